"""What a kernel sends the grader is bounded, and a kernel that sends too much costs only its cell.

One job is graded by ``autograder.worker.child_main`` in a process of its own, as `grade` runs it: only there does the
worker limit its memory. Its notebook's cells send the grader messages signed with the kernel's key, as ipykernel
signs its own: a frame over ``sandbox.MAX_FRAME_BYTES`` on the shell channel, then one message whose frames are each
under that size but together more than the worker's memory limit (``worker.WORKER_MEMORY_BYTES``) holds. Before the
bound (review, 2026-12-06), the first made grading wait for ever on a connection ZeroMQ had dropped, and the second
made the worker, root outside the sandbox, hold all of it.
"""

from __future__ import annotations

import json
import re
import sys
import tempfile
from pathlib import Path

import nbformat
import pytest
import zmq
from hypothesis import given, settings
from hypothesis import strategies as st

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from autograder import worker  # noqa: E402
from autograder.course import ASSIGNMENT  # noqa: E402
from autograder.sandbox import (MAX_FRAME_BYTES, MESSAGE_KEEP_CHARS, RECORD_MIMETYPE, SEND_TIMEOUT_MS,  # noqa: E402
                                SandboxLimits, bwrap_available)
from kernel_outputs import cell_texts  # noqa: E402
from test_worker_prestart import STUDENT, end_worker, make_job, notebook  # noqa: E402

FRAME = 60_000_000  # under MAX_FRAME_BYTES: only the memory limit stops a message of many such frames
SIGNED = ("_k = get_ipython().kernel\n"
          "_k.session.send({socket}, {msg_type!r}, {content}, parent=_k.get_parent('shell'), {extra})")
# an execute_reply to the cell's own request, one frame over the cap: 'pad' is no field the kernel's own cut of a
# large reply knows, so it stands for a cell that undoes the kernel's limits
HUGE_REPLY = SIGNED.format(
    socket="_k.shell_stream", msg_type="execute_reply",
    content=("{'status': 'ok', 'execution_count': 1, 'user_expressions': {}, 'payload': [], "
             f"'pad': 'A' * {MAX_FRAME_BYTES + 2**20}}}"),
    extra="ident=_k._shell_parent_ident.get()")
# a stream message carrying, as buffers, more frames under the cap than the worker's memory holds (one bytes object
# sent again and again: the kernel holds it once)
MANY_FRAMES = SIGNED.format(
    socket="_k.iopub_socket", msg_type="stream", content="{'name': 'stdout', 'text': 'frames sent'}",
    extra=f"buffers=[b'B' * {FRAME}] * {worker.WORKER_MEMORY_BYTES // FRAME + 1}")
CELLS = ["x = 41\nprint('before')", HUGE_REPLY, MANY_FRAMES, "print('after', x + 1)"]
CUT = "the kernel sent the grader more than it accepts (a message over 64 MiB, or more than the grader's memory holds)"


def graded_in_a_worker(tmp_path: Path, cells: list[str], seconds: int, **job_changes) -> tuple:
    """Grade one notebook of these code cells as `grade` does, in a sandboxed worker process of its own, with
    job_changes to its job.json; return the autograded notebook and the worker's log. Fails (and kills the worker)
    when the worker has not ended well within seconds."""
    from autograder.grade import worker_context

    if not bwrap_available():
        pytest.fail("bubblewrap is not usable here; `make sysdeps` installs it")
    scratch_root = Path(tempfile.mkdtemp(prefix="messages-"))  # short: unix socket paths
    scratch_root.chmod(0o711)
    job_dir = make_job(tmp_path, scratch_root, {"nb-a": notebook(cells)})
    job = json.loads((job_dir / "job.json").read_text())
    (job_dir / "job.json").write_text(json.dumps({**job, **job_changes}))
    proc = worker_context().Process(target=worker.child_main, args=(str(job_dir),))
    proc.start()
    try:
        proc.join(seconds)
        log = (job_dir / "worker.log").read_text()
        assert proc.exitcode == 0, f"exit code {proc.exitcode} (None: grading after {seconds} s):\n{log[-3000:]}"
    finally:
        end_worker(proc, scratch_root)
    results = json.loads((job_dir / "result.json").read_text())["notebooks"]
    assert results["nb-a"]["status"] == "graded", results
    return nbformat.read(job_dir / "course" / "autograded" / STUDENT / ASSIGNMENT / "nb-a.ipynb", as_version=4), log


