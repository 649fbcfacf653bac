"""Per-student extensions (autograder/extensions.py, `python -m autograder extend`) on a copy of the released course.

Lateness is read back through nbgrader's own SubmittedAssignment.duedate and total_seconds_late,
so these tests check that nbgrader sees the student's date, not only our table.
"""

from __future__ import annotations

import datetime as dt
import os
import re
from pathlib import Path

import pytest

from autograder.cli import main
from autograder.course import ASSIGNMENT, AutograderError, Course
from autograder.extensions import describe, extensions, grant
from autograder.grade import JOBS, GradeOptions, build_template, commit_grades, discard_job_dir, prepare_job
from autograder.release import set_due_date
from shared_builds import build_env, released_copy

DUE = dt.datetime(2026, 3, 1, 15, 59)
HOUR = dt.timedelta(hours=1)


@pytest.fixture()
def course(tmp_path):
    """The released course copied, with the due date DUE and two graded-looking submissions (ann, bob),
    each handed in one hour after it."""
    build = released_copy(tmp_path)
    with build_env(build):
        course = Course.load(build)
        set_due_date(course, DUE)
        with course.gradebook() as gb:
            for student in ("ann", "bob"):
                gb.update_or_create_student(student)
                with gb.db.no_autoflush:  # nbgrader's add_submission warns otherwise (SAWarning)
                    gb.add_submission(ASSIGNMENT, student, timestamp=DUE + HOUR)
        yield course


def lateness(course: Course) -> dict[str, tuple[dt.datetime, float]]:
    """{student: (nbgrader's due date for them, seconds late)} of every submission row."""
    with course.gradebook() as gb:
        return {s.student.id: (s.duedate, s.total_seconds_late) for s in gb.assignment_submissions(ASSIGNMENT)}


def test_an_extension_moves_nbgrader_s_due_date_for_that_student_only(course):
    now = grant(course, ["ann"], DUE + 2 * HOUR)
    assert [(e.student, e.until, e.interval, e.known) for e in now] == [("ann", DUE + 2 * HOUR, 2 * HOUR, True)]
    assert lateness(course) == {"ann": (DUE + 2 * HOUR, 0), "bob": (DUE, 3600)}
    assert describe(now[0]) == "ann: until 2026-03-01 17:59 UTC (2 h after the due date)"


def test_moving_the_due_date_keeps_the_end_of_an_extension(course):
    grant(course, ["ann"], DUE + 2 * HOUR)
    set_due_date(course, DUE + HOUR / 2)  # as release --due-date does
    with course.gradebook() as gb:
        assert gb.find_submission(ASSIGNMENT, "ann").extension == 1.5 * HOUR
    assert lateness(course) == {"ann": (DUE + 2 * HOUR, 0), "bob": (DUE + HOUR / 2, 1800)}
    set_due_date(course, DUE + 3 * HOUR)  # later than the extension: it gives nothing any more
    assert lateness(course) == {"ann": (DUE + 3 * HOUR, 0), "bob": (DUE + 3 * HOUR, 0)}
    with course.gradebook() as gb:
        assert gb.find_submission(ASSIGNMENT, "ann").extension is None
    assert "so it gives no extra time" in describe(extensions(course)[0])
    set_due_date(course, None)
    assert "the assignment has no due date now" in describe(extensions(course)[0])
    set_due_date(course, DUE)  # the extension is still recorded, and applies again
    assert lateness(course)["ann"] == (DUE + 2 * HOUR, 0)


def test_removing_an_extension_gives_the_student_the_assignment_s_due_date_again(course):
    grant(course, ["ann", "bob"], DUE + 2 * HOUR)
    assert grant(course, ["ann"], None)[0].student == "bob"
    assert lateness(course) == {"ann": (DUE, 3600), "bob": (DUE + 2 * HOUR, 0)}
    assert [e.student for e in extensions(course)] == ["bob"]


def test_an_extension_granted_before_grading_reaches_the_submission_row_grading_writes(course):
    grant(course, ["cy"], DUE + 5 * HOUR)  # no hand-in collected yet
    assert "not in the gradebook yet" in describe(extensions(course)[0])
    with course.gradebook() as gb:
        JOBS.create(gb.engine, checkfirst=True)
        commit_grades(gb, "cy", {"timestamp": DUE + 4 * HOUR, "notebooks": {}}, {"state": "done"})
    assert lateness(course)["cy"] == (DUE + 5 * HOUR, 0)
    assert extensions(course)[0].known


def test_the_worker_s_private_gradebook_gets_the_extension_for_nbgrader_s_late_penalty(course):
    """nbgrader's AssignLatePenalties runs in the worker on a private gradebook: it must see the extension too."""
    from nbgrader.api import Gradebook

    submitted = course.step_dir("submitted", "ann")
    submitted.mkdir(parents=True)
    (submitted / "timestamp.txt").write_text(str(DUE + HOUR))
    course.grading_dir.mkdir(parents=True)
    template = course.grading_dir / "template.db"
    with course.gradebook() as gb:
        build_template(course, gb.engine, template)
    job_dir = prepare_job(course, "ann", 1, template, GradeOptions(), course.notebook_names(), False, None,
                          extension=2 * HOUR)
    try:
        with Gradebook(f"sqlite:///{job_dir / 'gradebook.db'}", course.course_id) as private:
            submission = private.find_submission(ASSIGNMENT, "ann")
            submission.timestamp = DUE + HOUR  # what nbgrader's Autograde sets from timestamp.txt
            assert (submission.duedate, submission.total_seconds_late) == (DUE + 2 * HOUR, 0)
    finally:
        discard_job_dir(job_dir)


