"""Checks the student cannot fake: values cross the process boundary, comparisons happen here.

How it works (three steps per grading session):

1. ``record_expected(source_notebook)`` runs the instructor's source notebook once, outside
   any student kernel, with ``PART_II_CHECKS=record``: every ``check_*`` call in an autograded
   test cell sends a plain-JSON record (label, kind, the expected value it was given,
   tolerances) instead of comparing. The records are checked against the instructor's own
   actual values, so a broken source notebook is reported before any student is graded.
2. Before a submission's kernel runs, ``BlindExpectedValues`` rewrites each autograded
   test cell (the source nbgrader restored from the gradebook): the ``expected`` argument
   of every ``check_close``/``check_equal`` call becomes ``None``, and so does every
   assignment to a variable used only as such an argument (``_expected = torch.softmax(...)``).
   The student's process therefore never computes or sees an expected value; it only sends
   its actual values.
3. After execution, ``TrustedChecks`` compares, in the grader's process, each test cell's
   records with the instructor's (same number, same kinds, values within the instructor's
   tolerances, using checks.py's own ``close_failure``/``equal_failure`` on decoded plain
   data). A missing, extra or differing record fails the cell. It then replaces the test
   cell's outputs by a verdict only (nothing, or one short error naming each failed check's label -
   never a value, a hidden input or a traceback line of test code), restores the cell's
   original source, and strips every record from the notebook.

What is defended. Monkeypatching ``numpy.isclose``, ``numpy.testing``, ``math``, builtins,
``sys.modules`` or the check helper earns nothing for ``check_close``/``check_equal``: the
comparison is not in the student's process, a helper that sends nothing or too little fails
the cell, and a helper that sends made-up values must send the right numbers - computed
without ever seeing the expected value. Swallowing exceptions, forging an
``execute_result`` (nbgrader's partial-credit path) or clearing a cell's error output does
not help either: the verdict comes only from the comparison and from the errors the cell
really raised. nbgrader scores a test cell all or nothing, so a cell with at least one
value check on the student's result cannot be passed by faking the others.

Residual threats, honestly:
- ``check_true`` and ``check_raises`` send a verdict computed in the student's process (a
  boolean, an exception name); a patched helper can fake them. A test cell made only of such
  checks is as weak as plain nbgrader: ``weak_cells()`` lists them (``grade`` warns about
  each, and the test suite fails on one in the course) so authors can add a value check
  (e.g. ``check_close(label, p.sum(-1), np.ones(B))`` instead of
  ``check_true(label, np.allclose(p.sum(-1), 1))``).
- Hidden inputs are necessarily in the student's process (the student's function receives
  them), and so is the (blinded) hidden-test source. Student code can copy them into a later
  cell's output, or into a file a later notebook of the submission reads (they share a
  sandbox); ``TrustedChecks.hide_outputs_after_tests`` (on by default) replaces the outputs of
  ordinary code cells that run after the first autograded test cell with a note, and the
  feedback pages show no cell output at all, prompt numbers counted on the page and
  nbgrader's own error texts replaced (``feedback.HideCellOutputs``, ``error_for_the_page``).
  What remains is about 6 bits a cell: which built-in exception it raised, whether it printed,
  whether each test passed.
- An expected value computed in a variable that is also used for something else
  (e.g. in an ``actual`` expression or a label) cannot be blinded; such a check still
  compares outside the process, but a patched helper could read the variable.
- Blinded checks compare with the instructor's values, so hidden inputs must not depend on
  state the student can change (use a local seeded generator in the test cell, as the
  notebooks do), or honest students fail.
- The guard that an exercise is solved without the function it re-implements
  (``checks.forbidden_calls``: spies on ``pp.softmax``, ``torch.softmax``… while the student's
  function runs, also where that function and the student's own functions it reaches hold them:
  aliases, defaults, closures, containers, partials, decorated copies, the attributes of the
  student's classes and of their objects) lives in the kernel and reports through ``check_true``.
  Student code can still undo it (patch the spy back, hide a reference two containers deep or in
  an object of a library's class, fetch the function at call time from somewhere no spy sits, such
  as ``gc``), as in plain nbgrader.
"""

from __future__ import annotations

import ast
import atexit
import builtins
import contextlib
import importlib.util
import json
import os
import re
import signal
import sys
import tempfile
import threading
from collections import Counter
from pathlib import Path
from typing import Any, Callable

import nbformat
from nbformat.v4 import new_output
from nbgrader.preprocessors import NbGraderPreprocessor
from traitlets import Bool, Dict
from traitlets.config import Config

from .cells import (BUDGET_NOT_RUN, KERNEL_DIED, MOVED_TESTS_KEY, NOT_RUN, NOTEBOOK_TIMEOUT, TOO_MANY_PROCESSES,
                    first_line, left_out, moved_test_message, numbered_cell, test_headings, visible_source)