def test_a_kernel_that_sends_too_much_fails_its_cell_and_grading_goes_on(tmp_path):
    """Each sending cell fails with the reason, its kernel is replaced (the next cell finds x from a replay), the job
    ends in time, and the worker's log shows its memory limit."""
    assert MAX_FRAME_BYTES == 64 * 2**20 and FRAME < MAX_FRAME_BYTES, "CUT and FRAME assume a 64 MiB cap"
    graded, log = graded_in_a_worker(tmp_path, CELLS, 240)  # three kernels and four cells
    assert cell_texts(graded) == ["before", "ERROR KernelDied", "ERROR KernelDied", "after 42"]
    for cell in graded.cells[1:3]:
        assert [out.evalue for out in cell.outputs if out.output_type == "error"] == [
            f"{CUT}, so the grader stopped it and restarted it without this cell"]
    peak = re.search(r"grading process: peak address space (\d+) MiB \(limit (\d+) MiB\)", log)
    assert peak and int(peak[2]) == worker.WORKER_MEMORY_BYTES // 2**20, log[-3000:]


def test_without_the_sandbox_a_frame_over_the_cap_fails_its_cell_as_in_the_sandbox(tmp_path):
    """A student's check and a --no-sandbox class use the same client: the cell fails with the same reason, and the
    rest of the notebook runs in a new kernel."""
    from autograder.sandbox import GradingExecute

    nb = notebook([CELLS[0], HUGE_REPLY, CELLS[-1]])
    GradingExecute(timeout=60, allow_errors=True, scratch=str(tmp_path), preload_modules=[]).preprocess(
        nb, {"metadata": {"path": str(tmp_path)}})
    assert cell_texts(nb) == ["before", "ERROR KernelDied", "after 42"]
    assert nb.cells[1].outputs[-1].evalue == f"{CUT}, so the grader stopped it and restarted it without this cell"


# honest prints of more than the frame cap: in one write; in many writes within one flush interval (0.2 s); 200 Mi
# characters JSON writes as 6 bytes each; 1.2 GiB over many flushes
BIG_PRINTS = ["x = 41\nprint('before')", f"print('z' * {MAX_FRAME_BYTES + 2**20})",
              f"import sys\nfor _ in range({MAX_FRAME_BYTES // 2**20 + 1}):\n    sys.stdout.write('y' * 2**20)",
              "print('\\x00' * 200 * 2**20)", "for _ in range(300):\n    print('w' * 2**22)",
              "print('after', x + 1, [n for n in dir() if 'chunk' in n.lower() or n in ('within', 'LIMIT')])"]
# single messages over the frame cap, which no chunking splits: a cell's value, an error, a displayed object, a check's
# record (as checks._emit sends it), an error with a traceback longer than the grader keeps
BIG_VALUES = [f"'v' * {MAX_FRAME_BYTES + 2**20}", f"raise ValueError('e' * {MAX_FRAME_BYTES + 2**20})",
              f"from IPython.display import HTML, display\ndisplay(HTML('h' * {MAX_FRAME_BYTES + 2**20}))",
              f"from IPython.display import display\ndisplay({{{RECORD_MIMETYPE!r}: {{'kind': 'equal', "
              f"'label': 'answer', 'actual': 'r' * {MAX_FRAME_BYTES + 2**20}}}}}, raw=True)",
              f"def deep(n):\n    if n == 0:\n        raise ValueError('d' * {MAX_FRAME_BYTES + 2**20})\n"
              "    deep(n - 1)\ndeep(60)"]