def penalties(course: Course) -> dict[str, float]:
    """{student: the submission's late penalty (nbgrader's sum over its notebooks)}."""
    with course.gradebook() as gb:
        return {s.student.id: s.late_submission_penalty for s in gb.assignment_submissions(ASSIGNMENT)}


def test_a_late_penalty_follows_an_extension_or_a_moved_due_date_as_autograde_would_set_it(course):
    """Autograde sets a late penalty once; an extension granted afterwards left it standing, so export took every
    point off a student it reported as not late (a course with nbgrader's penalty_method "zero"; found by review).
    The penalty now follows each change of lateness, computed by nbgrader's plugin on the autograded points (export
    and feedback read this column after the same sync)."""
    course.config.LateSubmissionPlugin.penalty_method = "zero"  # the whole score goes when late, as nbgrader's
    with course.gradebook() as gb:
        points = {}
        for student in ("ann", "bob"):
            for notebook in gb.find_submission(ASSIGNMENT, student).notebooks:
                for grade in notebook.grades:  # full marks, as autograde would record them
                    grade.auto_score = grade.max_score
                # both are an hour late: what autograde's AssignLatePenalties wrote, the whole score
                notebook.late_submission_penalty = notebook.score
            gb.db.commit()
            points[student] = gb.find_submission(ASSIGNMENT, student).score
    assert points["ann"] > 0 and points["ann"] == points["bob"]
    assert penalties(course) == {"ann": points["ann"], "bob": points["bob"]}
    grant(course, ["ann"], DUE + 2 * HOUR)  # ann is not late any more
    assert penalties(course) == {"ann": 0, "bob": points["bob"]}
    grant(course, ["ann"], None)  # late again
    assert penalties(course) == {"ann": points["ann"], "bob": points["bob"]}
    set_due_date(course, DUE + 3 * HOUR)  # as release --due-date does: nobody is late
    assert penalties(course) == {"ann": 0, "bob": 0}
    course.config.LateSubmissionPlugin.penalty_method = "none"  # nbgrader's default: never a penalty
    set_due_date(course, DUE)
    assert penalties(course) == {"ann": 0, "bob": 0}


@pytest.mark.parametrize("until, words", [
    (DUE, "an extension must end after the due date (2026-03-01 15:59 UTC); got 2026-03-01 15:59 UTC"),
    (DUE - HOUR, "must end after the due date"),
])
def test_an_extension_that_gives_no_time_is_refused(course, until, words):
    with pytest.raises(AutograderError, match=r"\(2026-03-01 15:59 UTC\)") as err:
        grant(course, ["ann"], until)
    assert words in str(err.value)
    assert extensions(course) == [] and lateness(course)["ann"] == (DUE, 3600)


def test_an_extension_needs_a_due_date_and_a_student(course):
    with pytest.raises(AutograderError, match="name at least one student"):
        grant(course, [], DUE + HOUR)
    set_due_date(course, None)
    build = Path(course.root).resolve().parent  # not the default build/: the advice names it
    with pytest.raises(AutograderError, match=re.escape("no due date to extend: record one first with `python -m "
                                                        f"autograder release --due-date WHEN --build {build}`")):
        grant(course, ["ann"], DUE + HOUR)


def test_a_due_date_moved_or_removed_behind_the_harness_s_back_keeps_export_working_and_the_end_in_place(course):
    """formgrader's Edit assignment and `nbgrader db assignment` set the due date without a sync: export
    must neither fail (nbgrader's duedate is None + extension then) nor move the student's end time."""
    from autograder.export import export

    grant(course, ["ann"], DUE + 2 * HOUR)
    with course.gradebook() as gb:
        gb.find_assignment(ASSIGNMENT).duedate = DUE - HOUR  # as formgrader would
        gb.db.commit()
    export(course)
    assert lateness(course) == {"ann": (DUE + 2 * HOUR, 0), "bob": (DUE - HOUR, 7200)}
    with course.gradebook() as gb:
        gb.find_assignment(ASSIGNMENT).duedate = None
        gb.db.commit()
    written = export(course)
    assert lateness(course) == {"ann": (None, 0), "bob": (None, 0)}
    text = written[0].read_text(encoding="utf-8")
    assert "extension until 2026-03-01 17:59 UTC (no extra time: no due date)" in text, text


def test_an_extension_granted_with_nbgrader_s_own_api_is_kept_when_the_due_date_moves(course):
    with course.gradebook() as gb:
        gb.grant_extension(ASSIGNMENT, "bob", hours=3)
    set_due_date(course, DUE + HOUR)
    assert lateness(course) == {"ann": (DUE + HOUR, 0), "bob": (DUE + 3 * HOUR, 0)}
    assert [(e.student, e.until) for e in extensions(course)] == [("bob", DUE + 3 * HOUR)]


