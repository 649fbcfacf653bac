"""One grading job in its own process: ``python -m autograder.worker JOB_DIR``.

The parent (autograder.grade) prepares JOB_DIR with ``job.json``, a private copy of
the gradebook (``gradebook.db``) and the submission under ``course/submitted/``. This
process runs nbgrader's Autograde one notebook at a time, each with its own nbgrader
Config, its own scratch folder and (unless disabled) a kernel forked from the
submission's fork server in its bubblewrap sandbox, and writes ``result.json``. It never
opens the real gradebook: the parent copies the grades over in one transaction, so
parallel workers cannot lock or corrupt it.
"""

from __future__ import annotations

import ctypes
import json
import logging
import math
import multiprocessing
import os
import resource
import shutil
import signal
import sys
import threading
import time
from pathlib import Path

from nbformat.v4 import new_output
from nbgrader.preprocessors import OverwriteCells
from traitlets import Float

from .cells import (BUDGET_NOT_RUN, BUDGET_SPENT, LOST_CELLS, MOVED_TESTS_KEY, NO_KERNEL, NOTEBOOK_TIMEOUT,
                    WARNING_PATTERN, clipped, cut_middle, moved_tests, nbgrader_meta, readable, stands_in)
from .course import ASSIGNMENT, load_config
from .sandbox import GradingExecute, close_fork_servers, discard_prestarted, last_log_line

PR_SET_PDEATHSIG = 1
# address space of a sandboxed grading worker: it maps ~0.8 GiB itself; the rest holds what kernels send (each frame at
# most sandbox.MAX_FRAME_BYTES), so a flood of frames costs the host at most this much per worker
WORKER_MEMORY_BYTES = 2 * 2**30
# a notebook's error when Python ran out of that memory outside a cell (in a cell, the cell fails: see GradingExecute)
OUT_OF_MEMORY = "the grader ran out of memory grading this notebook: a kernel sent it more than it holds"
# notebooks left (the current one included) when the parent may start warming up the next job: about the
# time a sandbox's start and its fork server's imports take (~2 s) against a notebook's (~2.6 s, median)
WARM_AHEAD = 2


class BudgetedExecute(GradingExecute):
    """Execute with a per-notebook time budget on top of the per-cell timeout (kernel in GradingExecute.scratch)."""

    notebook_timeout = Float(600.0, help="seconds one notebook may run; later cells are not run").tag(config=True)

    def preprocess(self, nb, resources=None, km=None):
        """Start the notebook's clock, then execute as usual."""
        self._deadline = time.monotonic() + self.notebook_timeout
        return super().preprocess(nb, resources, km)

    def _get_timeout(self, cell):
        """The per-cell timeout, shortened to what is left of the notebook's budget (at least 1 s)."""
        timeout = super()._get_timeout(cell)
        remaining = getattr(self, "_deadline", math.inf) - time.monotonic()
        if cell is None or remaining == math.inf:
            return timeout
        return max(1, math.ceil(min(timeout or remaining, remaining)))

    def preprocess_cell(self, cell, resources, index):
        """Run the cell, or mark it failed without running it once the budget is spent."""
        if cell.cell_type == "code" and cell.source.strip() and time.monotonic() >= getattr(self, "_deadline", math.inf):
            message = f"{BUDGET_NOT_RUN} of {self.notebook_timeout:g} s"
            cell.outputs = [new_output("error", ename=NOTEBOOK_TIMEOUT, evalue=message,
                                       traceback=[f"{NOTEBOOK_TIMEOUT}: {message}"])]
            return cell, resources
        cell, resources = super().preprocess_cell(cell, resources, index)
        if time.monotonic() >= getattr(self, "_deadline", math.inf):  # the budget, not the cell's limit, stopped it
            message = f"{BUDGET_SPENT} of {self.notebook_timeout:g} s while the cell ran, and the grader stopped it"
            for out in cell.get("outputs", []):
                if out.get("output_type") == "error" and out.get("ename") == "CellTimeoutError":
                    out["evalue"], out["traceback"] = message, [f"CellTimeoutError: {message}"]
        return cell, resources


class MissingAnswerCells(ValueError):
    """A submitted notebook holds none of its release's answer cells: its test cells have nowhere to go back to."""


