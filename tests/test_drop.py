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


def interrupt_call(monkeypatch, owner, name: str, at: int = 1):
    """Make owner.name raise KeyboardInterrupt on its at-th call (as Ctrl-C would there); the other calls run."""
    real, calls = getattr(owner, name), []

    def cut(*args, **kwargs):
        calls.append(1)
        if len(calls) == at:
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    monkeypatch.setattr(owner, name, cut)


def cut_short(monkeypatch, cut: tuple, step, *args) -> None:
    """Run step(*args) with cut (owner, name, at: interrupt_call's) raising KeyboardInterrupt inside it."""
    with monkeypatch.context() as patch:
        interrupt_call(patch, *cut)
        with pytest.raises(KeyboardInterrupt):
            step(*args)


@pytest.mark.parametrize("where", ["moving the files", "the gradebook", "collect's report"])
def test_a_drop_or_undo_cut_short_is_finished_by_running_it_again(course, tmp_path, capsys, monkeypatch, where):
    """A review: a drop cut short and run again made a second folder and moved nothing, so --undo found no hand-in;
    an undo cut short left a student both dropped and graded. Each now notes itself first and is finished by the
    same command run again, with the state a drop that ran through leaves."""
    import nbgrader.api

    import autograder.drop

    download = class_download(course, tmp_path / "download", ["amy", "s014"])
    assert main(["collect", str(download)]) == 0
    handed_in = (course.step_dir("submitted", "s014") / f"{NOTEBOOK}.ipynb").read_bytes()
    cuts = {"moving the files": (autograder.drop.shutil, "move", 1),
            "the gradebook": (nbgrader.api.Gradebook, "remove_student", 1),
            "collect's report": (autograder.drop, "write_collect_log", 2)}  # the 1st notes the drop
    cut_short(monkeypatch, cuts[where], autograder.drop.drop, course, "s014")
    capsys.readouterr()
    assert main(["collect", str(download)]) == 0  # meanwhile: nothing of theirs is filed again
    assert "not filed, dropped from the course (1): s014" in capsys.readouterr().out
    assert main(["drop", "--undo", "--student", "s014"]) == 2
    assert "dropping s014 was cut short; run `python -m autograder drop --student s014" in capsys.readouterr().err
    assert main(["drop", "--student", "s014"]) == 0
    [folder] = list((course.root / "dropped" / "s014").iterdir())  # the same folder, finished
    assert (folder / "submitted" / "s014" / ASSIGNMENT / f"{NOTEBOOK}.ipynb").read_bytes() == handed_in
    log = json.loads((course.reports_dir / "collect.json").read_text(encoding="utf-8"))
    assert log["dropped"]["s014"] == {"time": log["dropped"]["s014"]["time"], "folder": str(folder.relative_to(course.root))}
    with course.gradebook() as gb:
        assert {s.id for s in gb.students} == {"amy"}

    undo_cuts = {"moving the files": (autograder.drop.shutil, "move", 1),
                 "the gradebook": (nbgrader.api.Gradebook, "update_or_create_student", 1),
                 "collect's report": (autograder.drop, "write_collect_log", 2)}  # the 1st notes the undo
    cut_short(monkeypatch, undo_cuts[where], autograder.drop.undo_drop, course, "s014")
    capsys.readouterr()
    assert main(["grade", "--student", "s014", "--no-sandbox"]) == 2  # half back: not graded
    assert "s014 was dropped from the course on " in capsys.readouterr().err
    assert main(["drop", "--student", "s014"]) == 2
    assert "taking s014 back was cut short; run `python -m autograder drop --undo --student s014" in \
        capsys.readouterr().err
    assert main(["drop", "--undo", "--student", "s014"]) == 0
    assert (course.step_dir("submitted", "s014") / f"{NOTEBOOK}.ipynb").read_bytes() == handed_in
    log = json.loads((course.reports_dir / "collect.json").read_text(encoding="utf-8"))
    assert "s014" not in log["dropped"] and "s014" in log["students"], log
    with course.gradebook() as gb:
        assert {s.id for s in gb.students} == {"amy", "s014"}


def test_a_student_dropped_while_collect_reads_the_download_is_not_filed_again(course, tmp_path, capsys, monkeypatch):
    """A review: collect read the dropped ids before it took the course's lock, so a drop run meanwhile (another
    terminal) was undone by the collect: the student was filed, registered and dropped at once."""
    import autograder.collect
    import autograder.drop

    download = class_download(course, tmp_path / "download", ["amy", "s014"])
    assert main(["collect", str(download)]) == 0
    read_download = autograder.collect.read_download

    def read_then_drop(*args, **kwargs):
        """The download read, then the drop another terminal runs before collect takes the lock."""
        got = read_download(*args, **kwargs)
        autograder.drop.drop(course, "s014")
        return got

    monkeypatch.setattr(autograder.collect, "read_download", read_then_drop)
    capsys.readouterr()
    assert main(["collect", str(download)]) == 0
    assert "not filed, dropped from the course (1): s014 (1 file)" in capsys.readouterr().out
    assert not course.step_dir("submitted", "s014").exists()
    log = json.loads((course.reports_dir / "collect.json").read_text(encoding="utf-8"))
    assert "s014" not in log["students"] and "s014" in log["dropped"], log
    with course.gradebook() as gb:
        assert {s.id for s in gb.students} == {"amy"}


def test_undo_keeps_an_extension_granted_since_the_drop_and_extend_names_a_dropped_id(course, tmp_path, capsys):
    """A review: undo put back the extension the student had before the drop over one granted since, without a word;
    extending a dropped id said only that it was not in the gradebook."""
    assert main(["collect", str(class_download(course, tmp_path / "download", ["s014"]))]) == 0
    assert main(["extend", "--student", "s014", "--until", "2026-03-05 23:59 UTC"]) == 0
    assert main(["drop", "--student", "s014"]) == 0
    capsys.readouterr()
    main(["extend", "--student", "s014", "--until", "2026-03-09 23:59 UTC"])
    out = capsys.readouterr().out
    assert "note: s014 was dropped from the course on " in out and "the extension counts once they are back" in out, out
    assert main(["drop", "--undo", "--student", "s014"]) == 0
    out = capsys.readouterr().out
    assert "kept the extension granted since the drop (until 2026-03-09 23:59 UTC), not the one they had before it " \
           "(until 2026-03-05 23:59 UTC)" in out, out
    assert main(["extend"]) == 0 and "s014: until 2026-03-09 23:59 UTC" in capsys.readouterr().out


def test_a_dropped_student_s_rejected_files_are_neither_reported_nor_recorded_nor_copied(course, tmp_path, capsys):
    """without_dropped: 'nothing of theirs is filed, registered or recorded': a dropped student's file that collect
    would reject (notes.txt) must not reach the summary's rejected files, collect.json or the course's rejected/."""
    download = class_download(course, tmp_path / "download", ["amy", "s014"])
    assert main(["collect", str(download)]) == 0
    assert main(["drop", "--student", "s014"]) == 0
    (download / "s014" / "notes.txt").write_text("my notes\n", encoding="utf-8")
    capsys.readouterr()
    assert main(["collect", str(download)]) == 0
    out = capsys.readouterr().out
    assert "not filed, dropped from the course (1): s014 (2 files)" in out, out
    assert "rejected files" not in out, out
    log = json.loads((course.reports_dir / "collect.json").read_text(encoding="utf-8"))
    assert [r for r in log["rejected"] if r.get("student") == "s014"] == [], log["rejected"]
    assert not (course.rejected_dir / "s014").exists()