def test_an_id_that_differs_only_in_case_is_refused_and_nothing_is_extended(course, capsys):
    """extend --student ANN for the gradebook's ann was stored (exit 1), and with a right id beside it that one was
    extended (a TA's walkthrough): an id that differs from a student's only in case is nobody (collect refuses such
    ids), so the command is refused, exit 2, nothing stored for anyone."""
    build = str(course.root.parent)
    assert main(["extend", "--student", "bob", "--student", "ANN", "--until", "2026-03-01 16:00:30 UTC",
                 "--build", build]) == 2
    err = capsys.readouterr().err
    assert "nothing was extended: ANN is the gradebook's ann in another case. Ids are case-sensitive, so the " \
           "extension would reach nobody: give the gradebook's spelling" in err, err
    assert extensions(course) == [] and lateness(course)["ann"] == (DUE, 3600)
    with course.gradebook() as gb:  # an older gradebook may hold both (collect now refuses ids that differ in case)
        gb.update_or_create_student("Ann")
    assert main(["extend", "--student", "ANN", "--until", "2026-03-01 16:00:30 UTC", "--build", build]) == 2
    assert "ANN is the gradebook's Ann or ann in another case" in capsys.readouterr().err
    assert main(["extend", "--student", "ANN", "--until", "none", "--build", build]) == 1  # removing one: nothing to
    assert "ANN: no extension" in capsys.readouterr().out  # refuse (an old gradebook may hold one for that id)


def test_an_id_close_to_a_gradebook_student_s_is_named_as_a_likely_typo(course, capsys):
    """extend --student 2004 for a class with 20004 (an instructor's walkthrough): granted, exit 1, and the line
    names the id it most likely meant; an id close to none gets the plain question."""
    build = str(course.root.parent)
    with course.gradebook() as gb:
        for sid in ("20001", "20004"):
            gb.update_or_create_student(sid)
    assert main(["extend", "--student", "2004", "--until", "2026-03-01 16:00:30 UTC", "--build", build]) == 1
    out = capsys.readouterr().out
    assert ("2004: until 2026-03-01 16:00:30 UTC (1 min after the due date); not in the gradebook yet (no hand-in of "
            "theirs collected): did you mean 20004? (`python -m autograder extend --student 2004 --until none "
            f"--build {build}` removes it)") in out, out
    assert main(["extend", "--student", "zed", "--until", "2026-03-01 16:00:30 UTC", "--build", build]) == 1
    out = capsys.readouterr().out
    assert "zed: until 2026-03-01 16:00:30 UTC (1 min after the due date); not in the gradebook yet (no hand-in of " \
           "theirs collected: is the id right?)" in out and "did you mean" not in out.split("zed:")[1], out


def test_the_command_grants_lists_and_removes(course, capsys):
    build = str(course.root.parent)
    assert main(["extend", "--build", build]) == 0
    assert capsys.readouterr().out == (f"no extensions (`python -m autograder extend --student ID --until WHEN --build "
                                       f"{build}` gives one)\n")  # a command that runs as printed
    assert main(["extend", "--student", "ann", "--student", "zed", "--until", "2026-03-03 23:59 Asia/Shanghai",
                 "--build", build]) == 1  # zed has no hand-in: a typo?
    out = capsys.readouterr().out
    given = " (2026-03-03 23:59 Asia/Shanghai as given)"  # the instructor's own time beside the UTC one
    assert f"ann: until 2026-03-03 15:59 UTC{given} (2 d after the due date)\n" in out
    assert f"zed: until 2026-03-03 15:59 UTC{given} (2 d after the due date); not in the gradebook yet" in out
    assert main(["extend", "--build", build]) == 1  # the list has only the UTC time: the zone given is not kept
    listed = capsys.readouterr().out
    assert listed.count(" until 2026-03-03 15:59 UTC (2 d after") == 2 and "as given" not in listed, listed
    assert main(["extend", "--student", "zed", "--until", "none", "--build", build]) == 0
    assert capsys.readouterr().out == "zed: no extension (the assignment's due date applies)\n"
    # removing what is not there: said so; for an id no hand-in has, exit 1 as granting it does (found by review)
    assert main(["extend", "--student", "zed", "--until", "none", "--build", build]) == 1
    assert capsys.readouterr().out == ("zed: no extension (the assignment's due date applies); it had none; not in the "
                                       "gradebook either (no hand-in of theirs collected): is the id right?\n")
    assert lateness(course)["ann"] == (dt.datetime(2026, 3, 3, 15, 59), 0)
    assert main(["extend", "--student", "ann", "--until", "none", "--build", build]) == 0
    assert "ann: no extension (the assignment's due date applies)" in capsys.readouterr().out
    assert lateness(course)["ann"] == (DUE, 3600)
    assert main(["extend", "--student", "ann", "--until", "none", "--build", build]) == 0  # a known id: just said
    assert capsys.readouterr().out == "ann: no extension (the assignment's due date applies); it had none\n"
    assert main(["extend", "--student", "ann", "--until", "2026-03-01 23:59 Asia/Shanghai", "--build", build]) == 2
    assert "an extension must end after the due date" in capsys.readouterr().err


def test_a_collected_student_removed_from_the_gradebook_is_named_as_such_not_as_a_typo(course, capsys):
    """extend said "no hand-in of theirs collected: is the id right?" of a student whose hand-in was collected and
    who was then removed with `nbgrader db student remove` (found by review)."""
    build = str(course.root.parent)
    course.step_dir("submitted", "cal").mkdir(parents=True)  # collected; not in the gradebook (removed since)
    assert main(["extend", "--student", "cal", "--until", "2026-03-03 15:59 UTC", "--build", build]) == 1
    out = capsys.readouterr().out
    assert out.startswith("cal: until 2026-03-03 15:59 UTC (2 d after the due date); collected, but not in the "
                          "gradebook (removed from it, e.g. by `nbgrader db student remove`)\n"), out
    assert "is the id right" not in out and "removes it" not in out, out
    assert main(["extend", "--student", "cal", "--until", "none", "--build", build]) == 0
    capsys.readouterr()
    assert main(["extend", "--student", "cal", "--until", "none", "--build", build]) == 1
    assert capsys.readouterr().out == ("cal: no extension (the assignment's due date applies); it had none; collected, "
                                       "but not in the gradebook (removed from it, e.g. by `nbgrader db student "
                                       "remove`)\n")


