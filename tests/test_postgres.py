"""The gradebook in PostgreSQL, as the README offers ($PART_II_DB_URL=postgresql+psycopg://...).

A PostgreSQL server of the test's own (a fresh cluster, a unix socket only, no TCP) holds the
gradebook of a small class that the CLI releases, collects, gives a due date and an extension,
grades (twice: the second run skips), feeds back and exports. The oracle is the SQLite gradebook
of the shared graded class (tests/shared_builds.py): the same submissions must get the same
grades and comments cell by cell, whichever database holds them.
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from autograder.course import REPO, Course
from autograder.sample_class import build_sample_class, write_lms_zip
from shared_builds import (CELL_TIMEOUT, build_env, dump, graded_build, read_grades_csv, reverse_cell_rows,
                           run_cli, sandbox_works)

STUDENTS = ["partial", "edited-tests", "broken"]  # one notebook each (trimmed class): cheap to grade
DATABASE = "course"


def postgres_bin() -> Path:
    """The folder of PostgreSQL's server programs (initdb, pg_ctl): Debian's newest, else the one on PATH."""
    debian = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=lambda p: int(Path(p).parts[4]) if
                    Path(p).parts[4].isdigit() else 0)
    found = debian[-1] if debian else shutil.which("initdb")
    if found is None:
        pytest.fail("PostgreSQL's initdb is missing: `make sysdeps` installs Debian's postgresql package")
    return Path(found).parent


def clean_env() -> dict[str, str]:
    """This environment without PG* variables, which would steer libpq and the server elsewhere."""
    return {k: v for k, v in os.environ.items() if not k.startswith("PG")}


def server_user() -> pwd.struct_passwd | None:
    """The user that owns the cluster when the tests run as root (initdb and postgres refuse root), else None."""
    if os.geteuid() != 0:
        return None
    try:
        return pwd.getpwnam("postgres")  # made by Debian's package
    except KeyError:
        return pwd.getpwnam("nobody")


def as_server_user(argv: list[str]) -> list[str]:
    """argv run as the cluster's owner."""
    user = server_user()
    return argv if user is None else ["runuser", "-u", user.pw_name, "--", *argv]


@pytest.fixture(scope="module")
def postgres():
    """The URL of an empty database on a PostgreSQL server started for this module, stopped after it."""
    from sqlalchemy import create_engine, text

    folder = Path(tempfile.mkdtemp(prefix="pg-", dir="/tmp"))  # short: a unix socket path has 107 bytes; 0700
    data, log, tools = folder / "data", folder / "server.log", postgres_bin()
    if (owner := server_user()) is not None:
        os.chown(folder, owner.pw_uid, owner.pw_gid)
    run = dict(check=True, capture_output=True, text=True, timeout=120, env=clean_env())
    try:
        try:
            subprocess.run(as_server_user([str(tools / "initdb"), "-D", str(data), "-A", "trust", "-U", "grader",
                                           "-E", "UTF8", "--locale=C", "--no-sync"]), **run)
            options = f"-k {folder} -c listen_addresses='' -c fsync=off -c full_page_writes=off"
            subprocess.run(as_server_user([str(tools / "pg_ctl"), "-D", str(data), "-o", options, "-l", str(log),
                                           "-w", "start"]), **run)
        except (subprocess.CalledProcessError, subprocess.TimeoutExpired) as exc:
            pytest.fail(f"could not start PostgreSQL: {exc.stderr or exc.stdout}{log.read_text() if log.exists() else ''}")
        admin = create_engine(f"postgresql+psycopg://grader@/postgres?host={folder}", isolation_level="AUTOCOMMIT")
        with admin.connect() as conn:
            conn.execute(text(f"CREATE DATABASE {DATABASE}"))
        admin.dispose()
        yield f"postgresql+psycopg://grader@/{DATABASE}?host={folder}"
    finally:
        if data.exists():  # also a server that started but did not answer pg_ctl's wait
            subprocess.run(as_server_user([str(tools / "pg_ctl"), "-D", str(data), "-m", "immediate", "stop"]),
                           capture_output=True, timeout=60, env=clean_env())
        shutil.rmtree(folder, ignore_errors=True)