REPO = Path(__file__).resolve().parent.parent
CHECKS_PATH = REPO / "code" / "part-ii" / "checks.py"
CHECKS_WITH_EXPECTED = frozenset({"check_close", "check_equal"})
SAFE_ENAMES = frozenset(name for name, obj in vars(builtins).items()
                        if isinstance(obj, type) and issubclass(obj, BaseException))
GRADER_ERRORS = {  # the grader's own words for the failures it causes; shown even after a test cell
    "CellTimeoutError": "the cell ran longer than its time limit and was stopped by the grader",
    KERNEL_DIED: ("the Python kernel stopped, or stopped answering, while this cell ran (exit(), quit(), os._exit(), "
                  "running out of memory or past the CPU time limit stop it): the grader started a new kernel, re-ran "
                  "the cells before this one and went on without it, so nothing this cell defines exists in later cells"),
    TOO_MANY_PROCESSES: ("this cell started too many processes (a fork bomb?), so the grader stopped it together "
                         "with the kernel, then re-ran the cells before it in a new kernel and went on without it"),
    NOT_RUN: "not run: the kernel stopped too many times in this notebook",
    NOTEBOOK_TIMEOUT: BUDGET_NOT_RUN,
}
IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
NAME_ERROR = re.compile(rf"name '({IDENTIFIER.pattern})' is not defined")

__all__ = ["record_expected", "record_assignment", "configure_trusted_checks", "weak_cells", "hidden_outputs",
           "blind_source", "BlindExpectedValues", "TrustedChecks", "DropEmptyGradeMetadata", "RECORD_ENV"]


def _load_checks():
    """Import the course's checks.py from the repository by path (the grader's own copy)."""
    spec = importlib.util.spec_from_file_location("part_ii_trusted_checks_module", CHECKS_PATH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


checks = _load_checks()
RECORD_ENV = {checks.MODE_ENV: "record"}
VERDICT_CHARS = 300  # longest verdict a failed test cell shows (whole failures, then "and N more")


def is_autograded_test(cell) -> bool:
    """True for a code cell nbgrader grades by running it (grade, not solution)."""
    meta = cell.get("metadata", {}).get("nbgrader", {})
    return cell.get("cell_type") == "code" and bool(meta.get("grade")) and not meta.get("solution")


# --- blinding ------------------------------------------------------------------------------
def _called_name(func) -> str:
    """The called function's bare name (check_close for check_close(...) and checks.check_close(...))."""
    if isinstance(func, ast.Name):
        return func.id
    if isinstance(func, ast.Attribute):
        return func.attr
    return ""


def _loaded_names(node) -> set[str]:
    """Names read anywhere inside node."""
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}


def _assigned_names(targets: list) -> list[str]:
    """The names an assignment binds when its targets are plain names, or one (nested) tuple/list of them, else []."""
    if len(targets) > 1 and any(isinstance(t, (ast.Tuple, ast.List)) for t in targets):
        return []  # a = b, c = value: not worth the case
    names = []
    for target in targets:
        if isinstance(target, ast.Name):
            names.append(target.id)
        elif isinstance(target, (ast.Tuple, ast.List)) and target.elts:
            inner = [_assigned_names([part]) for part in target.elts]
            if not all(inner):
                return []
            names += [name for part in inner for name in part]
        else:
            return []  # an attribute, a subscript or a starred name: not blinded
    return names


def _nones_like(target) -> ast.expr:
    """None for a name; for a tuple/list target, a tuple of the same shape holding Nones (the unpacking still works)."""
    if isinstance(target, (ast.Tuple, ast.List)):
        return ast.Tuple(elts=[_nones_like(part) for part in target.elts], ctx=ast.Load())
    return ast.Constant(value=None)


def _is_blinded(value: ast.expr) -> bool:
    """The value blind_source puts in: None, or a (nested) tuple of Nones."""
    if isinstance(value, ast.Tuple):
        return all(_is_blinded(part) for part in value.elts)
    return isinstance(value, ast.Constant) and value.value is None