def test_export_names_the_notebooks_of_a_late_hand_in_that_were_handed_in_on_time():
    """An end-of-term walkthrough: with a late penalty, a hand-in made late by one notebook lost the points of the
    notebooks handed in on time too, and grades.csv said only how late it was; collect's 'on time' list never
    reached it. export reads the files' times from collect.json against the student's due date (the extension's end
    included, as nbgrader's submission gives it)."""
    from autograder.export import on_time_notebooks

    collected = {"file_times": {"02-shapes-and-loss": "2026-03-02 15:59:00.000000 UTC",
                                "01-probability-and-bayes": "2026-03-01 14:59:00.000000 UTC",
                                "00-vectors-shapes-and-gradients": "2026-03-01 15:59:00.000000 UTC",
                                "03-maximum-likelihood": "not a time"}}
    assert on_time_notebooks(collected, DUE) == ["00-vectors-shapes-and-gradients", "01-probability-and-bayes"]
    assert on_time_notebooks(collected, DUE + 24 * HOUR) == ["00-vectors-shapes-and-gradients",
                                                             "01-probability-and-bayes", "02-shapes-and-loss"]
    assert on_time_notebooks(collected, None) == [] and on_time_notebooks({}, DUE) == []


def test_collect_names_a_hand_in_that_one_late_notebook_makes_late_as_a_whole(course, tmp_path, capsys):
    """A TA's walkthrough: a student resubmitted one notebook after the due date, and the notebook handed in on time
    became late with it (nbgrader dates a hand-in by its newest file; with a late penalty it lost its points too),
    while collect said nothing. collect now names such hand-ins and the notebooks that were on time; one that the
    student's extension covers is not named."""
    import nbformat

    def download(name: str, files: dict[str, tuple[str, dt.datetime]]) -> Path:
        """A class download of student s102's notebooks {notebook: (their answer, file time in naive UTC)}."""
        folder = tmp_path / name / "s102"
        folder.mkdir(parents=True)
        for notebook, (answer, when) in files.items():
            nb = nbformat.read(course.release_dir / f"{notebook}.ipynb", as_version=4)
            cell = next(c for c in nb.cells if c.cell_type == "code" and c.metadata.get("nbgrader", {}).get("solution"))
            cell.source = answer
            nbformat.write(nb, folder / f"{notebook}.ipynb")
            stamp = when.replace(tzinfo=dt.timezone.utc).timestamp()
            os.utime(folder / f"{notebook}.ipynb", (stamp, stamp))
        return folder.parent

    first, second = "01-probability-and-bayes", "02-shapes-and-loss"
    assert main(["collect", str(download("on-time", {first: ("a = 1", DUE - HOUR), second: ("b = 1", DUE - HOUR)}))]) == 0
    assert "late as a whole" not in capsys.readouterr().out
    assert main(["collect", str(download("late", {second: ("b = 2", DUE + 24 * HOUR)}))]) == 0
    out = capsys.readouterr().out
    assert "late as a whole (1): nbgrader dates a hand-in by its newest file" in out, out
    assert f"  s102: handed in 2026-03-02 15:59 UTC, due 2026-03-01 15:59 UTC; on time: {first}\n" in out, out
    assert main(["extend", "--student", "s102", "--until", "2026-03-03 15:59 UTC"]) == 0
    capsys.readouterr()
    assert main(["collect", str(download("extended", {second: ("b = 3", DUE + 25 * HOUR)}))]) == 0
    out = capsys.readouterr().out
    assert "updated" in out and "late as a whole" not in out, out


def test_with_a_late_penalty_every_notebook_s_score_is_shown_after_it_as_its_page_shows_it(course):
    """An end-of-term walkthrough: with penalty_method "zero", a late student's notebook page said 0 / 5 (nbgrader's
    page takes the notebook's penalty off) while their overview page and grades.csv's notebook columns said 5 / 5
    beside a total of 0. Every per-notebook score is now the one after its penalty, the points before it named."""
    import csv

    from autograder.export import export
    from autograder.feedback import write_index
    from autograder.grade import JOBS, commit_grades

    course.config.LateSubmissionPlugin.penalty_method = "zero"
    first = course.notebook_names()[0]
    with course.gradebook() as gb:
        JOBS.create(gb.engine, checkfirst=True)
        for student, late in (("ann", True), ("bob", False)):
            grades = {nb.name: {"late": None, "comments": {},
                                "grades": {g.name: (g.max_score if nb.name == first else 0.0) for g in nb.grades}}
                      for nb in gb.find_submission(ASSIGNMENT, student).notebooks}
            gb.db.execute(JOBS.insert().values(student_id=student, assignment=ASSIGNMENT, digest="", state="running"))
            commit_grades(gb, student, {"timestamp": DUE + (HOUR if late else -HOUR), "notebooks": grades},
                          {"state": "done", "notebooks": "{}"})
    with course.gradebook() as gb:
        points = gb.find_submission(ASSIGNMENT, "bob").score
    assert points > 0
    rows = {r["student_id"]: r for r in csv.DictReader(export(course)[0].open(encoding="utf-8"))}
    assert (rows["ann"]["raw_score"], rows["ann"]["late_submission_penalty"], rows["ann"]["score"], rows["ann"][first]) \
        == (f"{points:g}", f"{points:g}", "0", "0"), rows["ann"]
    assert (rows["bob"]["raw_score"], rows["bob"]["score"], rows["bob"][first]) == (f"{points:g}",) * 3, rows["bob"]
    names = set(course.notebook_names())
    for student in ("ann", "bob"):
        course.step_dir("feedback", student).mkdir(parents=True)  # where feedback writes the pages first
    ann = write_index(course, "ann", names, set()).read_text(encoding="utf-8")
    assert f"<td>0 / {points:g} ({points:g} before the late penalty)</td>" in ann, ann
    bob = write_index(course, "bob", names, set()).read_text(encoding="utf-8")
    assert f"<td>{points:g} / {points:g}</td>" in bob, bob


