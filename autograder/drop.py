"""Take a student out of the course, or back in: ``python -m autograder drop --student ID [--undo]``.

A student who left the class, or an id collect filed by mistake (a typo in a folder name, a test
upload), must leave no row in export and no page in feedback, and must not come back with the
next collect or grade. Dropping them moves everything of theirs that the course holds into
``<course>/dropped/<id>/<time>/`` (their hand-ins as filed, the earlier ones collect replaced,
their graded copies and feedback pages, their grading log) beside ``dropped.json``, a record of
what the gradebook and collect's report held for them (names, scores, hand scores and comments,
extension, collect's rows); then it removes them from the gradebook (with their grades and
extension) and from collect's report, where it notes the drop. Nothing is deleted.
A later collect files nothing of a dropped id and says so. ``--undo`` takes the student back:
their hand-in as it was filed, the earlier ones, their names and extension and collect's rows
come back from the newest drop of theirs, and the next ``grade`` grades them again; hand scores
given before the drop are in that drop's dropped.json, and are not put back.
"""

from __future__ import annotations

import datetime as dt
import json
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from sqlalchemy import delete, inspect

from .collect import DROPPED, dropped_students, load_collect_log, write_collect_log
from .course import ASSIGNMENT, AutograderError, Course, build_option, one_transaction
from .extensions import EXTENSIONS, closest_ids, extension_ends

RECORD = "dropped.json"
# the course's folders that hold one student's files in a subfolder named by their id: moved when they drop
STUDENT_FOLDERS = ("submitted", "autograded", "feedback", "replaced")
TIME_FORMAT = "%Y-%m-%dT%H-%M-%S-%fZ"  # a folder name: sorts by time, no colon


@dataclass
class DropReport:
    """What drop (or its undo) did for one student."""

    student: str
    folder: Path  # the drop's folder under <course>/dropped
    moved: list[str] = field(default_factory=list)  # course folders moved (relative to the course root)
    hand_scores: list[str] = field(default_factory=list)  # 'notebook cell: score of max' given before the drop
    undone: bool = False


def now_utc() -> dt.datetime:
    """The current time, UTC (naive, as the gradebook keeps times)."""
    return dt.datetime.now(dt.timezone.utc).replace(tzinfo=None)


def student_paths(course: Course, student: str) -> list[Path]:
    """The course's folders and files of one student (those that exist), each relative to the course root."""
    paths = [Path(step) / student for step in STUDENT_FOLDERS]
    paths.append(course.reports_dir.relative_to(course.root) / "grade-logs" / f"{student}.log")
    return [p for p in paths if (course.root / p).exists() or (course.root / p).is_symlink()]


def gradebook_record(gb, student: str) -> dict | None:
    """The gradebook's row of student (names, e-mail, LMS id), their notebooks' scores and every hand score and
    comment, as JSON; None when the gradebook does not hold them."""
    from nbgrader.api import MissingEntry

    try:
        row = gb.find_student(student)
    except MissingEntry:
        return None
    record = {"first_name": row.first_name, "last_name": row.last_name, "email": row.email,
              "lms_user_id": row.lms_user_id, "notebooks": {}, "hand_scores": [], "comments": []}
    for submission in row.submissions:
        if submission.assignment.name != ASSIGNMENT:
            continue
        record["timestamp"] = submission.timestamp.isoformat() if submission.timestamp else None
        for notebook in submission.notebooks:
            record["notebooks"][notebook.name] = {"score": notebook.score, "max_score": notebook.max_score}
            for grade in notebook.grades:
                if grade.manual_score is not None:
                    record["hand_scores"].append({"notebook": notebook.name, "cell": grade.name,
                                                  "manual_score": grade.manual_score, "max_score": grade.max_score})
            for comment in notebook.comments:
                if comment.manual_comment:
                    record["comments"].append({"notebook": notebook.name, "cell": comment.name,
                                               "manual_comment": comment.manual_comment})
    return record


