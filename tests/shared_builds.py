"""Builds that several test files read, made once per test run and shared by the xdist workers.

Releasing the course, or grading a class in the sandbox, costs minutes; test_release,
test_grading and test_adversarial need the same results. The first worker that asks for a
build makes it under an exclusive file lock; the others wait on the lock and read it. A
build that failed is recorded, so the other workers report the same failure instead of
paying for it again. Builds live in ``build/test-shared/<run id>/`` (the sandbox user must
be able to traverse them, which pytest's private tmp folders do not allow); the run id is
set by the controlling pytest process (conftest.py) and its folder removed at the end.

Tests must treat a shared build as read-only: copy it before changing anything.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import subprocess
import sys
import time
import traceback
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SHARED = REPO / "build" / "test-shared"
RUN_ENV = "PART_II_TEST_RUN"
STALE_SECONDS = 6 * 3600  # folders of killed runs older than this are removed by the next run

# The sample class and the adversarial catalogue are graded together, with these limits.
# A kernel imports numpy/torch/matplotlib before the first cell, so an honest cell takes well
# under a second even on a loaded machine; every cell that never ends costs one CELL_TIMEOUT.
CELL_TIMEOUT = 15.0
NOTEBOOK_TIMEOUT = 300.0
WORKERS = 2


def run_id() -> str:
    """This test run's id (set by conftest.py; a single process run makes its own)."""
    if RUN_ENV not in os.environ:
        os.environ[RUN_ENV] = f"{os.getpid()}-{int(time.time())}"
    return os.environ[RUN_ENV]


def run_root() -> Path:
    """build/test-shared/<run id>/, created traversable for the sandbox user."""
    root = SHARED / run_id()
    root.mkdir(parents=True, exist_ok=True)
    for folder in (SHARED.parent, SHARED, root):
        folder.chmod(0o755)
    return root


def remove_stale_runs(keep: str) -> None:
    """Delete the shared folders of earlier runs that were killed before cleaning up."""
    if not SHARED.is_dir():
        return
    now = time.time()
    for folder in SHARED.iterdir():
        if folder.name != keep and now - folder.stat().st_mtime > STALE_SECONDS:
            shutil.rmtree(folder, ignore_errors=True)


