"""Take a student out of the course, or back in: ``python -m autograder drop --student ID [--undo]``.

A student who left the class, or an id collect filed by mistake (a typo in a folder name, a test
upload), must leave no row in export and no page in feedback, and must not come back with the
next collect or grade. Dropping them moves the course's folders of theirs into
``<course>/dropped/<id>/<time>/`` (their hand-ins as filed, the earlier ones collect replaced,
their graded copies and feedback pages, their grading log) beside ``dropped.json``, a record of
what the gradebook and collect's report held for them (names, scores, hand scores and comments,
extension, collect's rows, which name the copies of their rejected files that stay in
``rejected/``); then it removes them from the gradebook (with their grades and extension) and
from collect's report, where it notes the drop. Nothing is deleted. The drop is noted first
(state "dropping"), so one cut short (Ctrl-C, a full disk) is finished by running it again.
A later collect files nothing of a dropped id and says so, and grade grades none. ``--undo``
takes the student back: their hand-in as it was filed, the earlier ones, their names and
extension (unless one was granted since) and collect's rows, and the next ``grade`` grades them
again; hand scores given before the drop are in dropped.json, and are not put back. An undo is
noted first too (state "undoing"), and one cut short is finished by running it again.
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
    # (the extension the student has now, the one before the drop) when undo kept one granted since the drop
    kept_extension: tuple[dt.datetime, dt.datetime] | None = None


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


DROPPING, UNDOING = "dropping", "undoing"  # collect.json's state of a drop or undo that has not finished


def drop(course: Course, student: str) -> DropReport:
    """Move student's files to <course>/dropped/<student>/<time>/, record them, and remove them from the gradebook
    and collect's report. AutograderError when the course has no such student, or has dropped them already.
    The drop is noted in collect's report (state DROPPING) before anything moves, so a drop cut short is finished by
    running it again, into the same folder."""
    with course.lock("drop"):
        log = load_collect_log(course)
        dropped = dropped_students(log)
        entry = dropped.get(student)
        if entry is not None and entry.get("state") != DROPPING:
            undo = f"`python -m autograder drop --undo --student {student}{build_option(course)}`"
            if entry.get("state") == UNDOING:
                raise AutograderError(f"taking {student} back was cut short; run {undo} again to finish it")
            raise AutograderError(f"{student} was dropped already, on {entry.get('time', '?')} (their files are in "
                                  f"{course.root / entry.get('folder', DROPPED)}); {undo} takes them back")
        if entry is None:
            with course.gradebook() as gb:
                known = {s.id for s in gb.students}
                held = gradebook_record(gb, student)
                until = extension_ends(gb.db).get(student)
            collected = student in log["students"] or course.step_dir("submitted", student).is_dir()
            if held is None and not collected:
                near = closest_ids(student, known | set(log["students"]))
                hint = f"; did you mean {' or '.join(near)}?" if near else ""
                raise AutograderError(f"no student {student} in this course: not in the gradebook, and collect filed "
                                      f"no hand-in of theirs{hint}")
            when = now_utc()
            folder = course.root / DROPPED / student / when.strftime(TIME_FORMAT)
            record = {"student": student, "dropped": when.isoformat() + "Z", "gradebook": held,
                      "extension_until": until.isoformat() if until else None,
                      "collect": log["students"].get(student),
                      "rejected": [r for r in log["rejected"] if r.get("student") == student],
                      "ignored": [r for r in log["ignored"] if r.get("student") == student]}
            folder.mkdir(parents=True)
            # the record, then the state in collect's report, before anything moves: whatever cuts the drop short,
            # what it moves and removes is written down, and running it again finishes it into this folder
            (folder / RECORD).write_text(json.dumps(record, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
            entry = {"time": record["dropped"], "folder": str(folder.relative_to(course.root)), "state": DROPPING}
            log[DROPPED] = {**dropped, student: entry}
            write_collect_log(course, log)
        folder = course.root / entry["folder"]
        record = json.loads((folder / RECORD).read_text(encoding="utf-8"))
        report = DropReport(student, folder, hand_scores=hand_score_lines(record))
        for rel in student_paths(course, student):
            if (folder / rel).exists():  # a second hand-in filed under this id while the drop was cut short
                raise AutograderError(f"{folder / rel} exists already, and so does {course.root / rel}: move one of "
                                      "them away, then run the drop again")
            (folder / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.move(str(course.root / rel), str(folder / rel))
            report.moved.append(str(rel))
        report.moved += [str(p.relative_to(folder)) for p in moved_before(folder) if str(p.relative_to(folder))
                         not in report.moved]
        from .grade import JOBS

        with course.gradebook() as gb, one_transaction(gb.db):
            for table in (EXTENSIONS, JOBS):
                if inspect(gb.engine).has_table(table.name):
                    gb.db.execute(delete(table).where(table.c.student_id == student, table.c.assignment == ASSIGNMENT))
        with course.gradebook() as gb:
            if student in {s.id for s in gb.students}:
                gb.remove_student(student)
        log["students"].pop(student, None)
        log["rejected"] = [r for r in log["rejected"] if r.get("student") != student]
        log["ignored"] = [r for r in log["ignored"] if r.get("student") != student]
        log[DROPPED] = {**dropped_students(log), student: {k: v for k, v in entry.items() if k != "state"}}
        write_collect_log(course, log)
    return report


def moved_before(folder: Path) -> list[Path]:
    """The student's folders and files a drop moved into folder (student_paths' places, relative to the course)."""
    found = [folder / step / child.name for step in STUDENT_FOLDERS if (folder / step).is_dir()
             for child in (folder / step).iterdir()]
    return found + sorted((folder / "reports" / "grade-logs").glob("*.log"))


def hand_score_lines(record: dict) -> list[str]:
    """'notebook cell: score of max' for each hand score a drop's record holds."""
    return [f"{h['notebook']} {h['cell']}: {h['manual_score']:g} of {h['max_score']:g}"
            for h in (record.get("gradebook") or {}).get("hand_scores", [])]