def grade_id_positions(cells: list) -> dict[str, int]:
    """grade_id -> index in cells of every cell carrying nbgrader metadata with a grade id."""
    return {meta["grade_id"]: k for k, cell in enumerate(cells) if (meta := nbgrader_meta(cell)).get("grade_id")}


def insert_missing(cells: list, order: list[str], restored: dict) -> None:
    """Insert each cell of restored (grade id -> cell, in release order) into cells, in place: right after the
    release cell just before it in order when cells hold that one (where nbgrader puts it); else right before the
    next release cell they hold, after any cells of the student's in between (where a rewritten answer would be),
    or last."""
    for name, cell in restored.items():
        positions = grade_id_positions(cells)
        at = order.index(name)
        if at > 0 and order[at - 1] in positions:
            index = positions[order[at - 1]] + 1
        else:
            index = next((positions[g] for g in order[at + 1:] if g in positions), len(cells))
        cells.insert(index, cell)


def held_answers(cells: list) -> set[str]:
    """grade ids of the answer (solution) cells among cells."""
    return {meta.get("grade_id") for cell in cells if (meta := nbgrader_meta(cell)).get("solution")}


def _count(n: int, noun: str) -> str:
    """'1 answer cell', '3 answer cells'."""
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


class RestoreMissingCells(OverwriteCells):
    """OverwriteCells that puts a deleted grade cell back next to the release cells the notebook still holds.

    nbgrader 0.9.6 puts it after the cell just before it in the release and raises KeyError when
    that cell is not a grade or answer cell of the submission (a read-only markdown cell, or an
    answer cell deleted with its test), so the whole notebook would score 0. Here it goes after
    that cell when the notebook holds it, else before the next release cell it holds (see
    insert_missing). A deleted code answer is not put back, since the student may have written
    the answer in a cell of their own; written answers graded by hand are grade cells and come
    back, as in nbgrader. A notebook with none of its answer cells is refused (MissingAnswerCells).
    A cell whose nbgrader metadata has no grade id the release knows (one pasted from another
    notebook) becomes a plain cell: nbgrader would crash on it (KeyError 'grade_id').
    """

    def preprocess(self, nb, resources):
        """nbgrader's OverwriteCells, with the student's own MOVED_TESTS_KEY (if any) dropped first: only
        add_missing_grade_cells writes it."""
        nb.metadata.pop(MOVED_TESTS_KEY, None)
        return super().preprocess(nb, resources)

    def preprocess_cell(self, cell, resources, index):
        """nbgrader's checks against the release; then drop nbgrader metadata left without a grade id (the helpers
        above read only what is left: metadata with grade ids)."""
        cell, resources = super().preprocess_cell(cell, resources, index)
        if "nbgrader" in cell.metadata and not nbgrader_meta(cell).get("grade_id"):
            self.log.warning("Cell %d has nbgrader metadata but no grade id of the release: graded as the student's",
                             index)
            del cell.metadata["nbgrader"]
        return cell, resources

    def add_missing_grade_cells(self, nb, resources):
        """Put back every release grade cell that nb lacks, in release order."""
        source_nb = self.gradebook.find_notebook(self.notebook_id, self.assignment_id)
        order = [cell.name for cell in source_nb.source_cells]  # notebook order (grade.build_template sorts them)
        sources = {cell.name: cell for cell in source_nb.source_cells}
        grade_cells = {cell.name: cell for cell in source_nb.grade_cells}
        answers = {cell.name for cell in source_nb.solution_cells}
        present = grade_id_positions(nb.cells)
        missing = [name for name in order if name in grade_cells and name not in present]
        if missing and answers and not answers & held_answers(nb.cells):
            raise MissingAnswerCells(f"the submission holds none of the {_count(len(answers), 'answer cell')} of "
                                     f"notebook {self.notebook_id!r}: there is nowhere to put back its "
                                     f"{_count(len(missing), 'missing grade cell')}")
        for name in missing:
            self.log.warning("Missing grade cell %s encountered, adding to notebook", name)
        insert_missing(nb.cells, order, {name: self.missing_cell_transform(sources[name], grade_cells[name].max_score,
                                                                           is_solution=name in answers)
                                         for name in missing})
        tests = [name for name in order if name in grade_cells and name not in answers
                 and sources[name].cell_type == "code"]
        held = set(tests)
        # for TrustedChecks, which runs in autograde's second pass, on this notebook as written (not these resources)
        nb.metadata[MOVED_TESTS_KEY] = moved_tests(tests, {name for name in tests if stands_in(sources[name].source)},
                                                   [g for cell in nb.cells
                                                    if (g := nbgrader_meta(cell).get("grade_id")) in held])
        return nb, resources