BIG_OUTPUTS = BIG_PRINTS[:-1] + BIG_VALUES + BIG_PRINTS[-1:]
KERNEL_CUT = re.compile(r"\[the kernel cut this output: 1?[0-9]{2}\.[0-9] MiB, more than one message to the grader "
                        r"may hold \(64 MiB\)\]")


def assert_big_prints_truncated(nb) -> None:
    """Each big print kept at most the cell's output budget, with the note; no kernel was cut or restarted."""
    texts = cell_texts(nb)
    assert [texts[0], texts[-1]] == ["before", "after 42 []"]  # the kernel-side code bound no name of the student's
    for text, letter in zip(texts[1:-1], "zy\x00w"):
        kept, note = text.rsplit("\n", 1)
        # the budget counts JSON bytes, which a character like '\x00' takes 6 of
        assert set(kept) == {letter} and 0 < len(json.dumps(kept)) <= SandboxLimits.output_bytes, len(kept)
        assert note.startswith("[output truncated: a cell may print"), note


def assert_big_values_cut(cells) -> None:
    """The kernel sent each of BIG_VALUES cut, with its note: the value's start, the error by its own name (the
    grader cut the kernel for them before, and each cell failed as KernelDied), the displayed object's plain text."""
    assert cell_texts(nbformat.v4.new_notebook(cells=cells)) == ["", "ERROR ValueError", "", "", "ERROR ValueError"]
    value, error, shown, record, deep = ([out for out in cell.outputs if out.output_type != "stream"] for cell in cells)
    assert [out.output_type for out in value + error + shown + record + deep] == [
        "execute_result", "error", "display_data", "display_data", "error"]
    kept, note = value[0].data["text/plain"].rsplit("\n", 1)
    assert kept == "'" + "v" * (MESSAGE_KEEP_CHARS - 1) and KERNEL_CUT.fullmatch(note), note
    assert KERNEL_CUT.fullmatch(error[0].traceback[-1]) and "eeee" in error[0].traceback[-2], error[0].traceback[-2:]
    assert KERNEL_CUT.fullmatch(error[0].evalue.split("\n")[0]), error[0].evalue[:200]  # the grader keeps its start
    kept, note = shown[0].data["text/plain"].split("\n")
    assert kept == "<IPython.core.display.HTML object>" and KERNEL_CUT.fullmatch(note) and len(shown[0].data) == 1
    # the record keeps its kind and label, so its check fails as one whose value could not be compared (review: it
    # was dropped, and the check said it had not reported, as when the check helper is tampered with)
    assert record[0].data == {RECORD_MIMETYPE: {"kind": "equal", "label": "answer",
                                                "actual": {"unsupported": "a value too large to send"}}}
    # the grader keeps a traceback's first 50 lines: the note is one of them (review)
    assert len(deep[0].traceback) == 50 and KERNEL_CUT.fullmatch(deep[0].traceback[-1]), deep[0].traceback[-3:]


@settings(max_examples=200, deadline=None)
@given(st.text(alphabet=st.sampled_from("ab\x00\n\"\\é中😀"), max_size=40), st.integers(0, 200))
def test_a_truncated_output_keeps_the_longest_prefix_whose_json_fits_the_budget(text, limit):
    """Output budgets count JSON bytes (json.dumps), which a character takes 1 to 12 of: the text kept is a prefix
    that fits, and one more character would not."""
    from autograder.sandbox import json_prefix

    kept = json_prefix(text, limit)
    assert text.startswith(kept)
    assert len(kept) == len(text) or len(json.dumps(text[:len(kept) + 1])) > limit
    assert len(json.dumps(kept)) <= limit or kept == ""