def blind_source(source: str) -> str:
    """Replace expected values of check_close/check_equal calls (and variables used only there) by None."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return source
    none = ast.Constant(value=None)
    regions = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and _called_name(node.func) in CHECKS_WITH_EXPECTED:
            if len(node.args) >= 3:
                regions.append(node.args[2])
                node.args[2] = none
            for keyword in node.keywords:
                if keyword.arg == "expected":
                    regions.append(keyword.value)
                    keyword.value = none
    if not regions:
        return source
    candidates = set().union(*(_loaded_names(r) for r in regions))
    while True:
        used_elsewhere = _loaded_names(tree)
        blinded = []
        for node in ast.walk(tree):
            if isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None:
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                names = _assigned_names(targets)
                if (names and all(n in candidates for n in names) and not any(n in used_elsewhere for n in names)
                        and not _is_blinded(node.value)):
                    candidates |= _loaded_names(node.value)
                    node.value = _nones_like(targets[0])
                    blinded.append(node)
        if not blinded:
            break
    return ast.unparse(tree)


# --- records ---------------------------------------------------------------------------------
def records_of(cell) -> list:
    """The check records a cell's outputs carry, in order (malformed ones included as such)."""
    found = []
    for output in cell.get("outputs", []):
        data = output.get("data", {}) if output.get("output_type") in ("display_data", "execute_result") else {}
        if checks.RECORD_MIMETYPE in data:
            record = data[checks.RECORD_MIMETYPE]
            if isinstance(record, str):
                try:
                    record = json.loads(record)
                except ValueError:
                    record = None
            found.append(record if isinstance(record, dict) else {"kind": "malformed"})
    return found


def strip_records(cell) -> None:
    """Remove every check record from a cell's outputs."""
    if "outputs" in cell:
        cell.outputs = [o for o in cell.outputs if checks.RECORD_MIMETYPE not in o.get("data", {})]


def _expected_entry(record: dict) -> dict:
    """What the grader keeps from an instructor record: kind, label, expected value, tolerances, check_true's hint."""
    keep = ("kind", "label", "expected", "rtol", "atol", "raised", "hint")
    return {k: record[k] for k in keep if k in record}


def record_failure(expected: dict, got) -> str | None:
    """Why a student's record does not pass the instructor's check, or None (no value is revealed)."""
    label = str(expected.get("label", "check"))
    if not isinstance(got, dict) or got.get("kind") != expected.get("kind"):
        return f"{label}: this check did not report its result"
    kind = expected["kind"]
    if kind == "close":
        return checks.close_failure(label, checks.from_plain(got.get("actual")), checks.from_plain(expected.get("expected")),
                                    rtol=expected.get("rtol", checks.RTOL), atol=expected.get("atol", checks.ATOL),
                                    reveal=False)
    if kind == "equal":
        return checks.equal_failure(label, checks.from_plain(got.get("actual")), checks.from_plain(expected.get("expected")),
                                    reveal=False)
    if kind == "true":  # the hint the instructor's check_true gave, as the student's own run shows it
        hint = expected.get("hint")
        note = f" ({hint})" if isinstance(hint, str) and hint else ""
        return None if got.get("holds") is True else f"{label}: not true{note}"
    if kind == "raises":
        ok = got.get("ok") is True and got.get("raised") == expected.get("raised")
        return None if ok else raises_failure(label, expected.get("raised"), got.get("raised"))
    return f"{label}: unknown kind of check"


def raises_failure(label: str, wanted, raised) -> str:
    """Why a check_raises record failed: the exception class names only (a message could echo hidden inputs)."""
    if not isinstance(wanted, str) or raised == wanted:  # nothing to compare with, or a malformed record
        return f"{label}: the expected error was not raised"
    if raised is None:
        return f"{label}: expected {wanted}, but the call returned normally"
    # the name comes from the student's process: only a built-in exception's name is shown as is
    shown = raised if isinstance(raised, str) and raised in SAFE_ENAMES else "another exception"
    return f"{label}: expected {wanted}, got {shown}"


NOT_REPORTED = "this check did not report its result"


def cell_failure(expected: list, got: list, limit: int = VERDICT_CHARS) -> str | None:
    """Compare one test cell's records with the instructor's; return every failure ('a; b', at most limit characters),
    or None. The checks after one that did not report are not judged: their records are missing, or no longer line
    up, for the same reason."""
    failures = []
    for index, want in enumerate(expected):
        if index >= len(got):
            failures.append(f"{want.get('label', 'check')}: {NOT_REPORTED} (the cell stopped early or the check "
                            "helper was changed)")
            break
        message = record_failure(want, got[index])
        if message:
            failures.append(message)
            if message.endswith(NOT_REPORTED):
                break
    if len(got) > len(expected) and not failures:
        return "the test cell reported more checks than it contains (the check helper was changed)"
    return joined_failures(failures, limit) if failures else None


def stopped_before(expected: list, got: list, room: int = VERDICT_CHARS) -> str:
    """Where a test cell that raised stopped, from its records: " before the check 'b' reported (the 2 checks before it
    passed)", with the failures of those before it instead when some failed, in at most room characters (whole
    failures, then 'and N more'); '' when the records say nothing (more than expected). The labels are the ones a
    failed check shows anyway; the kernel can only choose among them."""
    done = len(got)
    if done >= len(expected):
        return ""
    label = shown_label(expected[done])
    if done == 0:
        return f" before its first check, {label}, reported"
    opening = f" before the check {label} reported; before that: "
    earlier = cell_failure(expected[:done], got, max(room - len(opening), 0))
    if earlier:
        return opening + earlier
    return f" before the check {label} reported (the {'check' if done == 1 else f'{done} checks'} before it passed)"


