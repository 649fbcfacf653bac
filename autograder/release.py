"""Step 1, release: nbgrader's student version of part-ii and the zip students download.

The zip holds one folder, ``part-ii/``, with the release notebooks at its top and the
course's ``code/part-ii`` and ``data/part-ii`` beside them (the notebooks' setup cell finds
``code/part-ii`` by searching the parent folders), plus a ``README.md`` for the student (what
each notebook covers and is worth, how to set up, work and hand in), a ``requirements.txt``
with the course's pins of the packages the notebooks need, a ``constraints.txt`` (read through requirements.txt)
with the course's locked versions of what those install in turn, and an ``nbgrader_config.py`` giving
JupyterLab's Validate button grading's cell time limit, and a ``course-files.sha256`` with the digest of every
released ``code/`` and ``data/`` file (check compares the student's copy against it). Nothing else goes in: no source
notebook, no solution, no hidden test, no marking note. The same unpacked folder is what graded kernels
see as ``PART_II_ROOT``. For graders, release writes ``marking/<notebook>.md`` into the course folder (not the zip):
each hand-graded question with its model answer and marking note, to read beside formgrader.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import logging
import math
import re
import shutil
import zipfile
import zoneinfo
from dataclasses import dataclass, field
from pathlib import Path

import nbformat

from .cells import (cell_points, headings, is_hand_graded, left_out, leveled_headings, nbgrader_meta, numbered_cell,
                    numbered_headings, WARNING_PATTERN)
from .course import (ASSIGNMENT, BEIJING, BUNDLE_CONTENT, COURSE_FILES_LIST, DEFAULT_CELL_TIMEOUT,
                     DEFAULT_NOTEBOOK_TIMEOUT, REPO, AutograderError, Course, fast_new_gradebooks, one_transaction,
                     points_text, quiet_nbgrader_logs, record_db_url, sqlite_file)

# what must never reach a student, beyond the exact markers: nbgrader removes only exactly spelt markers (a stray END
# line silently), so a misspelt one leaves the hidden tests in; hidden checks are the only ones that pass reveal=False;
# marking notes begin with 评分要点 and go only under a note_ grade id
LEAKS = (
    (re.compile(r"^\s*#+\s*(BEGIN|END)\b[\s_-]*(HIDDEN[\s_-]*TESTS?|SOLUTION)\b", re.IGNORECASE | re.MULTILINE),
     "a solution or hidden-test marker (nbgrader removes only the exact lines ### BEGIN SOLUTION, ### END SOLUTION, "
     "### BEGIN HIDDEN TESTS and ### END HIDDEN TESTS)"),
    (re.compile(r"reveal\s*=\s*False"),
     "a hidden check (reveal=False) outside a hidden-test block: its ### BEGIN HIDDEN TESTS / ### END HIDDEN TESTS "
     "lines are missing or misspelt, or the check belongs inside one"),
    (re.compile(r"评分要点"), "a marking note (评分要点): release removes only cells whose grade id starts with note_"),
)
# marking notes quote the model answer; graders read them in the source notebooks and the marking guides below,
# students never get them
MARKING_NOTE_PREFIX = "note_"
MARKING_GUIDES = "marking"  # <course root>/marking/<notebook>.md: the graders' guide, beside formgrader
ZIP_DATE = (2026, 1, 1, 0, 0, 0)  # fixed entry dates make the zip byte-identical across releases
KEEP = object()  # release(due_date=KEEP): the gradebook's due date stays as it is
STUDENT_README = Path(__file__).parent / "templates" / "student_README.md"
LOCK = REPO / "constraints.txt"  # the version of every other package of the grading environment
STUDENT_CONSTRAINTS = "constraints.txt"  # the bundle's: the lock's versions of what STUDENT_PACKAGES install in turn
# what a student installs to run the notebooks: what they and code/part-ii import, JupyterLab and its kernel, and
# nbgrader for the Validate button (tests/test_release.py checks that the imports are covered)
STUDENT_PACKAGES = ("torch", "numpy", "matplotlib", "sympy", "jsonschema", "ipython", "jupyterlab", "ipykernel",
                    "nbgrader")
DUE_DATE_FORMS = ("'2026-03-01 23:59' (this machine's time zone), '2026-03-01 23:59+08:00', "
                  "'2026-03-01 23:59 Asia/Shanghai', or 'none' ({})")


@dataclass(frozen=True)
class Release:
    """What release wrote: the nbgrader release folder, the unpacked bundle and the zip."""

    notebooks: list[Path]
    bundle_dir: Path
    zip_path: Path
    changed: dict[str, list[str]] = field(default_factory=dict)  # test cells changed since the last release
    regrade: list[str] = field(default_factory=list)  # students whose grades are to be redone for that
    due_date: dt.datetime | None = None  # the assignment's due date after the release (naive UTC, as nbgrader keeps it)
    given_changed: dict[str, list[str]] = field(default_factory=dict)  # given code cells changed: 'cell N (…)' each
    answer_points: dict[str, list[str]] = field(default_factory=dict)  # hand-graded answers whose points changed
    flagged: int = 0  # hand scores given under their old points, flagged for review
    stated_points: dict[str, list[str]] = field(default_factory=dict)  # text stating other points than the cells
    marking_guides: Path | None = None  # the folder of the graders' guides (write_marking_guides)


WELL_FORMED = re.compile(r"\d{4}-\d{2}-\d{2}(?:[T ]\d{2}:\d{2}(?::\d{2}(?:\.\d+)?)?)?(?:Z|[+-]\d{2}:?\d{2})?")


def parse_moment(text: str, what: str = "due date", none_means: str = "no due date") -> dt.datetime | None:
    """A time as written, made aware (its zone, its offset, or this machine's zone); None for 'none'.
    ValueError naming the accepted forms (what: the kind of time in the messages, e.g. 'end of the extension';
    none_means: what 'none' does)."""
    forms = DUE_DATE_FORMS.format(none_means)
    if text.strip().lower() == "none":
        return None
    when, _, zone = text.strip().rpartition(" ")
    named = bool(when) and re.fullmatch(r"[A-Za-z][\w+\-/]*", zone) is not None  # 'Asia/Shanghai', 'UTC'
    try:
        tz = zoneinfo.ZoneInfo(zone) if named else None
    except (zoneinfo.ZoneInfoNotFoundError, ValueError):
        raise ValueError(f"unknown time zone {zone!r} in {what} {text!r}; expected {forms}") from None
    offset = re.search(r"\d[+-](\d{2}):?(\d{2})$", when if named else text.strip())
    if offset and (int(offset[1]) >= 24 or int(offset[2]) >= 60):  # Python: +25:00 in timedelta words, -0075 taken
        raise ValueError(f"the {what} {text!r} has the UTC offset {offset[0][1:]}, which does not exist: an offset "
                         f"lies between -23:59 and +23:59; expected {forms}")
    try:
        moment = dt.datetime.fromisoformat(when if named else text.strip())
    except ValueError as exc:
        if WELL_FORMED.fullmatch(when if named else text.strip()):  # '2026-02-30 23:59': in form, not in the calendar
            raise ValueError(f"the {what} {text!r} is not a real date and time ({exc}); expected {forms}") from None
        raise ValueError(f"cannot read the {what} {text!r}; expected {forms}") from None
    if not re.search(r"\d[T ]\d\d:\d\d", when if named else text):  # a bare date: the start or the end of the day?
        raise ValueError(f"the {what} {text!r} has no time of day; expected {forms}")
    if tz is not None:
        if moment.tzinfo is not None:
            raise ValueError(f"{what} {text!r} gives both an offset and a time zone; expected {forms}")
        moment = moment.replace(tzinfo=tz)
    check_wall_time(moment, text, what)  # a fixed offset has no gaps or folds: nothing to refuse
    try:
        moment = moment if moment.tzinfo is not None else moment.astimezone()  # a naive moment is local time
        naive_utc(moment)  # the form it is kept in: 0001-01-01 00:00+05:00 has none
    except (OverflowError, OSError, ValueError):  # ValueError: 'year 0 is out of range
        raise ValueError(f"the {what} {text!r} is out of range: in UTC it falls outside the years 1 to 9999; "
                         f"expected {forms}") from None
    return moment


def check_wall_time(moment: dt.datetime, text: str, what: str) -> None:
    """ValueError when moment's wall time (in its zone; naive: this machine's) does not exist there (the clocks skip
    it) or happens twice (they go back): Python would silently pick one reading."""
    local = moment.tzinfo is None
    try:
        first, second = (moment.replace(fold=f).astimezone() if local else moment.replace(fold=f) for f in (0, 1))
        if first.utcoffset() == second.utcoffset():
            return
        utc = first.astimezone(dt.timezone.utc)
        back = (utc.astimezone() if local else utc.astimezone(moment.tzinfo)).replace(tzinfo=None, fold=0)
    except (OverflowError, OSError, ValueError):  # out of range: parse_moment says so
        return
    wall = moment.replace(tzinfo=None, fold=0)
    zone = "this machine's time zone" if local else str(moment.tzinfo)
    offsets = " or ".join(f"'{wall:%Y-%m-%d %H:%M}{_offset(m)}'" for m in (first, second))
    if back != wall:
        raise ValueError(f"the {what} {text!r} does not exist in {zone}: the clocks skip that time (a daylight-saving "
                         f"or other clock change); give a time that exists, or an offset: {offsets}")
    raise ValueError(f"the {what} {text!r} happens twice in {zone} (the clocks go back); give the offset to say "
                     f"which: {offsets}")


def _offset(moment: dt.datetime) -> str:
    """moment's UTC offset as '+HH:MM'."""
    minutes = int(moment.utcoffset().total_seconds() // 60)
    return f"{'+' if minutes >= 0 else '-'}{abs(minutes) // 60:02d}:{abs(minutes) % 60:02d}"


def parse_due_date(text: str, what: str = "due date", none_means: str = "no due date") -> dt.datetime | None:
    """A due date as naive UTC (nbgrader's convention); None for 'none'. ValueError as parse_moment."""
    moment = parse_moment(text, what, none_means)
    return None if moment is None else naive_utc(moment)


def naive_utc(moment: dt.datetime) -> dt.datetime:
    """An aware time as naive UTC, the form nbgrader and the gradebook keep."""
    return moment.astimezone(dt.timezone.utc).replace(tzinfo=None)


def as_given(moment: dt.datetime | None) -> str:
    """' (2026-03-01 23:59 Asia/Shanghai as given)' for a time given off UTC; '' for one given in UTC or None."""
    if moment is None or moment.utcoffset() == dt.timedelta(0):
        return ""
    zone = getattr(moment.tzinfo, "key", None) or moment.strftime("%z")  # Asia/Shanghai, else +0800
    if zone[:1] in "+-" and len(zone) == 5:
        zone = f"{zone[:3]}:{zone[3:]}"
    seconds = f":{moment:%S}" if moment.second else ""
    return f" ({moment:%Y-%m-%d %H:%M}{seconds} {zone} as given)"


def set_due_date(course: Course, due_date: dt.datetime | None) -> None:
    """Record the assignment's due date (naive UTC, None for none) in the gradebook; a release must exist."""
    from .extensions import adopt_native_extensions, sync_all

    with course.gradebook() as gb, one_transaction(gb.db):  # a due date never lands without its extensions
        adopt_native_extensions(gb)  # at the end times they have under the old due date
        gb.find_assignment(ASSIGNMENT).duedate = due_date
        sync_all(gb, course.config)  # an extension keeps its end time, so its interval (and a penalty) change


def due_date_of(course: Course) -> dt.datetime | None:
    """The assignment's due date in the gradebook (naive UTC), None when it has none."""
    with course.gradebook() as gb:
        return gb.find_assignment(ASSIGNMENT).duedate


class _NbgraderLog(logging.Handler):
    """The records nbgrader logs while it converts (its logger has only a NullHandler: without this they are lost)."""

    def __init__(self):
        super().__init__(logging.INFO)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


def failed_notebook(records: list[logging.LogRecord]) -> str | None:
    """The file name of the notebook nbgrader was converting last (None before it began one)."""
    return next((Path(str(r.args[0])).name for r in reversed(records) if r.msg == "Converting notebook %s" and r.args),
                None)


def exception_line(traceback_text: str) -> str:
    """The first line of the (last) exception's message in a formatted traceback, without its class: the lines after
    the last frame ('  File …' and its indented source), e.g. '-3 is less than the minimum of 0' of a ValidationError
    whose message goes on for lines."""
    lines = traceback_text.rstrip().splitlines()
    start = max((i for i, line in enumerate(lines) if line.startswith("  File ")), default=-1) + 1
    while start < len(lines) and (lines[start].startswith("  ") or not lines[start].strip()):
        start += 1
    first = lines[start] if start < len(lines) else (lines[-1] if lines else "")
    return first.split(": ", 1)[-1].strip().rstrip(".") if ": " in first else first.strip()


def nbgrader_failure(course: Course, records: list[logging.LogRecord]) -> str:
    """What nbgrader's log says went wrong: 'NOTEBOOK: CAUSE, in cell N (first line)' as far as it tells."""
    notebook = failed_notebook(records)
    causes = [exception_line(text) for r in records
              if r.levelno >= logging.ERROR and (text := r.getMessage()).startswith("Traceback")]
    # the first traceback is the root cause: a failed check logs its own ("Duplicate grade id: …") before nbgrader's
    cause = causes[0] if causes else next((r.getMessage() for r in records if r.levelno >= logging.ERROR),
                                          "nbgrader gave no reason")
    contents = next((r.args[0] for r in reversed(records) if "Cell contents are:" in str(r.msg) and r.args), None)
    where = ""
    if notebook and contents is not None and (course.source_dir / notebook).is_file():
        nb = nbformat.read(course.source_dir / notebook, as_version=4)
        where = next((f", in {numbered_cell(c, n)}" for n, c in enumerate(nb.cells, 1) if c.source == contents), "")
    return f"{notebook}: {cause}{where}" if notebook else cause


def refusal_outcome(course: Course) -> str:
    """What a refused release leaves, said before it changes anything: the previous release, or no release at all."""
    return "the previous release is kept" if course.release_dir.is_dir() else "nothing was released"


def leaks_error(course: Course, leaks: list[str], outcome: str) -> AutograderError:
    """The refusal of a student version that would show what students must not see ('NOTEBOOK: cell N (…): what')."""
    return AutograderError(f"the student version would show what students must not see: {'; '.join(leaks)}; fix it "
                           f"in {course.source_dir} and release again ({outcome})")


MARKED_REGIONS = re.compile(r"^[ \t]*### BEGIN (SOLUTION|HIDDEN TESTS)[ \t]*$.*?^[ \t]*### END \1[ \t]*$",
                            re.MULTILINE | re.DOTALL)


def source_leaks(course: Course) -> list[str]:
    """find_leaks on the source notebooks as nbgrader will release them (exactly marked regions and note_ cells taken
    out), before nbgrader writes anything to the gradebook: 'NOTEBOOK: cell N (…): what' strings."""
    found = []
    for path in sorted(course.source_dir.glob("*.ipynb")):
        for number, cell in enumerate(read_source(path).cells, 1):
            if nbgrader_meta(cell).get("grade_id", "").startswith(MARKING_NOTE_PREFIX):
                continue
            released = MARKED_REGIONS.sub("", cell.source)
            found += [f"{path.name}: {leak}" for leak in cell_leaks(cell, number, released)]
    return found


def read_source(path: Path):
    """A source notebook, read; AutograderError naming it when it is no notebook nbformat can read."""
    try:
        return nbformat.read(path, as_version=4)
    except (ValueError, OSError) as exc:  # NotJSONError (a merge conflict left in it), a validation error, unreadable
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise AutograderError(f"the source notebook {path} cannot be read ({first[:200]}); fix it and release "
                              "again") from None


def generate_release(course: Course) -> list[Path]:
    """Run nbgrader's GenerateAssignment (records the assignment in the gradebook), remove the marking notes and check
    that nothing secret is left (find_leaks); return the release notebooks. When nbgrader fails or something secret is
    left, the previous release notebooks are put back (nbgrader deletes the folder)."""
    from nbgrader.converters import GenerateAssignment
    from nbgrader.converters.base import NbGraderException

    if not sorted(course.source_dir.glob("*.ipynb")):
        raise AutograderError(f"no source notebooks in {course.source_dir}")
    quiet_nbgrader_logs()
    fast_new_gradebooks()
    converter = GenerateAssignment(coursedir=course.coursedir(), config=course.config)
    converter.force = True
    converter.create_assignment = True
    kept = course.root / ".release-before"  # not under release/: formgrader would list it as an assignment
    if kept.is_dir() and not course.release_dir.is_dir():  # a run killed between nbgrader's delete and the restore
        kept.replace(course.release_dir)
    shutil.rmtree(kept, ignore_errors=True)
    if course.release_dir.is_dir():
        shutil.copytree(course.release_dir, kept)
    outcome = refusal_outcome(course)
    log, level = _NbgraderLog(), converter.log.level
    converter.log.addHandler(log)
    converter.log.setLevel(logging.INFO)  # "Converting notebook …" says which notebook failed
    try:
        converter.start()
        notebooks = sorted(course.release_dir.glob("*.ipynb"))
        for nb in notebooks:
            strip_marking_notes(nb)
        if leaks := [f"{nb.name}: {found}" for nb in notebooks for found in find_leaks(nb)]:
            raise leaks_error(course, leaks, outcome)
    except BaseException as exc:
        shutil.rmtree(course.release_dir, ignore_errors=True)  # a first release leaves no student version behind
        if kept.is_dir():
            kept.replace(course.release_dir)
        if isinstance(exc, NbGraderException):
            notebook = failed_notebook(log.records)
            source = course.source_dir / notebook if notebook else course.source_dir
            of = " of" if notebook else ":"
            raise AutograderError(f"nbgrader could not generate the student version{of} "
                                  f"{nbgrader_failure(course, log.records)}; fix it in {source} and release again "
                                  f"({outcome})") from exc
        raise
    finally:
        converter.log.removeHandler(log)
        converter.log.setLevel(level)
    shutil.rmtree(kept, ignore_errors=True)
    return notebooks


def strip_marking_notes(notebook: Path) -> int:
    """Remove the instructor-only marking notes (grade ids note_*) from a release notebook; return how many."""
    nb = nbformat.read(notebook, as_version=4)
    kept = [c for c in nb.cells if not c.metadata.get("nbgrader", {}).get("grade_id", "").startswith(MARKING_NOTE_PREFIX)]
    removed = len(nb.cells) - len(kept)
    if removed:
        nb.cells = kept
        nbformat.write(nb, notebook)
    return removed


def split_at_section_heading(markdown: str) -> tuple[str | None, str]:
    """(the text of the cell's last heading of its highest level, the markdown after it, deeper headings included)
    outside code fences; (None, all of it) without a heading. What comes before that heading belongs to the exercise
    before it; a sub-heading after it ('#### 你的回答') is part of the question."""
    found = list(numbered_headings(markdown))
    if not found:
        return None, markdown.strip()
    top = min(level for _, level, _ in found)
    at, _, text = [heading for heading in found if heading[1] == top][-1]
    return text, "\n".join(markdown.splitlines()[at + 1:]).strip()


def fenced_code(text: str) -> str:
    """text as a python code block whose fence is longer than any run of backticks in it."""
    fence = "`" * max(3, 1 + max((len(run) for run in re.findall(r"`+", text)), default=0))
    return f"{fence}python\n{text}\n{fence}"


def model_answer(cell) -> str:
    """The source notebook's answer to a hand-graded cell, without the solution markers (a code answer fenced)."""
    if nbgrader_meta(cell).get("task"):
        return "(a task cell: graders judge the work across the notebook that the task above asks for)"
    text = "\n".join(ln for ln in cell.source.splitlines() if ln.strip() not in ("### BEGIN SOLUTION", "### END SOLUTION"))
    return fenced_code(text.strip()) if cell.cell_type == "code" else text.strip()


def marking_guide(nb, name: str) -> str | None:
    """Markdown for graders of notebook name (the source notebook nb): each hand-graded answer with its question as
    students read it (the text since the exercise heading, or since the last graded cell), the model answer and its
    marking notes (note_ cells: those right below an answer go with it; any other, with the next answer)."""
    sections, heading, question, waiting = [], name, [], []
    below_answer = False  # nothing but notes since the last hand-graded answer: a note here is that answer's
    for cell in nb.cells:
        meta = nbgrader_meta(cell)
        if meta.get("grade_id", "").startswith(MARKING_NOTE_PREFIX):
            (sections[-1]["notes"] if below_answer else waiting).append(cell.source.strip())
            continue
        below_answer = False
        if is_hand_graded(cell):
            asked = cell.source.strip() if meta.get("task") else "\n\n".join(question)
            sections.append({"heading": heading, "question": asked, "cell": cell, "notes": waiting})
            question, waiting, below_answer = [], [], True
        elif meta.get("grade") or meta.get("solution"):  # an autograded exercise: its text is not the next question's
            question = []
        elif cell.cell_type == "markdown":
            found, text = split_at_section_heading(cell.source)
            if found:
                heading, question = found, []
            if text:
                question.append(text)
    if not sections:
        return None
    sections[-1]["notes"] += waiting  # notes after the last answer: never dropped
    lines = [f"# {name}: marking guide", "",
             f"For graders only (release writes it from the source notebook; students never get it). In formgrader: "
             f"Manual Grading › {ASSIGNMENT} › {name}. Each hand-graded answer: the question as students read it, "
             "the model answer and the marking note. Each release rewrites this file: keep notes of your own elsewhere.",
             ""]
    for sec in sections:
        meta, points = nbgrader_meta(sec["cell"]), cell_points(sec["cell"])
        lines += [f"## {sec['heading']}", "", f"`{meta.get('grade_id')}`, {points_text(points)}",
                  "", "### Question", "",
                  sec["question"] or "(no text between this answer cell and the graded cell before it: see above)", "",
                  "### Model answer", "", model_answer(sec["cell"]), "",
                  "### Marking note", "", "\n\n".join(sec["notes"]) or "(none in the source notebook)", ""]
    return "\n".join(lines)


def write_marking_guides(course: Course, sources: list[Path]) -> Path:
    """Write <course root>/marking/<notebook>.md for each source notebook with hand-graded answers (the folder
    rewritten, so a notebook that lost them loses its guide); return the folder."""
    folder = course.root / MARKING_GUIDES
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    for path in sources:
        if guide := marking_guide(read_source(path), path.stem):
            written = folder / f"{path.stem}.md"
            written.write_text(guide, encoding="utf-8")
            written.chmod(0o444)  # the next release rewrites it: an editor warns before a grader's notes go
    return folder


def cell_leaks(cell, number: int, source: str | None = None) -> list[str]:
    """What the cell (its source, or the given text of it) shows that students must not see (LEAKS), as
    'cell N (first line): what' strings."""
    text = cell.source if source is None else source
    return [f"{numbered_cell(cell, number)}: {what}" for pattern, what in LEAKS if pattern.search(text)]


def find_leaks(notebook: Path) -> list[str]:
    """What a release notebook shows that students must not see (cell_leaks of each cell)."""
    nb = nbformat.read(notebook, as_version=4)
    return [leak for n, cell in enumerate(nb.cells, 1) for leak in cell_leaks(cell, n)]


def _bundle_files(course: Course) -> list[tuple[Path, str]]:
    """(file, path inside the bundle) for every file a student gets, sorted."""
    files = [(nb, nb.name) for nb in sorted(course.release_dir.glob("*.ipynb"))]
    for top in BUNDLE_CONTENT:
        base = REPO / top / ASSIGNMENT
        for path in sorted(base.rglob("*")):
            if path.is_file() and not left_out(path):
                files.append((path, f"{top}/{ASSIGNMENT}/{path.relative_to(base)}"))
    return files


PIN = re.compile(r"(?P<name>[A-Za-z0-9][A-Za-z0-9._-]*)\s*==\s*(?P<version>[A-Za-z0-9.+!_-]+)")


def pinned_versions(requirements: Path = REPO / "requirements.txt") -> dict[str, str | None]:
    """{distribution name (normalised: lower case, '-'): version} for each plain `name==version` line of a
    requirements file; None for a name whose line says more (extras, markers, other specifiers)."""
    pins = {}
    for line in requirements.read_text(encoding="utf-8").splitlines():
        spec = line.split(" #", 1)[0].strip() if not line.lstrip().startswith("#") else ""
        if not spec or spec.startswith("-"):  # blank, comment, or a pip option
            continue
        m = PIN.fullmatch(spec)
        name = m["name"] if m else re.match(r"[A-Za-z0-9._-]*", spec).group(0)
        pins[re.sub(r"[-_.]+", "-", name).lower()] = m["version"] if m else None
    return pins


def student_requirements(pins: dict[str, str | None]) -> str:
    """The student's requirements.txt: the course's pin of each of STUDENT_PACKAGES, and the -c line that makes pip
    read the bundle's constraints.txt (the versions of what they install in turn)."""
    missing = [name for name in STUDENT_PACKAGES if not pins.get(name)]
    if missing:
        raise AutograderError(f"requirements.txt has no plain pin (name==version, no extras or markers) of "
                              f"{', '.join(missing)}; the student bundle's requirements.txt needs one of each")
    return ("# The versions the course is graded with. On Linux install torch from the CPU index first (README.md).\n"
            f"# {STUDENT_CONSTRAINTS} holds the graded versions of the packages these install in turn.\n"
            f"-c {STUDENT_CONSTRAINTS}\n"
            + "".join(f"{name}=={pins[name]}\n" for name in STUDENT_PACKAGES))


def required_distributions(roots: tuple[str, ...]) -> dict[str, str]:
    """{canonical name: the name of a distribution requiring it} of every distribution that roots (distribution
    names) require, directly or in turn, as pip installed them here: markers judged for this machine (so a
    Windows- or macOS-only helper, such as colorama, pywinpty or appnope, is not among them), an extra followed
    where a requirement asks for it. Read from the installed distributions' metadata; the roots are left out."""
    from importlib import metadata

    from packaging.markers import InvalidMarker, UndefinedComparison, UndefinedEnvironmentName
    from packaging.requirements import InvalidRequirement, Requirement
    from packaging.utils import InvalidName, canonicalize_name

    if isinstance(roots, str) or not isinstance(roots, (tuple, list)):
        raise AutograderError(f"roots must be a tuple of distribution names such as ('numpy',), got {roots!r}")
    names = []
    for root in roots:
        try:
            names.append(canonicalize_name(root, validate=True))
        except (InvalidName, TypeError):
            raise AutograderError(f"not a distribution name (letters, digits, '.', '_' and '-', no version): "
                                  f"{root!r}") from None
    roots = tuple(names)
    found: dict[str, str] = {}
    todo = [(root, frozenset(), "") for root in roots]
    seen = set()
    while todo:
        name, extras, by = todo.pop()
        if (name, extras) in seen:
            continue
        seen.add((name, extras))
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            raise AutograderError(f"{name} ({f'required by {by}' if by else 'one of the packages asked about'}) is not "
                                  "installed here; release reads what each package requires from the installed "
                                  "packages' metadata: set up the environment with `make venv`") from None
        if by:
            found.setdefault(name, by)
        for line in dist.requires or []:
            try:
                req = Requirement(line)
                active = req.marker is None or any(req.marker.evaluate({"extra": e}) for e in (extras or {""}))
            except (InvalidRequirement, InvalidMarker, UndefinedComparison, UndefinedEnvironmentName) as exc:
                raise AutograderError(f"the installed {name} {dist.version} declares a requirement that cannot be read "
                                      f"({line!r}: {exc}); reinstall it with `make venv`") from None
            if active:
                todo.append((canonicalize_name(req.name), frozenset(canonicalize_name(e) for e in req.extras), name))
    return {name: by for name, by in found.items() if name not in roots}


def student_constraints(pins: dict[str, str | None], lock: dict[str, str | None]) -> str:
    """The student's constraints.txt: the version of every distribution STUDENT_PACKAGES install in turn (on this
    machine; see required_distributions), sorted by name: its plain pin in requirements.txt, else the lock's.

    Refused when the installed version is another: the requirements were read from what is installed, and a
    dependency only the locked version brings in would be missing."""
    from importlib import metadata

    from packaging.version import InvalidVersion, Version

    for what, value in (("pins", pins), ("lock", lock)):
        if not isinstance(value, dict):
            raise AutograderError(f"{what} must be a dict of distribution name -> version (pinned_versions gives one), "
                                  f"got {type(value).__name__}")
    required = required_distributions(STUDENT_PACKAGES)
    versions = {**lock, **{name: v for name, v in pins.items() if v}}  # a pin with extras or markers: the lock's
    missing = sorted(f"{name} (required by {by})" for name, by in required.items() if not versions.get(name))
    if missing:
        raise AutograderError(f"constraints.txt has no plain pin (name==version) of {', '.join(missing)}; the "
                              f"student bundle's {STUDENT_CONSTRAINTS} needs one of each: regenerate constraints.txt "
                              "as its header says")

    def public(version: str) -> str:
        try:
            return Version(version).public  # torch's 2.13.0+cpu is the 2.13.0 pinned
        except InvalidVersion:
            return version

    installed = {name: metadata.version(name) for name in required}
    drifted = sorted(f"{name} {installed[name]} (locked: {versions[name]})" for name in required
                     if public(installed[name]) != public(versions[name]))
    if drifted:
        raise AutograderError(f"installed at another version than the lock's: {', '.join(drifted)}; release reads "
                              "what each package requires from the installed ones, so rebuild the environment with "
                              "`make venv` and release again")
    return ("# The versions the course is graded with of every package requirements.txt installs in turn, read by pip\n"
            "# through requirements.txt's -c line. A package listed here is installed only if something needs it.\n"
            + "".join(f"{name}=={versions[name]}\n" for name in sorted(required)))


def student_pin_files(pins: dict[str, str | None]) -> dict[str, str]:
    """{file name in the bundle: text} of the student's requirements.txt and constraints.txt, from pins (this
    repository's requirements.txt) and the lock; raises AutograderError when either cannot be written."""
    return {"requirements.txt": student_requirements(pins),
            STUDENT_CONSTRAINTS: student_constraints(pins, pinned_versions(LOCK))}


def notebook_title(nb) -> str:
    """The notebook's first heading (its title) as plain text; '' when it has none."""
    return next((text for cell in nb.cells if cell.cell_type == "markdown" for text in headings(cell.source)), "")


def due_date_text(due: dt.datetime | None) -> str:
    """The student README's due-date sentence for a due date in naive UTC (None: no due date recorded)."""
    if due is None:
        return "截止时间以老师的通知为准。"
    utc = due.replace(tzinfo=dt.timezone.utc)
    return (f"截止时间：**{utc.astimezone(BEIJING):%Y-%m-%d %H:%M}（北京时间）**，即 {utc:%Y-%m-%d %H:%M} UTC。"
            "交卷时间按收到的文件时间计；晚交多久会被记录下来，如何处理由老师决定。")


TITLE_POINTS = re.compile(r"本笔记本共\s*(\d+(?:\.\d+)?)\s*分（自动评分\s*(\d+(?:\.\d+)?)\s*分，人工评分\s*(\d+(?:\.\d+)?)\s*分）")
EXERCISE_POINTS = re.compile(r"(练习\s*[\d.]+)（(\d+(?:\.\d+)?)\s*分")  # an exercise heading: 练习 1.2（3 分）…


def counted(cell) -> bool:
    """Whether nbgrader counts the cell's points in the maximum: a graded cell, or a task."""
    meta = nbgrader_meta(cell)
    return bool(meta.get("grade") or meta.get("task"))


def stated_points_drift(nb) -> list[str]:
    """Where a notebook's text states other points than its cells hold: the title's '本笔记本共 N 分（自动评分 A 分，
    人工评分 M 分）' and each exercise heading's '练习 K（P 分' (the graded cells up to the next heading as high)."""
    auto = sum(cell_points(c) for c in nb.cells if nbgrader_meta(c).get("grade") and not nbgrader_meta(c).get("solution"))
    manual = sum(cell_points(c) for c in nb.cells if counted(c)) - auto
    notes = []
    text = "\n".join(c.source for c in nb.cells if c.cell_type == "markdown")
    if (title := TITLE_POINTS.search(text)) and not all(
            math.isclose(float(a), b) for a, b in zip(title.groups(), (auto + manual, auto, manual))):
        notes.append(f"the title says {title[1]} ({title[2]} autograded + {title[3]} by hand), the cells hold "
                     f"{auto + manual:g} ({auto:g} + {manual:g})")
    open_exercise = None  # [label, heading level, stated points, points of its cells]
    exercises = []
    for cell in nb.cells:
        # a task cell may carry its own heading (read before its points count); an answer's headings are the student's
        if cell.cell_type == "markdown" and not nbgrader_meta(cell).get("solution"):
            for level, heading in leveled_headings(cell.source):
                if open_exercise and level <= open_exercise[1]:
                    open_exercise = None
                if found := EXERCISE_POINTS.search(heading):
                    open_exercise = [found[1], level, float(found[2]), 0.0]
                    exercises.append(open_exercise)
        if counted(cell) and open_exercise:
            open_exercise[3] += cell_points(cell)
    notes += [f"{label} says {stated:g}, its cells hold {held:g}" for label, _, stated, held in exercises
              if not math.isclose(stated, held)]
    return notes


def student_readme(notebooks: list[Path], pins: dict[str, str], due: dt.datetime | None = None) -> str:
    """The student's README.md: a row per release notebook (file, title, points), then set-up, work and hand-in
    (with the due date, naive UTC, when one is recorded)."""
    rows = []
    for path in notebooks:
        nb = nbformat.read(path, as_version=4)
        points = sum(cell_points(c) for c in nb.cells if counted(c))
        title = (notebook_title(nb) or path.stem).replace("|", "\\|")  # a | would end the table cell
        rows.append(f"| `{path.name}` | {title} | {points:g} |")
    return STUDENT_README.read_text(encoding="utf-8").format(
        notebooks="\n".join(rows), torch_version=pins["torch"], cell_timeout=f"{DEFAULT_CELL_TIMEOUT:g}",
        notebook_timeout=f"{DEFAULT_NOTEBOOK_TIMEOUT:g}", due_date=due_date_text(due))


VALIDATE_WIDTH = 240  # characters of each line `nbgrader validate` prints of a failed check (nbgrader cuts at 90)


def student_nbgrader_config() -> str:
    """The student's nbgrader_config.py: JupyterLab started in the bundle gives Validate grading's default cell time
    limit (nbgrader's own is 30 s, so a cell of 30 to 60 s failed Validate and passed grading) and drops warnings as
    grading does (a cell that only warned failed Validate); `nbgrader validate` run there prints lines long enough
    for a check's message with its got and expected values (it cut them after 87 characters; the Validate button
    shows them whole)."""
    return ("# Written by `python -m autograder release`. JupyterLab started in this folder reads it: the Validate\n"
            "# button then gives each cell as long as grading does by default; `nbgrader validate` here prints whole\n"
            "# check messages.\n"
            "c = get_config()  # noqa: F821\n"
            f"c.Execute.timeout = {math.ceil(DEFAULT_CELL_TIMEOUT)}\n"
            "c.Execute.interrupt_on_timeout = True\n"
            f"c.Validator.width = {VALIDATE_WIDTH}\n"
            "# Grading drops a cell's stderr output that is a Python warning (nbgrader's IgnorePattern), so a cell that\n"
            "# only warned passes; Validate does the same here. nbgrader's Validator has no setting for its steps, so\n"
            "# the step is added to their default list (nbgrader 0.9 on traitlets 5). Last in this file, and guarded:\n"
            "# should another version store that list elsewhere, Validate keeps the settings above.\n"
            "c.IgnorePattern.enabled = True\n"
            f"c.IgnorePattern.pattern = {WARNING_PATTERN!r}\n"
            "try:\n"
            "    from nbgrader.preprocessors import IgnorePattern\n"
            "    from nbgrader.validator import Validator\n"
            "    _steps = Validator.preprocessors.default_args[0]\n"
            "    if IgnorePattern not in _steps:  # the file is read again for every Validate\n"
            "        _steps.append(IgnorePattern)\n"
            "except Exception:  # noqa: BLE001\n"
            "    pass\n")


def course_files_list(files: dict[str, bytes]) -> str:
    """`sha256sum` lines ('<hex>  <path>') of the bundle's code/ and data/ files (path inside the bundle -> bytes)."""
    shipped = sorted(rel for rel in files if rel.split("/", 1)[0] in BUNDLE_CONTENT)
    return "".join(f"{hashlib.sha256(files[rel]).hexdigest()}  {rel}\n" for rel in shipped)


def write_bundle(course: Course, pins: dict[str, str | None], pin_files: dict[str, str]) -> tuple[Path, Path]:
    """Write the unpacked student bundle and its zip from scratch, with pin_files (student_pin_files(pins)); return
    (bundle folder, zip)."""
    files = {rel: src.read_bytes() for src, rel in _bundle_files(course)}
    files["README.md"] = student_readme(sorted(course.release_dir.glob("*.ipynb")), pins, due_date_of(course)).encode()
    files.update((name, text.encode()) for name, text in pin_files.items())
    files["nbgrader_config.py"] = student_nbgrader_config().encode()
    files[COURSE_FILES_LIST] = course_files_list(files).encode()
    if course.bundle_dir.exists():
        shutil.rmtree(course.bundle_dir)
    course.bundle_zip.parent.mkdir(parents=True, exist_ok=True)
    tmp_zip = course.bundle_zip.with_suffix(".zip.tmp")
    with zipfile.ZipFile(tmp_zip, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        for rel, data in sorted(files.items()):
            dest = course.bundle_dir / rel
            dest.parent.mkdir(parents=True, exist_ok=True)
            dest.write_bytes(data)
            info = zipfile.ZipInfo(f"{ASSIGNMENT}/{rel}", date_time=ZIP_DATE)
            info.external_attr = 0o644 << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            zf.writestr(info, data)
    tmp_zip.replace(course.bundle_zip)
    return course.bundle_dir, course.bundle_zip


def write_formgrader_config(course: Course) -> Path:
    """Write <course root>/nbgrader_config.py so JupyterLab started there opens formgrader on this gradebook.

    The course root and a gradebook inside it are written relative to the file itself, so a
    copied or moved build folder still points at its own course, not at the one it came from.
    Formgrader's Generate, Autograde and Generate Feedback are turned off (autograder/formgrader.py).
    """
    from .formgrader import formgrader_lines

    record_db_url(course.root, course.db_url)  # later commands without $PART_II_DB_URL use this gradebook
    path = course.root / "nbgrader_config.py"
    own_file = sqlite_file(course.db_url)
    own = own_file is not None and (Path.cwd() / own_file).resolve() == (course.root / "gradebook.db").resolve()
    db_line = ("c.CourseDirectory.db_url = URL.create('sqlite', database=os.path.join(_here, 'gradebook.db'))"
               ".render_as_string()\n" if own else f"c.CourseDirectory.db_url = {course.db_url!r}\n")
    path.write_text(
        "# Written by `python -m autograder release`. Start JupyterLab in this folder and\n"
        "# nbgrader's formgrader (Nbgrader > Formgrader) opens this course and gradebook.\n"
        "import os\n\n"
        "from sqlalchemy.engine import URL\n\n"
        "c = get_config()  # noqa: F821\n"
        f"load_subconfig({str(REPO / 'autograder' / 'nbgrader_config.py')!r})  # noqa: F821\n"
        "_here = os.path.dirname(os.path.abspath(__file__))\n"
        "c.CourseDirectory.root = _here\n"
        + db_line
        + formgrader_lines(),
        encoding="utf-8",
    )
    return path


def release(course: Course, due_date=KEEP, check_sources: bool = True, revert_tests: bool = False) -> Release:
    """Check that every model answer passes its own tests, generate the release, check it leaks nothing, write the
    bundle, zip and formgrader config.

    due_date: naive UTC or None (no due date) to record in the gradebook; KEEP leaves it as it is.
    check_sources: False skips running the source notebooks, unless test cells changed since the last release (the
    regrade that queues must not fail); a student's preview (make lab) needs no check.
    revert_tests: release test cells that are an earlier release's (reverted_tests), which is refused otherwise once
    students have handed in.
    """
    from .grade import expected_records, record_release, regrade_after_new_tests

    with course.lock("release"):
        changed, repointed = check_changes_since_last_release(course, revert_tests)
        if leaks := source_leaks(course):  # before nbgrader records anything in the gradebook
            raise leaks_error(course, leaks, refusal_outcome(course))
        pins = pinned_versions()
        pin_files = student_pin_files(pins)  # the same: an environment that is not the lock's stops the release here
        # sources that fail their own checks would ship a broken setup cell to students, or be found only by the
        # first grade, after hand-in; after changed test cells, the regrade queued below would fail, the class
        # ungraded. Recorded once per version of each notebook (cached): grade then reuses the records.
        if check_sources or changed:
            try:  # with the code/ and data/ this release ships (the bundle's are the last release's)
                expected_records(course, [p.stem for p in sorted(course.source_dir.glob("*.ipynb"))], root=REPO)
            except AutograderError as exc:
                kept = ", and the class keeps its grades" if changed else ""
                raise AutograderError(f"{exc}; fix the source and release again (nothing was released{kept})") from None
        # before nbgrader runs: it records the new test cells in the gradebook, and a release that fails or is
        # interrupted after that would leave the next one nothing to compare, and the class graded under old tests
        regrade = regrade_after_new_tests(course) if changed else []
        before = given_cells(course.release_dir)
        try:
            notebooks = generate_release(course)
        finally:  # nbgrader may have recorded the new points before failing: the next release would see no change
            flagged = flag_hand_scores(course, repointed)
        with course.gradebook() as gb:  # what later checkouts are compared with (reverted_tests)
            record_release(course, gb, dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"))
        if due_date is not KEEP:
            set_due_date(course, due_date)
        bundle_dir, zip_path = write_bundle(course, pins, pin_files)
        write_formgrader_config(course)
        guides = write_marking_guides(course, sorted(course.source_dir.glob("*.ipynb")))
        due = due_date_of(course)
        # a new cell counts too: students lack it, and a hidden test that uses what it defines fails for everyone
        given_changed = {nb: labels for nb, cells in given_cells(course.release_dir).items() if nb in before
                         and (labels := [label + ("" if cell_id in before[nb] else ", new")
                                         for cell_id, (source, label) in cells.items()
                                         if cell_id not in before[nb] or before[nb][cell_id][0] != source])}
    stated = {nb.stem: notes for nb in notebooks if (notes := stated_points_drift(nbformat.read(nb, as_version=4)))}
    return Release(notebooks, bundle_dir, zip_path, changed, regrade, due, given_changed, repointed, flagged, stated,
                   guides)


def flag_hand_scores(course: Course, answers: dict[str, list[str]]) -> int:
    """Flag for review every hand score of these answers (notebook -> grade ids): it was given under other points,
    and may now exceed the maximum. Return how many were flagged."""
    if not answers:
        return 0
    flagged = 0
    with course.gradebook() as gb:
        for submission in gb.assignment_submissions(ASSIGNMENT):
            for nb in submission.notebooks:
                for grade in nb.grades:
                    if grade.name in answers.get(nb.name, ()) and grade.manual_score is not None:
                        grade.needs_manual_grade = True
                        flagged += 1
        gb.db.commit()
    return flagged


def given_cells(release_dir: Path) -> dict[str, dict[str, tuple[str, str]]]:
    """{notebook: {cell id: (source, 'cell N (first line)')}} of the released code cells nbgrader does not restore
    at grading (no grade, solution or lock): every student keeps the copy of the release they started from."""
    out = {}
    for path in sorted(release_dir.glob("*.ipynb")):
        nb = nbformat.read(path, as_version=4)
        out[path.stem] = {cell.get("id"): (cell.source, numbered_cell(cell, number))
                          for number, cell in enumerate(nb.cells, 1) if cell.cell_type == "code" and cell.get("id")
                          and not any(nbgrader_meta(cell).get(k) for k in ("grade", "solution", "locked"))}
    return out


def check_changes_since_last_release(course: Course, revert_tests: bool = False
                                      ) -> tuple[dict[str, list[str]], dict[str, list[str]]]:
    """(notebook -> test cells changed, notebook -> hand-graded answers whose points changed) since the last release
    (both {} for a first release); raise, before nbgrader runs (it would fail and delete the release folder), when
    cells were added or removed once students handed in, and when test cells go back to an earlier release's once
    students handed in, unless revert_tests."""
    from .grade import moved_cells_error, record_release, release_drift, reverted_error, reverted_tests

    names = [p.stem for p in sorted(course.source_dir.glob("*.ipynb"))]
    check_grade_ids_unique(course)
    with course.gradebook() as gb:
        if not _has_assignment(gb):
            return {}, {}
        released = sorted(nb.name for nb in gb.find_assignment(ASSIGNMENT).notebooks)
        if released != names and (gb.assignment_submissions(ASSIGNMENT) or course.submitted_students()):
            raise notebooks_changed_error(course, released, names)
        moved, changed, repointed = release_drift(course, gb, names)
        if moved and gb.assignment_submissions(ASSIGNMENT):
            raise moved_cells_error(moved)
        record_release(course, gb, None)  # a course released before the history was kept: the release in use
        handed_in = gb.assignment_submissions(ASSIGNMENT) or course.submitted_students()
        if handed_in and not revert_tests and (reverted := reverted_tests(course, gb, changed)):
            raise reverted_error(course, reverted, "this release would put the earlier tests back and grade every "
                                 "student under them again; release with --revert-tests if that is what you want.")
        return changed, repointed


def check_grade_ids_unique(course: Course) -> None:
    """Raise AutograderError when two source notebooks share a grade id: collect tells a hand-in's notebook by its
    grade ids (a file named otherwise is filed as the notebook whose ids it holds), and formgrader lists them by id."""
    owners: dict[str, list[str]] = {}
    for path in sorted(course.source_dir.glob("*.ipynb")):
        ids = {nbgrader_meta(c).get("grade_id") for c in read_source(path).cells}
        for grade_id in sorted(i for i in ids if i):
            owners.setdefault(grade_id, []).append(path.name)
    if shared := {grade_id: nbs for grade_id, nbs in owners.items() if len(nbs) > 1}:
        listing = "; ".join(f"{grade_id} in {' and '.join(nbs)}" for grade_id, nbs in sorted(shared.items()))
        raise AutograderError(f"grade ids must differ between notebooks, but {listing}: collect tells which notebook a "
                              f"hand-in is by them. Give the cells of one notebook new ids (in {course.source_dir}) and "
                              "release again")


def notebooks_changed_error(course: Course, released: list[str], sources: list[str]) -> AutograderError:
    """The error for notebooks added, removed or renamed in the source folder after students handed in (collected or
    graded: grading a hand-in needs its notebook in the assignment)."""
    gone, new = sorted(set(released) - set(sources)), sorted(set(sources) - set(released))
    what = "; ".join(part for part in (f"no longer in the sources: {', '.join(gone)}" if gone else "",
                                       f"new: {', '.join(new)}" if new else "") if part)
    return AutograderError(
        f"the source notebooks in {course.source_dir} are not the ones students handed in for ({what}). nbgrader cannot "
        "change an assignment's notebooks once submissions exist, and grading needs each released notebook's source: "
        "put them back as they were (a renamed notebook under its old name), or use a new build folder for the new set "
        "(a new course, with a gradebook of its own; hand scores, extensions and the due date of this one stay here)")


def _has_assignment(gb) -> bool:
    """Whether the gradebook knows part-ii (a release was recorded)."""
    from nbgrader.api import MissingEntry

    try:
        gb.find_assignment(ASSIGNMENT)
    except MissingEntry:
        return False
    return True
