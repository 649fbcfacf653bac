"""Per-student extensions: a later due date for one student, as ``python -m autograder extend``.

nbgrader keeps an extension on the student's submission row (``SubmittedAssignment.extension``,
an interval added to the assignment's due date), and that row exists only once the student
has been graded. Instructors grant extensions before the hand-in, though, and think of them
as a date ("until Thursday 23:59"), so the extension itself lives in the table
``autograder_extension`` of the gradebook as an end time (naive UTC, like nbgrader's times).
nbgrader's column is derived from it wherever the two can disagree: when an extension is
granted or removed, when grading writes a submission row, and when ``release --due-date``
moves the due date (the student's own date stays where it was granted). export, feedback,
formgrader and nbgrader's late penalty all read lateness from nbgrader's column.
"""

from __future__ import annotations

import datetime as dt
import difflib
from dataclasses import dataclass

from sqlalchemy import Column, DateTime, MetaData, String, Table, inspect, select

from .collect import id_key
from .course import ASSIGNMENT, AutograderError, Course, build_option, one_transaction, run_first

EXTENSIONS = Table(
    "autograder_extension", MetaData(),
    Column("student_id", String(128), primary_key=True),
    Column("assignment", String(128), primary_key=True),
    Column("until", DateTime, nullable=False),  # the student's own due date, naive UTC
)


@dataclass(frozen=True)
class Extension:
    """One student's extension as the course has it now."""

    student: str
    until: dt.datetime  # naive UTC
    due_date: dt.datetime | None  # the assignment's due date (naive UTC), None when it has none
    known: bool  # the student is in the gradebook (collect has filed a hand-in of theirs)
    suggestions: tuple[str, ...] = ()  # when not known: students of the gradebook whose ids differ only in case, else
    # (no hand-in of theirs collected either) those whose ids are closest to it: a typo
    collected: bool = False  # when not known: collect saw them, and they were removed from the gradebook since

    @property
    def interval(self) -> dt.timedelta | None:
        """What nbgrader adds to the due date for this student; None when the extension gives no extra time."""
        return nbgrader_interval(self.until, self.due_date)


def utc_time(moment: dt.datetime) -> str:
    """'2026-03-01 15:59 UTC' for a naive UTC time; with ':SS' when its seconds are not zero."""
    seconds = f":{moment:%S}" if moment.second else ""
    return f"{moment:%Y-%m-%d %H:%M}{seconds} UTC"


def extension_ends(session) -> dict[str, dt.datetime]:
    """{student: end of their extension (naive UTC)} from the gradebook session (empty before the first one)."""
    if not inspect(session.get_bind()).has_table(EXTENSIONS.name):
        return {}
    rows = session.execute(select(EXTENSIONS.c.student_id, EXTENSIONS.c.until).where(EXTENSIONS.c.assignment == ASSIGNMENT))
    return {student: until for student, until in rows}


def nbgrader_interval(until: dt.datetime | None, due_date: dt.datetime | None) -> dt.timedelta | None:
    """nbgrader's extension interval for an end time: None without an end, a due date, or extra time."""
    if until is None or due_date is None or until <= due_date:
        return None
    return until - due_date


def sync_submission(gb, submission, ends: dict[str, dt.datetime] | None = None) -> None:
    """Set one nbgrader submission row's extension from the extension table (in the caller's transaction)."""
    ends = extension_ends(gb.db) if ends is None else ends
    submission.extension = nbgrader_interval(ends.get(submission.student.id), submission.assignment.duedate)


def adopt_native_extensions(gb) -> None:
    """Record in the extension table each nbgrader extension it lacks (granted with nbgrader's own
    grant_extension), at the end time nbgrader gives it now, so that a sync keeps it (caller commits)."""
    due = gb.find_assignment(ASSIGNMENT).duedate
    extended = [s for s in gb.assignment_submissions(ASSIGNMENT) if s.extension is not None]
    if not extended or due is None:
        return
    EXTENSIONS.create(gb.engine, checkfirst=True)
    ends = extension_ends(gb.db)
    for submission in extended:
        if submission.student.id not in ends:
            gb.db.execute(EXTENSIONS.insert().values(student_id=submission.student.id, assignment=ASSIGNMENT,
                                                     until=due + submission.extension))