def shown_label(record: dict) -> str:
    """A check's label quoted for a verdict, cut to 100 characters ('a check' when it has none)."""
    label = re.sub(r"\s+", " ", str(record.get("label") or "")).strip()
    return f"'{label[:100]}{'…' if len(label) > 100 else ''}'" if label else "a check"


def joined_failures(failures: list[str], limit: int = VERDICT_CHARS) -> str:
    """'a (3 checks); b; c' in at most `limit` characters: each failure once, with the number of checks that gave it
    (a check run in a loop), cut after a whole failure ('a; and 2 more checks failed')."""
    counts = Counter(failures)  # in the order first given
    texts = [failure if n == 1 else f"{failure} ({n} checks)" for failure, n in counts.items()]
    numbers = list(counts.values())
    for shown in range(len(texts), 0, -1):
        rest = sum(numbers[shown:])
        text = "; ".join(texts[:shown]) + (f"; and {rest} more {'check' if rest == 1 else 'checks'} failed"
                                          if rest else "")
        if len(text) <= limit:
            return text
        if shown == 1:  # the first failure alone is too long: cut it, keep its count and the count of the others
            tail = text[len(failures[0]):]  # texts[0] is failures[0], with its count when it has one
            return failures[0][:max(limit - len(tail) - 1, 0)] + "…" + tail
    return ""


async def _run_in_record_mode(path: Path, timeout: int, quiet_after: list | None = None) -> nbformat.NotebookNode:
    """Execute a source notebook with PART_II_CHECKS=record in a fresh kernel; return the executed notebook. The
    kernel's own log (its stderr) is passed on when the run ends, unless quiet_after then holds an interrupt."""
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError, CellTimeoutError, DeadKernelError

    nb = nbformat.read(path, as_version=4)
    with tempfile.TemporaryDirectory(prefix="part-ii-record-") as tmp:
        config = Config()  # unix sockets: no TCP port race with parallel kernels, no plain-text TCP warning
        config.KernelManager.transport = "ipc"
        config.KernelManager.ip = str(Path(tmp) / "kernel")
        config.KernelManager.connection_file = str(Path(tmp) / "kernel.json")
        config.AsyncKernelManager.client_factory = "autograder.sandbox.ReadyKernelClient"  # no 0.2 s IOPub flush
        client = NotebookClient(nb, timeout=timeout, kernel_name="python3", config=config,
                                resources={"metadata": {"path": str(path.parent)}})
        # a kernel stopped by Ctrl-C logs a ZMQError traceback for each message it was answering: not worth showing
        with open(Path(tmp) / "kernel.log", "w+b") as log:
            running = []
            client.on_cell_start = lambda cell, cell_index, **kw: running.append(cell_index)
            try:
                await client.async_execute(env={**os.environ, **RECORD_ENV}, stderr=log)
            except (CellExecutionError, CellTimeoutError, DeadKernelError) as exc:
                raise ValueError(failed_cell_message(path, nb, running[-1] if running else None, exc)) from None
            finally:  # a run cancelled during nbclient's clean-up leaves its exit hook (AssertionError at exit)
                atexit.unregister(client._cleanup_kernel)
                if not quiet_after:
                    log.seek(0)
                    sys.stderr.write(log.read().decode("utf-8", "replace"))
    return nb


def failed_cell_message(path: Path, nb: nbformat.NotebookNode, index: int | None, exc: Exception) -> str:
    """'NAME.ipynb: cell N (first line) raised Error: message' (or timed out, or its kernel died) for a source notebook
    stopped in record mode at cell index: one line that says where, as nbclient's message (a traceback) does not."""
    from nbclient.exceptions import CellExecutionError, CellTimeoutError
    if isinstance(exc, CellExecutionError):
        what = f"raised {exc.ename}: {first_line(exc.evalue) or '(no message)'}"
    elif isinstance(exc, CellTimeoutError):
        what = "timed out"
    else:
        what = "stopped: its kernel died"
    where = numbered_cell(nb.cells[index], index + 1) if index is not None else "a cell"
    return f"{path.name}: {where} {what}"


def _records_of_notebook(path: Path, nb: nbformat.NotebookNode) -> dict[str, list]:
    """{grade_id: [expected records]} of an executed source notebook; ValueError if its own checks fail."""
    result = {}
    for cell in nb.cells:
        if not is_autograded_test(cell):
            continue
        grade_id = cell.metadata.nbgrader.get("grade_id", "")
        records = records_of(cell)
        for record in records:
            if not isinstance(record, dict) or "kind" not in record:
                raise ValueError(f"{path.name}: {grade_id} produced a malformed check record")
            message = record_failure(_expected_entry(record), {**record, "ok": record.get("ok", True)})
            if record.get("kind") in ("close", "equal") and record.get("expected") is None:
                message = f"{record.get('label')}: the expected value is None in the source notebook"
            if message:
                raise ValueError(f"{path.name}: the instructor's solution fails its own check in {grade_id}: {message}")
        result[grade_id] = [_expected_entry(r) for r in records]
    return result


