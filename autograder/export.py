"""Step 5, export: the gradebook as CSV, one row per student and one row per graded cell.

``grades.csv`` starts with nbgrader's own export columns (assignment, duedate, timestamp,
student_id, last_name, first_name, email, raw_score, late_submission_penalty, score,
max_score; duedate and timestamp in UTC, as nbgrader keeps them), then one score column per
notebook (after that notebook's late penalty, as its feedback page gives it; a penalty takes at most what its
notebook scored, so score is their sum and late_submission_penalty the points taken), the number of cells
still waiting for a human grader, how many seconds after the due date (or the student's extension)
the hand-in came (0: on time or no due date), a status and the reasons behind it (rejected or
missing files, notebooks handed in as released, notebooks that could not be graded, grading errors).
Status is one of graded, awaiting manual grading (graded, but cells wait for a grader in formgrader:
the score can still change), incomplete (graded, with reasons to look at), error, not graded (scores
left empty, not 0), not filed (collect could not write the student's files: scores left empty), no valid
notebook (files handed in, none gradable: the notes name each file and why) and no submission. Manual scores given in formgrader are part of every score.
``grades-per-cell.csv`` has one row per student and graded cell.
Both are UTF-8, as nbgrader writes them and LMS imports read them; with ``bom=True`` they start
with a byte-order mark, which Excel needs to read non-ASCII names right on a double click.
"""

from __future__ import annotations

import csv
import datetime as dt
import json
import re
import sys
from pathlib import Path
from types import SimpleNamespace

import nbformat

from .cells import exercises, graded_cells, is_edited, is_hand_graded, is_test_cell, nbgrader_meta, not_run_for_time
from .collect import MANY_FILES, NOT_FILED, SHOWN_FILES, load_collect_log, moved_files, parse_time, unfiled_text
from .course import ASSIGNMENT, AutograderError, Course, build_option, run_first
from .extensions import NOT_IN_GRADEBOOK, collected_students, extension_ends, nbgrader_interval, sync_now, utc_time
from .grade import GRADES_GONE, STANDING, grades_gone, job_rows, needs_regrade, release_drift_warning

NBGRADER_COLUMNS = ["assignment", "duedate", "timestamp", "student_id", "last_name", "first_name", "email",
                    "raw_score", "late_submission_penalty", "score", "max_score"]
CELL_COLUMNS = ["assignment", "student_id", "notebook", "cell", "kind", "max_score", "auto_score", "manual_score",
                "extra_credit", "score", "needs_manual_grade", "result"]


def _fmt(value) -> str:
    """CSV text of a value: '' for None, floats without trailing noise."""
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


def capped(notes: list[str], kind: str) -> list[str]:
    """notes, or of over MANY_FILES only the first SHOWN_FILES and a count: a spreadsheet cell holds 32,767
    characters, and a handed-in venv gave one of 129,763."""
    if len(notes) <= MANY_FILES:
        return notes
    notes = sorted(notes, key=lambda note: ".ipynb: " not in note)  # a notebook's own trouble is never cut off
    return notes[:SHOWN_FILES] + [f"… and {len(notes) - SHOWN_FILES} more {kind} files (all in reports/collect.json)"]


