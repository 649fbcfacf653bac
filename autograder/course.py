"""Where a course's files live and how every step reaches nbgrader's configuration and gradebook.

All steps share one layout under the course root (``build/course`` by default; ``$PART_II_BUILD`` or ``--build``
moves it):

    release/part-ii/           nbgrader's student version
    student/part-ii/           the student bundle (release notebooks + code/ + data/); PART_II_ROOT of graded kernels
    student/part-ii.zip        the same bundle as the download for students
    submitted/<student>/part-ii/, autograded/…, feedback/…   nbgrader's folders
    rejected/                  files collect could not accept (kept, never dropped)
    replaced/                  hand-ins a later download replaced (kept)
    dropped/                   a dropped student's files and dropped.json (drop; drop --undo takes them back)
    marking/                   the graders' guides to the hand-graded answers (release)
    grading/                   one private scratch folder per grading job
    reports/                   collect.json, grades.csv, grades-per-cell.csv, totals.png
    gradebook.db               the SQLite gradebook (unless $PART_II_DB_URL points elsewhere)
    gradebook-url.txt          the gradebook URL release used, when not that file (read when $PART_II_DB_URL is unset)
    releases.json              each release's time and test-cell digests (grade.record_release)
    nbgrader_config.py         formgrader's configuration for this course (release)
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import os
import shlex
import zoneinfo
from dataclasses import dataclass
from pathlib import Path

from traitlets.config import Config
from traitlets.config.loader import PyFileConfigLoader

PACKAGE = Path(__file__).resolve().parent
REPO = PACKAGE.parent
ASSIGNMENT = "part-ii"
CONFIG_FILE = PACKAGE / "nbgrader_config.py"
BEIJING = zoneinfo.ZoneInfo("Asia/Shanghai")  # the students' clock: the student README and late notes give it beside UTC
# the shell's $PART_II_BUILD, read before load_config exports --build over it: a suggested command without --build
# runs there
SHELL_BUILD = os.environ.get("PART_II_BUILD") or None
BUNDLE_CONTENT = ("code", "data")  # top-level course folders shipped to students, each as <name>/part-ii
# in the student bundle: the sha256 of every file of BUNDLE_CONTENT as released (`sha256sum -c` reads it), so that
# `check` tells a student's edits from a repository that has moved on since the release
COURSE_FILES_LIST = "course-files.sha256"


class AutograderError(Exception):
    """A problem the user can fix; the CLI prints the message and exits with ``exit_code``."""

    def __init__(self, message: str, exit_code: int = 2):
        super().__init__(message)
        self.exit_code = exit_code


def load_config(build: Path | None = None) -> Config:
    """Read autograder/nbgrader_config.py; ``build`` overrides $PART_II_BUILD (and is exported to children).

    Without $PART_II_DB_URL, a course released with another gradebook keeps it: the URL release
    recorded in the course folder (DB_URL_RECORD) is used, not a new, empty SQLite file.
    """
    if build is not None:
        os.environ["PART_II_BUILD"] = str(Path(build).resolve())
    config = PyFileConfigLoader(CONFIG_FILE.name, path=str(PACKAGE)).load_config()
    if "PART_II_DB_URL" not in os.environ and (recorded := recorded_db_url(Path(config.CourseDirectory.root))):
        config.CourseDirectory.db_url = recorded
    return config


DB_URL_RECORD = "gradebook-url.txt"  # in the course root: the gradebook URL release used, when not the default


def recorded_db_url(root: Path) -> str | None:
    """The gradebook URL recorded in the course root by release, or None (the default SQLite gradebook)."""
    path = root / DB_URL_RECORD
    try:
        text = path.read_text(encoding="utf-8").strip()
    except (FileNotFoundError, NotADirectoryError):
        return None
    except (OSError, UnicodeDecodeError) as exc:
        raise AutograderError(f"cannot read {path} ({exc}): it holds the gradebook URL release used; make it readable, "
                              "or delete it and set $PART_II_DB_URL to the course's gradebook") from None
    return text or None


def record_db_url(root: Path, url: str) -> None:
    """Write url as the course's gradebook (owner-only: it may hold a password); remove the record for the course's
    own SQLite file, however its URL spells it, so a copied build keeps using its own copy."""
    from sqlalchemy.engine import make_url

    path = root / DB_URL_RECORD
    parsed = make_url(url)
    if parsed.get_backend_name() == "sqlite" and parsed.database and parsed.database != ":memory:":
        database = (Path.cwd() / parsed.database).resolve()  # an absolute path stays itself
        if database == (root / "gradebook.db").resolve():
            path.unlink(missing_ok=True)
            return
        url = parsed.set(database=str(database)).render_as_string(hide_password=False)  # not relative to cwd
    path.touch(mode=0o600)
    path.write_text(url + "\n", encoding="utf-8")


@functools.cache
def alembic_head() -> str:
    """The newest revision of the installed nbgrader's gradebook schema: what `alembic heads` prints, read in-process."""
    import nbgrader
    from alembic.config import Config as AlembicConfig
    from alembic.script import ScriptDirectory

    config = AlembicConfig()
    config.set_main_option("script_location", str(Path(nbgrader.__file__).parent / "alembic"))
    return ScriptDirectory.from_config(config).get_current_head()