def die_with_parent() -> None:
    """SIGKILL this worker (and its process group) when the `grade` run that started it ends; exit at
    once if it has already ended. Its sandboxes end with it (bwrap's --die-with-parent); a
    --no-sandbox kernel, in a session of its own, follows within a second (ipykernel's parent poller).

    The worker's real parent is multiprocessing's fork server, which lives on while any worker
    holds its 'alive' pipe, so PR_SET_PDEATHSIG alone does not fire when `grade` is killed: the
    worker would grade on beside the next run's worker for the same student. multiprocessing
    gives every child a sentinel of the process that started it (end of file when that ends);
    a daemon thread waits on it.
    """
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    except OSError:  # pragma: no cover - not glibc
        pass
    starter = multiprocessing.parent_process()
    if starter is None:  # not started by multiprocessing (a test calling run_job directly)
        return
    if not starter.is_alive():
        os._exit(1)

    def watch() -> None:
        starter.join()  # returns when the sentinel reads end of file: `grade` is gone
        if os.getpgrp() == os.getpid():  # child_main made the worker a group of its own (with the fork server's bwrap)
            os.killpg(os.getpid(), signal.SIGKILL)
        os.kill(os.getpid(), signal.SIGKILL)

    threading.Thread(target=watch, name="die-with-grade", daemon=True).start()


def limit_memory(limit: int = WORKER_MEMORY_BYTES) -> None:
    """Lower this process's soft address-space limit to limit bytes (never above the hard limit, which stays as it
    is: the sandbox's prlimit sets the kernels' own limits, soft and hard). A kernel's flood of messages then makes
    ZeroMQ cut that kernel's connection, or Python raise MemoryError, and the cell fails (GuardedKernelClient); or,
    when ZeroMQ fails to allocate where it cannot recover (a message of millions of tiny frames), it aborts this
    process, and `grade` reports the submission as out of memory (grade._failure_reason)."""
    _, hard = resource.getrlimit(resource.RLIMIT_AS)
    resource.setrlimit(resource.RLIMIT_AS, (limit if hard == resource.RLIM_INFINITY else min(limit, hard), hard))


def address_space(field: str = "VmSize") -> int | None:
    """This process's address space in bytes, now (VmSize) or at its peak (VmPeak), from /proc/self/status; None
    where it has no such line."""
    return next((int(line.split()[1]) * 1024 for line in Path("/proc/self/status").read_text().splitlines()
                 if line.startswith(f"{field}:")), None)


def address_space_line() -> str:
    """'peak address space 812 MiB (limit 2048 MiB)': this process's VmPeak and its soft RLIMIT_AS, for the log."""
    peak = address_space("VmPeak")
    peak = None if peak is None else peak // 2**20
    soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    limit = "none" if soft == resource.RLIM_INFINITY else f"{soft // 2**20} MiB"
    return f"peak address space {peak} MiB (limit {limit})"


def with_ours(preprocessors: list, swaps: dict) -> list:
    """The preprocessor list with each nbgrader class (or subclass) that swaps names replaced by ours."""
    return [next((ours for theirs, ours in swaps.items() if isinstance(p, type) and issubclass(p, theirs)), p)
            for p in preprocessors]


def autograde_preprocessors(config) -> list:
    """The configured (or nbgrader's default) autograde preprocessors, executing with BudgetedExecute."""
    from nbgrader.converters import Autograde
    from nbgrader.preprocessors import Execute

    current = config.Autograde.get("autograde_preprocessors") or Autograde().autograde_preprocessors
    return with_ours(current, {Execute: BudgetedExecute})


def sanitize_preprocessors(config) -> list:
    """The configured (or nbgrader's default) sanitize preprocessors, restoring deleted tests with RestoreMissingCells."""
    from nbgrader.converters import Autograde

    current = config.Autograde.get("sanitize_preprocessors") or Autograde().sanitize_preprocessors
    return with_ours(current, {OverwriteCells: RestoreMissingCells})