def test_the_overview_names_extra_credit_where_a_notebook_s_score_goes_beyond_its_points(course):
    """An end-of-term walkthrough: extra credit given in formgrader showed as '11.5 / 11' on the overview, unexplained."""
    from autograder.feedback import write_index
    from autograder.grade import JOBS, commit_grades

    first = course.notebook_names()[0]
    with course.gradebook() as gb:
        JOBS.create(gb.engine, checkfirst=True)
        gb.db.execute(JOBS.insert().values(student_id="bob", assignment=ASSIGNMENT, digest="", state="running"))
        grades = {nb.name: {"late": None, "comments": {}, "grades": {g.name: g.max_score for g in nb.grades}}
                  for nb in gb.find_submission(ASSIGNMENT, "bob").notebooks}
        commit_grades(gb, "bob", {"timestamp": DUE - HOUR, "notebooks": grades}, {"state": "done", "notebooks": "{}"})
        notebook = next(nb for nb in gb.find_submission(ASSIGNMENT, "bob").notebooks if nb.name == first)
        notebook.grades[0].extra_credit = 0.5
        gb.db.commit()
        points = notebook.max_score
    course.step_dir("feedback", "bob").mkdir(parents=True)
    page = write_index(course, "bob", set(course.notebook_names()), set()).read_text(encoding="utf-8")
    assert f"<td>{points + 0.5:g} / {points:g}, with 0.5 extra credit</td>" in page, page
    assert page.count("extra credit") == 1, page


def test_a_hand_score_below_a_notebook_s_penalty_gives_one_total_on_every_page(course):
    """The penalty is worked out on a notebook's autograded points; a grader's hand score below it used to leave
    grades.csv's notebook columns (each at least 0) summing to more than its score column (the whole at least 0), and
    the notebook's page showing a negative score. A penalty now takes at most what its notebook scored, everywhere."""
    import csv
    import shutil

    from nbgrader.plugins import LateSubmissionPlugin

    from autograder.export import export, released_test_ids
    from autograder.feedback import generate_for, page_text, write_index
    from autograder.grade import JOBS, commit_grades

    class TwoPointsLate(LateSubmissionPlugin):
        """Takes 2 points off each late notebook."""

        def late_submission_penalty(self, student_id, score, total_seconds_late):
            """2 points whatever the lateness."""
            return 2.0

    course.config.AssignLatePenalties.plugin_class = TwoPointsLate
    first, second = course.notebook_names()[:2]
    with course.gradebook() as gb:
        JOBS.create(gb.engine, checkfirst=True)
        grades = {nb.name: {"late": None, "comments": {},
                            "grades": {g.name: (g.max_score if nb.name in (first, second) else 0.0)
                                       for g in nb.grades}}
                  for nb in gb.find_submission(ASSIGNMENT, "ann").notebooks}
        gb.db.execute(JOBS.insert().values(student_id="ann", assignment=ASSIGNMENT, digest="", state="running"))
        commit_grades(gb, "ann", {"timestamp": DUE + HOUR, "notebooks": grades}, {"state": "done", "notebooks": "{}"})
    with course.gradebook() as gb:
        notebooks = {nb.name: nb for nb in gb.find_submission(ASSIGNMENT, "ann").notebooks}
        tests = [g for g in notebooks[first].grades if g.max_score]
        for grade in tests:  # the grader gives 1 point for the whole notebook, below its penalty of 2
            grade.manual_score = 1.0 if grade is tests[0] else 0.0
        gb.db.commit()
        kept = notebooks[second].score
    assert kept > 2
    rows = {r["student_id"]: r for r in csv.DictReader(export(course)[0].open(encoding="utf-8"))}
    ann = rows["ann"]
    assert (ann[first], ann[second]) == ("0", f"{kept - 2:g}"), ann
    # the total is the notebooks' sum, and the penalty what it took: 1 of the first notebook's 2, 2 of the second's
    assert (ann["raw_score"], ann["late_submission_penalty"], ann["score"]) == \
        (f"{kept + 1:g}", "3", f"{kept - 2:g}"), ann
    course.step_dir("feedback", "ann").mkdir(parents=True)
    page = write_index(course, "ann", set(course.notebook_names()), set()).read_text(encoding="utf-8")
    assert f"<h1>{ASSIGNMENT}: {kept - 2:g} of " in page, page
    assert f"late penalty of 3 points is taken off the {kept + 1:g} points" in page, page
    # the notebook's own page: 0, not -1, with the 1 point the penalty took
    graded = course.step_dir("autograded", "ann")
    graded.mkdir(parents=True)
    shutil.copy(course.release_dir / f"{first}.ipynb", graded)
    [html_page] = generate_for(course, "ann", None, released_test_ids(course))
    text = page_text(html_page.read_text(encoding="utf-8"))
    assert "(Score: 0.0 / " in text and "Late submission penalty (Score: -1.0)" in text, text[:3000]
    assert "It costs 1 point (the late penalty, at most what this notebook scored)." in text, text[:3000]