def fast_new_gradebooks() -> None:
    """Make nbgrader stamp a new gradebook with alembic_head() instead of running `alembic heads` in a
    subprocess (about 3 s per new gradebook: every release, first collect and grade run pays it)."""
    import nbgrader.api

    nbgrader.api.get_alembic_version = alembic_head


def build_flag(build: Path) -> str:
    """' --build DIR' to repeat in a suggested command for the build folder DIR ('' where a command without --build
    runs: the default build/, or the shell's $PART_II_BUILD)."""
    build = Path(build).resolve()
    implied = Path(SHELL_BUILD).resolve() if SHELL_BUILD else (REPO / "build").resolve()
    return "" if build == implied else f" --build {shlex.quote(str(build))}"


def build_option(course: "Course") -> str:
    """' --build DIR' to repeat in a suggested command about course (see build_flag)."""
    return build_flag(Path(course.root).parent)


def run_first(course: "Course", command: str) -> str:
    """'run `python -m autograder COMMAND [--build DIR]` first': the advice, runnable as printed for this course."""
    return f"run `python -m autograder {command}{build_option(course)}` first"


def check_build_folder(root: Path, create: bool = True) -> None:
    """Raise AutograderError when a file stands where the course root or one of its folders must be, or the
    course root cannot be created (a read-only place, /proc, a missing drive); without create, when it is missing."""
    for path in [root, *root.parents]:
        if path.exists():
            if not path.is_dir():
                raise AutograderError(f"{path} is a file, but the course needs a folder there ({root}); "
                                      "--build (or $PART_II_BUILD) must name a folder, the one that holds course/")
            break
    resolved = root.resolve()
    if resolved.is_relative_to(REPO.resolve()) and not resolved.is_relative_to((REPO / "build").resolve()):
        # a course among the repository's own files, where git does not ignore it (only build/ is ignored)
        raise AutograderError(f"{root.parent} is inside the repository ({REPO}) but not in its build/ folder: --build "
                              "(or $PART_II_BUILD) must name build/ (the default), a folder inside it, or one outside "
                              "the repository")
    nested = not root.is_dir() and (root.parent / "release" / ASSIGNMENT).is_dir()
    if create and nested:  # release would make a second course inside the first
        raise AutograderError(f"{root.parent} is a course folder itself: give --build "
                              f"{shlex.quote(str(root.parent.parent))}, the folder that holds course/")
    if not create and nested:  # the course is there, one level up: releasing again is the wrong advice
        raise AutograderError(f"{root.parent} is a course folder itself: give --build "
                              f"{shlex.quote(str(root.parent.parent))}, the folder that holds course/ ({root} does not exist)")
    if not create and not root.is_dir():
        raise AutograderError(f"there is no course in {root.parent} ({root} does not exist): run "
                              f"`python -m autograder release{build_flag(root.parent)}` first; --build (or "
                              "$PART_II_BUILD) names the folder that holds course/")
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise AutograderError(f"cannot create the course folder {root} ({exc.strerror or exc}); --build (or "
                              "$PART_II_BUILD) must name a folder you can write to") from None


GLOB_WILDCARDS = "[]*?"  # nbgrader joins the course and source folders into glob patterns unescaped


def check_no_wildcards(path: Path, what: str) -> None:
    """Raise AutograderError when path holds a character glob reads as a wildcard: nbgrader would miss the course's
    own files ('[1]' matches '1', not '[1]') or pick up another folder's ('a?b' matches 'axb')."""
    found = [char for char in GLOB_WILDCARDS if char in str(path)]
    if found:
        raise AutograderError(f"{what} {path} has {' '.join(found)} in its path: nbgrader finds the course's notebooks "
                              "with glob patterns made from it, where these are wildcards, so it would miss files or "
                              "read another folder's; choose a folder whose path has none of [ ] * ?")