def student_notes(student: str, collect_log: dict, job: dict | None, stale: bool = False,
                  grade: str = "python -m autograder grade", gone: bool = False) -> tuple[str, list[str]]:
    """(status, reasons) of one student from the collect report and the job table; stale: handed in
    again after the job was graded; grade: the command that grades them (with the course's --build); gone: the
    gradebook lost the grades of their graded job (grade.grades_gone)."""
    collected = collect_log["students"].get(student, {})
    notes = capped([f"rejected {r['file']}: {r['reason']}" for r in collect_log["rejected"] if r.get("student") == student],
                   "rejected")
    notebooks = sorted({*collected.get("notebooks", {}), *collected.get("missing", [])})  # the assignment's
    notes += [f"{file} filed as {nb}.ipynb: it holds that notebook's exercises"
              for file, nb in sorted(moved_files(collected.get("notebooks", {}), notebooks).items())]
    if collected.get("unfiled"):  # the server's trouble (a full disk), not the student's: no score yet
        return NOT_FILED, notes + [f"{unfiled_text(collected['unfiled'], collected.get('error'))}: collect the "
                                   f"download again, then `{grade}`"]
    notes += [f"missing {nb}.ipynb (scored 0)" for nb in collected.get("missing", [])]
    if unanswered := collected.get("unanswered"):
        notes.append(f"handed in as released, no answer filled in (the wrong file?): "
                     f"{', '.join(f'{nb}.ipynb' for nb in unanswered)}")
    if job is None:
        if not collected.get("notebooks"):
            # a student who handed in only files that could not be graded has a row saying which and why (a Jupyter
            # checkpoint alone is a system file, ignored, but handed in)
            notes += capped([f"ignored {r['file']}: {r['reason']}" for r in collect_log.get("ignored", [])
                             if r.get("student") == student], "ignored")
            return ("no valid notebook", notes) if any(n.startswith(("rejected ", "ignored ")) for n in notes) else \
                ("no submission", notes or ["nothing was collected"])
        return "not graded", notes + [f"not graded yet; run `{grade}`"]
    if job["state"] == "error":
        return "error", notes + [f"grading failed: {job['error']}"]
    if job["state"] not in STANDING:
        return "not graded", notes + [f"grading {job['state']}; run `{grade}`"]
    if gone:  # first: said after "handed in again", it would go unsaid for a student who also did that
        return "not graded", notes + [f"{GRADES_GONE}; run `{grade}`"]
    if stale:
        return "not graded", notes + ["handed in again after grading (collect filed newer files); "
                                      f"run `{grade}`"]
    for nb, r in sorted(json.loads(job["notebooks"] or "{}").items()):
        if r["status"] == "error":
            notes.append(f"{nb} could not be graded (scored 0): {r['error']}")
    status = "incomplete" if notes else "graded"
    if job["state"] != "done":  # the scores are the earlier grading's, which stands until the new one is in
        notes.append(f"queued to be graded again (a `grade --force` run stopped or failed before its new grades were "
                     f"in; these are the earlier ones): run `{grade}`")
    return status, notes


def on_time_notebooks(collected: dict, due) -> list[str]:
    """The notebooks of a student's hand-in (collect.json's entry) whose files are dated no later than due (naive UTC:
    the assignment's due date, or the student's extension's end), in name order."""
    if due is None:
        return []
    own = due.replace(tzinfo=dt.timezone.utc)
    return [nb for nb, t in sorted((collected.get("file_times") or {}).items())
            if (when := parse_time(t)) is not None and when <= own]


def after_penalty(notebook) -> float:
    """A graded notebook's score with its own late penalty taken off (nbgrader's SubmittedNotebook), at least 0."""
    return max(0.0, notebook.score - (notebook.late_submission_penalty or 0.0))


def penalty_taken(score: float, penalty: float | None) -> float:
    """The points a notebook's late penalty takes from its score: the penalty, but never more than the score (a hand
    score below the penalty, which was worked out on the autograded points), and exactly 0 without one."""
    return min(penalty or 0.0, max(score, 0.0))


def after_penalties(submission) -> tuple[float, float]:
    """(score, penalty) of a graded submission (nbgrader's SubmittedAssignment): the sum of its notebooks' scores
    after their penalties, and the points those penalties took; so the total is the sum of the notebook scores every
    page and column gives."""
    score = sum(after_penalty(nb) for nb in submission.notebooks)
    # summed notebook by notebook, not as raw - score: the gradebook's total is another float sum (a 1e-16 penalty)
    return score, sum(penalty_taken(nb.score, nb.late_submission_penalty) for nb in submission.notebooks)


