"""Step 3, grade: autograde every collected submission, N at a time, resumable.

Worker model. Each submission is one job, graded by its own worker process
(``autograder.worker``) in a private folder with a private copy of the gradebook, and
every kernel talks over unix sockets in that folder (no TCP port race, nbgrader #174;
no shared ``os.chdir``). This process is the only writer of the real gradebook: when a
worker finishes, it copies the submission's grades and the job's new state in ONE
transaction. The job table ``autograder_job`` lives in the gradebook database itself,
so a grade and the record that it was committed can never disagree:

    pending -> running -> done | error          (state per submission)
    done -> requeued -> regrading -> done | requeued   (grade --force; requeued again when it fails)

A forced regrade leaves each submission's grades standing until its new ones are committed:
``requeued`` and ``regrading`` are done jobs queued and being graded again, which export and
feedback treat as done. Ctrl-C during a forced run stops it with every grade in place, and
the next run (with or without ``--force``) grades the rest of the queue.

A SIGKILL at any moment leaves each job either committed (done, skipped by the next
run) or not (running/pending, or regrading/requeued with the earlier grades standing,
graded again from scratch by the next run); workers die
with this process (worker.die_with_parent), and their sandboxes with them (bwrap's
--die-with-parent). A re-run skips done jobs whose submission is
unchanged, unless ``--force``; ``commits`` counts how often a job's grades were written.

Warming up. A job's worker first starts its sandbox, the fork server's imports and its
first kernel (about 2 s), then waits for its go. While a job grades its last notebooks
(worker.WARM_AHEAD), the next job is started to warm up beside it, and it gets its go
when a slot frees: so at most ``workers`` jobs grade at once, and the start-up of each
submission's sandbox is hidden behind the one before it. A warming job is "running" in
the table (its worker exists), but its time budget begins only with its go.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import hashlib
import json
import multiprocessing
import multiprocessing.connection
import os
import re
import shutil
import signal
import sys
import tempfile
import threading
import time
from collections import deque
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import nbformat
from sqlalchemy import Column, Float, Integer, MetaData, String, Table, Text, create_engine, inspect, select

from .cells import ANSI, clipped, readable
from .collect import _digest, dropped_note, dropped_students, load_collect_log
from .course import (ASSIGNMENT, DEFAULT_CELL_TIMEOUT, DEFAULT_NOTEBOOK_TIMEOUT, REPO, AutograderError, Course, abandon,
                     build_option, case_hint, fast_new_gradebooks, listed, one_transaction, run_first, sqlite_url)
from .extensions import extension_ends, nbgrader_interval, sync_submission

RETRIES = 1  # a worker that crashes (not a timeout, not out of memory: those would end the same) is started once more
POLL_SECONDS = 0.2
OUT_OF_MEMORY_REASON = "the grading process ran out of memory"  # how such a failure's reason starts
AUTOGRADING_LINE = re.compile(r"\S+ \S+ INFO Autograding (.+\.ipynb)$")  # nbgrader's, on the worker's log
REQUEUED = "requeued"  # a done job that `grade --force` queued to be graded again: its grades stand meanwhile
REGRADING = "regrading"  # a requeued job being graded: its grades stand until the new ones are committed
STANDING = ("done", REQUEUED, REGRADING)  # the states whose grades are the submission's (export, feedback)
BUSY = ("running", REGRADING)  # the states of a job whose worker runs (or ran, in a run that was killed)
TEMPLATE_TABLES = ("assignment", "notebook", "base_cell", "grade_cells", "solution_cells", "task_cells", "source_cell")

JOBS = Table(
    "autograder_job", MetaData(),
    Column("student_id", String(128), primary_key=True),
    Column("assignment", String(128), primary_key=True),
    Column("digest", String(64), nullable=False),  # sha256 of the submitted files
    Column("state", String(16), nullable=False),  # pending, running, done, error, requeued, regrading
    Column("attempts", Integer, nullable=False, default=0),
    Column("commits", Integer, nullable=False, default=0),  # times grades were written for it
    Column("pid", Integer),
    Column("error", Text),
    Column("notebooks", Text),  # JSON: notebook -> {"status", "error", "seconds"}
    Column("seconds", Float),
)


@dataclass
class GradeOptions:
    """How to grade: parallelism, re-grading, timeouts and sandbox."""

    workers: int = os.cpu_count() or 1
    force: bool = False
    students: list[str] | None = None
    cell_timeout: float | None = None
    notebook_timeout: float | None = None
    no_sandbox: bool = False
    limits: dict = field(default_factory=dict)  # SandboxLimits fields
    progress: bool = True


@dataclass
class GradeResult:
    """What a grade run did."""

    mode: str
    graded: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    errors: dict[str, str] = field(default_factory=dict)
    # graded submissions with notebooks nbgrader could not grade (scored 0): student -> {notebook: reason}
    notebook_errors: dict[str, dict[str, str]] = field(default_factory=dict)
    # submissions graded before and again in this run: student -> [(notebook, score before, score now)] that changed
    regraded: dict[str, list[tuple[str, float | None, float | None]]] = field(default_factory=dict)
    # of those, the hand scores now flagged for review (their answer's text changed): student -> ['notebook: cell']
    to_review: dict[str, list[str]] = field(default_factory=dict)

    @property
    def exit_code(self) -> int:
        """0 when every job was graded, 1 when some job failed."""
        return 1 if self.errors else 0


@dataclass
class Running:
    """A worker process and its job."""

    student: str
    proc: multiprocessing.process.BaseProcess
    job_dir: Path
    started: float  # when its budget began: at its start, or at its go when it was warmed up first
    budget: float
    # the parent's ends of two pipes (multiprocessing Connections; see run_job): the worker grades once a
    # byte arrives on the first, and writes one to the second when its last notebooks begin. Pipes, not
    # Events: an Event's set() waits for every waiter to wake, for ever when a waiter was killed.
    gate: Any = None
    ahead: Any = None
    warming: bool = False  # started ahead of its turn: it warms up, grades nothing yet, its budget has not begun
    nearly: bool = False  # seen on `ahead`

    def open(self) -> None:
        """Let a warming job grade; its budget begins now."""
        self.warming, self.started = False, time.monotonic()
        try:
            self.gate.send_bytes(b"go")  # never blocks: one short write into an empty pipe
        except OSError:
            pass  # the worker has ended: the run loop reaps it

    def nearly_done(self) -> bool:
        """Grading its last notebooks (worker.WARM_AHEAD): time to warm the next job up."""
        if not self.nearly and not self.warming and self.ahead is not None:
            self.nearly = self.ahead.poll()  # also at end of file: an ended worker makes room anyway
        return self.nearly

    def close(self) -> None:
        """Close the parent's ends of the job's pipes."""
        for end in (self.gate, self.ahead):
            if end is not None:
                end.close()


# --- sandbox mode ------------------------------------------------------------------------

def sandbox_mode(no_sandbox: bool) -> bool:
    """True to grade in bubblewrap; refuse (AutograderError) when it is missing and not waived."""
    if no_sandbox:
        print("WARNING: --no-sandbox: student code runs with YOUR rights, network and files. "
              "Only do this for code you trust.", file=sys.stderr)
        return False
    try:
        from . import sandbox
    except ImportError as exc:
        raise AutograderError(f"the sandbox module cannot be loaded ({exc}); refusing to run student code. "
                              "Pass --no-sandbox to grade trusted code without it.") from None
    problem = sandbox.sandbox_problem()
    if problem:
        raise AutograderError(f"{problem}, so student code cannot be sandboxed; refusing to grade. "
                              f"{sandbox.sandbox_remedy(problem)}, or pass --no-sandbox to grade trusted code without a "
                              "sandbox.")
    return True


# where a course sets each sandbox limit (SandboxLimits' fields) in autograder/nbgrader_config.py
LIMIT_SETTINGS = {"cpu_seconds": "SandboxedKernelManager", "memory_bytes": "SandboxedKernelManager",
                  "max_processes": "SandboxedKernelManager", "file_size_bytes": "SandboxedKernelManager",
                  "disk_bytes": "SandboxedKernelManager", "output_bytes": "GradingExecute"}


def configured_limits(config, given: dict) -> dict:
    """The SandboxLimits fields the course config sets (c.SandboxedKernelManager.memory_bytes, bytes, ...;
    c.GradingExecute.output_bytes), with given's on top; AutograderError naming the setting whose value is not a
    positive integer."""
    limits = {name: config[section][name] for name, section in LIMIT_SETTINGS.items()
              if section in config and name in config[section]}
    for name, value in limits.items():
        if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
            unit = {"cpu_seconds": "seconds", "max_processes": "processes"}.get(name, "bytes, e.g. 4 * 2**30 for 4 GiB")
            raise AutograderError(f"autograder/nbgrader_config.py sets c.{LIMIT_SETTINGS[name]}.{name} = {value!r}; "
                                  f"expected a positive integer ({unit})")
    return {**limits, **given}


# --- job table -----------------------------------------------------------------------------

def job_rows(db_url: str) -> dict[str, dict]:
    """The job table as {student: row dict} (empty when it does not exist yet)."""
    engine = create_engine(db_url, future=True)
    try:
        if not inspect(engine).has_table(JOBS.name):
            return {}
        with engine.connect() as conn:
            rows = conn.execute(select(JOBS).where(JOBS.c.assignment == ASSIGNMENT)).mappings().all()
        return {r["student_id"]: dict(r) for r in rows}
    finally:
        engine.dispose()


def _update_job(session, student: str, **values) -> None:
    """UPDATE one job row inside the caller's transaction."""
    session.execute(JOBS.update().where(JOBS.c.student_id == student, JOBS.c.assignment == ASSIGNMENT).values(**values))