def drop(course: Course, student: str) -> DropReport:
    """Move student's files to <course>/dropped/<student>/<time>/, record them, and remove them from the gradebook
    and collect's report. AutograderError when the course has no such student, or has dropped them already."""
    with course.lock("drop"):
        log = load_collect_log(course)
        if student in (dropped := dropped_students(log)):
            raise AutograderError(f"{student} was dropped already, on {dropped[student].get('time', '?')} (their files "
                                  f"are in {course.root / dropped[student].get('folder', DROPPED)}); `python -m "
                                  f"autograder drop --undo --student {student}{build_option(course)}` takes them back")
        with course.gradebook() as gb:
            known = {s.id for s in gb.students}
            held = gradebook_record(gb, student)
            until = extension_ends(gb.db).get(student)
        collected = student in log["students"] or course.step_dir("submitted", student).is_dir()
        if held is None and not collected:
            near = closest_ids(student, known | set(log["students"]))
            hint = f"; did you mean {' or '.join(near)}?" if near else ""
            raise AutograderError(f"no student {student} in this course: not in the gradebook, and collect filed no "
                                  f"hand-in of theirs{hint}")
        when = now_utc()
        folder = course.root / DROPPED / student / when.strftime(TIME_FORMAT)  # the same name as collect's key
        folder.mkdir(parents=True)
        record = {"student": student, "dropped": when.isoformat() + "Z", "gradebook": held,
                  "extension_until": until.isoformat() if until else None,
                  "collect": log["students"].get(student),
                  "rejected": [r for r in log["rejected"] if r.get("student") == student],
                  "ignored": [r for r in log["ignored"] if r.get("student") == student]}
        # the record first: whatever stops the drop half-way, what it moved and removed is written down
        (folder / RECORD).write_text(json.dumps(record, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
        report = DropReport(student, folder, hand_scores=[
            f"{h['notebook']} {h['cell']}: {h['manual_score']:g} of {h['max_score']:g}"
            for h in (held or {}).get("hand_scores", [])])
        for rel in student_paths(course, student):
            (folder / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.move(str(course.root / rel), str(folder / rel))
            report.moved.append(str(rel))
        from .grade import JOBS

        with course.gradebook() as gb, one_transaction(gb.db):
            for table in (EXTENSIONS, JOBS):
                if inspect(gb.engine).has_table(table.name):
                    gb.db.execute(delete(table).where(table.c.student_id == student, table.c.assignment == ASSIGNMENT))
        if held is not None:
            with course.gradebook() as gb:
                gb.remove_student(student)
        log["students"].pop(student, None)
        log["rejected"] = [r for r in log["rejected"] if r.get("student") != student]
        log["ignored"] = [r for r in log["ignored"] if r.get("student") != student]
        log[DROPPED] = {**dropped, student: {"time": record["dropped"], "folder": str(folder.relative_to(course.root))}}
        write_collect_log(course, log)
    return report


def undo_drop(course: Course, student: str) -> DropReport:
    """Take a dropped student back from their newest drop: their files, names, extension and collect's rows; the
    next grade grades them again. AutograderError when they are not dropped, or a hand-in of theirs is filed."""
    with course.lock("drop"):
        log = load_collect_log(course)
        dropped = dropped_students(log)
        if student not in dropped:
            near = closest_ids(student, set(dropped))
            hint = f"; did you mean {' or '.join(near)}?" if near else ""
            listed_now = ", ".join(sorted(dropped)) or "none"
            raise AutograderError(f"{student} is not a dropped student (dropped: {listed_now}){hint}")
        folder = course.root / dropped[student].get("folder", "")
        record_path = folder / RECORD
        if not record_path.is_file():
            raise AutograderError(f"{record_path} is missing: the record of {student}'s drop, which --undo reads; put "
                                  "the folder back where it was")
        record = json.loads(record_path.read_text(encoding="utf-8"))
        in_the_way = [str(course.root / step / student) for step in ("submitted", "replaced")
                      if (course.root / step / student).exists()]
        if in_the_way:
            raise AutograderError(f"{student} has files in the course again ({', '.join(in_the_way)}): move them away "
                                  "first, so that the dropped hand-in does not overwrite them")
        report = DropReport(student, folder, undone=True)
        # graded copies and pages stay with the drop: their grades left the gradebook, so grade makes them anew
        for step in ("submitted", "replaced"):
            if (folder / step / student).exists():
                (course.root / step).mkdir(parents=True, exist_ok=True)
                shutil.move(str(folder / step / student), str(course.root / step / student))
                report.moved.append(f"{step}/{student}")
        held = record.get("gradebook") or {}
        with course.gradebook() as gb:
            gb.update_or_create_student(student, **{k: held.get(k) for k in ("first_name", "last_name", "email",
                                                                            "lms_user_id")})
        if until := record.get("extension_until"):
            with course.gradebook() as gb, one_transaction(gb.db):
                EXTENSIONS.create(gb.engine, checkfirst=True)
                # one granted to the id since the drop gives way to the one the student had
                gb.db.execute(delete(EXTENSIONS).where(EXTENSIONS.c.student_id == student,
                                                       EXTENSIONS.c.assignment == ASSIGNMENT))
                gb.db.execute(EXTENSIONS.insert().values(student_id=student, assignment=ASSIGNMENT,
                                                         until=dt.datetime.fromisoformat(until)))
        report.hand_scores = [f"{h['notebook']} {h['cell']}: {h['manual_score']:g} of {h['max_score']:g}"
                              for h in held.get("hand_scores", [])]
        if record.get("collect") is not None:
            log["students"][student] = record["collect"]
        log["rejected"] += record.get("rejected", [])
        log["ignored"] += record.get("ignored", [])
        log[DROPPED] = {k: v for k, v in dropped.items() if k != student}
        write_collect_log(course, log)
    return report


def print_drop(course: Course, report: DropReport) -> None:
    """What drop or its undo did, and what to run next."""
    build = build_option(course)
    if report.undone:
        print(f"{report.student} is back in the course: {', '.join(report.moved) or 'no hand-in of theirs'} put back "
              f"from {report.folder}")
        if report.moved:
            print(f"next: `python -m autograder grade{build}` grades their hand-in again")
        if report.hand_scores:
            print(f"hand scores given before the drop, to give again in formgrader: {'; '.join(report.hand_scores)} "
                  f"(with their comments in {report.folder / RECORD})")
        return
    print(f"dropped {report.student}: out of the gradebook and collect's report, so export and feedback leave them out "
          f"and collect files nothing of theirs")
    print(f"kept in {report.folder}: {', '.join(report.moved) or 'no files'}, and {RECORD} (their names, scores, "
          "hand scores, comments, extension and collect's rows)")
    if report.hand_scores:
        print(f"hand scores that left the gradebook with them: {'; '.join(report.hand_scores)}")
    print(f"undo: `python -m autograder drop --undo --student {report.student}{build}`")