def notebook_config(job: dict, scratch: Path):
    """The nbgrader Config for one notebook of this job (private course, timeouts, sandbox)."""
    config = load_config()
    config.CourseDirectory.root = job["course_root"]
    config.CourseDirectory.db_url = job["db_url"]
    config.Autograde.create_student = True
    config.OverwriteCells.add_missing_cells = True  # a deleted test cell comes back and is graded
    config.IgnorePattern.enabled = True
    config.IgnorePattern.pattern = WARNING_PATTERN
    config.Execute.timeout = int(math.ceil(job["cell_timeout"]))
    config.Execute.interrupt_on_timeout = True
    config.BudgetedExecute.notebook_timeout = float(job["notebook_timeout"])
    config.BudgetedExecute.scratch = str(scratch)
    # unix sockets in a private folder: no TCP port race between parallel kernels (nbgrader #174)
    config.KernelManager.transport = "ipc"
    config.KernelManager.ip = str(scratch / "ipc" / "kernel")
    (scratch / "ipc").mkdir(parents=True, exist_ok=True)
    if job["sandbox"]:
        config.merge(sandbox_config(job, scratch))
    if job.get("expected_records"):
        from .trusted_checks import configure_trusted_checks

        records = json.loads(Path(job["expected_records"]).read_text(encoding="utf-8"))
        configure_trusted_checks(config, records)
    config.Autograde.autograde_preprocessors = autograde_preprocessors(config)
    config.Autograde.sanitize_preprocessors = sanitize_preprocessors(config)
    return config


def sandbox_config(job: dict, scratch: Path):
    """The sandbox settings for one notebook's kernel (helper G's configure_sandbox), as a Config to merge.

    The sandbox shows student code nothing but what it binds, and configure_sandbox refuses to
    bind a folder holding the course named in the config it is given, so it gets the REAL course
    root and gradebook (this job's private copy lies inside that root), not the private ones
    nbgrader uses here; PART_II_BUILD is left out because the course root already lies inside it.
    """
    from traitlets.config import Config

    from .sandbox import SandboxLimits, configure_sandbox

    config = Config()
    config.CourseDirectory.root = job["real_course_root"]
    config.CourseDirectory.db_url = job["real_db_url"]
    readable = [Path(job["bundle_dir"]) / top / ASSIGNMENT for top in ("code", "data")]
    build = os.environ.pop("PART_II_BUILD", None)
    try:
        configure_sandbox(config, scratch=scratch, readable=readable, limits=SandboxLimits(**job.get("limits", {})),
                          fork_server=Path(job["scratch_root"]))
    finally:
        if build is not None:
            os.environ["PART_II_BUILD"] = build
    del config["CourseDirectory"]
    return config


# characters of one record of the worker's log, at most (one is rarely over 2,000): a record can quote what a kernel
# sent, as jupyter_client's "Invalid Signature: %r" of a frame does, and a red-team review's three 60 MiB frames made
# a 503 MB log that reports/grade-logs kept
LOG_RECORD_CHARS = 20_000


class BoundedFormatter(logging.Formatter):
    """The worker's log format, each record cut to LOG_RECORD_CHARS and printable (cells.readable): the kernel's
    bytes reach the log (an error quoting a message, the kernel log's tail), which the instructor reads in a
    terminal."""

    def format(self, record: logging.LogRecord) -> str:
        """The record as one bounded, printable piece of text."""
        return readable(cut_middle(super().format(record), LOG_RECORD_CHARS))


class ErrorLog(logging.Handler):
    """Remember the last error logged by nbgrader (its traceback's last line is the reason)."""

    def __init__(self):
        super().__init__(logging.ERROR)
        self.messages: list[str] = []

    def emit(self, record):
        """Store the message text."""
        self.messages.append(record.getMessage())

    def reason(self) -> str:
        """The most specific error line seen, or a generic phrase; cut to KERNEL_WORDS characters (nbgrader's errors
        may quote what the kernel sent, such as a forged execution count, for the instructor's summary and notes)."""
        for message in reversed(self.messages):
            lines = [ln for ln in message.strip().splitlines() if ln.strip()]
            if len(lines) > 1 and lines[0].startswith("Traceback"):
                return clipped(lines[-1].strip())
        return clipped(self.messages[0]) if self.messages else "nbgrader reported an error"