def test_output_a_cell_could_not_keep_costs_the_notebook_s_budget_nothing(tmp_path):
    """The notebook keeps NOTEBOOK_OUTPUT_FACTOR cells' worth of what it kept: eight cells whose figure-sized HTML
    each exceeded the cell's budget and was dropped left the ninth cell's print in place (it was charged as kept,
    and every later print of the notebook was dropped: review), and a truncated print's message, its name and
    quotes included, fits the cell's budget."""
    from autograder.sandbox import NOTEBOOK_OUTPUT_FACTOR, GradingExecute

    budget = 10_000
    dropped = "from IPython.display import HTML, display\nprint('small')\ndisplay(HTML('h' * 15_000))"
    nb = notebook([dropped] * NOTEBOOK_OUTPUT_FACTOR + ["print('hello')", f"print('a' * {3 * budget})"])
    GradingExecute(timeout=60, allow_errors=True, scratch=str(tmp_path), preload_modules=[],
                   output_bytes=budget).preprocess(nb, {"metadata": {"path": str(tmp_path)}})
    texts = cell_texts(nb)
    assert texts[:NOTEBOOK_OUTPUT_FACTOR] == ["small\n\n[output truncated: a cell may print 10000 bytes, a notebook "
                                              "80000]"] * NOTEBOOK_OUTPUT_FACTOR, texts
    assert texts[-2] == "hello"
    kept = [out for out in nb.cells[-1].outputs if out.output_type == "stream"][0]
    assert set(kept.text) == {"a"} and len(json.dumps({"name": kept.name, "text": kept.text})) <= budget, len(kept.text)


def test_a_print_or_value_over_the_cap_is_only_truncated_without_the_sandbox(tmp_path):
    """A student's check (and --no-sandbox grading): the kernel's streams send at most STREAM_CHUNK_CHARS characters
    per message and stream_cap per cell, so printing any amount is cut to the cell's budget, not the kernel, and
    the grader receives little more than it keeps (before: each cell failed as KernelDied, its kernel restarted; then
    with chunks alone, the grader received every character, and the largest prints timed out or cut the kernel).
    A value, error or displayed object over the cap is sent cut, with a note (before: KernelDied too)."""
    from autograder.sandbox import STREAM_CHUNK_CHARS, GradingExecute, stream_cap

    class Counted(GradingExecute):
        """GradingExecute that counts, per cell, the stream characters it receives and their largest message."""

        def output(self, outs, msg, display_id, cell_index):
            if msg.get("msg_type") == "stream":
                total, largest = self.received.get(cell_index, (0, 0))
                size = len(msg["content"]["text"])
                self.received[cell_index] = (total + size, max(largest, size))
            return super().output(outs, msg, display_id, cell_index)

    nb = notebook(BIG_OUTPUTS)
    executor = Counted(timeout=60, allow_errors=True, scratch=str(tmp_path), preload_modules=[])
    executor.received = {}
    executor.preprocess(nb, {"metadata": {"path": str(tmp_path)}})
    assert_big_prints_truncated(nb)
    assert_big_values_cut(nb.cells[len(BIG_PRINTS) - 1:-1])
    for cell in range(1, len(BIG_PRINTS) - 1):
        total, largest = executor.received[cell]
        assert executor.output_bytes < total <= stream_cap(executor.output_bytes) + 1, (cell, total)  # and print's \n
        assert largest <= STREAM_CHUNK_CHARS, (cell, largest)


def test_a_print_or_value_over_the_cap_is_only_truncated_in_the_sandbox_too(tmp_path):
    """The same in a kernel forked from a sandboxed worker's fork server, as `grade` runs it; the worker's memory
    stays far from its limit (the 200 Mi characters of '\\x00' took it to 1.5 GiB of its 2 before the per-cell cap)."""
    graded, log = graded_in_a_worker(tmp_path, BIG_OUTPUTS, 180)
    assert_big_prints_truncated(graded)
    assert_big_values_cut(graded.cells[len(BIG_PRINTS) - 1:-1])
    assert "connection cut" not in log
    peak = re.search(r"grading process: peak address space (\d+) MiB", log)
    assert peak and int(peak[1]) < worker.WORKER_MEMORY_BYTES // 2**20 // 2, log[-3000:]