DEFAULT_PORTS = {"postgresql": 5432, "mysql": 3306, "mariadb": 3306, "mssql": 1433, "oracle": 1521}


def gradebook_key(url: str) -> str:
    """url as comparable text: a SQLite file by its resolved path (relative to the current folder, as SQLAlchemy
    opens it), a server's database by backend, user, host, port (its default filled in) and name: not the driver,
    not the password (one URL may carry it, another leave it to PGPASSWORD or .pgpass)."""
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    try:
        parsed = make_url(url)
    except ArgumentError:  # not a URL (a damaged record): compared as written
        return url
    if (path := resolved_sqlite_file(url)) is not None:
        return f"sqlite file {path}"
    backend = parsed.get_backend_name()
    return (f"{backend} {parsed.username or ''}@{parsed.host or ''}:{parsed.port or DEFAULT_PORTS.get(backend, '')}/"
            f"{parsed.database or ''}")


def resolved_sqlite_file(url: str) -> Path | None:
    """The absolute path of the file a SQLite URL names (relative to the current folder, as SQLAlchemy opens it);
    None for another database, SQLite in memory, or a URL SQLAlchemy cannot parse."""
    from sqlalchemy.exc import ArgumentError

    try:
        path = sqlite_file(url)
    except ArgumentError:
        return None
    return None if path is None else (Path.cwd() / path).resolve()


def check_variable_names_the_courses_gradebook(root: Path) -> None:
    """Raise AutograderError when $PART_II_DB_URL names another gradebook than the course's (the URL release
    recorded, else its own gradebook.db) once the course has collected hand-ins: a variable left set from another
    course would otherwise write this course's students into that course's gradebook, and hide this one's grades."""
    url = os.environ.get("PART_II_DB_URL")
    collected = root / "reports" / "collect.json"
    if url is None or not collected.is_file():
        return
    recorded = recorded_db_url(root)
    own = recorded or sqlite_url(root / "gradebook.db")
    if gradebook_key(url) == gradebook_key(own):
        return
    if (own_file := resolved_sqlite_file(own)) is not None and not own_file.exists():
        return  # the course's file was moved: the variable may point at it where it is now (check_gradebook_present)
    where = f"the URL release recorded in {root / DB_URL_RECORD}" if recorded else "its own SQLite file"
    raise AutograderError(f"$PART_II_DB_URL names the gradebook {shown_url(url)}, but this course's gradebook is "
                          f"{shown_url(own)} ({where}), and the course has collected hand-ins (see {collected}). "
                          "Unset $PART_II_DB_URL: the course's own gradebook is used without it. To start the course "
                          f"over with another gradebook instead, remove {root} first.")


def shown_url(url: str) -> str:
    """url for a message: its password hidden (a URL SQLAlchemy cannot parse as given: it holds none it could find)."""
    from sqlalchemy.engine import make_url

    try:
        return make_url(url).render_as_string(hide_password=True)
    except Exception:  # noqa: BLE001 - an unparseable URL is refused before any database is opened
        return url


def check_gradebook_present(url: str, root: Path) -> None:
    """Raise AutograderError when the SQLite gradebook file of a course that has collected hand-ins is gone (moved
    or deleted): opening it would make a new, empty one, and every command would then advise releasing again."""
    path = sqlite_file(url)
    if path is None:
        return
    collected = root / "reports" / "collect.json"
    if not path.exists() and collected.is_file():
        raise AutograderError(f"the gradebook {path} does not exist, but this course has collected hand-ins (see "
                              f"{collected}): it was moved or deleted. Put it back, or point $PART_II_DB_URL at it "
                              f"(sqlite:////path/to/gradebook.db); to start the course over instead, remove {root} first")


def sqlite_url(path: Path | str) -> str:
    """The SQLAlchemy URL of the SQLite file at path, with the characters a URL gives a meaning (? # % : @) escaped:
    sqlite:///… written plainly opened the file 'a' for a build folder named 'a?b' (the rest read as a query)."""
    from sqlalchemy.engine import URL

    return URL.create("sqlite", database=str(path)).render_as_string()


def sqlite_file(url: str) -> Path | None:
    """The file a SQLite URL names (its escapes undone); None for another database, or SQLite in memory."""
    from sqlalchemy.engine import make_url

    parsed = make_url(url)
    if not parsed.drivername.startswith("sqlite") or parsed.database in (None, "", ":memory:"):
        return None
    return Path(parsed.database)