def grade_notebook(job: dict, notebook: str, scratch: Path, log: logging.Logger, config=None) -> None:
    """Autograde one notebook of the job's submission; raise RuntimeError with the reason on failure.

    config: the notebook's nbgrader Config when already built (by prestart_kernel), else built here.
    """
    from nbgrader.converters import Autograde
    from nbgrader.coursedir import CourseDirectory

    config = config if config is not None else notebook_config(job, scratch)
    coursedir = CourseDirectory(config=config)
    coursedir.assignment_id = ASSIGNMENT
    coursedir.student_id = job["student"]
    coursedir.notebook_id = notebook
    errors = ErrorLog()
    log.addHandler(errors)
    try:
        converter = Autograde(coursedir=coursedir, config=config, log=log)
        converter.force = True
        converter.start()
    except Exception as exc:  # noqa: BLE001 - any failure is this notebook's, the others go on
        reason = errors.reason() if errors.messages else f"{type(exc).__name__}: {exc}"
        lost = lost_cells_reason(job, notebook)
        if lost and MissingAnswerCells.__name__ in reason:  # ours: lost says it all
            raise RuntimeError(lost) from exc
        raise RuntimeError(f"{lost} (nbgrader: {reason})" if lost else reason) from exc
    finally:
        log.removeHandler(errors)


def lost_cells_reason(job: dict, notebook: str) -> str | None:
    """What is wrong with a submitted notebook that lacks answer cells of the assignment, or None when it has them all.

    Grading puts deleted test cells back (RestoreMissingCells) and refuses a notebook that holds
    none of its answer cells (e.g. a fresh notebook saved under the right name); nbgrader's own
    errors may come from lost cells too.
    """
    from nbgrader.api import Gradebook, MissingEntry

    try:
        submitted = json.loads((Path(job["course_root"]) / "submitted" / job["student"] / ASSIGNMENT
                                / f"{notebook}.ipynb").read_text(encoding="utf-8"))
        present = {str(cell.get("metadata", {}).get("nbgrader", {}).get("grade_id", ""))
                   for cell in submitted.get("cells", []) if isinstance(cell, dict)}
        with Gradebook(job["db_url"], job["course_id"]) as gb:
            source = gb.find_notebook(notebook, ASSIGNMENT)
            expected = {c.name for c in source.solution_cells}
    except (OSError, ValueError, AttributeError, MissingEntry):
        return None
    lost = sorted(expected - present)
    if not lost:
        return None
    shown = ", ".join(lost[:4]) + (", ..." if len(lost) > 4 else "")
    return (f"{LOST_CELLS}{len(lost)} of its {len(expected)} answer cells ({shown}): "
            "it was not started from the released notebook, or those cells were deleted; "
            "hand in the released notebook with the answers written in it")


def kernel_names(job: dict, submitted: Path) -> dict[str, str]:
    """notebook -> the kernel nbgrader will run it with: the gradebook's kernelspec (OverwriteKernelspec
    puts it into the notebook), else the submitted notebook's, else '' (the default kernel)."""
    from nbgrader.api import Gradebook, MissingEntry

    names = dict.fromkeys(job["notebooks"], "")
    with Gradebook(job["db_url"], job["course_id"]) as gb:
        for notebook in job["notebooks"]:
            try:
                spec = json.loads(gb.find_notebook(notebook, ASSIGNMENT).kernelspec or "null")
            except (MissingEntry, ValueError):
                continue
            names[notebook] = str(spec.get("name", "")) if isinstance(spec, dict) else ""
    for notebook, name in names.items():
        if not name:
            try:
                meta = json.loads((submitted / f"{notebook}.ipynb").read_text(encoding="utf-8")).get("metadata", {})
                names[notebook] = str(meta.get("kernelspec", {}).get("name", ""))
            except (OSError, ValueError, AttributeError):
                pass  # not handed in or not a notebook: nbgrader reports it
    return names