def test_the_kernel_s_message_cut_sends_a_message_it_cannot_read_as_it_is():
    """The start-up line, run in a process of its own (it patches jupyter_client's Session there): a display whose
    data is no dict goes out as it was, for the grader to cut, instead of raising in the kernel's send; a readable one
    is cut; a message under the cap is the bytes it was."""
    import subprocess

    from autograder.sandbox import kernel_output_argument

    code = f"""
exec({kernel_output_argument(2**21).split("=", 1)[1]!r}, {{}})
import jupyter_client.session
session = jupyter_client.session.Session(key=b"k")
def message(content):
    return {{"header": {{"msg_type": "display_data"}}, "parent_header": {{}}, "metadata": {{}}, "content": content}}
print(max(map(len, session.serialize(message({{"data": None, "pad": "x" * {MAX_FRAME_BYTES + 1}}})))) > {MAX_FRAME_BYTES})
print(max(map(len, session.serialize(message({{"data": {{"text/plain": "y" * {MAX_FRAME_BYTES + 1}}}}})))) < 2**20)
small = message({{"data": {{"text/plain": "z"}}, "metadata": {{}}}})
print(session.serialize(small)[-1] == jupyter_client.session.Session.serialize.__wrapped__(session, small)[-1])
"""
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0 and run.stdout.split() == ["True"] * 3, (run.stdout, run.stderr[-2000:])


def test_every_socket_to_a_kernel_gets_the_frame_cap_and_the_send_timeout_before_it_connects(tmp_path):
    """The client's and the manager's (interrupts) contexts give each new socket both options: ZeroMQ reads
    ZMQ_MAXMSGSIZE only when the socket connects, so it must be there from the start."""
    from autograder.sandbox import GuardedKernelClient, SandboxedKernelManager

    for owner in (GuardedKernelClient(), SandboxedKernelManager(scratch=str(tmp_path))):
        sock = owner.context.socket(zmq.DEALER)
        try:
            assert (sock.getsockopt(zmq.MAXMSGSIZE), sock.getsockopt(zmq.SNDTIMEO)) == (MAX_FRAME_BYTES, SEND_TIMEOUT_MS)
        finally:
            sock.close(linger=0)
            owner.context.term()


@pytest.mark.parametrize("rc, log, out_of_memory", [
    (-6, "INFO grading nb-a\nFATAL ERROR: OUT OF MEMORY (src/yqueue.hpp:92)\n", True),  # ZeroMQ's abort
    (1, "Traceback (most recent call last):\n  File \"x.py\", line 1\nMemoryError\n", True),
    (-6, "terminate called after throwing an instance of 'std::bad_alloc'\n  what():  std::bad_alloc\n", True),
    (-6, "INFO grading nb-a\n", False),  # another abort: retried, reported as the signal
    (-6, "INFO a kernel wrote: FATAL ERROR: OUT OF MEMORY (x:1)\n", False),  # the words, not at a line's start
    (1, "Traceback (most recent call last):\nValueError: MemoryError\n", False),
])
def test_a_worker_that_ran_out_of_memory_is_reported_so_and_not_graded_again(tmp_path, rc, log, out_of_memory):
    """grade's reason for a worker that ended without a result, and whether it retries it (it would end the same)."""
    from autograder.grade import Running, _failure_reason, _out_of_memory

    (tmp_path / "worker.log").write_text(log)
    run = Running("s1", None, tmp_path, 0.0, 60.0)
    assert _out_of_memory(run, rc) is out_of_memory
    reason = _failure_reason(run, rc, timed_out=False)
    if out_of_memory:
        assert reason == ("the grading process ran out of memory (its limit: 2 GiB): a kernel sent it more than it "
                          "holds; reports/grade-logs/s1.log has the worker's log")
        assert _failure_reason(run, rc, timed_out=False, sandboxed=False).startswith(
            "the grading process ran out of memory: a kernel")  # no limit without the sandbox
        # the notebook being graded, from nbgrader's last 'Autograding' line naming one of the course's notebooks
        with (tmp_path / "worker.log").open("w") as f:
            f.write("2026-12-06 20:20:21,952 INFO Autograding /c/autograded/s1/part-ii/nb-a.ipynb\n"
                    "2026-12-06 20:20:23,011 INFO Autograding /c/autograded/s1/part-ii/nb-b.ipynb\n"
                    "2026-12-06 20:20:24,100 INFO Autograding /c/autograded/s1/part-ii/planted.ipynb\n" + log)
        assert _failure_reason(run, rc, timed_out=False, notebooks=["nb-a", "nb-b"]).startswith(
            "the grading process ran out of memory grading nb-b (its limit: 2 GiB): a kernel sent it")
    else:
        assert "out of memory" not in reason and reason.startswith(("the grading process was killed by signal 6",
                                                                    "the grading process failed (exit code 1)"))