def _source_path(source_notebook: Path) -> Path:
    """The source notebook's path; FileNotFoundError when it is missing."""
    path = Path(source_notebook)
    if not path.is_file():
        raise FileNotFoundError(f"source notebook not found: {path}")
    return path


def record_expected(source_notebook: Path, timeout: int = 300) -> dict[str, list]:
    """Run an instructor source notebook in record mode; return {grade_id: [expected records]}."""
    import asyncio

    path = _source_path(source_notebook)
    return _records_of_notebook(path, asyncio.run(_run_in_record_mode(path, timeout)))


@contextlib.contextmanager
def _interrupts_noted():
    """Ctrl-C (and SIGTERM where a Python handler takes it) inside the block raise KeyboardInterrupt at once, and the
    block ends in KeyboardInterrupt whatever else it raised or returned: asyncio's default Ctrl-C cancels the run, and
    nbclient turned the cancelled kernels into AssertionError or DeadKernelError (the sources blamed) after running
    on for seconds, or swallowed the cancel. Yields the list of signals noted (empty until one arrives)."""
    noted: list[int] = []

    def handler(signum, frame):
        noted.append(signum)
        for other in previous:  # a second Ctrl-C would cut nbclient's clean-up short (tracebacks at exit)
            signal.signal(other, signal.SIG_IGN)
        raise KeyboardInterrupt

    previous = {}
    if threading.current_thread() is threading.main_thread():
        for signum in (signal.SIGINT, signal.SIGTERM):
            current = signal.getsignal(signum)
            if callable(current) and (signum == signal.SIGINT or current is not signal.default_int_handler):
                previous[signum] = signal.signal(signum, handler)
    try:
        yield noted
    except BaseException:
        if noted:
            raise KeyboardInterrupt from None
        raise
    finally:
        for signum, old in previous.items():
            signal.signal(signum, old)
    if noted:
        raise KeyboardInterrupt


async def _record_many(paths: list[Path], timeout: int, parallel: int, quiet_after: list | None = None
                       ) -> list[dict[str, list]]:
    """record_expected for several notebooks, at most `parallel` kernels at a time, results in order. Once quiet_after
    holds anything (an interrupt), the kernels' dying words (tasks' unretrieved exceptions) are not printed."""
    import asyncio

    loop = asyncio.get_running_loop()
    loop.set_exception_handler(lambda lp, context: None if quiet_after else lp.default_exception_handler(context))
    # nbclient puts a Ctrl-C handler of its own on the loop for each kernel it starts: it stops only the kernel started
    # last (the others ran on), and the run then failed with AssertionError; _interrupts_noted's handler stays instead
    loop.add_signal_handler = lambda sig, callback, *args: None
    loop.remove_signal_handler = lambda sig: False
    gate = asyncio.Semaphore(parallel)

    async def one(path: Path) -> dict[str, list]:
        async with gate:
            return _records_of_notebook(path, await _run_in_record_mode(path, timeout, quiet_after))

    # every notebook runs to its end: a failure raised at once cancelled the others' kernels mid-run, and their
    # deaths printed screens of ZMQ and DeadKernelError tracebacks above the one error that mattered
    results = await asyncio.gather(*(one(p) for p in paths), return_exceptions=True)
    if failed := next((r for r in results if isinstance(r, BaseException)), None):
        raise failed
    return results


def record_assignment(source_dir: Path, notebooks: list[str] | None = None, timeout: int = 300,
                      cache_dir: Path | None = None, parallel: int | None = None,
                      before_run: Callable[[list[str]], None] | None = None) -> dict[str, dict]:
    """record_expected for every notebook of an assignment folder: {notebook stem: {grade_id: [...]}}.

    Notebooks run `parallel` at a time (default: one per CPU). With cache_dir, a notebook is run
    again only when its bytes or a file under code/ or data/ of the root it is recorded with
    ($PART_II_ROOT, else this repository) changed, or its cache file does not parse; nothing is
    cached from an interrupted or failed run. The cache holds expected values: keep it where
    kernels cannot read it. before_run gets the names about to run (none: not called).
    """
    import asyncio

    folder = Path(source_dir)
    if not folder.is_dir():
        raise FileNotFoundError(f"assignment source folder not found: {folder}")
    if parallel is not None and (not isinstance(parallel, int) or parallel < 1):
        raise ValueError(f"parallel must be a positive integer, got {parallel!r}")
    names = notebooks if notebooks is not None else sorted(p.stem for p in folder.glob("*.ipynb"))
    paths = {name: _source_path(folder / f"{name}.ipynb") for name in names}
    cached = _cache_files(paths, Path(cache_dir)) if cache_dir else {}
    result = {name: found for name, f in cached.items() if (found := read_cache(f)) is not None}
    todo = [name for name in names if name not in result]
    if todo:
        if before_run:
            before_run(todo)
        with _interrupts_noted() as noted:
            recorded = asyncio.run(_record_many([paths[n] for n in todo], timeout, parallel or os.cpu_count() or 1,
                                                noted))
        for name, records in zip(todo, recorded):
            result[name] = records
            if name in cached:
                write_cache(cached[name], records)
    return {name: result[name] for name in names}