def _kill_stale_worker(pid: int | None) -> None:
    """Kill a worker left running by a grade run that was killed (only if it is really ours)."""
    if not pid:
        return
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return
    if b"autograder.worker" in cmdline:
        try:
            os.killpg(pid, signal.SIGKILL)
        except OSError:
            pass


def needs_regrade(course: Course, jobs: dict[str, dict]) -> set[str]:
    """Students whose graded (done) job was for other files than the ones collected now: collect
    filed a new hand-in after grading, so their grades and autograded notebooks are out of date."""
    return {student for student, row in jobs.items()
            if row["state"] in STANDING and course.step_dir("submitted", student).is_dir()
            and _digest(course.step_dir("submitted", student)) != row["digest"]}


def _submitters(connection) -> set[str]:
    """Ids of the students whose part-ii submission (their grades) the gradebook holds, read on an open
    connection or session."""
    from nbgrader.api import Assignment, SubmittedAssignment

    return {row[0] for row in connection.execute(
        select(SubmittedAssignment.student_id).join(Assignment, SubmittedAssignment.assignment_id == Assignment.id)
        .where(Assignment.name == ASSIGNMENT))}


def gradebook_submitters(db_url: str) -> set[str]:
    """_submitters of the gradebook at db_url (none before the first release)."""
    from nbgrader.api import SubmittedAssignment

    engine = create_engine(db_url, future=True)
    try:
        if not inspect(engine).has_table(SubmittedAssignment.__tablename__):
            return set()
        with engine.connect() as conn:
            return _submitters(conn)
    finally:
        engine.dispose()


GRADES_GONE = ("the gradebook holds no grades of this hand-in (removed from it, e.g. by `nbgrader db student "
               "remove --force`)")


def grades_gone(course: Course, jobs: dict[str, dict]) -> set[str]:
    """Collected students whose job is done but whose grades the gradebook no longer holds: a done job always
    committed a submission, so something outside the harness removed it (`nbgrader db student remove`)."""
    done = {student for student, row in jobs.items()
            if row["state"] in STANDING and course.step_dir("submitted", student).is_dir()}
    return done - gradebook_submitters(course.db_url) if done else set()


def grading_stale(course: Course, jobs: dict[str, dict]) -> set[str]:
    """Students whose done job no longer stands: handed in again since (needs_regrade), or their grades removed from
    the gradebook (grades_gone). The next `grade` grades them again; feedback writes them no pages until then."""
    return needs_regrade(course, jobs) | grades_gone(course, jobs)


def to_grade(course: Course) -> list[str]:
    """Collected students the next `grade` grades: no finished job yet (none, pending, failed), one for other
    files than those collected now, one whose grades the gradebook lost, or one a forced regrade cut short left
    queued (requeued: its grades stand meanwhile)."""
    jobs = job_rows(course.db_url)
    stale = grading_stale(course, jobs)
    return [s for s in course.submitted_students() if jobs.get(s, {}).get("state") != "done" or s in stale]


def plan_jobs(session, course: Course, students: list[str], force: bool, write: bool = True
              ) -> tuple[list[str], list[str]]:
    """Bring the job table up to date (without write, only tell); return (students to grade, students skipped as
    already graded)."""
    existing = {r.student_id: r for r in session.execute(select(JOBS).where(JOBS.c.assignment == ASSIGNMENT))}
    # a done job whose grades were removed from the gradebook behind our back is graded again, not skipped
    in_gradebook = _submitters(session)
    todo, skipped = [], []
    for student in students:
        digest = _digest(course.step_dir("submitted", student))
        row = existing.get(student)
        if row is None and not write:
            todo.append(student)
            continue
        if row is None:
            session.execute(JOBS.insert().values(student_id=student, assignment=ASSIGNMENT, digest=digest,
                                                 state="pending", attempts=0, commits=0))
            todo.append(student)
            continue
        standing = row.state in STANDING and row.digest == digest and student in in_gradebook
        if row.state == "done" and standing and not force:
            skipped.append(student)
            continue
        if not write:
            todo.append(student)
            continue
        if row.state in BUSY:
            _kill_stale_worker(row.pid)
        # a forced regrade (or the rest of one cut short) keeps the grades standing until the new ones are in
        _update_job(session, student, state=REQUEUED if standing else "pending", digest=digest, pid=None)
        todo.append(student)
    session.commit()
    return todo, skipped


def largest_first(course: Course, students: list[str]) -> list[str]:
    """Students ordered by notebooks handed in, most first (then by id): long jobs start early, so the
    last worker to finish is not still busy with a whole submission while the others sit idle."""
    def count(student: str) -> int:
        return len(list(course.step_dir("submitted", student).glob("*.ipynb")))

    return sorted(students, key=lambda s: (-count(s), s))


# --- private gradebook template --------------------------------------------------------------

def build_template(course: Course, master_engine, path: Path) -> str:
    """A SQLite gradebook holding only the assignment's structure (no students, no grades); return its URL.

    Its cell rows are written in the order of the notebooks' cells. nbgrader keeps no position
    for a cell and reads a notebook's cells in the order the database returns them: putting a
    deleted test cell back (after the cell before it) needs that order to be the notebook's.
    nbgrader inserts a notebook's rows in its order, and SQLite returns rows as inserted;
    PostgreSQL returns them as they lie on disk, which a release that rewrites them (deletes
    and inserts, or updates) can leave in another order.
    """
    from nbgrader.api import Base, Gradebook

    fast_new_gradebooks()
    path.unlink(missing_ok=True)
    url = sqlite_url(path)
    with Gradebook(url, course.course_id):
        pass  # creates the schema, the alembic version and the course row
    target = create_engine(url, future=True)
    try:
        with master_engine.connect() as src, target.begin() as dst:
            tables = {name: [dict(r) for r in src.execute(select(Base.metadata.tables[name])).mappings()]
                      for name in TEMPLATE_TABLES}
            in_notebook_order(tables, source_cell_positions(course))
            for name in TEMPLATE_TABLES:
                if tables[name]:
                    dst.execute(Base.metadata.tables[name].insert(), tables[name])
    finally:
        target.dispose()
    return url


def source_cell_positions(course: Course) -> dict[str, dict[str, int]]:
    """{notebook: {grade id: index of its cell}} of the source notebooks, from which nbgrader recorded the cells
    (the release drops the metadata of read-only prose cells, which the gradebook keeps); of the released
    notebook for one whose source is gone."""
    from .cells import nbgrader_meta

    positions = {}
    for folder in (course.release_dir, course.source_dir):  # the source wins
        for path in sorted(folder.glob("*.ipynb")):
            cells = nbformat.read(path, as_version=4).cells
            positions[path.stem] = {}
            for index, cell in enumerate(cells):
                positions[path.stem].setdefault(nbgrader_meta(cell).get("grade_id"), index)
    return positions