def test_a_record_of_the_worker_s_log_is_bounded_and_printable():
    """A record quoting what a kernel sent (megabytes, a terminal's escapes) is cut around its middle to
    LOG_RECORD_CHARS and its unprintable characters shown as '?'; an ordinary record is unchanged."""
    import logging

    formatter = worker.BoundedFormatter("%(levelname)s %(message)s")
    quoted = "\x1b]0;TITLE\x07\x1b[31mGRADER: all passed\x1b[0m\r" + "z" * 10**6 + "END"
    line = formatter.format(logging.LogRecord("w", logging.ERROR, __file__, 1, "kernel log:\n%s", (quoted,), None))
    assert line.startswith("ERROR kernel log:\n?]0;TITLE??[31mGRADER: all passed?[0m?zzz") and line.endswith("zzzEND")
    assert len(line) <= worker.LOG_RECORD_CHARS + 100 and "characters cut ...]" in line
    assert all(c.isprintable() or c in "\n\t" for c in line)
    plain = logging.LogRecord("w", logging.INFO, __file__, 1, "graded %s\tin %d s", ("nb-a", 3), None)
    assert formatter.format(plain) == "INFO graded nb-a\tin 3 s"


def test_the_kept_grading_log_is_bounded_and_printable_and_its_end_still_names_an_out_of_memory_death(tmp_path):
    """reports/grade-logs keeps at most LOG_KEPT_BYTES of a worker's log (its start and end: a red-team review's
    kernel made a 503 MB one), with a terminal's escapes as '?'; grade reads only the log's end for why the worker
    ended, and still finds the out-of-memory line after 10 MB of noise."""
    from types import SimpleNamespace

    from autograder.grade import LOG_KEPT_BYTES, Running, Scheduler, _failure_reason

    noise = "\x1b[2J\x1b]52;c;Y3VybA==\x07" + "n" * 199 + "\n"
    log = ("2026-12-07 10:00:00,000 INFO first line\n" + noise * 50_000
           + "2026-12-07 10:00:09,000 INFO Autograding /c/autograded/s1/part-ii/nb-b.ipynb\n"
           "FATAL ERROR: OUT OF MEMORY (src/yqueue.hpp:92)\n")
    (tmp_path / "worker.log").write_text(log)
    run = Running("s1", None, tmp_path, 0.0, 60.0)
    assert _failure_reason(run, -6, timed_out=False, notebooks=["nb-a", "nb-b"]).startswith(
        "the grading process ran out of memory grading nb-b (its limit: 2 GiB)")
    scheduler = Scheduler.__new__(Scheduler)  # _keep_log needs only the course
    scheduler.course = SimpleNamespace(reports_dir=tmp_path / "reports")
    scheduler._keep_log(run)
    kept = (tmp_path / "reports" / "grade-logs" / "s1.log").read_text(encoding="utf-8")
    assert len(kept.encode()) <= LOG_KEPT_BYTES
    assert kept.startswith("2026-12-07 10:00:00,000 INFO first line\n?[2J?]52;c;Y3VybA==?nnn")
    assert kept.endswith("INFO Autograding /c/autograded/s1/part-ii/nb-b.ipynb\n"
                         "FATAL ERROR: OUT OF MEMORY (src/yqueue.hpp:92)\n")
    left_out = len(log.encode()) - LOG_KEPT_BYTES
    assert f"\n[... {left_out} bytes of this log left out ...]\n" in kept
    assert "\x1b" not in kept and "\x07" not in kept
    # a log that ends in one long line without a line break keeps that line's end; bytes that are no UTF-8 are one
    # '?' each, so the copy is no larger than the bytes it keeps
    (tmp_path / "worker.log").write_bytes(b"INFO start\n" + b"\xff\xfe" * LOG_KEPT_BYTES + b"tail end")
    scheduler._keep_log(run)
    kept = (tmp_path / "reports" / "grade-logs" / "s1.log").read_text(encoding="utf-8")
    assert kept.startswith("INFO start\n") and kept.endswith("??tail end") and len(kept.encode()) <= LOG_KEPT_BYTES