def test_without_a_penalty_the_penalty_column_is_exactly_0_whatever_the_float_sums(course):
    """A code review: the penalty was the gradebook's total less the notebooks' sum, two float sums in other orders,
    so hand scores 0.1 | 0.2 and 0.3 gave a 1.11022e-16 late penalty in grades.csv and on the overview."""
    import csv

    from autograder.export import export
    from autograder.feedback import write_index
    from autograder.grade import JOBS, commit_grades

    first, second = course.notebook_names()[:2]
    with course.gradebook() as gb:
        JOBS.create(gb.engine, checkfirst=True)
        grades = {nb.name: {"late": None, "comments": {}, "grades": {g.name: 0.0 for g in nb.grades}}
                  for nb in gb.find_submission(ASSIGNMENT, "ann").notebooks}
        gb.db.execute(JOBS.insert().values(student_id="ann", assignment=ASSIGNMENT, digest="", state="running"))
        commit_grades(gb, "ann", {"timestamp": DUE + HOUR, "notebooks": grades}, {"state": "done", "notebooks": "{}"})
    with course.gradebook() as gb:
        notebooks = {nb.name: nb for nb in gb.find_submission(ASSIGNMENT, "ann").notebooks}
        one, = [g for g in notebooks[first].grades if g.max_score][:1]
        two, three = [g for g in notebooks[second].grades if g.max_score][:2]
        one.manual_score, two.manual_score, three.manual_score = 0.1, 0.2, 0.3
        gb.db.commit()
        raw = gb.find_submission(ASSIGNMENT, "ann").score
    rows = {r["student_id"]: r for r in csv.DictReader(export(course)[0].open(encoding="utf-8"))}
    assert (rows["ann"]["late_submission_penalty"], rows["ann"]["score"]) == ("0", f"{raw:g}"), rows["ann"]
    assert "late penalty" not in rows["ann"]["notes"], rows["ann"]["notes"]
    course.step_dir("feedback", "ann").mkdir(parents=True)
    page = write_index(course, "ann", set(course.notebook_names()), set()).read_text(encoding="utf-8")
    assert "penalty" not in page, page


def _grade_all(gb, student: str, job: dict, scores: dict | None = None) -> None:
    """Commit full marks for every cell of the student's submission but those in scores ({grade id: its auto score;
    None: waiting for a grader}), with the job row's values job."""
    from autograder.grade import JOBS, commit_grades

    JOBS.create(gb.engine, checkfirst=True)
    grades = {nb.name: {"late": None, "comments": {},
                        "grades": {g.name: (scores or {}).get(g.name, g.max_score) for g in nb.grades}}
              for nb in gb.find_submission(ASSIGNMENT, student).notebooks}
    gb.db.execute(JOBS.insert().values(student_id=student, assignment=ASSIGNMENT, digest=job.pop("digest", ""),
                                       state="running"))
    commit_grades(gb, student, {"timestamp": DUE - HOUR, "notebooks": grades}, job)


def grades_rows(course: Course) -> dict[str, dict]:
    import csv

    from autograder.export import export

    with open(export(course)[0], newline="", encoding="utf-8") as fh:
        return {r["student_id"]: r for r in csv.DictReader(fh)}


def test_export_leaves_the_scores_of_a_failed_grading_empty_and_counts_the_cells_waiting_for_a_grader(course):
    """A student whose grading failed gets empty scores, not 0 and not an earlier grading's (an LMS upload would take
    either for a score); a graded student with a cell waiting for a grader and a notebook that could not be graded is
    'incomplete' (reasons to look at come first), with exactly that one cell waiting."""
    import json

    first, second = course.notebook_names()[:2]
    with course.gradebook() as gb:
        _grade_all(gb, "ann", {"state": "error", "error": "RuntimeError: boom", "notebooks": "{}"})
        waiting = next(g.name for nb in gb.find_submission(ASSIGNMENT, "bob").notebooks if nb.name == first
                       for g in nb.grades)
        _grade_all(gb, "bob", {"state": "done", "notebooks": json.dumps({second: {"status": "error", "error": "x"}})},
                   scores={waiting: None})
    rows = grades_rows(course)
    ann = rows["ann"]
    assert ann["status"] == "error" and "grading failed: RuntimeError: boom" in ann["notes"], ann
    assert (ann["raw_score"], ann["score"], ann["late_submission_penalty"], ann[first]) == ("", "", "", ""), ann
    bob = rows["bob"]
    assert bob["needs_manual_grading"] == "1", bob
    assert bob["status"] == "incomplete", bob


def test_export_calls_a_hand_in_with_changed_test_cells_incomplete(course):
    import nbformat

    from autograder.cells import is_test_cell
    from autograder.grade import _digest

    first = course.notebook_names()[0]
    nb = nbformat.read(course.release_dir / f"{first}.ipynb", as_version=4)
    test = next(c for c in nb.cells if is_test_cell(c))
    test.source += "\nassert True  # my own check"
    folder = course.step_dir("submitted", "bob")
    folder.mkdir(parents=True)
    nbformat.write(nb, folder / f"{first}.ipynb")
    with course.gradebook() as gb:
        _grade_all(gb, "bob", {"state": "done", "notebooks": "{}", "digest": _digest(folder)})
    bob = grades_rows(course)["bob"]
    assert bob["status"] == "incomplete", bob
    assert f"{first}: test cells changed by the student, graded as released: {test.metadata.nbgrader.grade_id}" \
        in bob["notes"], bob