def undo_drop(course: Course, student: str) -> DropReport:
    """Take a dropped student back from their drop: their files, names, extension and collect's rows; the next grade
    grades them again. AutograderError when they are not dropped, or a hand-in of theirs is in the way.
    The undo is noted in collect's report (state UNDOING) before anything moves, so one cut short is finished by
    running it again."""
    with course.lock("drop"):
        log = load_collect_log(course)
        dropped = dropped_students(log)
        entry = dropped.get(student)
        if entry is None:
            near = closest_ids(student, set(dropped))
            hint = f"; did you mean {' or '.join(near)}?" if near else ""
            listed_now = ", ".join(sorted(dropped)) or "none"
            raise AutograderError(f"{student} is not a dropped student (dropped: {listed_now}){hint}")
        if entry.get("state") == DROPPING:
            raise AutograderError(f"dropping {student} was cut short; run `python -m autograder drop --student "
                                  f"{student}{build_option(course)}` again to finish it, then undo it")
        folder = course.root / entry.get("folder", "")
        record_path = folder / RECORD
        if not record_path.is_file():
            raise AutograderError(f"{record_path} is missing: the record of {student}'s drop, which --undo reads; put "
                                  "the folder back where it was")
        record = json.loads(record_path.read_text(encoding="utf-8"))
        if entry.get("state") != UNDOING:
            in_the_way = [str(course.root / step / student) for step in ("submitted", "replaced")
                          if (course.root / step / student).exists() and (folder / step / student).exists()]
            if in_the_way:
                raise AutograderError(f"{student} has files in the course again ({', '.join(in_the_way)}): move them "
                                      "away first, so that the dropped hand-in does not overwrite them")
            log[DROPPED] = {**dropped, student: {**entry, "state": UNDOING}}
            write_collect_log(course, log)
        report = DropReport(student, folder, undone=True, hand_scores=hand_score_lines(record))
        # graded copies and pages stay with the drop: their grades left the gradebook, so grade makes them anew
        for step in ("submitted", "replaced"):
            if (folder / step / student).exists() and not (course.root / step / student).exists():
                (course.root / step).mkdir(parents=True, exist_ok=True)
                shutil.move(str(folder / step / student), str(course.root / step / student))
            if (course.root / step / student).exists():
                report.moved.append(f"{step}/{student}")
        held = record.get("gradebook") or {}
        with course.gradebook() as gb:
            gb.update_or_create_student(student, **{k: held.get(k) for k in ("first_name", "last_name", "email",
                                                                            "lms_user_id")})
        if until := record.get("extension_until"):
            with course.gradebook() as gb, one_transaction(gb.db):
                EXTENSIONS.create(gb.engine, checkfirst=True)
                now = extension_ends(gb.db).get(student)
                if now is None:  # one granted to the id since the drop stays (extend named it then)
                    gb.db.execute(EXTENSIONS.insert().values(student_id=student, assignment=ASSIGNMENT,
                                                             until=dt.datetime.fromisoformat(until)))
                elif now != dt.datetime.fromisoformat(until):
                    report.kept_extension = (now, dt.datetime.fromisoformat(until))
        if record.get("collect") is not None:
            log["students"][student] = record["collect"]
        ours = [json.dumps(r, sort_keys=True) for r in log["rejected"] + log["ignored"]]
        log["rejected"] += [r for r in record.get("rejected", []) if json.dumps(r, sort_keys=True) not in ours]
        log["ignored"] += [r for r in record.get("ignored", []) if json.dumps(r, sort_keys=True) not in ours]
        log[DROPPED] = {k: v for k, v in dropped_students(log).items() if k != student}
        write_collect_log(course, log)
    return report


def print_drop(course: Course, report: DropReport) -> None:
    """What drop or its undo did, and what to run next."""
    from .extensions import utc_time

    build = build_option(course)
    if report.undone:
        print(f"{report.student} is back in the course: {', '.join(report.moved) or 'no hand-in of theirs'} put back "
              f"from {report.folder}")
        if report.kept_extension:
            now, before = report.kept_extension
            print(f"kept the extension granted since the drop (until {utc_time(now)}), not the one they had before it "
                  f"(until {utc_time(before)})")
        if report.hand_scores:
            print(f"hand scores given before the drop, to give again in formgrader: {'; '.join(report.hand_scores)} "
                  f"(with their comments in {report.folder / RECORD})")
        print(f"next: `python -m autograder grade{build}` grades their hand-in again" if report.moved else
              f"next: `python -m autograder export{build}` lists them again")
        return
    print(f"dropped {report.student}: out of the gradebook and collect's report, so export and feedback leave them out "
          f"and collect files nothing of theirs")
    print(f"kept in {report.folder}: {', '.join(report.moved) or 'no files'}, and {RECORD} (their names, scores, "
          "hand scores, comments, extension and collect's rows)")
    if report.hand_scores:
        print(f"hand scores that left the gradebook with them: {'; '.join(report.hand_scores)}")
    print(f"undo: `python -m autograder drop --undo --student {report.student}{build}`")
    print(f"next: `python -m autograder export{build}` writes grades.csv without them (the one written before still "
          "lists them)")