def _cache_files(paths: dict[str, Path], cache_dir: Path) -> dict[str, Path]:
    """{name: cache_dir/<name>-<key>.json}, the key a hash of the notebook's bytes and of the course files the
    record kernels get (code/ and data/ under $PART_II_ROOT, else this repository)."""
    import hashlib

    root = Path(os.environ.get("PART_II_ROOT") or REPO)
    course_files = _files_digest([root / "code", root / "data"])
    keys = {name: hashlib.sha256((course_files + _files_digest([path])).encode()).hexdigest()[:24]
            for name, path in paths.items()}
    return {name: cache_dir / f"{name}-{key}.json" for name, key in keys.items()}


def _files_digest(paths: list[Path]) -> str:
    """sha256 (hex) over the names (from each path's parent) and bytes of files (folders walked; compiled files and
    editor or OS leftovers skipped, as release skips them)."""
    import hashlib

    h = hashlib.sha256()
    for path in paths:
        if path.is_dir():
            # what release leaves out of the student bundle is left out here too: grade, which records with the
            # bundle's code/ and data/, finds the records release made with the repository's
            files = sorted(p for p in path.rglob("*") if p.is_file() and not left_out(p))
        else:
            files = [path]
        for f in files:  # named from the folder given: a file moved from code/ to data/ changes the digest
            h.update(str(f.relative_to(path.parent)).encode() + b"\0" + f.read_bytes() + b"\0")
    return h.hexdigest()


def read_cache(path: Path) -> Any:
    """A cache file's JSON, or None when it is missing or does not parse (it is then made again)."""
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def write_cache(path: Path, value: Any) -> None:
    """Write a cache file as JSON, whole or not at all (parallel runs may write the same one)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_text(json.dumps(value, sort_keys=True), encoding="utf-8")
    tmp.replace(path)


def weak_cells(expected_records: dict) -> list[str]:
    """Test cells ("notebook/grade_id") with no value check (only plain asserts, check_true or check_raises), whose
    verdicts the student's process computes, so a patched helper fakes them."""
    weak = []
    for notebook, cells in sorted(expected_records.items()):
        for grade_id, records in sorted(cells.items()):
            if not any(r.get("kind") in ("close", "equal") for r in records):
                weak.append(f"{notebook}/{grade_id}")
    return weak


# --- nbgrader preprocessors --------------------------------------------------------------------
class BlindExpectedValues(NbGraderPreprocessor):
    """Before execution: blank the expected values in autograded test cells (originals kept in resources)."""

    def preprocess(self, nb, resources):
        """Rewrite every autograded test cell's source; remember the original by grade id."""
        originals = resources.setdefault("trusted_checks_sources", {})
        for cell in nb.cells:
            if is_autograded_test(cell):
                originals[cell.metadata.nbgrader.get("grade_id", "")] = cell.source
                cell.source = blind_source(cell.source)
        return nb, resources