def sync_all(gb, config) -> None:
    """Set every submission row's extension from the extension table, and each late penalty for the lateness that
    gives (caller commits); config: the course's nbgrader Config (its late-submission plugin).

    Run wherever the due date may have moved since the last sync: release --due-date, and export and
    feedback, which read lateness (formgrader's Edit assignment and `nbgrader db assignment` change the
    due date behind our back; nbgrader's total_seconds_late fails on an extension without a due date).
    """
    ends = extension_ends(gb.db)
    for submission in gb.assignment_submissions(ASSIGNMENT):
        if submission.extension is not None or submission.student.id in ends:
            sync_submission(gb, submission, ends)
    reassess_late_penalties(gb, config)


def late_penalty_step(config):
    """nbgrader's AssignLatePenalties with the course's configured plugin, as autograde runs it."""
    from nbgrader.preprocessors import AssignLatePenalties

    step = AssignLatePenalties(config=config)
    step.init_plugin()
    return step


def reassess_late_penalties(gb, config) -> None:
    """Set each graded notebook's late penalty as autograde would set it now (caller commits).

    Autograde sets it once, from the lateness when it ran; an extension granted or removed, or a due date moved,
    afterwards left it standing: export took 71 points off a student whose extension made them not late (found
    by review). As nbgrader's AssignLatePenalties: none unless the hand-in is late, else the plugin's penalty on
    the notebook's autograded points (its score when autograde ran), within [0, those points]. With nbgrader's
    default plugin (penalty_method "none") every penalty stays none.
    """
    step = late_penalty_step(config)
    for submission in gb.assignment_submissions(ASSIGNMENT):
        late = submission.total_seconds_late
        for notebook in submission.notebooks:
            penalty = None
            if late > 0:
                points = sum(grade.auto_score or 0.0 for grade in notebook.grades)
                given = step.plugin_inst.late_submission_penalty(submission.student.id, points, late)
                penalty = None if given is None else min(max(float(given), 0.0), points)
            if notebook.late_submission_penalty != penalty:
                notebook.late_submission_penalty = penalty


def sync_now(gb, config) -> None:
    """Bring nbgrader's extension and late-penalty columns in line with the extension table and the due date now
    (one commit); config: the course's nbgrader Config."""
    with one_transaction(gb.db):
        adopt_native_extensions(gb)
        sync_all(gb, config)


def synced(course: Course) -> None:
    """sync_now on the course's gradebook."""
    with course.gradebook() as gb:
        sync_now(gb, course.config)


def grant(course: Course, students: list[str], until: dt.datetime | None) -> list[Extension]:
    """Give students their own due date `until` (naive UTC), or remove theirs (None); return the extensions now.

    An extension needs a due date to extend and must end after it: AutograderError otherwise.
    """
    from nbgrader.api import MissingEntry

    if not students:
        raise AutograderError("name at least one student to extend (--student ID)")
    with course.gradebook() as gb:
        due = released_due_date(course, gb)
        if until is not None and due is None:
            raise AutograderError("the assignment has no due date to extend: record one first with "
                                  f"`python -m autograder release --due-date WHEN{build_option(course)}`")
        if until is not None and until <= due:
            raise AutograderError(f"an extension must end after the due date ({utc_time(due)}); got {utc_time(until)}")
        if until is not None and (clashes := case_clashes(students, {s.id for s in gb.students})):
            raise AutograderError(f"nothing was extended: {'; '.join(clashes)}. Ids are case-sensitive, so the "
                                  "extension would reach nobody: give the gradebook's spelling")
        EXTENSIONS.create(gb.engine, checkfirst=True)
        with one_transaction(gb.db):
            for student in students:
                gb.db.execute(EXTENSIONS.delete().where(EXTENSIONS.c.student_id == student,
                                                        EXTENSIONS.c.assignment == ASSIGNMENT))
                if until is not None:
                    gb.db.execute(EXTENSIONS.insert().values(student_id=student, assignment=ASSIGNMENT, until=until))
                try:
                    sync_submission(gb, gb.find_submission(ASSIGNMENT, student))
                except MissingEntry:
                    pass  # not graded yet: grading writes the row and its extension
    return extensions(course)  # its sync sets the late penalties for the new lateness