def test_a_kernel_that_forges_signatures_of_megabytes_leaves_a_short_log_and_loses_only_its_cell(tmp_path):
    """A red-team review's attack: an IOPub message whose signature is a 16 MiB frame. jupyter_client's error quotes
    it (64 MiB of repr), which went whole into the worker's log. Now the cell fails, the next runs, the log stays
    short."""
    forge = ("_k = get_ipython().kernel\n"
             "_k.iopub_socket.send_multipart([b'stream', b'<IDS|MSG>', b'\\x00' * (16 << 20), b'{}', b'{}', b'{}',"
             " b'{}'])\n"
             "import time\ntime.sleep(2)")
    graded, log = graded_in_a_worker(tmp_path, ["x = 41\nprint('before')", forge, "print('after', x + 1)"], 180)
    texts = cell_texts(graded)
    assert texts[0] == "before" and texts[-1] == "after 42", texts
    assert len(log) < 200_000, len(log)
    assert "Invalid Signature" in log


def test_a_notebook_whose_grading_runs_out_of_memory_outside_a_cell_is_an_error_of_its_own(tmp_path, monkeypatch):
    """A MemoryError where no cell catches it (nbgrader's own steps) ends that notebook with a reason; the job goes on
    to the next notebook."""
    monkeypatch.setenv("PART_II_ROOT", str(REPO))  # run_job sets it for its kernels; the test's own is restored
    scratch_root = tmp_path / "scratch"
    scratch_root.mkdir()
    job_dir = make_job(tmp_path, scratch_root, {"nb-a": notebook(["1"]), "nb-b": notebook(["2"])})
    graded = []

    def grade_notebook(job, notebook, scratch, log, config=None):
        if notebook == "nb-a":
            raise MemoryError
        graded.append(notebook)

    monkeypatch.setattr(worker, "grade_notebook", grade_notebook)
    monkeypatch.setattr(worker, "prestart_kernel", lambda *args: None)
    zeroed = []
    monkeypatch.setattr(worker, "zero_notebook", lambda job, notebook: zeroed.append(notebook))
    results = worker.run_job(job_dir)
    assert {nb: {k: v for k, v in r.items() if k != "seconds"} for nb, r in results.items()} == {
        "nb-a": {"status": "error", "error": worker.OUT_OF_MEMORY}, "nb-b": {"status": "graded"}}
    assert graded == ["nb-b"] and zeroed == ["nb-a"]