def late_by(seconds: float) -> str:
    """'2 d 3 h', '3 h 4 min', '45 min', '30 s': how long after the due date, rounded down to what matters (no minutes
    once it is days, no seconds once it is minutes)."""
    seconds = int(seconds)
    days, rest = divmod(seconds, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    if seconds < 60:
        return f"{secs} s" if secs else "under 1 s"
    parts = [f"{days} d" if days else "", f"{hours} h" if hours else "", f"{minutes} min" if minutes and not days else ""]
    return " ".join(p for p in parts if p)


def submitted_cells(course: Course, student: str) -> dict[str, list]:
    """{notebook: its cells} of the student's collected notebooks, in name order (one that cannot be read is left out:
    collect filed it as a notebook, and a broken one has its own note)."""
    found = {}
    for path in sorted(course.step_dir("submitted", student).glob("*.ipynb")):
        try:
            found[path.stem] = nbformat.read(path, as_version=4).cells
        except Exception:  # noqa: BLE001 - see above
            continue
    return found


def tampered_cells(submitted: dict[str, list], released_tests: dict[str, set[str]]) -> dict[str, tuple[list, list]]:
    """{notebook: (grade ids of test cells the student changed, of those they deleted)} for the notebooks with either.

    submitted: submitted_cells() of the student; released_tests: {notebook: grade ids of its test cells in the
    release}. Grading used the released cells.
    """
    tampered = {}
    for notebook, cells in submitted.items():
        released = released_tests.get(notebook, set())
        carrying: dict[str, list] = {}  # grade id -> the cells that carry it (a copied cell repeats one)
        for c in cells:
            carrying.setdefault(nbgrader_meta(c).get("grade_id"), []).append(c)
        if not carrying.keys() - {None}:
            # no cell of the release at all: a notebook not started from it, which grading refuses and names as such
            # (cells.LOST_CELLS: every course notebook has answer cells); "every test cell deleted" would only point
            # the wrong way
            continue
        # changed: a source or points edit (checksum), a test cell retyped as markdown, a copy with other contents
        edited = sorted(g for g in released & carrying.keys()
                        if any(not is_test_cell(c) or is_edited(c) for c in carrying[g]))
        deleted = sorted(released - carrying.keys())
        if edited or deleted:
            tampered[notebook] = (edited, deleted)
    return tampered


def out_of_time(course: Course, student: str) -> list[str]:
    """Notes for the instructor naming, per graded notebook of the student, the test cells its time budget left unrun."""
    notes = []
    for path in sorted(course.step_dir("autograded", student).glob("*.ipynb")):
        try:
            unrun = not_run_for_time(nbformat.read(path, as_version=4))
        except Exception:  # noqa: BLE001 - a notebook grading could not write whole has its own note
            continue
        if unrun:
            notes.append(f"{path.stem}: used up its time budget; tests not run (failed): {', '.join(unrun)}")
    return notes


def released_answers(course: Course) -> dict[str, dict[str, tuple[str, ...]]]:
    """{notebook: {grade id of an autograded answer cell in the release: the grade ids of its test cells}}: code cells
    marked solution, not graded by hand (grading puts a deleted hand-graded answer back, but not these: the answer may
    sit in a cell of the student's own, which runs and defines it as well)."""
    answers = {}
    for path in sorted(course.release_dir.glob("*.ipynb")):
        nb = nbformat.read(path, as_version=4)
        by_hand = {nbgrader_meta(c).get("grade_id") for c in nb.cells if is_hand_graded(c)}
        answers[path.stem] = {ex.solution_id: ex.test_ids for ex in exercises(nb, path.stem)
                              if ex.solution_id not in by_hand}
    return answers


def deleted_answers(submitted: dict[str, list], released: dict[str, dict[str, tuple[str, ...]]]
                    ) -> dict[str, dict[str, tuple[str, ...]]]:
    """{notebook: {answer grade id: its test ids}} of the released answer cells (released_answers) missing from the
    student's hand-in (submitted_cells), for the notebooks that hold some of them (one holding none is not gradable,
    and says so)."""
    deleted = {}
    for notebook, cells in submitted.items():
        present = {nbgrader_meta(c).get("grade_id") for c in cells}
        answers = released.get(notebook, {})
        if (missing := sorted(set(answers) - present)) and len(missing) < len(answers):
            deleted[notebook] = {answer: answers[answer] for answer in missing}
    return deleted


def failing_without_answer(deleted: dict[str, tuple[str, ...]], failed: set[str]) -> list[str]:
    """The deleted answer cells (deleted_answers of one notebook) whose exercise lost points in a test (failed: grade
    ids of the test cells that did): a student's own cell may define the answer well, and then there is nothing to say."""
    return [answer for answer, tests in deleted.items() if failed & set(tests)]


def released_test_ids(course: Course) -> dict[str, set[str]]:
    """{notebook: grade ids of its autograded test cells in the release}."""
    return {stem: {g for g, test in cells.items() if test} for stem, cells in graded_cells(course.release_dir).items()}


def tampered_tests(submitted: dict[str, list], released_tests: dict[str, set[str]]) -> list[str]:
    """Notes for the instructor naming the test cells a student's hand-in (submitted_cells) changed or deleted."""
    notes = []
    for notebook, (edited, deleted) in tampered_cells(submitted, released_tests).items():
        if edited:
            notes.append(f"{notebook}: test cells changed by the student, graded as released: {', '.join(edited)}")
        if deleted:
            notes.append(f"{notebook}: test cells deleted by the student, put back for grading: {', '.join(deleted)}")
    return notes


def cell_kind(grade, solution_names: set[str]) -> str:
    """'test' for an autograded test cell, 'answer' for a manually graded answer, 'task' for a task."""
    if grade.cell.type == "TaskCell":
        return "task"
    return "answer" if grade.name in solution_names else "test"


def cell_result(grade, kind: str, notebook_status: str = "graded") -> str:
    """passed / failed / partial / needs manual grading from the scores; 'not handed in' or 'not gradable'
    when the notebook was missing or nbgrader could not grade it (its cells then score 0); 'to be reviewed'
    for a hand score that a later regrade flagged again (nbgrader's rule; the score is kept)."""
    if notebook_status == "missing":
        return "not handed in"
    if notebook_status == "error":
        return "not gradable"
    if grade.needs_manual_grade:
        return "to be reviewed" if grade.manual_score is not None else "needs manual grading"
    if grade.score >= grade.max_score:
        return "passed"
    return "failed" if grade.score == 0 else "partial"


def export(course: Course, bom: bool = False) -> list[Path]:
    """Write reports/grades.csv and reports/grades-per-cell.csv (bom: UTF-8 with a byte-order mark); return their paths."""
    notebooks = course.notebook_names()
    if warning := release_drift_warning(course, notebooks):
        print(warning, file=sys.stderr)
    collect_log = load_collect_log(course)
    jobs = job_rows(course.db_url)
    stale = needs_regrade(course, jobs)
    grades_lost = grades_gone(course, jobs)
    from nbgrader.api import MissingEntry

    rows, cells = [], []
    with course.gradebook() as gb:
        try:
            assignment = gb.find_assignment(ASSIGNMENT)
        except MissingEntry:
            raise AutograderError(f"the gradebook has no assignment part-ii; {run_first(course, 'release')}") from None
        solution_names = {nb.name: {c.name for c in nb.solution_cells} for nb in assignment.notebooks}
        sync_now(gb, course.config)  # the due date may have moved in formgrader since the last sync
        extended = extension_ends(gb.db)
        released_tests, answers = released_test_ids(course), released_answers(course)
        students = {s.id: s for s in gb.students}
        # a collected student removed from the gradebook (nbgrader db student remove) keeps a row saying so
        removed = collected_students(course, collect_log) - set(students)
        for student_id in removed:
            students[student_id] = SimpleNamespace(id=student_id, last_name=None, first_name=None, email=None)
        for student in sorted(students.values(), key=lambda s: s.id):
            status, notes = student_notes(student.id, collect_log, jobs.get(student.id), student.id in stale,
                                          f"python -m autograder grade{build_option(course)}", student.id in grades_lost)
            if student.id in removed and student.id not in grades_lost:
                # grade adds back a student with a filed hand-in; one whose files were all rejected it never sees
                notes.append(NOT_IN_GRADEBOOK + ("" if course.step_dir("submitted", student.id).is_dir() else
                                                 f"; `nbgrader db student add {student.id}`, run in {course.root}, "
                                                 "puts them back"))
            handed_in = submitted_cells(course, student.id)
            if tampered := tampered_tests(handed_in, released_tests):
                notes += tampered
                status = "incomplete" if status == "graded" else status
            notes += out_of_time(course, student.id)
            gone = deleted_answers(handed_in, answers)
            row = {"assignment": ASSIGNMENT, "duedate": _fmt(assignment.duedate), "student_id": student.id,
                   "last_name": _fmt(student.last_name), "first_name": _fmt(student.first_name),
                   "email": _fmt(student.email), "max_score": _fmt(assignment.max_score)}
            try:
                submission = gb.find_submission(ASSIGNMENT, student.id)
            except MissingEntry:
                submission = None
            if student.id in extended:
                until = extended[student.id]
                gives = "" if nbgrader_interval(until, assignment.duedate) else \
                    (" (no extra time: no due date)" if assignment.duedate is None else " (no extra time: the due date is later)")
                notes.append(f"extension until {utc_time(until)}{gives}")
            if submission is None or status in ("no submission", "not graded", "error", NOT_FILED):
                # not graded, or its grading failed (an earlier grading's scores would stand for other files): empty,
                # not 0, so that an upload to the LMS cannot pass it off as a score
                zero = "" if status in ("not graded", "error", NOT_FILED) else "0"
                row.update(timestamp="", raw_score=zero, late_submission_penalty=zero, score=zero, needs_manual_grading="",
                           seconds_late="")
                row.update({nb: zero for nb in notebooks})  # as each notebook of a graded student handing in none
            else:
                total, penalty = after_penalties(submission)
                if late := submission.total_seconds_late:  # a due date (or the student's extension) is set and passed
                    notes.append(f"handed in {late_by(late)} after the {'extended ' if submission.extension else ''}due date"
                                 + (f" (late penalty {_fmt(penalty)})" if penalty else " (the score is not reduced for it)"))
                    if on_time := on_time_notebooks(collect_log["students"].get(student.id, {}), submission.duedate):
                        notes.append(f"on time: {', '.join(on_time)} (nbgrader dates a hand-in by its newest file, so "
                                     f"{'it counts' if len(on_time) == 1 else 'they count'} as late too"
                                     + (", and the penalty covers their points)" if penalty else ")"))
                row.update(timestamp=_fmt(submission.timestamp), raw_score=_fmt(submission.score),
                           late_submission_penalty=_fmt(penalty), score=_fmt(total))
                by_name = {nb.name: nb for nb in submission.notebooks}
                # after the notebook's own penalty, as its feedback page gives it; raw_score is their sum before it
                row.update({nb: _fmt(after_penalty(by_name[nb])) if nb in by_name else "" for nb in notebooks})
                for nb, deleted in sorted(gone.items()):
                    failed = {g.name for g in by_name[nb].grades if g.score < g.max_score} if nb in by_name else set()
                    if lost := failing_without_answer(deleted, failed):
                        notes.append(f"{nb}: answer cells deleted by the student, and their tests failed (grading does "
                                     f"not put a deleted answer cell back): {', '.join(lost)}")
                waiting, outside = 0, hand_scores_out_of_range(submission)
                job = jobs.get(student.id) or {}
                statuses = {nb: r.get("status", "graded") for nb, r in json.loads(job.get("notebooks") or "{}").items()}
                for nb in sorted(submission.notebooks, key=lambda n: n.name):
                    for grade in sorted(nb.grades, key=lambda g: g.name):
                        kind = cell_kind(grade, solution_names.get(nb.name, set()))
                        waiting += bool(grade.needs_manual_grade)
                        cells.append({"assignment": ASSIGNMENT, "student_id": student.id, "notebook": nb.name,
                                      "cell": grade.name, "kind": kind, "max_score": _fmt(grade.max_score),
                                      "auto_score": _fmt(grade.auto_score), "manual_score": _fmt(grade.manual_score),
                                      "extra_credit": _fmt(grade.extra_credit), "score": _fmt(grade.score),
                                      "needs_manual_grade": str(bool(grade.needs_manual_grade)).lower(),
                                      "result": cell_result(grade, kind, statuses.get(nb.name, "graded"))})
                row["needs_manual_grading"] = str(waiting)
                if outside:
                    notes.append(f"{HAND_SCORE_OUTSIDE}: {', '.join(outside)} (give points beyond the maximum as "
                                 "extra credit)")
                row["seconds_late"] = _fmt(int(submission.total_seconds_late or 0))
                if waiting and status == "graded":  # the score can still change: not final
                    status = "awaiting manual grading"
            row["status"] = status
            row["notes"] = "; ".join(notes)
            rows.append(row)
    if not rows:
        raise AutograderError(f"the gradebook has no students; {run_first(course, 'collect PATH')}")
    course.reports_dir.mkdir(parents=True, exist_ok=True)
    grades_csv = course.reports_dir / "grades.csv"
    cells_csv = course.reports_dir / "grades-per-cell.csv"
    encoding = "utf-8-sig" if bom else "utf-8"
    _write_csv(grades_csv, NBGRADER_COLUMNS + notebooks + ["needs_manual_grading", "seconds_late", "status", "notes"], rows,
               encoding)
    _write_csv(cells_csv, CELL_COLUMNS, cells, encoding)
    return [grades_csv, cells_csv]


# a text cell starting with one of these is a formula to Excel and LibreOffice (=HYPERLINK(...) sends data away)
FORMULA_START = ("=", "+", "-", "@", "\t", "\r")
# what a spreadsheet reads as a number (one digit run before the point: two overlapping ones backtracked
# quadratically on a student's file name of 60,000 digits)
SHEET_NUMBER = re.compile(r"[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?")


def spreadsheet_text(value):
    """value as a spreadsheet shows it as text: a string that starts like a formula, and is no number, gets a leading
    apostrophe (OWASP's advice for CSV injection: names and notes come from students, through the LMS roster)."""
    if not isinstance(value, str) or not value.startswith(FORMULA_START) or SHEET_NUMBER.fullmatch(value):
        return value
    return "'" + value


def sheet_value(text: str) -> str:
    """A cell of a grades.csv as it was before spreadsheet_text."""
    return text[1:] if text.startswith("'") and text[1:].startswith(FORMULA_START) else text


def _write_csv(path: Path, columns: list[str], rows: list[dict], encoding: str = "utf-8") -> None:
    """Write rows atomically with a header line; text that a spreadsheet would run as a formula is quoted."""
    tmp = path.with_suffix(".csv.tmp")
    with open(tmp, "w", newline="", encoding=encoding) as fh:
        writer = csv.DictWriter(fh, fieldnames=columns)
        writer.writeheader()
        writer.writerows({k: spreadsheet_text(v) for k, v in row.items()} for row in rows)
    tmp.replace(path)


HAND_SCORE_OUTSIDE = "hand score below 0 or above the cell's points"


def hand_scores_out_of_range(submission) -> list[str]:
    """'00-vectors-shapes-and-gradients answer_activation 7 of 2' for each hand score of a gradebook submission outside
    its cell's 0..points: formgrader's page keeps a score within them, its API and scripts do not."""
    return [f"{nb.name} {grade.name} {_fmt(grade.manual_score)} of {_fmt(grade.max_score)}"
            for nb in sorted(submission.notebooks, key=lambda n: n.name)
            for grade in sorted(nb.grades, key=lambda g: g.name)
            if grade.manual_score is not None and not 0 <= grade.manual_score <= grade.max_score]


def hand_scores_outside(path: Path) -> list[str]:
    """student_ids of a grades.csv whose notes name a hand score outside its cell's 0..points."""
    with open(path, newline="", encoding="utf-8-sig") as fh:
        return [sheet_value(r["student_id"]) for r in csv.DictReader(fh) if HAND_SCORE_OUTSIDE in r["notes"]]


def waiting_for_a_grader(path: Path) -> dict[str, int]:
    """student_id -> cells still needing manual grading, from a grades.csv (students with none left out)."""
    with open(path, newline="", encoding="utf-8-sig") as fh:  # -sig: also one written with export --bom
        return {sheet_value(r["student_id"]): int(r["needs_manual_grading"]) for r in csv.DictReader(fh)
                if r["needs_manual_grading"] not in ("", "0")}


def not_graded(path: Path, status: str = "not graded") -> list[str]:
    """student_ids whose status in a grades.csv is status ('not graded', or 'error': grading failed); their scores
    are left empty."""
    with open(path, newline="", encoding="utf-8-sig") as fh:
        return [sheet_value(r["student_id"]) for r in csv.DictReader(fh) if r["status"] == status]