def in_notebook_order(tables: dict[str, list[dict]], positions: dict[str, dict[str, int]]) -> None:
    """Sort the cell tables' rows (in place) by notebook and cell position; cells no source shows go last."""
    notebooks = {row["id"]: row["name"] for row in tables["notebook"]}

    last = (1, "", 0)

    def place(row: dict) -> tuple[int, str, int]:
        """(0, notebook, index of the cell) of a base_cell or source_cell row; `last` for an unknown notebook."""
        notebook = notebooks.get(row["notebook_id"])
        return last if notebook is None else (0, notebook, positions.get(notebook, {}).get(row["name"], sys.maxsize))

    for name in ("base_cell", "source_cell"):
        tables[name].sort(key=place)  # stable: what has no position keeps the database's order
    base = {row["id"]: place(row) for row in tables["base_cell"]}
    for name in ("grade_cells", "solution_cells", "task_cells"):  # joined to base_cell by id
        tables[name].sort(key=lambda row: base.get(row["id"], last))


# --- trusted checks: the instructor's expected values, recorded outside any student kernel ----------

def warn_weak_cells(records: dict) -> None:
    """Warn on stderr about test cells ({notebook: {grade_id: [record]}}) that a patched check helper can fake."""
    from .trusted_checks import weak_cells

    weak = weak_cells(records)
    if weak:
        n = len(weak)
        print(f"WARNING: {n} test {'cell has' if n == 1 else 'cells have'} no value check, only plain asserts, "
              "check_true or check_raises, whose verdict the student's own process computes, so a student who patches "
              f"them passes: {', '.join(weak)}. Add a value check (check_close or check_equal, from checks.py) to "
              f"{'it' if n == 1 else 'each'}.", file=sys.stderr)


def release_drift(course: Course, gb, notebooks: list[str]
                  ) -> tuple[dict[str, list[str]], dict[str, list[str]], dict[str, list[str]]]:
    """(moved, changed, repointed), each notebook -> grade ids, comparing the source notebooks with the release
    recorded in the gradebook: moved, the cells nbgrader records (graded, answer, task or read-only) added or removed,
    which it refuses once submissions exist; changed, the test cells whose source or points differ (added and removed
    ones included); repointed, the hand-graded answers whose points differ. Notebooks the gradebook or the source
    folder lacks are left out; each source is read once."""
    import nbformat
    from nbgrader.api import MissingEntry
    from nbgrader.utils import is_grade, is_locked, is_solution, is_task

    from .cells import cell_points, nbgrader_meta

    moved, changed, repointed = {}, {}, {}
    for name in notebooks:
        path = course.source_dir / f"{name}.ipynb"
        try:
            released = gb.find_notebook(name, ASSIGNMENT)
        except MissingEntry:
            continue
        if not path.is_file():
            continue
        cells = [c for c in nbformat.read(path, as_version=4).cells if nbgrader_meta(c).get("grade_id")]
        kept = {nbgrader_meta(c)["grade_id"] for c in cells if is_grade(c) or is_solution(c) or is_task(c) or is_locked(c)}
        sources = {c.name: c.source for c in released.source_cells}
        if kept != sources.keys():
            moved[name] = sorted(kept ^ sources.keys())
        tests = source_tests(cells)
        answers = {c.name for c in released.solution_cells}
        recorded = recorded_tests(released)
        differ = sorted(k for k in tests.keys() | recorded.keys() if tests.get(k) != recorded.get(k))
        if differ:
            changed[name] = differ
        answer_points = {nbgrader_meta(c)["grade_id"]: cell_points(c) for c in cells if is_grade(c) and is_solution(c)}
        hand_points = {g.name: float(g.max_score) for g in released.grade_cells if g.name in answers}
        if differ := sorted(g for g in answer_points.keys() & hand_points.keys() if answer_points[g] != hand_points[g]):
            repointed[name] = differ
    return moved, changed, repointed


def source_tests(cells) -> dict[str, tuple[str, float]]:
    """grade id -> (source, points) of a source notebook's autograded test cells."""
    from .cells import cell_points, is_test_cell, nbgrader_meta

    return {nbgrader_meta(c)["grade_id"]: (c.source, cell_points(c)) for c in cells if is_test_cell(c)}


def recorded_tests(released) -> dict[str, tuple[str | None, float]]:
    """grade id -> (source, points) of the autograded test cells of a notebook as the gradebook recorded its release."""
    sources = {c.name: c.source for c in released.source_cells}
    answers = {c.name for c in released.solution_cells}
    return {g.name: (sources.get(g.name), float(g.max_score))
            for g in released.grade_cells if g.name not in answers and g.cell_type == "code"}


def tests_digest(tests: dict[str, tuple[str | None, float]]) -> str:
    """A notebook's test cells (grade id -> (source, points)) as one SHA-256, the same for the same cells in any order."""
    return hashlib.sha256(json.dumps(sorted([k, src, float(pts)] for k, (src, pts) in tests.items())).encode()).hexdigest()


RELEASES = "releases.json"  # <course>/releases.json: each release's time and its notebooks' test-cell digests


def release_history(course: Course) -> list[dict]:
    """The releases recorded in <course>/releases.json, oldest first ([] before the first, or for a course released
    before the history was kept); each {"released": ISO time or None, "tests": {notebook: tests_digest}}."""
    path = course.root / RELEASES
    try:
        entries = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return []
    except (OSError, ValueError) as exc:
        raise AutograderError(f"{path} cannot be read ({exc}): it lists the test cells of each release. Put back a "
                              "copy from a backup, or delete it to start the list again from the next release") from None
    if not isinstance(entries, list) or not all(isinstance(e, dict) and isinstance(e.get("tests"), dict) for e in entries):
        raise AutograderError(f"{path} is not a list of releases with their test cells: put back a copy from a backup, "
                              "or delete it to start the list again from the next release")
    return entries