def test_a_postgresql_gradebook_gets_the_grades_the_sqlite_one_does(postgres):
    """release, collect, release --due-date, extend, grade (and again), feedback, export against PostgreSQL:
    the grades equal those of the SQLite gradebook, the extension and lateness reach the export, and no
    SQLite gradebook appears beside the course."""
    from sqlalchemy import create_engine, inspect

    shared, _ = graded_build()
    (REPO / "build").mkdir(exist_ok=True)
    build = Path(tempfile.mkdtemp(prefix="test-postgres-", dir=REPO / "build"))
    build.chmod(0o755)  # the sandbox user passes through it
    try:
        def cli(*args: str) -> dict:
            """A `python -m autograder` run on this build, the gradebook in PostgreSQL."""
            return run_cli(build, *args, timeout=1200, db_url=postgres)

        steps = {"release": cli("release")}
        with build_env(build):
            os.environ["PART_II_DB_URL"] = postgres  # build_env restores it
            course = Course.load(build)
            assert course.db_url == postgres
            students = [s for s in build_sample_class(course, trimmed=True) if s.student in STUDENTS]
        write_lms_zip(students, build / "lms.zip")
        steps["collect"] = cli("collect", str(build / "lms.zip"))
        # the sample hand-ins are dated 2026-03-01 10:00 UTC: late for this due date, on time for the extension
        steps["due date"] = cli("release", "--due-date", "2026-03-01 09:00 UTC")
        steps["extend"] = cli("extend", "--student", "partial", "--until", "2026-03-02 00:00 UTC")
        # nbgrader reads a notebook's cells in the database's order to put a deleted test cell back (edited-tests
        # deleted one): PostgreSQL's order after the release rewrote the rows is not reliably the notebook's
        reverse_cell_rows(postgres)
        grade = ["grade", "--workers", "2", "--cell-timeout", f"{CELL_TIMEOUT:g}", *([] if sandbox_works() else ["--no-sandbox"])]
        steps["grade"] = cli(*grade)
        steps["grade again"] = cli(*grade)
        steps["feedback"] = cli("feedback")
        steps["export"] = cli("export")
        codes = {step: done["returncode"] for step, done in steps.items()}
        # collect rejects broken's damaged file (exit code 1)
        assert codes == {"release": 0, "collect": 1, "due date": 0, "extend": 0, "grade": 0, "grade again": 0,
                         "feedback": 0, "export": 0}, {s: (d["returncode"], d["stdout"][-1500:], d["stderr"][-1500:])
                                                        for s, d in steps.items()}
        assert "graded 3, already graded (skipped) 0, errors 0" in steps["grade"]["stdout"], steps["grade"]["stdout"]
        assert "graded 0, already graded (skipped) 3, errors 0" in steps["grade again"]["stdout"]
        assert "next: nothing to grade (every hand-in named is graded; --force grades again); " \
            "`python -m autograder feedback" in steps["grade again"]["stdout"], steps["grade again"]["stdout"]  # review
        assert not (build / "course" / "gradebook.db").exists()  # nothing fell back to SQLite

        def grades(db_url: str) -> dict:
            """Every grade and comment of STUDENTS (not the late penalties: only this class has a due date)."""
            return {k: v for k, v in dump(db_url, STUDENTS).items() if k[3] != "notebook"}

        got = grades(postgres)
        want = grades(f"sqlite:///{shared / 'build' / 'course' / 'gradebook.db'}")
        assert got and got == want, sorted(set(got.items()) ^ set(want.items()))[:20]

        rows = read_grades_csv(build / "course" / "reports" / "grades.csv")
        sqlite_rows = read_grades_csv(shared / "build" / "course" / "reports" / "grades.csv")
        for student in STUDENTS:
            assert rows[student]["score"] == sqlite_rows[student]["score"], (rows[student], sqlite_rows[student])
            assert rows[student]["duedate"] == "2026-03-01 09:00:00", rows[student]
        assert "extension until 2026-03-02 00:00 UTC" in rows["partial"]["notes"], rows["partial"]
        assert "after the due date" not in rows["partial"]["notes"], rows["partial"]
        assert "handed in 1 h after the due date" in rows["edited-tests"]["notes"], rows["edited-tests"]
        tables = inspect(engine := create_engine(postgres)).get_table_names()
        engine.dispose()
        assert {"grade", "submitted_assignment", "autograder_job", "autograder_extension"} <= set(tables), tables
    finally:
        shutil.rmtree(build, ignore_errors=True)
