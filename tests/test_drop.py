"""`python -m autograder drop`: a student taken out of the course leaves export, feedback and later collects, keeps
every file, and `--undo` takes them back (a TA's mid-term walkthrough: `nbgrader db student remove` left export and
feedback exiting 1 with "run grade", and grade put the student back)."""

from __future__ import annotations

import csv
import datetime as dt
import json
import shutil

import pytest

from autograder.cli import main
from autograder.course import ASSIGNMENT, Course
from autograder.release import set_due_date
from shared_builds import build_env, released_copy

DUE = dt.datetime(2026, 3, 1, 15, 59)  # naive UTC, as the gradebook keeps it
NOTEBOOK = "02-shapes-and-loss"


@pytest.fixture()
def course(tmp_path):
    """The released course copied, with the due date DUE."""
    build = released_copy(tmp_path)
    with build_env(build):
        course = Course.load(build)
        set_due_date(course, DUE)
        yield course


def class_download(course: Course, folder, students: list[str]):
    """A class download: a folder per student holding a copy of the released notebook NOTEBOOK."""
    for sid in students:
        (folder / sid).mkdir(parents=True)
        shutil.copyfile(course.release_dir / f"{NOTEBOOK}.ipynb", folder / sid / f"{NOTEBOOK}.ipynb")
    return folder


def grades_csv_students(course: Course) -> list[str]:
    """The student ids of export's grades.csv."""
    with open(course.reports_dir / "grades.csv", encoding="utf-8") as fh:
        return [row["student_id"] for row in csv.DictReader(fh)]


def test_a_dropped_student_leaves_export_and_collect_keeps_every_file_and_undo_takes_them_back(course, tmp_path,
                                                                                                capsys):
    download = class_download(course, tmp_path / "download", ["amy", "s014", "s104"])  # s014: a typo of s104
    assert main(["collect", str(download)]) == 0
    assert main(["extend", "--student", "s014", "--until", "2026-03-03 23:59 UTC"]) == 0
    with course.gradebook() as gb:  # a hand score given before anyone saw the typo (grading writes these rows)
        with gb.db.no_autoflush:
            gb.add_submission(ASSIGNMENT, "s014", timestamp=DUE)
        grade = gb.find_grade("answer_ppl_evidence", NOTEBOOK, ASSIGNMENT, "s014")
        grade.manual_score = 1.5
        gb.db.commit()
    handed_in = (course.step_dir("submitted", "s014") / f"{NOTEBOOK}.ipynb").read_bytes()
    capsys.readouterr()

    assert main(["drop", "--student", "s014"]) == 0
    out = capsys.readouterr().out
    assert "dropped s014: out of the gradebook and collect's report" in out, out
    assert f"hand scores that left the gradebook with them: {NOTEBOOK} answer_ppl_evidence: 1.5 of 2" in out, out
    [folder] = list((course.root / "dropped" / "s014").iterdir())
    assert (folder / "submitted" / "s014" / ASSIGNMENT / f"{NOTEBOOK}.ipynb").read_bytes() == handed_in
    assert not course.step_dir("submitted", "s014").parent.exists()
    record = json.loads((folder / "dropped.json").read_text(encoding="utf-8"))
    assert record["extension_until"] == "2026-03-03T23:59:00", record
    assert record["gradebook"]["hand_scores"] == [{"notebook": NOTEBOOK, "cell": "answer_ppl_evidence",
                                                   "manual_score": 1.5, "max_score": 2.0}], record
    assert list(record["collect"]["notebooks"]) == [NOTEBOOK], record  # collect's row, which --undo puts back
    with course.gradebook() as gb:
        assert {s.id for s in gb.students} == {"amy", "s104"}
    log = json.loads((course.reports_dir / "collect.json").read_text(encoding="utf-8"))
    assert "s014" not in log["students"] and log["dropped"]["s014"]["folder"] == str(folder.relative_to(course.root))
    assert main(["extend"]) == 0 and "s014" not in capsys.readouterr().out
    main(["export"])  # 1: nobody is graded yet
    assert grades_csv_students(course) == ["amy", "s104"]

    # the next collect of the same download files nothing of theirs, and says so
    capsys.readouterr()
    assert main(["collect", str(download)]) == 0
    out = capsys.readouterr().out
    assert "not filed, dropped from the course (1): s014 (1 file)" in out, out
    assert not course.step_dir("submitted", "s014").exists()
    with course.gradebook() as gb:
        assert "s014" not in {s.id for s in gb.students}
    assert main(["collect", str(download / "s014"), "--student", "s014"]) == 2
    assert "--student s014: s014 was dropped from the course on " in capsys.readouterr().err

    # refusals: dropped already, and an id the course never had
    assert main(["drop", "--student", "s014"]) == 2
    assert "s014 was dropped already" in capsys.readouterr().err
    assert main(["drop", "--student", "amyy"]) == 2
    err = capsys.readouterr().err
    assert "no student amyy in this course: not in the gradebook, and collect filed no hand-in of theirs; did you " \
           "mean amy?" in err, err

    assert main(["drop", "--undo", "--student", "s014"]) == 0
    out = capsys.readouterr().out
    assert "s014 is back in the course" in out and "grades their hand-in again" in out, out
    assert f"to give again in formgrader: {NOTEBOOK} answer_ppl_evidence: 1.5 of 2" in out, out
    assert (course.step_dir("submitted", "s014") / f"{NOTEBOOK}.ipynb").read_bytes() == handed_in
    with course.gradebook() as gb:
        assert {s.id for s in gb.students} == {"amy", "s014", "s104"}
    log = json.loads((course.reports_dir / "collect.json").read_text(encoding="utf-8"))
    assert "s014" in log["students"] and "s014" not in log["dropped"], log
    assert main(["extend"]) == 0 and "s014: until 2026-03-03 23:59 UTC" in capsys.readouterr().out
    main(["export"])
    assert grades_csv_students(course) == ["amy", "s014", "s104"]
    assert main(["drop", "--undo", "--student", "s014"]) == 2
    assert "s014 is not a dropped student (dropped: none)" in capsys.readouterr().err


def test_a_download_of_dropped_students_only_is_refused(course, tmp_path, capsys):
    download = class_download(course, tmp_path / "download", ["amy"])
    assert main(["collect", str(download)]) == 0
    assert main(["drop", "--student", "amy"]) == 0
    capsys.readouterr()
    assert main(["collect", str(download)]) == 2
    err = capsys.readouterr().err
    assert "nothing was collected: the download holds only files of students dropped from the course (amy)" in err, err
