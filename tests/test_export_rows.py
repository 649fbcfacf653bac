"""export: what a student's row says, from the collect report and the grading job alone (mutation audit)."""

from __future__ import annotations

import json
from types import SimpleNamespace

from autograder.export import capped, late_by, penalty_taken, student_notes

GRADE = "python -m autograder grade"
LOG = {"students": {"ann": {"status": "new", "notebooks": {"02-shapes-and-loss": "ann/02-shapes-and-loss.ipynb"},
                            "missing": []}},
       "rejected": [], "ignored": []}


def job(state: str, notebooks: dict | None = None, error: str | None = None) -> dict:
    """A row of the job table as grade.job_rows gives it."""
    return {"state": state, "notebooks": json.dumps(notebooks) if notebooks is not None else None, "error": error}


def test_a_failed_grading_job_is_an_error_row():
    assert student_notes("ann", LOG, job("error", error="RuntimeError: boom")) == (
        "error", ["grading failed: RuntimeError: boom"])


def test_a_job_still_pending_or_running_is_not_graded():
    for state in ("pending", "running"):
        assert student_notes("ann", LOG, job(state), grade=GRADE) == (
            "not graded", [f"grading {state}; run `{GRADE}`"])


def test_a_hand_in_filed_again_after_grading_is_not_graded():
    status, notes = student_notes("ann", LOG, job("done", {}), stale=True, grade=GRADE)
    assert status == "not graded"
    assert notes == [f"handed in again after grading (collect filed newer files); run `{GRADE}`"]


def test_a_notebook_grading_could_not_grade_makes_the_row_incomplete_and_says_why():
    status, notes = student_notes("ann", LOG, job("done", {"02-shapes-and-loss": {"status": "error",
                                                                                 "error": "no kernel could start"},
                                                           "00-vectors-shapes-and-gradients": {"status": "graded"}}))
    assert status == "incomplete"
    assert notes == ["02-shapes-and-loss could not be graded (scored 0): no kernel could start"]


def test_grades_that_stand_while_a_regrade_is_queued_say_so():
    status, notes = student_notes("ann", LOG, job("requeued", {}), grade=GRADE)
    assert status == "graded"
    assert notes == ["queued to be graded again (a `grade --force` run stopped or failed before its new grades were "
                     f"in; these are the earlier ones): run `{GRADE}`"]
    assert student_notes("ann", LOG, job("done", {})) == ("graded", [])


def test_exactly_many_files_are_all_named_and_one_more_is_summed_up():
    """capped: only a list of over MANY_FILES (20) notes is cut to the first 10 and a count."""
    twenty = [f"rejected ann/f{i:02}.txt: not a notebook" for i in range(20)]
    assert capped(twenty, "rejected") == twenty
    assert capped(twenty + ["rejected ann/f20.txt: not a notebook"], "rejected")[-1] == \
        "… and 11 more rejected files (all in reports/collect.json)"


def test_how_late_is_rounded_down():
    assert late_by(59.9) == "59 s"
    assert late_by(60) == "1 min"
    assert late_by(119.9) == "1 min"


def test_a_penalty_takes_nothing_from_a_notebook_scored_below_zero():
    """A hand score below 0 (formgrader's API allows it): the penalty takes no points, it does not give any back."""
    assert penalty_taken(-1.0, 2.0) == 0.0
    assert penalty_taken(1.5, 2.0) == 1.5
    assert penalty_taken(3.0, None) == 0.0


def test_a_notebook_not_started_from_the_release_reports_no_deleted_test_cells():
    """tampered_cells: a notebook holding no cell of the release (grading names it as such) is not said to have every
    test cell deleted, which would point the instructor the wrong way."""
    import nbformat

    from autograder.export import tampered_cells

    own = [nbformat.v4.new_code_cell("x = 1"), nbformat.v4.new_markdown_cell("my notes")]
    assert tampered_cells({"02-shapes-and-loss": own}, {"02-shapes-and-loss": {"test_a", "test_b"}}) == {}


def test_a_test_cell_retyped_as_markdown_counts_as_changed():
    import nbformat

    from autograder.export import tampered_cells

    answer = nbformat.v4.new_code_cell("x = 1")
    answer.metadata["nbgrader"] = {"grade": False, "solution": True, "locked": False, "grade_id": "ex_a"}
    retyped = nbformat.v4.new_markdown_cell("assert x == 1")
    retyped.metadata["nbgrader"] = {"grade": True, "solution": False, "locked": True, "points": 1, "grade_id": "test_a"}
    assert tampered_cells({"02-shapes-and-loss": [answer, retyped]}, {"02-shapes-and-loss": {"test_a"}}) == {
        "02-shapes-and-loss": (["test_a"], [])}


def test_released_answers_leave_out_code_answers_graded_by_hand(tmp_path):
    """released_answers: autograded answer cells only (grading puts a deleted hand-graded answer back)."""
    import nbformat

    from autograder.export import released_answers

    def cell(grade_id: str, grade: bool, solution: bool):
        c = nbformat.v4.new_code_cell(f"# {grade_id}")
        c.metadata["nbgrader"] = {"grade": grade, "solution": solution, "locked": not solution, "grade_id": grade_id,
                                  "points": 1 if grade else 0}
        return c

    nb = nbformat.v4.new_notebook(cells=[cell("ex_a", False, True), cell("test_a", True, False),
                                         cell("ex_hand", True, True), cell("test_hand", True, False)])
    nbformat.write(nb, tmp_path / "02-shapes-and-loss.ipynb")
    assert released_answers(SimpleNamespace(release_dir=tmp_path)) == {"02-shapes-and-loss": {"ex_a": ("test_a",)}}


def test_each_cell_s_result_in_grades_per_cell():
    from autograder.export import cell_result

    def grade(score, max_score=2.0, needs=False, manual=None):
        return SimpleNamespace(score=score, max_score=max_score, needs_manual_grade=needs, manual_score=manual)

    assert cell_result(grade(2.0), "test") == "passed"
    assert cell_result(grade(0.0), "test") == "failed"
    assert cell_result(grade(1.0), "test") == "partial"
    assert cell_result(grade(0.0), "test", "missing") == "not handed in"
    assert cell_result(grade(0.0), "test", "error") == "not gradable"
    assert cell_result(grade(0.0, needs=True), "answer") == "needs manual grading"
    assert cell_result(grade(1.0, needs=True, manual=1.0), "answer") == "to be reviewed"


def test_a_hand_score_below_zero_is_named_like_one_above_the_points():
    from autograder.export import hand_scores_out_of_range

    def nb(name, *grades):
        return SimpleNamespace(name=name, grades=[SimpleNamespace(name=g, manual_score=s, max_score=m)
                                                  for g, s, m in grades])

    submission = SimpleNamespace(notebooks=[nb("02-shapes-and-loss", ("answer_a", -1.0, 2.0), ("answer_b", 2.0, 2.0),
                                               ("answer_c", None, 2.0), ("answer_d", 7.0, 2.0))])
    assert hand_scores_out_of_range(submission) == ["02-shapes-and-loss answer_a -1 of 2",
                                                    "02-shapes-and-loss answer_d 7 of 2"]


def test_only_students_with_cells_waiting_are_read_back_from_grades_csv(tmp_path):
    from autograder.export import waiting_for_a_grader

    path = tmp_path / "grades.csv"
    path.write_text("student_id,needs_manual_grading,status,notes\nann,0,graded,\nbob,2,awaiting manual grading,\n"
                    "cat,,no submission,\n", encoding="utf-8")
    assert waiting_for_a_grader(path) == {"bob": 2}