def shared(name: str, make) -> tuple[Path, dict]:
    """(folder, info) of the build `name`: make(folder) -> info (JSON) runs once per test run."""
    root = run_root()
    folder, info_file, failed = root / name, root / f"{name}.json", root / f"{name}.failed"
    with open(root / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes, also if this process dies
        if failed.exists():
            raise RuntimeError(f"the shared build {name!r} failed in another worker:\n{failed.read_text()}")
        if not info_file.exists():
            shutil.rmtree(folder, ignore_errors=True)
            folder.mkdir()
            folder.chmod(0o755)
            try:
                info = make(folder)
            except BaseException:
                failed.write_text(traceback.format_exc()[-6000:])
                raise
            info_file.write_text(json.dumps(info), encoding="utf-8")
    return folder, json.loads(info_file.read_text(encoding="utf-8"))


@contextlib.contextmanager
def build_env(build: Path):
    """PART_II_BUILD pointed at build for the block (Course.load exports it), restored afterwards."""
    saved = {k: os.environ.get(k) for k in ("PART_II_BUILD", "PART_II_DB_URL")}
    os.environ.pop("PART_II_DB_URL", None)
    os.environ["PART_II_BUILD"] = str(build)
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def cli_env(build: Path, db_url: str | None = None) -> dict[str, str]:
    """Environment of a `python -m autograder` run on build (the venv first on PATH: nbgrader calls alembic);
    the gradebook at db_url when given (libpq's PG* variables left out, which would steer it elsewhere)."""
    env = {k: v for k, v in os.environ.items() if k not in ("PART_II_SOURCE", "PART_II_DB_URL")}
    env.update(PART_II_BUILD=str(build), OMP_NUM_THREADS="1", PYTHONHASHSEED="0",
               PATH=f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}")
    if db_url is not None:
        env = {k: v for k, v in env.items() if not k.startswith("PG")}
        env["PART_II_DB_URL"] = db_url
    return env


def run_cli(build: Path, *args: str, timeout: int = 1800, db_url: str | None = None) -> dict:
    """Run `python -m autograder ARGS --build BUILD` (gradebook at db_url if given); return its argv, exit code and output."""
    argv = [sys.executable, "-m", "autograder", *args, "--build", str(build)]
    done = subprocess.run(argv, cwd=REPO, env=cli_env(build, db_url), capture_output=True, text=True, timeout=timeout)
    return {"args": argv, "returncode": done.returncode, "stdout": done.stdout, "stderr": done.stderr}


def released_copy(tmp_path: Path) -> Path:
    """tmp_path/build: a copy of the course released by the CLI (released_build) that a test may change."""
    released, _ = released_build()
    build = tmp_path / "build"
    shutil.copytree(released, build, symlinks=True)
    return build


def editable_sources(tmp_path: Path, monkeypatch) -> Path:
    """A copy of notebooks/ that courses read for the test ($PART_II_SOURCE), with the venv first on PATH (a release
    runs nbgrader, which calls alembic); returns its part-ii/ folder, whose notebooks the test may edit."""
    source = tmp_path / "notebooks"
    shutil.copytree(REPO / "notebooks", source)
    monkeypatch.setenv("PART_II_SOURCE", str(source))
    monkeypatch.setenv("PATH", f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
    return source / "part-ii"


def read_grades_csv(path: Path) -> dict[str, dict[str, str]]:
    """{student_id: row} of an export's grades.csv."""
    import csv

    with open(path, newline="", encoding="utf-8") as fh:
        return {row["student_id"]: row for row in csv.DictReader(fh)}


def reverse_cell_rows(db_url: str) -> None:
    """Rewrite a gradebook's cell rows in reverse order: nbgrader then reads each notebook's cells backwards, as
    PostgreSQL may return them after a release rewrote them."""
    from nbgrader.api import Base
    from sqlalchemy import create_engine, delete, select, text

    names = ("grade_cells", "solution_cells", "task_cells", "source_cell", "base_cell")  # base_cell last: referred to
    tables = {name: Base.metadata.tables[name] for name in names}
    engine = create_engine(db_url, future=True)
    try:
        with engine.begin() as db:
            if engine.dialect.name == "postgresql":
                # submissions' grade rows refer to the cells: foreign keys off while the same rows go back in
                db.execute(text("SET LOCAL session_replication_role = replica"))
            rows = {name: [dict(r) for r in db.execute(select(table)).mappings()] for name, table in tables.items()}
            for table in tables.values():
                db.execute(delete(table))
            for name in reversed(names):
                if rows[name]:
                    db.execute(tables[name].insert(), rows[name][::-1])
    finally:
        engine.dispose()


def sandbox_works() -> bool:
    """Grade like the demo: in the sandbox when bubblewrap can run here."""
    try:
        from autograder.sandbox import bwrap_available
    except ImportError:
        return False
    return bwrap_available()


def dump(db_url: str, students=None) -> dict:
    """Every grade and comment of the gradebook (of these students), by names, as {(student, notebook, cell, kind):
    value}: kind 'grade' (auto, manual, needs manual), 'comment', or 'notebook' (late penalty, hand-in time) with
    cell ''. By names, because nbgrader's row ids are random."""
    from nbgrader.api import Gradebook

    out = {}
    with Gradebook(db_url, "llm-probability-part-ii") as gb:
        for sub in gb.assignment_submissions("part-ii"):
            if students and sub.student.id not in students:
                continue
            for nb in sub.notebooks:
                for g in nb.grades:
                    out[(sub.student.id, nb.name, g.name, "grade")] = (g.auto_score, g.manual_score, g.needs_manual_grade)
                for c in nb.comments:
                    out[(sub.student.id, nb.name, c.name, "comment")] = c.auto_comment
                out[(sub.student.id, nb.name, "", "notebook")] = (nb.late_submission_penalty, str(sub.timestamp))
    return out


# --- the builds ------------------------------------------------------------------------------

def _make_release(folder: Path) -> dict:
    """`python -m autograder release` into folder/build."""
    out = run_cli(folder / "build", "release")
    if out["returncode"] != 0:
        raise RuntimeError(f"python -m autograder release failed:\n{out['stdout'][-3000:]}\n{out['stderr'][-3000:]}")
    return {"release": out}


def released_build() -> tuple[Path, dict]:
    """A build folder (path, info) holding the course released by the CLI; read-only."""
    folder, info = shared("release", _make_release)
    return folder / "build", info


def _make_graded(folder: Path) -> dict:
    """The released course copied, the sample class and the adversarial catalogue collected from one
    LMS zip, graded (2 workers, sandbox when available), feedback and export - all by the CLI."""
    import adversarial_catalogue as cat
    from autograder.course import Course
    from autograder.sample_class import SampleStudent, build_sample_class, write_lms_zip

    released, _ = released_build()
    build = folder / "build"
    shutil.copytree(released, build, symlinks=True)
    with build_env(build):
        course = Course.load(build)
    # the course copy and a listening loopback port are there while the escape probes run
    with cat.course_copy(course) as copy_of_course, cat.listening_socket() as port:
        with build_env(build):
            students = build_sample_class(course, trimmed=True)
            entries = cat.catalogue_submissions(course, folder / "escaped.txt", copy_of_course, port)
        extra = [SampleStudent(entry_id, "adversarial catalogue entry", {f"{cat.NOTEBOOK}.ipynb": data})
                 for entry_id, data in entries.items()]
        lms = write_lms_zip(students + extra, folder / "lms.zip")
        outputs = {"collect": run_cli(build, "collect", str(lms))}
        shutil.copytree(build / "course", folder / "collected", symlinks=True)
        grade = ["grade", "--workers", str(WORKERS), "--cell-timeout", f"{CELL_TIMEOUT:g}",
                 "--notebook-timeout", f"{NOTEBOOK_TIMEOUT:g}"]
        outputs["grade"] = run_cli(build, *grade, *([] if sandbox_works() else ["--no-sandbox"]))
    outputs["feedback"] = run_cli(build, "feedback")
    outputs["export"] = run_cli(build, "export")
    return {"outputs": outputs, "sample": [s.student for s in students], "catalogue": sorted(entries)}


def graded_build() -> tuple[Path, dict]:
    """(folder, info) of the graded class: folder/build (graded course), folder/collected (the course
    before grading), folder/escaped.txt (must never exist); info["outputs"] = the CLI runs."""
    return shared("graded", _make_graded)