def record_release(course: Course, gb, released_at: str | None) -> None:
    """Add the release the gradebook now holds to releases.json, unless its test cells are the last entry's."""
    tests = {nb.name: tests_digest(recorded_tests(nb)) for nb in gb.find_assignment(ASSIGNMENT).notebooks}
    history = release_history(course)
    if history and history[-1]["tests"] == tests:
        return
    history.append({"released": released_at, "tests": tests})
    path = course.root / RELEASES
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(history, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    os.replace(tmp, path)


def reverted_tests(course: Course, gb, changed: dict[str, list[str]]) -> dict[str, str]:
    """notebook -> when it was released, for each notebook of changed (release_drift's) whose source test cells are
    those of an earlier release than the one in use: a checkout that lacks a change released since (made in another
    clone, or never committed), not a change made after the release."""
    import nbformat

    history = release_history(course)
    if len(history) < 2:
        return {}
    found = {}
    for name in changed:
        digest = tests_digest(source_tests(nbformat.read(course.source_dir / f"{name}.ipynb", as_version=4).cells))
        current = history[-1]["tests"].get(name)
        earlier = [e for e in history[:-1] if e["tests"].get(name) == digest and digest != current]
        if earlier:
            found[name] = release_time(earlier[-1].get("released"))
    return found


def release_time(iso: str | None) -> str:
    """'2026-03-01 08:15 UTC' for a release's recorded ISO time; 'before the list of releases began' for None."""
    if not iso:
        return "before the list of releases began"
    try:
        return dt.datetime.fromisoformat(iso).astimezone(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    except (TypeError, ValueError):
        return str(iso)[:40]


def reverted_error(course: Course, reverted: dict[str, str], advice: str) -> AutograderError:
    """The refusal of test cells that would go back to an earlier release's."""
    listed = "; ".join(f"{name} (as released {when})" for name, when in sorted(reverted.items()))
    return AutograderError(
        f"the test cells of the source notebooks in {course.source_dir} are those of an earlier release, not of the one "
        f"in use: {listed}. This checkout lacks a change to the tests released since (made in another clone, or not "
        f"committed), so {advice} Bring that change here (git pull, or commit it where it was made), or use the "
        "checkout it was released from.")


def listed_cells(cells: dict[str, list[str]]) -> str:
    """'02-shapes-and-loss (test_a, test_b); 04-… (…)' for a notebook -> grade ids mapping."""
    return "; ".join(f"{name} ({', '.join(ids)})" for name, ids in sorted(cells.items()))


def moved_cells_error(moved: dict[str, list[str]]) -> AutograderError:
    """The error for cells added or removed after students handed in (nbgrader cannot record that)."""
    return AutograderError(
        f"graded or read-only cells were added to or removed from the source notebooks since the release students "
        f"handed in: {listed_cells(moved)}. nbgrader cannot record that once submissions exist: put those cells back as "
        "they were (edit their contents instead), or use a new build folder (release, collect, grade: a new course, "
        "with a gradebook of its own; hand scores, extensions and the due date of this one stay here).")


def refuse_stale_release(course: Course, gb, notebooks: list[str]) -> dict[str, list[str]]:
    """Raise when test cells were edited after release: graded kernels would run the released test cells
    (nbgrader restores them from the gradebook) against values recorded from the edited ones. Return the hand-graded
    answers whose points changed (release_drift's repointed), which grading does not refuse."""
    if missing := [name for name in notebooks if not (course.source_dir / f"{name}.ipynb").is_file()]:
        raise AutograderError(f"the source of released {'notebook' if len(missing) == 1 else 'notebooks'} "
                              f"{', '.join(missing)} is not in {course.source_dir} (renamed or removed?): grading "
                              "records each released notebook's expected values from its source. Put it back under "
                              "its released name")
    moved, changed, repointed = release_drift(course, gb, notebooks)
    if moved and gb.assignment_submissions(ASSIGNMENT):
        raise moved_cells_error(moved)
    if reverted := reverted_tests(course, gb, changed):
        raise reverted_error(course, reverted, "releasing from here would put the earlier tests back and grade every "
                             "student under them again.")
    if changed:
        raise AutograderError(
            f"test cells of the source notebooks changed (source or points) after the assignment was released: "
            f"{listed_cells(changed)}. Grading runs the released test cells stored in the gradebook but would compare "
            "with values recorded from the edited ones. Run `python -m autograder release"
            f"{build_option(course)}` first: it keeps submissions and grades, and the next `grade` grades again "
            "every submission graded under the old cells (hand out the new zip if students should see them).")
    return repointed


def release_drift_warning(course: Course, notebooks: list[str]) -> str | None:
    """drift_warning for the source notebooks against the release the gradebook holds; when their test cells are an
    earlier release's, a warning that says so instead (releasing from this checkout would undo a later change)."""
    with course.gradebook() as gb:
        drift = release_drift(course, gb, notebooks)
        reverted = reverted_tests(course, gb, drift[1])
    if reverted:
        return (f"warning: {reverted_error(course, reverted, 'the grades follow the release in use.').args[0]} Do not "
                "release from this checkout until then.")
    return drift_warning(course, *drift)


def drift_warning(course: Course, moved: dict[str, list[str]], changed: dict[str, list[str]],
                  repointed: dict[str, list[str]]) -> str | None:
    """A warning when the source notebooks changed after the release in what grades are made of (release_drift's
    cells added or removed, test cells' source or points, hand-graded answers' points), else None: the grades and
    pages follow the released cells until release and grade run again."""
    what = ([f"cells added or removed: {listed_cells(moved)}"] if moved else []) + \
           ([f"test cells: {listed_cells(changed)}"] if changed else []) + \
           ([f"the points of hand-graded answers: {listed_cells(repointed)}"] if repointed else [])
    if not what:
        return None
    then = f"`python -m autograder release{build_option(course)}` and then `grade` run"
    if moved:  # release refuses them once students have handed in
        return (f"warning: the source notebooks changed after the release: {'; '.join(what)}. The grades follow the "
                "released cells. Cells added or removed cannot be recorded once students have handed in: undo that, "
                f"or use a new build folder (see README); other changes count once {then}.")
    return (f"warning: the source notebooks changed after the release: {'; '.join(what)}. The grades follow the "
            f"released cells until {then}.")


def regrade_after_new_tests(course: Course) -> list[str]:
    """Mark every graded job (done, or queued to be graded again) pending again, in one transaction; return their
    students (sorted)."""
    with course.gradebook() as gb:
        if not inspect(gb.engine).has_table(JOBS.name):
            return []
        done = JOBS.c.assignment == ASSIGNMENT
        graded = JOBS.c.state.in_(STANDING)
        students = sorted(gb.db.execute(select(JOBS.c.student_id).where(done, graded)).scalars())
        gb.db.execute(JOBS.update().where(done, JOBS.c.state.in_(("done", REQUEUED))).values(state="pending", pid=None))
        # left by a killed run: running keeps the pid, so the next grade stops a worker still alive, then grades it
        gb.db.execute(JOBS.update().where(done, JOBS.c.state == REGRADING).values(state="running"))
        gb.db.commit()
    return students


def expected_records(course: Course, notebooks: list[str], root: Path | None = None) -> Path | None:
    """Run the source notebooks in record mode (cached notebook by notebook, by content), with the code/ and data/ of
    root (default: the student bundle's, which graded kernels get); return the file of all their records, named by
    its content, or None when the trusted-checks module is not available."""
    try:
        from . import trusted_checks
    except ImportError:
        print("WARNING: autograder/trusted_checks.py is missing: test cells compare inside the student's kernel",
              file=sys.stderr)
        return None
    folder = Path(os.environ.get("PART_II_CACHE") or REPO / "build" / "cache")

    def announce(todo: list[str]) -> None:
        print(f"recording the expected values of {len(todo)} source "
              f"{'notebook' if len(todo) == 1 else 'notebooks'} (once per version of each notebook)",
              file=sys.stderr, flush=True)

    saved = os.environ.get("PART_II_ROOT")
    os.environ["PART_II_ROOT"] = str(root or course.bundle_dir)  # the code/ and data/ the graded kernels get
    try:
        # one cache file per notebook version: editing one notebook records that one again, not every kernel
        records = trusted_checks.record_assignment(course.source_dir, notebooks, cache_dir=folder, before_run=announce)
    except Exception as exc:  # noqa: BLE001 - CellExecutionError, ValueError...: the sources are broken
        text = ANSI.sub("", str(exc)).strip()  # nbclient's error carries the traceback's colour codes
        first = text.splitlines()[-1] if text else type(exc).__name__
        raise AutograderError(f"the instructor notebooks cannot be used for grading: {first}") from None
    finally:
        if saved is None:
            os.environ.pop("PART_II_ROOT", None)
        else:
            os.environ["PART_II_ROOT"] = saved
    # named by content: a job that is handed this path never sees it change under it
    digest = hashlib.sha256(json.dumps(records, sort_keys=True).encode()).hexdigest()[:24]
    combined = folder / f"expected-records-{digest}.json"
    if trusted_checks.read_cache(combined) != records:
        trusted_checks.write_cache(combined, records)
    return combined


# --- one job -------------------------------------------------------------------------------

def earlier_job_dirs(grading_dir: Path, student: str) -> list[Path]:
    """The job folders of student's earlier attempts (named student-ATTEMPT-RANDOM; not another
    student's whose id starts with this one's, such as ann-lee's for ann)."""
    name = re.compile(re.escape(student) + r"-\d+-[a-z0-9_]+")
    return sorted(p for p in grading_dir.iterdir() if p.is_dir() and name.fullmatch(p.name))


def prepare_job(course: Course, student: str, attempt: int, template: Path, options: GradeOptions,
                notebooks: list[str], sandboxed: bool, records: Path | None, extension=None) -> Path:
    """Create the job's private folder: gradebook copy, submission copy, job.json.

    extension: the student's nbgrader extension (a timedelta), written into the private gradebook so
    that nbgrader's late penalty in the worker counts from the student's own due date.
    """
    for old in earlier_job_dirs(course.grading_dir, student):
        discard_job_dir(old)
    # a name never used before: a worker of a killed run that still writes (by path) into its
    # folder must not reach this job's gradebook, even when the attempt number repeats
    job_dir = Path(tempfile.mkdtemp(prefix=f"{student}-{attempt}-", dir=course.grading_dir))  # 0700: the grader's
    # the kernels' scratch folders live outside the course (the sandbox binds them read-write, and of
    # the course only the student bundle's code and data, read-only)
    scratch_root = Path(tempfile.mkdtemp(prefix=f"part-ii-grade-{student[:24]}-"))
    scratch_root.chmod(0o711)
    private = job_dir / "course"
    shutil.copytree(course.step_dir("submitted", student), private / "submitted" / student / ASSIGNMENT)
    shutil.copyfile(template, job_dir / "gradebook.db")
    if extension is not None:
        from nbgrader.api import Gradebook

        with Gradebook(sqlite_url(job_dir / "gradebook.db"), course.course_id) as private_gb:
            private_gb.update_or_create_student(student)
            _new_submission(private_gb, student).extension = extension  # nbgrader's Autograde updates the row
            private_gb.db.commit()
    job = {
        "student": student,
        "notebooks": notebooks,
        "course_root": str(private),
        "course_id": course.course_id,
        "db_url": sqlite_url(job_dir / "gradebook.db"),
        "bundle_dir": str(course.bundle_dir),
        "cell_timeout": options.cell_timeout or DEFAULT_CELL_TIMEOUT,
        "notebook_timeout": options.notebook_timeout or DEFAULT_NOTEBOOK_TIMEOUT,
        "sandbox": sandboxed,
        "limits": options.limits,
        "scratch_root": str(scratch_root),
        "real_course_root": str(course.root),
        "real_db_url": course.db_url,
        "expected_records": str(records) if records else None,
    }
    (job_dir / "job.json").write_text(json.dumps(job, indent=1), encoding="utf-8")
    return job_dir


def discard_job_dir(job_dir: Path) -> None:
    """Delete a job folder and the scratch folder its job.json names."""
    try:
        scratch = json.loads((job_dir / "job.json").read_text(encoding="utf-8")).get("scratch_root")
    except (OSError, ValueError):
        scratch = None
    if scratch and Path(scratch).name.startswith("part-ii-grade-"):
        shutil.rmtree(scratch, ignore_errors=True)
    shutil.rmtree(job_dir, ignore_errors=True)


def discard_job_dirs(grading_dir: Path) -> None:
    """Delete every job folder in grading_dir and their scratch folders (only while holding the course's lock, when
    none is live)."""
    for stale in grading_dir.iterdir() if grading_dir.is_dir() else ():
        if stale.is_dir():
            discard_job_dir(stale)


def worker_context():
    """Fork workers from a server that has already imported nbgrader (a worker starts in ms, not seconds)."""
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(["autograder.worker"])
    return ctx


def start_worker(ctx, job_dir: Path, gate=None, ahead=None):
    """Start autograder.worker.child_main(JOB_DIR, gate, ahead) in a fresh forked process (its own session)."""
    from .worker import child_main

    proc = ctx.Process(target=child_main, args=(str(job_dir), gate, ahead), name=f"grade {job_dir.name}")
    proc.start()
    return proc


def stop_worker(proc) -> None:
    """Stop a worker and everything in its session: TERM, then KILL after 3 s."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for target in (lambda: os.killpg(proc.pid, sig), lambda: os.kill(proc.pid, sig)):
            try:
                target()
                break
            except OSError:
                continue
        proc.join(timeout=3)
        if proc.exitcode is not None:
            return


def read_private_grades(db_url: str, course_id: str, student: str) -> dict:
    """The submission's timestamp, penalties, auto scores and auto comments from a private gradebook."""
    from nbgrader.api import Gradebook

    with Gradebook(db_url, course_id) as gb:
        sub = gb.find_submission(ASSIGNMENT, student)
        return {
            "timestamp": sub.timestamp,
            "notebooks": {
                nb.name: {
                    "late": nb.late_submission_penalty,
                    "grades": {g.name: g.auto_score for g in nb.grades},
                    "comments": {c.name: c.auto_comment for c in nb.comments},
                }
                for nb in sub.notebooks
            },
        }


def _new_submission(gb, student: str):
    """nbgrader's add_submission without its commit (so the caller's transaction stays one)."""
    from nbgrader.api import Comment, Grade, SubmittedAssignment, SubmittedNotebook

    with gb.db.no_autoflush:
        assignment, owner = gb.find_assignment(ASSIGNMENT), gb.find_student(student)
        submission = SubmittedAssignment(assignment=assignment, student=owner)
        gb.db.add(submission)
        for notebook in assignment.notebooks:
            nb = SubmittedNotebook(notebook=notebook, assignment=submission)
            rows = [nb] + [Grade(cell=cell, notebook=nb) for cell in notebook.grade_cells]
            rows += [Comment(cell=cell, notebook=nb) for cell in notebook.solution_cells]
            rows += [cls(cell=cell, notebook=nb) for cell in notebook.task_cells for cls in (Comment, Grade)]
            gb.db.add_all(rows)
    return submission


def commit_grades(gb, student: str, grades: dict, job_values: dict, unchanged: frozenset = frozenset()) -> None:
    """Write one submission's auto grades and its job row in ONE transaction (manual grades are kept).

    unchanged: (notebook, grade id) of answers whose text is the one last graded (see unchanged_answers);
    a hand score on one of those keeps its review state instead of being flagged again.
    """
    from nbgrader.api import MissingEntry

    with one_transaction(gb.db):
        gb.update_or_create_student(student)  # collect registered it; a no-op then
        try:
            submission = gb.find_submission(ASSIGNMENT, student)
        except MissingEntry:
            submission = _new_submission(gb, student)
            sync_submission(gb, submission)  # an extension granted before the student was graded
        submission.timestamp = grades["timestamp"]
        for nb in submission.notebooks:
            data = grades["notebooks"].get(nb.name)
            if data is None:
                continue
            nb.late_submission_penalty = data["late"]
            for grade in nb.grades:
                grade.auto_score = data["grades"].get(grade.name)
                if grade.manual_score is not None and (nb.name, grade.name) in unchanged:
                    continue  # the hand score was given to this very answer: its review state stands
                # nbgrader's rule: a manual score or a missing auto score needs a human
                grade.needs_manual_grade = grade.manual_score is not None or grade.auto_score is None
            for comment in nb.comments:
                comment.auto_comment = data["comments"].get(comment.name)
        _update_job(gb.db, student, **job_values)


def unchanged_answers(course: Course, job_dir: Path, student: str) -> frozenset:
    """(notebook, grade id) of the answer cells whose text in the job's autograded notebooks is the text of the
    autograded notebooks in place (the ones a grader saw in formgrader): a hand score given to them still holds.

    nbgrader flags every hand score for review when a submission is graded again, even an unchanged one.
    """
    def answers(path: Path) -> dict[str, str]:
        cells = nbformat.read(path, as_version=4).cells
        return {m["grade_id"]: c.source for c in cells
                if (m := c.metadata.get("nbgrader", {})).get("solution") and m.get("grade") and "grade_id" in m}

    same = set()
    for new in (job_dir / "course" / "autograded" / student / ASSIGNMENT).glob("*.ipynb"):
        old = course.step_dir("autograded", student) / new.name
        try:
            before, after = (answers(old), answers(new)) if old.is_file() else ({}, {})
        except Exception:  # noqa: BLE001 - an unreadable notebook counts as changed: nbgrader's rule applies
            continue
        same |= {(new.stem, g) for g, text in after.items() if g in before and before[g] == text}
    return frozenset(same)


def install_autograded(course: Course, job_dir: Path, student: str) -> None:
    """Move the job's graded notebooks to autograded/<student>/part-ii, replacing older ones."""
    src = job_dir / "course" / "autograded" / student / ASSIGNMENT
    dest = course.step_dir("autograded", student)
    if dest.exists():
        shutil.rmtree(dest)
    if src.exists():
        dest.parent.mkdir(parents=True, exist_ok=True)
        os.replace(src, dest)


# of a worker's log: what grade reads for why it ended (the end), and what reports/grade-logs keeps of it (a
# submission's log is some 20 KB; what a kernel makes the worker write can be far more)
LOG_TAIL_BYTES = 2**20
LOG_KEPT_BYTES = 4 * 2**20


def bounded_text(path: Path, limit: int, head: int = 0) -> str:
    """A log file's text when it holds at most limit bytes, else its first head bytes and its last limit - head,
    around a line saying how many bytes were left out; a line cut by either end is dropped (unless it is all there
    is). Bytes that are no UTF-8 are each one '?', so the text is no longer in UTF-8 than the bytes it came from."""
    def text(data: bytes) -> str:
        return data.decode("utf-8", errors="replace").replace("\ufffd", "?")

    with open(path, "rb") as fh:
        size = os.fstat(fh.fileno()).st_size
        if size <= limit:
            return text(fh.read())
        start = text(fh.read(head))
        first = start.rpartition("\n")[0] or start
        fh.seek(size - (limit - head))
        end = text(fh.read())
        last = end.partition("\n")[2] or end
    cut = f"[... {size - limit} bytes of this log left out ...]\n"
    return f"{first}\n{cut}{last}" if head else cut + last


def _log_lines(run: Running) -> list[str]:
    """The lines of the worker's log, of its last LOG_TAIL_BYTES ([] when it wrote none)."""
    log = run.job_dir / "worker.log"
    return bounded_text(log, LOG_TAIL_BYTES).strip().splitlines() if log.exists() else []


def _out_of_memory(run: Running, rc: int | None, lines: list[str] | None = None) -> bool:
    """True when the worker ended for want of memory (its limit: worker.limit_memory): aborted (SIGABRT) by ZeroMQ
    ('FATAL ERROR: OUT OF MEMORY (file:line)' on its log), by C++'s std::bad_alloc or by Python's fatal MemoryError,
    or ended by an uncaught MemoryError. Grading it again would end the same. lines: its log's, when read already."""
    lines = _log_lines(run) if lines is None else lines
    if rc == -signal.SIGABRT:
        return any(line.startswith("FATAL ERROR: OUT OF MEMORY (") or "std::bad_alloc" in line
                   or (line.startswith("Fatal Python error") and "MemoryError" in line) for line in lines[-200:])
    return rc == 1 and bool(lines) and lines[-1].startswith("MemoryError")


def _notebook_at_end(lines: list[str], notebooks: list[str]) -> str | None:
    """The notebook (one of notebooks) nbgrader was grading when the worker's log (its lines) ends ('... INFO
    Autograding <path>/<notebook>.ipynb'), or None."""
    for line in reversed(lines):
        if (found := AUTOGRADING_LINE.match(line)) and Path(found[1]).stem in notebooks:
            return Path(found[1]).stem
    return None


def _failure_reason(run: Running, rc: int | None, timed_out: bool, sandboxed: bool = True,
                    notebooks: list[str] = ()) -> str:
    """A one-line reason why a worker produced no result (sandboxed: the worker had worker.limit_memory's limit;
    notebooks: the course's, one of which an out-of-memory reason names as the one being graded)."""
    from .worker import WORKER_MEMORY_BYTES

    if timed_out:
        return f"grading took longer than {run.budget:.0f} s and was stopped"
    lines = _log_lines(run)
    if _out_of_memory(run, rc, lines):
        limit = f" (its limit: {WORKER_MEMORY_BYTES / 2**30:g} GiB)" if sandboxed else ""
        where = f" grading {notebook}" if (notebook := _notebook_at_end(lines, list(notebooks))) else ""
        return (f"{OUT_OF_MEMORY_REASON}{where}{limit}: a kernel sent it more than it holds; "
                f"reports/grade-logs/{run.student}.log has the worker's log")
    if rc is not None and rc < 0:
        return f"the grading process was killed by signal {-rc} ({signal.Signals(-rc).name})"
    last = lines[-1] if lines else "no output"
    return f"the grading process failed (exit code {rc}): {clipped(last)}"


# --- the run -------------------------------------------------------------------------------

class Scheduler:
    """Runs jobs in up to `workers` processes and commits each finished one."""

    def __init__(self, course: Course, gb, options: GradeOptions, notebooks: list[str], sandboxed: bool, template: Path,
                 records: Path | None):
        self.course, self.gb, self.options, self.records = course, gb, options, records
        self.notebooks, self.sandboxed, self.template = notebooks, sandboxed, template
        self.running: dict[str, Running] = {}
        self.retries: dict[str, int] = {}
        self.result = GradeResult(mode="sandbox" if sandboxed else "no sandbox")
        self.ctx = worker_context()
        self.budget = len(notebooks) * ((options.notebook_timeout or DEFAULT_NOTEBOOK_TIMEOUT) + 60) + 120
        self.interrupted = False  # set by the run's signal handler (see _note_interrupts)

    def start(self, student: str, warm: bool = False) -> None:
        """Prepare and start a job, recording it as running; warm: it only warms up until open_gates() lets it grade."""
        attempts, state = self.gb.db.execute(select(JOBS.c.attempts, JOBS.c.state).where(
            JOBS.c.student_id == student, JOBS.c.assignment == ASSIGNMENT)).one()
        attempts += 1
        extension = nbgrader_interval(extension_ends(self.gb.db).get(student), self.gb.find_assignment(ASSIGNMENT).duedate)
        job_dir = prepare_job(self.course, student, attempts, self.template, self.options, self.notebooks, self.sandboxed,
                              self.records, extension)
        gate_in, gate = self.ctx.Pipe(duplex=False)
        ahead, ahead_out = self.ctx.Pipe(duplex=False)
        try:
            proc = start_worker(self.ctx, job_dir, gate_in, ahead_out)
        finally:
            gate_in.close()  # the worker has its own copies now
            ahead_out.close()
        run = self.running[student] = Running(student, proc, job_dir, time.monotonic(), self.budget, gate, ahead,
                                              warming=warm)  # tracked at once
        if not warm:
            run.open()  # it grades as soon as it has warmed up
        _update_job(self.gb.db, student, state=REGRADING if state == REQUEUED else "running", attempts=attempts,
                    pid=proc.pid)
        self.gb.db.commit()

    def grading(self) -> list[Running]:
        """The jobs grading now (not warming up)."""
        return [run for run in self.running.values() if not run.warming]

    def open_gates(self) -> None:
        """Let warmed-up jobs, oldest first, grade in the slots free of the `workers` allowed."""
        for run in [run for run in self.running.values() if run.warming]:
            if len(self.grading()) >= self.options.workers:
                return
            run.open()

    def fill(self, queue: deque) -> None:
        """Keep `workers` jobs grading; warm one up ahead for each that is grading its last notebooks.

        A warmed job starts its sandbox and its fork server's imports (seconds of CPU that a
        second core does beside the grading) and waits; open_gates() starts its grading
        when a slot frees, so the imports are off the grading's path.
        """
        self.open_gates()
        while queue and len(self.grading()) < self.options.workers:
            self.start(queue.popleft())
        while queue and sum(run.warming for run in self.running.values()) < sum(
                run.nearly_done() for run in self.running.values()):
            self.start(queue.popleft(), warm=True)

    def timed_out(self, run: Running) -> bool:
        """True when a grading job (not one warming up) has used its budget."""
        return not run.warming and time.monotonic() - run.started > run.budget

    def finish(self, run: Running, rc: int | None, timed_out: bool = False) -> bool:
        """Commit a finished job (or record its failure); return False when it should be retried."""
        student = run.student
        result_file = run.job_dir / "result.json"
        seconds = round(time.monotonic() - run.started, 1)
        self._keep_log(run)
        if rc == 0 and result_file.exists():
            notebooks = json.loads(result_file.read_text(encoding="utf-8"))["notebooks"]
            grades = read_private_grades(sqlite_url(run.job_dir / "gradebook.db"), self.course.course_id, student)
            unchanged = unchanged_answers(self.course, run.job_dir, student)  # before the old notebooks are replaced
            if self._state(student) == REGRADING:
                # the earlier grades stop standing before their graded notebooks are replaced: a cut between the two
                # must not leave pages of the new notebooks under the old scores
                _update_job(self.gb.db, student, state="running")
                self.gb.db.commit()
            install_autograded(self.course, run.job_dir, student)
            problems = {nb: r["error"] + (f"; the kernel's log ends: {r['kernel_log']}" if r.get("kernel_log") else "")
                        for nb, r in notebooks.items() if r["status"] == "error"}
            error = "; ".join(f"{nb}: {e}" for nb, e in problems.items()) or None
            commits = self.gb.db.execute(select(JOBS.c.commits).where(
                JOBS.c.student_id == student, JOBS.c.assignment == ASSIGNMENT)).scalar_one()
            commit_grades(self.gb, student, grades, dict(state="done", commits=commits + 1, pid=None, error=error,
                                                         notebooks=json.dumps(notebooks, sort_keys=True), seconds=seconds),
                          unchanged)
            discard_job_dir(run.job_dir)
            self.result.graded.append(student)
            if problems:
                self.result.notebook_errors[student] = problems
            return True
        reason = _failure_reason(run, rc, timed_out, self.sandboxed, self.course.notebook_names())
        retry = not timed_out and not reason.startswith(OUT_OF_MEMORY_REASON)  # either would end the same
        discard_job_dir(run.job_dir)
        regrading = self._state(student) == REGRADING  # its earlier grades stand
        if retry and self.retries.get(student, 0) < RETRIES:
            self.retries[student] = self.retries.get(student, 0) + 1
            _update_job(self.gb.db, student, state=REQUEUED if regrading else "pending", pid=None, error=reason)
            self.gb.db.commit()
            return False
        # a forced regrade that failed leaves the earlier grades of the same hand-in standing (and their graded
        # notebooks, not replaced), queued for the next run; the summary names the failure
        _update_job(self.gb.db, student, state=REQUEUED if regrading else "error", pid=None, error=reason,
                    seconds=seconds)
        self.gb.db.commit()
        self.result.errors[student] = reason
        return True

    def _state(self, student: str) -> str:
        """The state of a student's job row (running, or regrading while a forced regrade's earlier grades stand)."""
        return self.gb.db.execute(select(JOBS.c.state).where(
            JOBS.c.student_id == student, JOBS.c.assignment == ASSIGNMENT)).scalar_one()

    def stop_all(self, todo: list[str]) -> int:
        """Stop every worker and leave every unfinished job queued (pending, or requeued when its earlier grades
        stand); return how many of todo are queued."""
        abandon(self.gb.db)  # a start or a commit the interrupt cut short is not half-saved
        for run in self.running.values():
            stop_worker(run.proc)
            self._keep_log(run)  # why a job that seemed stuck was: the instructor may have pressed Ctrl-C to find out
        # now, not at the next run's start: a scratch folder in /tmp holds what the student's code wrote, and a course
        # never graded again (a test's, or one given up) would keep it there; every job folder, also one the interrupt
        # caught between prepare_job and self.running
        discard_job_dirs(self.course.grading_dir)
        # the course's grade lock is ours, so every running row is this run's: also the job whose start
        # or finish was interrupted, which self.running may no longer hold
        for busy, queued in (("running", "pending"), (REGRADING, REQUEUED)):
            self.gb.db.execute(JOBS.update().where(JOBS.c.assignment == ASSIGNMENT, JOBS.c.state == busy)
                               .values(state=queued, pid=None))
        self.gb.db.commit()
        pending = self.gb.db.execute(select(JOBS.c.student_id).where(
            JOBS.c.assignment == ASSIGNMENT, JOBS.c.state.in_(("pending", REQUEUED)), JOBS.c.student_id.in_(todo))).all()
        return len(pending)

    def _keep_log(self, run: Running) -> None:
        """Copy the worker's log to reports/grade-logs/<student>.log: at most LOG_KEPT_BYTES of it (its start and its
        end), printable (cells.readable; what the worker did not format, such as a traceback it printed, too)."""
        log = run.job_dir / "worker.log"
        if log.exists():
            dest = self.course.reports_dir / "grade-logs" / f"{run.student}.log"
            dest.parent.mkdir(parents=True, exist_ok=True)
            dest.write_text(readable(bounded_text(log, LOG_KEPT_BYTES, head=LOG_KEPT_BYTES // 4)), encoding="utf-8")

    def run(self, todo: list[str]) -> GradeResult:
        """Grade every student in todo; Ctrl-C/SIGTERM stops the workers and leaves their jobs queued (stop_all)."""
        from tqdm import tqdm

        queue = deque(todo)
        bar = tqdm(total=len(todo), unit="submission", desc=f"grading ({self.result.mode})", file=sys.stderr,
                   disable=not (self.options.progress and todo), dynamic_ncols=True)  # no empty bar: nothing to do
        previous = self._note_interrupts()
        try:
            while queue or self.running:
                self.fill(queue)
                # wakes when a worker ends (the next job's go without a poll's delay), else polls for `ahead`
                multiprocessing.connection.wait([run.proc.sentinel for run in self.running.values()], POLL_SECONDS)
                if self.interrupted:  # its KeyboardInterrupt was raised where Python drops it (a weakref callback)
                    raise KeyboardInterrupt
                for student, run in list(self.running.items()):
                    rc = run.proc.exitcode
                    timed_out = rc is None and self.timed_out(run)
                    if rc is None and not timed_out:
                        continue
                    if timed_out:
                        stop_worker(run.proc)
                    del self.running[student]
                    run.close()
                    self.open_gates()  # the next job grades while this one's grades are committed
                    if self.finish(run, rc, timed_out):
                        bar.update(1)
                        if student in self.result.errors:
                            bar.write(f"error: {student}: {self.result.errors[student]}")
                    else:
                        queue.append(student)
        except KeyboardInterrupt:
            with signals_ignored(signal.SIGINT, signal.SIGTERM):  # a second Ctrl-C must not cut this short
                left = self.stop_all(todo)
            done = len(self.result.graded)
            raise AutograderError(f"interrupted: {done} {'submission' if done == 1 else 'submissions'} graded in this "
                                  f"run, {left} not; "
                                  f"run `python -m autograder grade{build_option(self.course)}` again to resume", 130) from None
        except BaseException:  # a failure of this process: its workers (those warming wait for ever) end with it
            for run in self.running.values():
                stop_worker(run.proc)
            raise
        finally:
            for signum, handler in previous.items():
                signal.signal(signum, handler)
            bar.close()
        return self.result

    def _note_interrupts(self) -> dict:
        """Handle Ctrl-C (unless ignored, as in a background job) and SIGTERM by noting the interrupt, then raising
        KeyboardInterrupt; return the handlers replaced. A noted interrupt stops the run at the next poll even when
        the exception itself was raised inside a callback that swallows it."""
        def handler(signum, frame):
            self.interrupted = True
            raise KeyboardInterrupt

        previous = {}
        if threading.current_thread() is not threading.main_thread():
            return previous
        for signum in (signal.SIGINT, signal.SIGTERM):
            current = signal.getsignal(signum)
            if current is signal.SIG_IGN or current is None:
                continue
            previous[signum] = current
            signal.signal(signum, handler)
        return previous


@contextlib.contextmanager
def signals_ignored(*signums: int):
    """Ignore these signals inside the block (main thread only), then restore their handlers."""
    previous = {signum: signal.signal(signum, signal.SIG_IGN) for signum in signums}
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler if handler is not None else signal.SIG_DFL)


def _raise_interrupt(signum, frame):
    """SIGTERM handler: stop like Ctrl-C, so running jobs are left queued (Scheduler.stop_all)."""
    raise KeyboardInterrupt


def grade(course: Course, options: GradeOptions) -> GradeResult:
    """Grade the collected submissions (all, or options.students) and print a summary."""
    notebooks = course.notebook_names()
    log = load_collect_log(course)
    dropped = dropped_students(log)  # a drop or its undo cut short leaves files of theirs
    students = [s for s in course.submitted_students() if s not in dropped]
    if options.students:
        unknown = sorted(set(options.students) - set(students))
        if unknown:
            rows = log["students"]
            # collected, but no notebook of theirs was filed: say so, not that they are unknown
            empty = [f"{s} ({rows[s].get('status')})" for s in unknown if isinstance(rows.get(s), dict)]
            filed_none = (f"; collect filed no notebook of {', '.join(empty)}: see reports/collect.json, and collect "
                          "their hand-in again once it is put right" if empty else "")
            raise AutograderError(f"no collected submission for student(s) {', '.join(unknown)}{case_hint(unknown, students)}"
                                  f"{dropped_note(log, unknown)}; "
                                  f"collected: {', '.join(students) or 'none'}{filed_none}")
        students = [s for s in students if s in options.students]
    if not students:
        raise AutograderError(f"nothing to grade: no collected submissions; {run_first(course, 'collect PATH')}")
    limits = configured_limits(course.config, options.limits)  # a wrong value is named, sandbox or not
    sandboxed = sandbox_mode(options.no_sandbox)
    if sandboxed:  # unsandboxed, GradingExecute reads its output_bytes from the config itself
        options = replace(options, limits=limits)
    previous = signal.signal(signal.SIGTERM, _raise_interrupt)
    try:
        with course.lock("grade"), course.gradebook() as gb:
            repointed = refuse_stale_release(course, gb, notebooks)
            if warning := drift_warning(course, {}, {}, repointed):  # not refused: the hand scores stand
                print(warning, file=sys.stderr)
            JOBS.create(gb.engine, checkfirst=True)
            records = None
            # the sources are recorded before any job changes: a source that fails its own checks is refused with
            # every earlier grade standing (a forced regrade was reset first, and exported empty)
            preview = plan_jobs(gb.db, course, students, options.force, write=False)[0]
            gb.db.rollback()  # no transaction stays open while the sources run (formgrader may write meanwhile)
            if preview:
                records = expected_records(course, notebooks)
                if records:
                    warn_weak_cells(json.loads(records.read_text(encoding="utf-8")))
            todo, skipped = plan_jobs(gb.db, course, students, options.force)
            course.grading_dir.mkdir(parents=True, exist_ok=True)
            discard_job_dirs(course.grading_dir)  # left by a killed run
            template = course.grading_dir / "template.db"
            if todo:
                build_template(course, gb.engine, template)
            before = graded_scores(gb, todo)  # to say what grading them again changed (a new test, a new hand-in)
            gb.db.rollback()
            scheduler = Scheduler(course, gb, options, notebooks, sandboxed, template, records)
            result = scheduler.run(largest_first(course, todo))
            result.skipped = skipped
            gb.db.expire_all()
            result.regraded = score_changes(before, graded_scores(gb, [s for s in result.graded if s in before]))
            result.to_review = hand_scores_to_review(gb, list(result.regraded))
            gb.db.rollback()
            template.unlink(missing_ok=True)
    finally:
        signal.signal(signal.SIGTERM, previous)
    print_summary(course, result)
    return result


def submissions_of(gb, students: list[str]):
    """(student, submission) for each of students the gradebook holds a submission of, in the order given."""
    from nbgrader.api import MissingEntry

    for student in students:
        try:
            yield student, gb.find_submission(ASSIGNMENT, student)
        except MissingEntry:
            continue


def graded_scores(gb, students: list[str]) -> dict[str, dict[str, float]]:
    """{student: {notebook: score}} of those students' submissions that hold scores (nbgrader's notebook score: a hand
    score where one was given, else the auto score, without the late penalty)."""
    scores = {}
    for student, submission in submissions_of(gb, students):
        notebooks = {nb.name: float(nb.score) for nb in submission.notebooks
                     if any(g.auto_score is not None or g.manual_score is not None for g in nb.grades)}
        if notebooks:
            scores[student] = notebooks
    return scores


def score_changes(before: dict[str, dict[str, float]], after: dict[str, dict[str, float]]
                  ) -> dict[str, list[tuple[str, float | None, float | None]]]:
    """{student: [(notebook, score before, score after)] where they differ} for every student in after who is in
    before (an empty list: no score changed)."""
    changes = {}
    for student, now in after.items():
        if student in before:
            was = before[student]
            changes[student] = [(nb, was.get(nb), now.get(nb)) for nb in sorted(set(was) | set(now))
                                if was.get(nb) != now.get(nb)]
    return changes


def hand_scores_to_review(gb, students: list[str]) -> dict[str, list[str]]:
    """{student: ['notebook: cell', ...]} of the hand scores of these students that wait for review in formgrader
    (given before a regrade of an answer whose text changed since; see unchanged_answers)."""
    found = {}
    for student, submission in submissions_of(gb, students):
        cells = [f"{nb.name}: {g.name}" for nb in sorted(submission.notebooks, key=lambda n: n.name)
                 for g in sorted(nb.grades, key=lambda g: g.name) if g.manual_score is not None and g.needs_manual_grade]
        if cells:
            found[student] = cells
    return found


def regrade_line(regraded: dict[str, list[tuple[str, float | None, float | None]]], most: int = 5) -> str:
    """'graded again N submissions graded before: scores changed for M: s1 +2 (02-... 9 -> 11); ...' (the first
    `most` students whose scores changed, each with the change of their total and of each notebook's score)."""
    def points(value: float | None) -> str:
        return "-" if value is None else f"{value:g}"

    changed = {s: c for s, c in sorted(regraded.items()) if c}
    n = len(regraded)
    head = f"graded again {n} {'submission' if n == 1 else 'submissions'} graded before: "
    if not changed:
        return head + "no score changed"
    shown = []
    for student, notebooks in list(changed.items())[:most]:
        total_before = sum(b or 0.0 for _, b, _ in notebooks)
        total_after = sum(a or 0.0 for _, _, a in notebooks)
        parts = ", ".join(f"{nb} {points(b)} -> {points(a)}" for nb, b, a in notebooks)
        shown.append(f"{student} {total_after - total_before:+g} ({parts})")
    more = len(changed) - len(shown)
    rest = f", and {more} more (export's grades.csv has every score)" if more else ""
    return head + f"scores changed for {len(changed)}: " + "; ".join(shown) + rest


def print_summary(course: Course, result: GradeResult) -> None:
    """Counts, then one line per submission that failed and per notebook that could not be graded (scored 0)."""
    partly = sum(len(v) for v in result.notebook_errors.values())
    print(f"graded {len(result.graded)}, already graded (skipped) {len(result.skipped)}, "
          f"errors {len(result.errors)}, notebooks not gradable (scored 0) {partly}; mode: {result.mode}")
    for student, reason in sorted(result.errors.items()):
        print(f"  {student}: ERROR {reason}")
    for student, problems in sorted(result.notebook_errors.items()):
        for notebook, reason in sorted(problems.items()):
            print(f"  {student}: {notebook} not gradable, scored 0: {reason}")
    if result.regraded:
        print(regrade_line(result.regraded))
    if result.to_review:
        n = sum(len(cells) for cells in result.to_review.values())
        shown = "; ".join(f"{student} ({', '.join(cells)})" for student, cells in sorted(result.to_review.items())[:5])
        more = len(result.to_review) - min(5, len(result.to_review))
        print(f"{n} hand {'score waits' if n == 1 else 'scores wait'} for review in formgrader, given before the "
              f"{'answer' if n == 1 else 'answers'} changed: {shown}{f', and {more} more students' if more else ''}; "
              f"the pages and grades.csv mark {'it' if n == 1 else 'them'} provisional until a grader scores or "
              f"resolves {'it' if n == 1 else 'them'}")
    build = build_option(course)
    again = [s for s, reason in sorted(result.errors.items()) if not reason.startswith(OUT_OF_MEMORY_REASON)]
    same = [s for s in sorted(result.errors) if s not in again]  # the same hand-in would send the grader the same
    if result.graded:
        print(f"next: `python -m autograder feedback{build}` (a page per student and notebook) and "
              f"`python -m autograder export{build}` (grades.csv); free-text answers are graded by hand in formgrader")
    elif again:
        print(f"next: `python -m autograder grade{build}` tries the submissions that failed again (the errors above "
              "say why they failed)")
    elif result.skipped and not same:
        print(f"next: nothing to grade (every hand-in named is graded; --force grades again); "
              f"`python -m autograder feedback{build}` and `python -m autograder export{build}` write the pages and "
              f"grades.csv, `python -m autograder collect PATH{build}` files new hand-ins")
    if same:
        print(f"{'' if result.graded or again else 'next: '}grading {listed(same)} again would most likely run "
              f"out of memory again: `python -m autograder collect PATH{build}` files a corrected hand-in, and "
              f"`python -m autograder grade{build}` grades it")
    if left := [s for s in to_grade(course) if s not in result.errors]:  # e.g. a run limited by --student
        jobs = job_rows(course.db_url)
        stale = grading_stale(course, jobs)  # handed in again, or grades gone: nothing of theirs stands
        queued = [s for s in left if jobs.get(s, {}).get("state") in (REQUEUED, REGRADING) and s not in stale]
        if new := [s for s in left if s not in queued]:
            n = len(new)
            print(f"{n} other collected {'student is' if n == 1 else 'students are'} not graded yet ({listed(new)}): "
                  f"`python -m autograder grade{build}` grades {'it' if n == 1 else 'them'}")
        if queued:
            n = len(queued)
            print(f"{n} other {'student is' if n == 1 else 'students are'} queued to be graded again by a `--force` "
                  f"run cut short ({listed(queued)}; {'its' if n == 1 else 'their'} earlier grades stand meanwhile): "
                  f"`python -m autograder grade{build}` grades {'it' if n == 1 else 'them'}")