def prestart_kernel(job: dict, scratch: Path, kernel_name: str, log: logging.Logger):
    """Build the notebook's Config and launch the kernel its executor will adopt; return the Config.

    Returns None when that fails (the notebook's own grading then starts its kernel and
    reports whatever goes wrong, as without pre-start).
    """
    try:
        config = notebook_config(job, scratch)
        executor = next(p for p in config.Autograde.autograde_preprocessors
                        if isinstance(p, type) and issubclass(p, GradingExecute))
        executor(config=config).prestart(kernel_name)
        return config
    except Exception as exc:  # noqa: BLE001 - an optimisation only
        log.warning("could not pre-start the kernel in %s: %s: %s", scratch, type(exc).__name__, exc)
        discard_prestarted(str(scratch))
        return None


def zero_notebook(job: dict, notebook: str) -> None:
    """Give every grade of a notebook that could not be graded 0 points in the private gradebook."""
    from nbgrader.api import Gradebook

    with Gradebook(job["db_url"], job["course_id"]) as gb:
        submitted = gb.find_submission_notebook(notebook, ASSIGNMENT, job["student"])
        for grade in submitted.grades:
            grade.auto_score = 0.0
            grade.needs_manual_grade = False
        gb.db.commit()


def wait_at_gate(gate, log: logging.Logger) -> None:
    """Block until the parent writes the job's go to gate (a multiprocessing Connection; None grades at once)."""
    if gate is None:
        return
    if not gate.poll():
        log.info("warmed up; waiting for the grade run's go")
        waited = time.monotonic()
        gate.poll(None)
        log.info("go after %.2f s", time.monotonic() - waited)
    try:
        gate.recv_bytes()
    except EOFError:
        raise RuntimeError("the grade run that started this job has ended; nothing was graded") from None


def tell_nearly_done(ahead) -> None:
    """Write to the parent's `ahead` pipe (a multiprocessing Connection, or None): the next job may warm up."""
    if ahead is not None and not ahead.closed:
        try:
            ahead.send_bytes(b"ahead")
        except OSError:
            pass  # the grade run has ended; die_with_parent ends this worker
        ahead.close()


CHANGED_ATTRIBUTE = "Attribute '%s' for cell %s has changed! (should be: %s, got: %s)"  # nbgrader's OverwriteCells


def not_a_restored_test_cell(record: logging.LogRecord) -> bool:
    """False for nbgrader's "Attribute 'checksum' for cell X has changed!", which every test cell with hidden tests
    gets (the released copy lacks them), as does one a student edited: grading runs the gradebook's cell either way,
    and the feedback page and export name the cells a student edited. The log keeps nbgrader's other changes."""
    return not (record.msg == CHANGED_ATTRIBUTE and isinstance(record.args, tuple) and record.args[:1] == ("checksum",))