def ids_by_key(known: set[str]) -> dict[str, list[str]]:
    """{id_key: the ids of known spelt that way in any case or Unicode form, sorted}."""
    by_key: dict[str, list[str]] = {}
    for sid in sorted(known):
        by_key.setdefault(id_key(sid), []).append(sid)
    return by_key


def case_clashes(students: list[str], known: set[str]) -> list[str]:
    """'S102 is the gradebook's s102 in another case' for each of students that the gradebook (known) lacks but holds
    in another case or Unicode spelling."""
    by_key = ids_by_key(known)
    return [f"{sid} is the gradebook's {' or '.join(by_key[id_key(sid)])} in another case" for sid in students
            if sid not in known and id_key(sid) in by_key]


def released_due_date(course: Course, gb):
    """The assignment's due date in course's gradebook gb (naive UTC, or None); AutograderError when the course has
    no release yet."""
    from nbgrader.api import MissingEntry

    try:
        return gb.find_assignment(ASSIGNMENT).duedate
    except MissingEntry:
        raise AutograderError(f"no release in this course yet: {run_first(course, 'release')}") from None


def extensions(course: Course) -> list[Extension]:
    """Every extension of the course (nbgrader's own ones too), by student id."""
    with course.gradebook() as gb:
        due = released_due_date(course, gb)
        sync_now(gb, course.config)
        known = {s.id for s in gb.students}
        by_case = ids_by_key(known)
        seen = collected_students(course)
        return [Extension(student, until, due, student in known,
                          () if student in known else tuple(by_case.get(id_key(student), ()))
                          or (() if student in seen else closest_ids(student, known)), student in seen)
                for student, until in sorted(extension_ends(gb.db).items())]


def closest_ids(student: str, known: set[str]) -> tuple[str, ...]:
    """The gradebook's ids that an id it lacks is most likely a typo of ('2004' -> '20004'), at most three."""
    return tuple(difflib.get_close_matches(student, sorted(known), n=3, cutoff=0.8))


def gradebook_students(course: Course) -> set[str]:
    """The ids of the students in course's gradebook (each collected at least once)."""
    with course.gradebook() as gb:
        return {s.id for s in gb.students}


def collected_students(course: Course, collect_log: dict | None = None) -> set[str]:
    """The ids collect has seen (a hand-in filed, or only files it rejected): each was added to the gradebook then
    (collect_log: the collect report when the caller has read it already)."""
    from .collect import load_collect_log

    log = load_collect_log(course) if collect_log is None else collect_log
    return set(course.submitted_students()) | set(log["students"])


NOT_IN_GRADEBOOK = "collected, but not in the gradebook (removed from it, e.g. by `nbgrader db student remove`)"


def describe(ext: Extension, given: str = "", build: str = "") -> str:
    """One line on an extension for the terminal, e.g. '10001: until 2026-03-04 15:59 UTC (3 d after the due date)'
    (given: release.as_given's note on the time as the instructor wrote it, put after the UTC time; build: the
    ' --build DIR' a suggested command needs, see course.build_option)."""
    from .export import late_by

    line = f"{ext.student}: until {utc_time(ext.until)}{given}"
    if ext.due_date is None:
        line += " (the assignment has no due date now, so it gives no extra time)"
    elif ext.interval is None:
        line += f" (no later than the due date, {utc_time(ext.due_date)}, so it gives no extra time)"
    else:
        line += f" ({late_by(ext.interval.total_seconds())} after the due date)"
    in_case = [s for s in ext.suggestions if id_key(s) == id_key(ext.student)]
    if len(in_case) == 1:
        line += (f"; not in the gradebook, but {ext.suggestions[0]} is: ids are case-sensitive, did you mean "
                 f"{ext.suggestions[0]}?")
    elif ext.suggestions and not in_case:
        line += (f"; not in the gradebook yet (no hand-in of theirs collected): did you mean "
                 f"{' or '.join(ext.suggestions)}?")
    elif ext.suggestions:
        line += (f"; not in the gradebook, but {' and '.join(ext.suggestions)} are: ids are case-sensitive, did you mean "
                 "one of them?")
    elif not ext.known and ext.collected:
        line += f"; {NOT_IN_GRADEBOOK}"
    elif not ext.known:
        line += "; not in the gradebook yet (no hand-in of theirs collected: is the id right?)"
    if not ext.known and not ext.collected:
        line += f" (`python -m autograder extend --student {ext.student} --until none{build}` removes it)"
    return line