def check_db_url(url: str) -> None:
    """Raise AutograderError when the gradebook URL is not a database URL SQLAlchemy can open here."""
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError, NoSuchModuleError

    try:
        dialect = make_url(url).get_dialect()
    except NoSuchModuleError:  # a subclass of ArgumentError
        raise AutograderError(f"the gradebook URL {url!r} ($PART_II_DB_URL) names an unknown database kind; "
                              "expected one SQLAlchemy knows, e.g. sqlite:// or postgresql+psycopg://") from None
    except ArgumentError:
        raise AutograderError(f"the gradebook URL {url!r} ($PART_II_DB_URL) is not a database URL; expected a "
                              "SQLAlchemy URL such as sqlite:////abs/path/gradebook.db or "
                              "postgresql+psycopg://user@host/dbname") from None
    try:
        dialect.import_dbapi()
    except ImportError as exc:
        package = DRIVER_PACKAGES.get(exc.name or "", exc.name)
        raise AutograderError(f"the gradebook URL {url!r} needs the Python database driver {exc.name!r}, which is "
                              f"not installed; install it into the venv (e.g. `.venv/bin/pip install {package}`) "
                              "or unset $PART_II_DB_URL to use the SQLite gradebook") from None


def listed(ids: list[str], most: int = 5) -> str:
    """'a, b, c, d, e, …': the first `most` ids, for a one-line summary."""
    return ", ".join(ids[:most]) + (", …" if len(ids) > most else "")


def points_text(value: float) -> str:
    """'1 point', '2.5 points': a number of points as a message gives it."""
    return f"{value:g} {'point' if value == 1 else 'points'}"


def case_hint(unknown: list[str], known: list[str]) -> str:
    """' (ids are case-sensitive: did you mean alice?)' for unknown ids that differ from a known one only in case, else ''."""
    lowered = {k.lower(): k for k in known}
    meant = [lowered[u.lower()] for u in unknown if u.lower() in lowered]
    return f" (ids are case-sensitive: did you mean {', '.join(meant)}?)" if meant else ""


DEFAULT_CELL_TIMEOUT = 60.0  # seconds a cell may run when graded (grade --cell-timeout), and in check
DEFAULT_NOTEBOOK_TIMEOUT = 600.0  # seconds a whole notebook may run when graded (grade --notebook-timeout)


# the pip package of a driver module whose name differs from it
DRIVER_PACKAGES = {"MySQLdb": "mysqlclient", "pymysql": "PyMySQL", "psycopg2": "psycopg2-binary",
                   "psycopg": "'psycopg[binary]'", "cx_Oracle": "cx-Oracle", "pyodbc": "pyodbc"}


def gradebook_error(url: str, exc: Exception) -> str:
    """A message for a database error of the gradebook at url (its password hidden): what failed, what was expected."""
    cause = str(getattr(exc, "orig", None) or exc).strip().splitlines()[0]
    return (f"cannot use the gradebook {shown_url(url)}: {cause}; expected a database this machine can open and write: "
            "for SQLite a gradebook file (or none yet) in a folder that exists, for a server a running one that "
            "holds that database (set by $PART_II_DB_URL, else the URL release recorded in the course's "
            f"{DB_URL_RECORD}, else the course folder's own gradebook.db)")