# run first, it prints; replayed (after the kernel died), it sends the grader a shell message a second for ever
DRIP_WHEN_REPLAYED = (
    "import os, time\n"
    "_k = get_ipython().kernel\n"
    "if os.path.exists('/tmp/.replayed'):\n"
    "    while True:\n"
    "        _k.session.send(_k.shell_stream, 'comm_msg', {}, ident=_k._shell_parent_ident.get())\n"
    "        time.sleep(1)\n"
    "open('/tmp/.replayed', 'w').close()\n"
    "print('first run')")


def test_a_replayed_cell_that_keeps_the_shell_channel_busy_is_stopped_at_its_time_limit(tmp_path):
    """The wait for a replayed cell's reply counts its time limit on the clock: it used to count only the seconds
    in which the shell channel was silent, and a message a second kept the job waiting until grade killed it (79 min
    for a 7-notebook submission; red-team review). The replay is cut after the cell's limit and grading goes on."""
    cells = [CELLS[0], DRIP_WHEN_REPLAYED, "import os; os._exit(1)", CELLS[-1]]
    graded, _ = graded_in_a_worker(tmp_path, cells, 120, cell_timeout=10)  # the old wait never ended
    assert cell_texts(graded) == ["before", "first run", "ERROR KernelDied", "after 42"]


# error messages sent by hand, as a kernel's own code can (a red-team review: six errors with a 40 Mi-character name
# each made a 77 KB hand-in a 252 MB graded notebook; errors were never cut by name nor counted in any budget)
ERROR_FLOOD = ("ip = get_ipython(); dh = ip.displayhook\n"
               "for i in range({n}):\n"
               "    dh.session.send(dh.pub_socket, 'error', {{'ename': 'E' * {size}, 'evalue': 'v' * {size},\n"
               "                    'traceback': ['t' * {size}] * 100}}, dh.parent_header)\n")


def test_a_flood_of_error_messages_is_cut_to_a_few_errors_per_cell_within_the_notebook_s_budget(tmp_path):
    """A cell keeps its first MAX_ERRORS_PER_CELL errors, each cut (name, value, traceback); errors count in the
    notebook's output budget, and once it is spent an error keeps its name and the start of its value only. Every
    cell that raised still has an error, so it still fails; a later cell's own error is kept."""
    from autograder.sandbox import ERROR_NAME_CHARS, MAX_ERRORS_PER_CELL, NOTEBOOK_OUTPUT_FACTOR, GradingExecute

    budget = 10_000
    # and a real exception with a long name (nbgrader adds the execute reply's error when no kept error has its
    # name: found by review), and one raised after three errors sent by hand
    raised = "E = type('E' * 2**16, (Exception,), {})\nraise E('v' * 2**16)"
    nb = notebook([ERROR_FLOOD.format(n=6, size=2**16)] * 4 + [raised, ERROR_FLOOD.format(n=3, size=10) + raised,
                                                               "1 / 0"])
    GradingExecute(timeout=60, allow_errors=True, scratch=str(tmp_path), preload_modules=[],
                   output_bytes=budget).preprocess(nb, {"metadata": {"path": str(tmp_path)}})
    errors = [[out for out in cell.outputs if out.output_type == "error"] for cell in nb.cells]
    assert [len(e) for e in errors] == [MAX_ERRORS_PER_CELL] * 4 + [1, MAX_ERRORS_PER_CELL + 1, 1], \
        [len(e) for e in errors]
    flood = [out for cell in errors[:-1] for out in cell]
    assert all(len(out.ename) <= ERROR_NAME_CHARS and len(out.evalue) <= 2000 for out in flood)
    assert all(len(json.dumps(out)) < 51 * 2100 for out in flood)  # 50 traceback lines of at most 2,000 characters
    kept = sum(len(json.dumps(out)) for cell in errors for out in cell)
    assert kept <= NOTEBOOK_OUTPUT_FACTOR * budget + 4 * 2**10, kept  # the last errors' names and value starts
    assert errors[-1][0].ename == "ZeroDivisionError" and errors[-1][0].evalue.startswith("division by zero")