class TrustedChecks(NbGraderPreprocessor):
    """After execution: judge each autograded test cell from its records, outside the student's process."""

    expected_records = Dict(help="{notebook: {grade_id: [records]}} from record_assignment()").tag(config=True)
    hide_outputs_after_tests = Bool(True, help="replace outputs of ordinary code cells after the first "
                                               "autograded test cell (they could echo hidden inputs)").tag(config=True)

    def preprocess(self, nb, resources):
        """Give each test cell a verdict-only output, restore its source, strip all records."""
        notebook = resources.get("unique_key") or resources.get("nbgrader", {}).get("notebook", "")
        expected = self.expected_records.get(notebook)
        originals = resources.get("trusted_checks_sources", {})
        names = visible_test_names(nb, originals)
        moved = nb.metadata.pop(MOVED_TESTS_KEY, None)  # RestoreMissingCells's, from the release's order
        moved = {g: str(later) for g, later in moved.items()} if isinstance(moved, dict) else {}
        headings = test_headings(nb) if moved else {}
        seen_test = False
        for cell in nb.cells:
            if is_autograded_test(cell):
                seen_test = True
                grade_id = cell.metadata.nbgrader.get("grade_id", "")
                cell.outputs = ([_error(moved_test_message(moved[grade_id], headings))] if grade_id in moved else
                                self._verdict(cell, None if expected is None else expected.get(grade_id), names))
                if grade_id in originals:
                    cell.source = originals[grade_id]
            elif cell.get("cell_type") == "code":
                strip_records(cell)
                if seen_test and self.hide_outputs_after_tests and cell.outputs:
                    cell.outputs = hidden_outputs(cell.outputs, cell.source)
        return nb, resources

    def _verdict(self, cell, expected: list | None, names: frozenset = frozenset()) -> list:
        """[] when the cell passes, else one short error output that reveals no value (`names` may be named)."""
        if expected is None:
            return [_error("no trusted expected values were recorded for this test cell")]
        for output in cell.outputs:
            if output.get("output_type") == "error":
                summary = _error_summary(output.get("ename", ""), str(output.get("evalue", "")), names)
                if output.get("ename") not in (NOT_RUN, NOTEBOOK_TIMEOUT):  # a cell never run reached no check
                    summary += stopped_before(expected, records_of(cell), VERDICT_CHARS - len(summary))
                return [_error(summary)]
            if output.get("output_type") == "stream" and output.get("name") == "stderr":
                return [_error("the test cell wrote to stderr")]
        message = cell_failure(expected, records_of(cell))
        return [_error(message)] if message else []


class DropEmptyGradeMetadata(NbGraderPreprocessor):
    """After DeduplicateIds: remove the empty nbgrader metadata it leaves on duplicate cells.

    nbgrader 0.9.6's OverwriteCells(add_missing_cells=True) reads ``grade_id`` from every cell
    with nbgrader metadata and crashes (KeyError) on those empty dicts, so one duplicated grade
    id would stop the whole notebook from being graded.
    """

    def preprocess_cell(self, cell, resources, index):
        """Turn a duplicate (emptied) grade cell into a plain cell."""
        if cell.get("metadata", {}).get("nbgrader", None) == {}:
            del cell.metadata["nbgrader"]
        return cell, resources


AFTER_TEST = "cells that run after a test cell could display its hidden inputs"  # why their outputs are hidden


def hidden_outputs(outputs: list, source: str = "", why: str = AFTER_TEST) -> list:
    """What is kept of a cell that ran after a test cell (or, why saying so, of any cell on a feedback page): that it
    failed (and how), or a note.

    A syntax error is described from the cell's source, compiled here (it never ran, so it could
    not have seen a hidden input): the student learns the line and what the compiler expected.
    """
    for output in outputs:
        if output.get("output_type") == "error":
            name = output.get("ename", "")
            name = name if name in SAFE_ENAMES or name in GRADER_ERRORS else "Exception"
            # a grader error's fixed wording, never the output's own (a student may raise an exception of that name)
            message = (GRADER_ERRORS.get(name) or syntax_error(source, name) or missing_module(output, source)
                       or f"details not shown: {why}")
            return [new_output("error", ename=name, evalue=message, traceback=[f"{name}: {message}"])]
    return [new_output("stream", name="stdout", text=f"[output not shown: {why}]\n")]


MISSING_MODULE = re.compile(r"No module named '([A-Za-z_][\w.]*)'")
DOTTED_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*")


def names_module(source: str, module: str) -> bool:
    """True when a cell's source spells out the module name: a dotted name in it (strings too, for import_module) or
    one of its dotted prefixes, or module.name of a `from module import name`. A fixed set of names, so that a kernel
    choosing among them can tell only a few bits, where any name made of the source's identifiers could carry hidden
    inputs. Each name is compared, not its prefixes collected: a name of 32,000 parts took 2 GiB that way."""
    if any(dotted == module or dotted.startswith(module + ".") for dotted in DOTTED_NAME.findall(source)):
        return True
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):  # IPython syntax, a null byte, nesting too deep
        return False
    return any(isinstance(node, ast.ImportFrom) and node.module and not node.level
               and any(alias.name != "*" and f"{node.module}.{alias.name}" == module for alias in node.names)
               for node in ast.walk(tree))


def missing_module(output: dict, source: str) -> str | None:
    """"No module named 'x' (when graded)" for a ModuleNotFoundError whose module the cell's own source names (the
    student's text, so no hidden input; only the grading environment may lack it), else None."""
    found = MISSING_MODULE.fullmatch(str(output.get("evalue", "")).strip())
    if output.get("ename") != "ModuleNotFoundError" or found is None:
        return None
    module = found.group(1)
    if not names_module(source, module):
        return None
    return f"No module named '{module}' when the notebook was graded (the grading environment does not have it)"