@dataclass(frozen=True)
class Course:
    """The paths and gradebook URL of one course, read from an nbgrader Config."""

    config: Config

    @classmethod
    def load(cls, build: Path | None = None, create: bool = True) -> "Course":
        """The course configured by nbgrader_config.py (optionally in another build folder); without create, a
        course folder that does not exist yet is an AutograderError instead of being made."""
        config = load_config(build)
        check_db_url(config.CourseDirectory.db_url)
        check_no_wildcards(Path(config.CourseDirectory.root), "the course folder")
        check_no_wildcards(Path(config.CourseDirectory.source_directory) / ASSIGNMENT, "the source notebooks' folder")
        check_build_folder(Path(config.CourseDirectory.root), create)
        check_variable_names_the_courses_gradebook(Path(config.CourseDirectory.root))
        check_gradebook_present(config.CourseDirectory.db_url, Path(config.CourseDirectory.root))
        return cls(config)

    @property
    def root(self) -> Path:
        """nbgrader's course root (everything generated lives under it)."""
        return Path(self.config.CourseDirectory.root)

    @property
    def db_url(self) -> str:
        """The gradebook URL (SQLite by default, any SQLAlchemy URL nbgrader accepts)."""
        return self.config.CourseDirectory.db_url

    @property
    def course_id(self) -> str:
        """nbgrader's course id."""
        return self.config.CourseDirectory.course_id

    @property
    def source_dir(self) -> Path:
        """The instructor notebooks of the assignment (solutions and hidden tests)."""
        return Path(self.config.CourseDirectory.source_directory) / ASSIGNMENT

    def step_dir(self, step: str, student: str | None = None) -> Path:
        """nbgrader's folder for a step ('release', 'submitted', 'autograded', 'feedback'), optionally one student's."""
        base = self.root / step
        return base / ASSIGNMENT if student is None else base / student / ASSIGNMENT

    @property
    def release_dir(self) -> Path:
        """The generated student notebooks."""
        return self.step_dir("release")

    @property
    def bundle_dir(self) -> Path:
        """The unpacked student download: release notebooks + code/part-ii + data/part-ii."""
        return self.root / "student" / ASSIGNMENT

    @property
    def bundle_zip(self) -> Path:
        """The student download."""
        return self.root / "student" / f"{ASSIGNMENT}.zip"

    @property
    def reports_dir(self) -> Path:
        """Reports written by collect, grade and export."""
        return self.root / "reports"

    @property
    def rejected_dir(self) -> Path:
        """Copies of the files collect rejected."""
        return self.root / "rejected"

    @property
    def replaced_dir(self) -> Path:
        """The earlier hand-ins that a later collect replaced."""
        return self.root / "replaced"

    @property
    def grading_dir(self) -> Path:
        """Scratch folders of grading jobs."""
        return self.root / "grading"

    def notebook_names(self) -> list[str]:
        """Names (without .ipynb) of the released notebooks, sorted; fails if release has not run."""
        names = sorted(p.stem for p in self.release_dir.glob("*.ipynb"))
        if not names:
            raise AutograderError(f"no released notebooks in {self.release_dir}; {run_first(self, 'release')}")
        return names

    def submitted_students(self) -> list[str]:
        """Ids of students with a collected submission, sorted."""
        base = self.root / "submitted"
        return sorted(p.parent.name for p in base.glob(f"*/{ASSIGNMENT}") if p.is_dir())

    def gradebook(self):
        """Open nbgrader's Gradebook on this course (use as a context manager)."""
        from nbgrader.api import Gradebook

        fast_new_gradebooks()
        self.root.mkdir(parents=True, exist_ok=True)
        return Gradebook(self.db_url, self.course_id)

    def coursedir(self, **overrides):
        """An nbgrader CourseDirectory for this course, with trait overrides (assignment_id, student_id…)."""
        from nbgrader.coursedir import CourseDirectory

        cd = CourseDirectory(config=self.config)
        cd.assignment_id = ASSIGNMENT
        for key, value in overrides.items():
            setattr(cd, key, value)
        return cd

    @contextlib.contextmanager
    def lock(self, command: str):
        """Hold the course's write lock so two commands never change the same course at once."""
        self.root.mkdir(parents=True, exist_ok=True)
        path = self.root / ".autograder.lock"
        with open(path, "a+") as fh:
            try:
                fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                fh.seek(0)
                holder = fh.read().strip() or "another process"
                raise AutograderError(f"the course at {self.root} is busy ({holder}); wait for it to finish") from None
            fh.seek(0)
            fh.truncate()
            fh.write(f"`{command}` running as pid {os.getpid()}")
            fh.flush()
            try:
                yield
            finally:
                fh.seek(0)
                fh.truncate()
                fcntl.flock(fh, fcntl.LOCK_UN)


def abandon(session) -> None:
    """Roll back what the session has not committed. An interrupt that lands inside commit() after the
    database committed leaves the transaction 'committed' but open, where rollback raises
    InvalidRequestError: then it is closed instead (its changes are saved) and the session is usable again."""
    from sqlalchemy.exc import InvalidRequestError

    try:
        session.rollback()
    except InvalidRequestError:
        session.close()


@contextlib.contextmanager
def one_transaction(session):
    """Commit what the block changes in the session at its end, or nothing of it on any exception (Ctrl-C too)."""
    try:
        yield
        session.commit()
    except BaseException:
        abandon(session)
        raise


def quiet_nbgrader_logs(level: int | None = None) -> None:
    """Keep nbgrader's and traitlets' INFO chatter off the terminal (warnings still show)."""
    import logging

    logging.getLogger("traitlets").setLevel(level or logging.WARNING)