def run_job(job_dir: Path, gate=None, ahead=None, own_process: bool = False) -> dict:
    """Grade every notebook of the job; return {notebook: {"status": ..., "error": ...}}.

    gate and ahead (the worker's ends of two pipes, or None): the job first starts its sandbox,
    fork server and first kernel, then waits for the go on gate before it grades anything; it
    writes to ahead when WARM_AHEAD notebooks are left, so the parent can warm the next job up.
    own_process: this process is the job's alone, so a sandboxed job limits its memory (limit_memory; without the
    sandbox, kernels are this process's children and would inherit the limit).
    """
    job = json.loads((job_dir / "job.json").read_text(encoding="utf-8"))
    if own_process and job["sandbox"]:
        limit_memory()
    os.environ["PART_II_ROOT"] = job["bundle_dir"]  # the kernels' code/ and data/, no instructor file
    log = logging.getLogger("autograder.worker")
    log.setLevel(logging.INFO)
    log.propagate = False
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(BoundedFormatter("%(asctime)s %(levelname)s %(message)s"))
    handler.addFilter(not_a_restored_test_cell)  # 31 lines of each class-demo submission's log
    log.addHandler(handler)
    submitted = Path(job["course_root"]) / "submitted" / job["student"] / ASSIGNMENT
    handed_in = [(k, nb) for k, nb in enumerate(job["notebooks"]) if (submitted / f"{nb}.ipynb").exists()]
    results = {nb: {"status": "missing", "error": "not handed in"} for nb in job["notebooks"]}
    kernels = kernel_names(job, submitted)
    configs: dict[int, object] = {}  # notebook index -> Config its pre-started kernel was launched with

    def scratch_of(k: int) -> Path:
        """The private scratch folder of notebook k (created on first use)."""
        scratch = Path(job["scratch_root"]) / f"nb{k}"
        scratch.mkdir(mode=0o755, exist_ok=True)
        return scratch

    try:
        if handed_in:  # the sandbox's start and the fork server's imports, hidden behind another job when warmed
            k, notebook = handed_in[0]
            configs[k] = prestart_kernel(job, scratch_of(k), kernels[notebook], log)
        wait_at_gate(gate, log)
        for i, (k, notebook) in enumerate(handed_in):
            scratch = scratch_of(k)
            started = time.monotonic()
            if len(handed_in) - i <= WARM_AHEAD:
                tell_nearly_done(ahead)
            if i + 1 < len(handed_in):  # the next kernel boots (and imports) while this notebook runs
                k_next, nb_next = handed_in[i + 1]
                configs[k_next] = prestart_kernel(job, scratch_of(k_next), kernels[nb_next], log)
            try:
                grade_notebook(job, notebook, scratch, log, configs.pop(k))
                results[notebook] = {"status": "graded"}
            except (RuntimeError, MemoryError) as exc:
                exc = exc if isinstance(exc, RuntimeError) else RuntimeError(OUT_OF_MEMORY)
                log.error("could not grade %s: %s", notebook, exc)
                kernel_logs = [scratch / "kernel.log", Path(job["scratch_root"]) / "kernel.log"]
                for kernel_log in kernel_logs:
                    if kernel_log.exists():  # written by the sandbox: why a kernel would not start
                        log.error("kernel log:\n%s", kernel_log.read_text(errors="replace")[-4000:])
                results[notebook] = {"status": "error", "error": str(exc)}
                if NO_KERNEL in str(exc) and (cause := last_log_line(kernel_logs)):
                    # for the instructor only (grade's summary, the job table): the student's own code, run in an
                    # earlier notebook's kernel of this sandbox, can write that log, so no feedback page shows it
                    results[notebook]["kernel_log"] = cause
            finally:
                discard_prestarted(str(scratch))  # not adopted when nbgrader failed before executing
            results[notebook]["seconds"] = round(time.monotonic() - started, 1)
            shutil.rmtree(scratch, ignore_errors=True)  # whatever the student's code wrote
    finally:
        discard_prestarted()  # no kernel outlives the job
        # the submission's cost: bubblewrap passes no CPU time on to this process's RUSAGE_CHILDREN
        log.info("fork server CPU (server and kernels): %.2f s", close_fork_servers())
        log.info("grading process: %s", address_space_line())
    for notebook, result in results.items():
        if result["status"] == "error":
            zero_notebook(job, notebook)
    return results


def write_result(job_dir: Path, results: dict) -> None:
    """Write result.json atomically (its presence means the job finished)."""
    tmp = job_dir / "result.json.tmp"
    tmp.write_text(json.dumps({"notebooks": results}, indent=1), encoding="utf-8")
    tmp.replace(job_dir / "result.json")


def child_main(job_dir: str, gate=None, ahead=None) -> None:
    """Body of a worker forked by the grade parent: own session, log to JOB_DIR/worker.log, grade, exit.

    gate, ahead: the job's pipes (see run_job); None for a job that grades at once.
    """
    os.setsid()  # the parent stops the worker and what shares its group with one killpg (kernels: see stop_worker)
    die_with_parent()
    log_fd = os.open(os.path.join(job_dir, "worker.log"), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(log_fd, 1)
    os.dup2(log_fd, 2)
    sys.stdout = open(1, "w", buffering=1, closefd=False)  # noqa: SIM115
    sys.stderr = open(2, "w", buffering=1, closefd=False)  # noqa: SIM115
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    try:
        write_result(Path(job_dir), run_job(Path(job_dir), gate, ahead, own_process=True))
    except BaseException:
        import traceback

        traceback.print_exc()
        sys.stderr.flush()
        os._exit(1)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def main(argv: list[str]) -> int:
    """Grade one prepared job folder in this process (for debugging a job by hand)."""
    if len(argv) != 1 or not (Path(argv[0]) / "job.json").is_file():
        print("usage: python -m autograder.worker JOB_DIR  (a folder prepared by `python -m autograder grade`, "
              "holding job.json)", file=sys.stderr)
        return 2
    write_result(Path(argv[0]), run_job(Path(argv[0]), own_process=True))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