def test_export_says_a_collected_student_is_no_longer_in_the_gradebook(course):
    from autograder.collect import write_collect_log
    from autograder.extensions import NOT_IN_GRADEBOOK

    write_collect_log(course, {"students": {"cat": {"status": "no valid notebook", "notebooks": {}, "missing": []}},
                               "rejected": [{"file": "cat/notes.txt", "reason": "not a notebook", "student": "cat",
                                             "copy": None}], "ignored": []})
    cat = grades_rows(course)["cat"]
    assert f"{NOT_IN_GRADEBOOK}; `nbgrader db student add cat`" in cat["notes"], cat


def test_export_with_bom_starts_both_files_with_a_byte_order_mark_and_without_none(course):
    from autograder.export import export

    for path in export(course, bom=True):
        assert path.read_bytes().startswith(b"\xef\xbb\xbfassignment,"), path
    for path in export(course):
        assert path.read_bytes().startswith(b"assignment,"), path


def test_export_gives_whole_seconds_late_however_late(course):
    """seconds_late is a whole number of seconds, also for a hand-in weeks late (not 1.728e+06)."""
    from autograder.grade import JOBS, commit_grades

    with course.gradebook() as gb:
        JOBS.create(gb.engine, checkfirst=True)
        grades = {nb.name: {"late": None, "comments": {}, "grades": {g.name: g.max_score for g in nb.grades}}
                  for nb in gb.find_submission(ASSIGNMENT, "bob").notebooks}
        gb.db.execute(JOBS.insert().values(student_id="bob", assignment=ASSIGNMENT, digest="", state="running"))
        commit_grades(gb, "bob", {"timestamp": DUE + dt.timedelta(days=20, microseconds=500_000), "notebooks": grades},
                      {"state": "done", "notebooks": "{}"})
    assert grades_rows(course)["bob"]["seconds_late"] == str(20 * 86400)


def test_export_reads_the_notebooks_on_time_against_the_student_s_extension(course):
    """A file dated after the course's due date but within the student's extension was handed in on time."""
    from autograder.collect import TIMESTAMP_FORMAT, write_collect_log

    first, second = course.notebook_names()[:2]
    grant(course, ["bob"], DUE + 2 * HOUR)
    with course.gradebook() as gb:
        _grade_all(gb, "bob", {"state": "done", "notebooks": "{}"})
        gb.find_submission(ASSIGNMENT, "bob").timestamp = DUE + 3 * HOUR
        gb.db.commit()
    times = {first: (DUE + 90 * dt.timedelta(minutes=1)).strftime(TIMESTAMP_FORMAT),
             second: (DUE + 3 * HOUR).strftime(TIMESTAMP_FORMAT)}
    write_collect_log(course, {"students": {"bob": {"status": "new", "notebooks": {first: f"bob/{first}.ipynb",
                                                                                  second: f"bob/{second}.ipynb"},
                                                    "missing": [], "file_times": times}},
                               "rejected": [], "ignored": []})
    notes = grades_rows(course)["bob"]["notes"]
    assert "handed in 1 h after the extended due date" in notes, notes
    assert f"on time: {first} (nbgrader dates a hand-in by its newest file, so it counts as late too" in notes, notes


