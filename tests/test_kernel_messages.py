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
import shutil
import sys
import tempfile
from pathlib import Path

import nbformat
import pytest

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from autograder import worker  # noqa: E402
from autograder.course import ASSIGNMENT  # noqa: E402
from autograder.sandbox import MAX_FRAME_BYTES, bwrap_available  # noqa: E402
from kernel_outputs import cell_texts  # noqa: E402
from test_worker_prestart import STUDENT, make_job, notebook  # noqa: E402

FRAME = 60_000_000  # under MAX_FRAME_BYTES: only the memory limit stops a message of many such frames
SIGNED = ("_k = get_ipython().kernel\n"
          "_k.session.send({socket}, {msg_type!r}, {content}, parent=_k.get_parent('shell'), {extra})")
# an execute_reply to the cell's own request, one frame over the cap
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
CUT = ("the kernel sent the grader more than it accepts (a message over 64 MiB, such as that much output at once, or "
       "more than the grader's memory holds)")


def test_a_kernel_that_sends_too_much_fails_its_cell_and_grading_goes_on(tmp_path):
    """Each sending cell fails with the reason, its kernel is replaced (the next cell finds x from a replay), the job
    ends in time, and the worker's log shows its memory limit."""
    from autograder.grade import worker_context

    if not bwrap_available():
        pytest.fail("bubblewrap is not usable here; `make sysdeps` installs it")
    assert MAX_FRAME_BYTES == 64 * 2**20 and FRAME < MAX_FRAME_BYTES, "CUT and FRAME assume a 64 MiB cap"
    scratch_root = Path(tempfile.mkdtemp(prefix="messages-"))  # short: unix socket paths
    scratch_root.chmod(0o711)
    job_dir = make_job(tmp_path, scratch_root, {"nb-a": notebook(CELLS)})
    proc = worker_context().Process(target=worker.child_main, args=(str(job_dir),))
    proc.start()
    try:
        proc.join(240)  # three kernels and four cells; a blocked send waits for ever
        log = job_dir / "worker.log"
        assert proc.exitcode == 0, f"exit code {proc.exitcode} (None: grading after 240 s):\n{log.read_text()[-3000:]}"
    finally:
        if proc.is_alive():
            proc.kill()
            proc.join()
        shutil.rmtree(scratch_root, ignore_errors=True)
    results = json.loads((job_dir / "result.json").read_text())["notebooks"]
    assert results["nb-a"]["status"] == "graded", results
    graded = nbformat.read(job_dir / "course" / "autograded" / STUDENT / ASSIGNMENT / "nb-a.ipynb", as_version=4)
    assert cell_texts(graded) == ["before", "ERROR KernelDied", "ERROR KernelDied", "after 42"]
    for cell in graded.cells[1:3]:
        assert [out.evalue for out in cell.outputs if out.output_type == "error"] == [
            f"{CUT}, so the grader stopped it and restarted it without this cell"]
    peak = re.search(r"grading process: peak address space (\d+) MiB \(limit (\d+) MiB\)", log.read_text())
    assert peak and int(peak[2]) == worker.WORKER_MEMORY_BYTES // 2**20, log.read_text()[-3000:]