# a magic or shell line: IPython compiles what Python cannot (blanks, not \s: \s also crossed every newline after each
# line start, quadratic in a cell of newlines)
IPYTHON_SYNTAX = re.compile(r"^[^\S\n]*[%!]", re.MULTILINE)


def syntax_error(source: str, ename: str) -> str | None:
    """'<the compiler's message> (line N)' when ename is a syntax error and compiling source here raises one of that
    class, else None. IPython syntax (%magic, !command) is not Python: such a cell gets None."""
    if ename not in ("SyntaxError", "IndentationError", "TabError") or IPYTHON_SYNTAX.search(source):
        return None
    try:
        compile(source, "<cell>", "exec")
    except SyntaxError as err:
        if type(err).__name__ != ename:
            return None
        return f"{err.msg} (line {err.lineno} of the cell)" if err.lineno else err.msg
    except (ValueError, MemoryError, RecursionError):  # a null byte; nesting too deep, or a cell too large, to compile
        return None  # (a kernel may call any cell's error a SyntaxError: '-' * 100,000 overflowed the parser here)
    return None


def visible_test_names(nb, originals: dict) -> frozenset:
    """Identifiers in the visible part of a notebook's autograded test cells (what the student's copy shows them)."""
    names = set()
    for cell in nb.cells:
        if is_autograded_test(cell):
            # the blinded source lost its comments, hidden-test markers included: read the original
            source = originals.get(cell.metadata.nbgrader.get("grade_id", ""), cell.source)
            names |= set(IDENTIFIER.findall(visible_source(source)))
    return frozenset(names)


def _error_summary(ename: str, evalue: str = "", names: frozenset = frozenset()) -> str:
    """A fixed phrase for an error raised in a test cell (the student controls its message).

    A NameError's missing name is added only when it is one of `names` (the visible test code's
    identifiers): a name only the hidden tests use is never shown.
    """
    if ename in GRADER_ERRORS:
        return GRADER_ERRORS[ename]
    missing = NAME_ERROR.match(evalue.strip()) if ename == "NameError" else None
    if missing and missing.group(1) in names:
        return (f"the test cell stopped with NameError ({missing.group(1)} is not defined: "
                "did the cell that defines it run without error?)")
    shown = ename if ename in SAFE_ENAMES else "an exception"
    return f"the test cell stopped with {shown}"


def _error(message: str):
    """An error output nbgrader scores as a failed test cell."""
    message = re.sub(r"\s+", " ", message)[:VERDICT_CHARS]
    return new_output("error", ename="AssertionError", evalue=message, traceback=[f"AssertionError: {message}"])


def configure_trusted_checks(config: Config, expected_records: dict) -> None:
    """Make autograde blind test cells, record checks in the kernel and judge them here."""
    from nbgrader.converters import Autograde
    from nbgrader.preprocessors import Execute, LimitOutput, SaveAutoGrades

    if not isinstance(config, Config):
        raise TypeError(f"config must be a traitlets Config, got {type(config).__name__}")
    if not isinstance(expected_records, dict) or not all(isinstance(v, dict) for v in expected_records.values()):
        raise TypeError("expected_records must be {notebook: {grade_id: [records]}} as record_assignment() returns")
    config.TrustedChecks.expected_records = expected_records
    env = dict(config.SandboxedKernelManager.get("setenv", {}))
    config.SandboxedKernelManager.setenv = {**env, **RECORD_ENV}
    kernel_env = dict(config.GradingExecute.get("kernel_env", {}))
    config.GradingExecute.kernel_env = {**kernel_env, **RECORD_ENV}
    current = [p for p in (config.Autograde.get("autograde_preprocessors") or Autograde().autograde_preprocessors)
               if p not in (BlindExpectedValues, TrustedChecks)]
    executes = [i for i, p in enumerate(current) if isinstance(p, type) and issubclass(p, Execute)]
    if not executes:
        raise ValueError("the autograde preprocessors contain no Execute step to wrap")
    from .sandbox import GradingExecute

    at = executes[0]
    if not issubclass(current[at], GradingExecute):
        current[at] = GradingExecute  # it passes kernel_env to the kernel
    # judge after IgnorePattern (harmless warnings gone), before LimitOutput and the scores
    after = at + 1
    while after < len(current) and current[after] not in (LimitOutput, SaveAutoGrades):
        after += 1
    current.insert(after, TrustedChecks)
    current.insert(at, BlindExpectedValues)
    config.Autograde.autograde_preprocessors = current
    from nbgrader.preprocessors import DeduplicateIds

    sanitize = [p for p in (config.Autograde.get("sanitize_preprocessors") or Autograde().sanitize_preprocessors)
                if p is not DropEmptyGradeMetadata]
    if DeduplicateIds in sanitize:
        sanitize.insert(sanitize.index(DeduplicateIds) + 1, DropEmptyGradeMetadata)
    config.Autograde.sanitize_preprocessors = sanitize