def test_export_names_a_deleted_answer_cell_only_where_its_tests_lost_points(course):
    import nbformat

    from autograder.cells import exercises
    from autograder.grade import _digest

    first = course.notebook_names()[0]
    nb = nbformat.read(course.release_dir / f"{first}.ipynb", as_version=4)
    exercise = exercises(nb, first)[0]
    nb.cells = [c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") != exercise.solution_id]
    for student in ("ann", "bob"):
        folder = course.step_dir("submitted", student)
        folder.mkdir(parents=True)
        nbformat.write(nb, folder / f"{first}.ipynb")
    with course.gradebook() as gb:
        for student, scores in (("ann", dict.fromkeys(exercise.test_ids, 0.0)), ("bob", None)):  # ann's tests failed
            digest = _digest(course.step_dir("submitted", student))
            _grade_all(gb, student, {"state": "done", "notebooks": "{}", "digest": digest}, scores=scores)
    rows = grades_rows(course)
    assert f"{first}: answer cells deleted by the student, and their tests failed" in rows["ann"]["notes"], rows["ann"]
    assert "answer cells deleted" not in rows["bob"]["notes"], rows["bob"]


def _graded_ann(course: Course, handed_in: dt.datetime, full_marks: bool = True) -> str:
    """ann's hand-in of the first notebook graded (full marks, or 0, dated handed_in), its autograded copy in place;
    return the notebook's name."""
    import shutil

    from autograder.grade import JOBS, commit_grades

    first = course.notebook_names()[0]
    with course.gradebook() as gb:
        JOBS.create(gb.engine, checkfirst=True)
        grades = {nb.name: {"late": None, "comments": {},
                            "grades": {g.name: g.max_score if full_marks else 0.0 for g in nb.grades}}
                  for nb in gb.find_submission(ASSIGNMENT, "ann").notebooks}
        gb.db.execute(JOBS.insert().values(student_id="ann", assignment=ASSIGNMENT, digest="", state="running"))
        commit_grades(gb, "ann", {"timestamp": handed_in, "notebooks": grades}, {"state": "done", "notebooks": "{}"})
    graded = course.step_dir("autograded", "ann")
    graded.mkdir(parents=True)
    shutil.copy(course.release_dir / f"{first}.ipynb", graded)
    return first


def test_a_late_page_names_the_student_s_extended_due_date_and_why_its_tests_failed(course):
    from autograder.export import released_test_ids
    from autograder.feedback import generate_for, page_text

    grant(course, ["ann"], DUE + HOUR / 2)
    _graded_ann(course, DUE + HOUR, full_marks=False)
    [page] = generate_for(course, "ann", None, released_test_ids(course))
    text = page_text(page.read_text(encoding="utf-8"))
    assert "30 min after your extended due date (2026-03-01 16:29 UTC, 2026-03-02 00:29 Beijing time)" in text, \
        text[:3000]
    assert "Why a test failed. Each failed test below says why" in text, text[:3000]


def test_a_page_showing_a_hidden_test_line_is_withheld_by_render(course):
    """render's last guard: a page that shows a leak signature more often than the student's own cells hold it is
    deleted and the student named (here the signature is a line the page does show: a test cell's visible check)."""
    import nbformat

    from autograder.cells import is_test_cell, visible_source
    from autograder.feedback import FeedbackResult, authored_text, render

    first = _graded_ann(course, DUE - HOUR)
    graded = course.step_dir("autograded", "ann") / f"{first}.ipynb"
    authored = authored_text(graded)
    shown = next(line.strip() for c in nbformat.read(graded, as_version=4).cells if is_test_cell(c)
                 for line in visible_source(c.source).split("\n")
                 if len(line.strip()) >= 20 and line.strip() not in authored)
    result = FeedbackResult()
    render(course, ["ann"], {shown}, 1, result)
    assert result.written == [], result.written
    assert result.errors["ann"] == f"{first}.html withheld: it would show hidden test text (1 lines)", result.errors
    assert not (course.step_dir("feedback", "ann") / f"{first}.html").exists()


def test_the_overview_links_the_page_of_a_notebook_that_was_not_graded(course):
    from autograder.feedback import write_index

    first, second = course.notebook_names()[:2]
    course.step_dir("feedback", "bob").mkdir(parents=True)
    page = write_index(course, "bob", set(), {first}).read_text(encoding="utf-8")
    assert f'<a href="{ASSIGNMENT}/{first}.html">{first}</a>' in page, page
    assert f'<a href="{ASSIGNMENT}/{second}.html">' not in page, page


def test_a_not_graded_page_shows_a_file_name_as_text(course):
    """explain_not_graded: the reason quotes the student's file name, which may hold HTML."""
    from autograder.feedback import explain_not_graded

    first = course.notebook_names()[0]
    why = 'Your file bob/<img src=x onerror="window.__hostile_ran=1">.ipynb was not accepted: invalid JSON.'
    [page] = explain_not_graded(course, "bob", {first: why})
    text = page.read_text(encoding="utf-8")
    assert "<img" not in text and "&lt;img src=x onerror=&quot;window.__hostile_ran=1&quot;&gt;" in text, text


def test_feedback_removes_the_earlier_pages_of_a_student_whose_last_download_could_not_be_filed(course):
    from autograder.collect import write_collect_log
    from autograder.feedback import feedback, index_page

    first = course.notebook_names()[0]
    write_collect_log(course, {"students": {"bob": {"status": "not filed", "notebooks": {}, "missing": [],
                                                    "unfiled": [first], "error": "OSError: disk full"}},
                               "rejected": [], "ignored": []})
    old = course.step_dir("feedback", "bob") / f"{first}.html"
    old.parent.mkdir(parents=True)
    old.write_text("<p>an earlier grading</p>", encoding="utf-8")
    index_page(course, "bob").write_text("<p>an earlier overview</p>", encoding="utf-8")
    result = feedback(course, ["bob"])
    assert "removed its earlier page" in result.errors["bob"], result.errors
    assert not old.exists() and not index_page(course, "bob").exists()


def test_feedback_writes_no_pages_for_a_hand_in_filed_again_or_a_hand_score_outside_its_points(course):
    import shutil

    import nbformat

    from autograder.export import HAND_SCORE_OUTSIDE
    from autograder.feedback import HANDED_IN_AGAIN, feedback

    first = _graded_ann(course, DUE - HOUR)
    folder = course.step_dir("submitted", "ann")  # collected again since grading: the job's digest is another
    folder.mkdir(parents=True)
    nbformat.write(nbformat.read(course.release_dir / f"{first}.ipynb", as_version=4), folder / f"{first}.ipynb")
    result = feedback(course, ["ann"])
    assert result.errors["ann"].startswith(HANDED_IN_AGAIN), result.errors
    assert result.written == [] and not list(course.step_dir("feedback", "ann").glob("*.html"))
    shutil.rmtree(folder.parent)  # the newer hand-in gone: the grading stands again; now a hand score past its points
    with course.gradebook() as gb:
        grade = next(g for nb in gb.find_submission(ASSIGNMENT, "ann").notebooks if nb.name == first
                     for g in nb.grades if g.max_score)
        grade.manual_score = grade.max_score + 5
        gb.db.commit()
    result = feedback(course, ["ann"])
    assert result.errors["ann"].startswith(HAND_SCORE_OUTSIDE), result.errors
    assert result.written == [] and not list(course.step_dir("feedback", "ann").glob("*.html"))
