"""Feedback leak guard: a page is withheld for hidden-test text the grading run put there, never for the student's own code.

Each test renders a tiny graded notebook with nbgrader's feedback template and the
HideHiddenTests preprocessor (as ``python -m autograder feedback`` does), then scans it
with find_leaks. The signatures are written here, as hidden_lines() would list them.
"""

from __future__ import annotations

from pathlib import Path

import nbformat
import pytest
from nbconvert.exporters import HTMLExporter
from nbformat.v4 import new_code_cell, new_markdown_cell, new_output
from traitlets.config import Config

import nbgrader
from autograder.feedback import HideHiddenTests, authored_text, find_leaks, page_text

IDIOM = 'with np.errstate(all="ignore"):'  # taught in the notebooks, and also in a hidden test
SECRET = "_q = np.array([0.125, 0.375, 0.5])  # hidden input"
SIGNATURES = {IDIOM, SECRET}
TEST_SOURCE = ("check_close('kl is finite', ex_kl(p, q), 0.0)\n"
               "### BEGIN HIDDEN TESTS\n"
               f"{IDIOM}\n"
               f"    {SECRET}\n"
               "    check_close('hidden kl', ex_kl(p, _q), 0.0)\n"
               "### END HIDDEN TESTS")
ANSWER = ("def ex_kl(p, q):\n"
          f"    {IDIOM}\n"
          "        return float(np.sum(p * np.log(p / q)))")


def graded_notebook(folder: Path, answer: str, test_outputs: list, later_outputs: list | None = None) -> Path:
    """folder/nb.ipynb as autograde leaves it: an exercise cell, a test cell (hidden block restored), a plain cell."""
    exercise = new_code_cell(answer)
    exercise.metadata["nbgrader"] = {"grade": False, "solution": True, "locked": False,
                                     "grade_id": "ex_kl", "schema_version": 3}
    test = new_code_cell(TEST_SOURCE, outputs=test_outputs, execution_count=2)
    test.metadata["nbgrader"] = {"grade": True, "solution": False, "locked": True, "points": 1,
                                 "grade_id": "test_kl", "schema_version": 3, "score": 0.0}
    later = new_code_cell("print(ex_kl(p, q))", outputs=later_outputs or [], execution_count=3)
    nb = nbformat.v4.new_notebook(cells=[new_markdown_cell("KL 的方向"), exercise, test, later])
    path = folder / "nb.ipynb"
    nbformat.write(nb, path)
    return path


def render(notebook: Path) -> Path:
    """The feedback page nbgrader's template makes of the notebook, with the hidden tests filtered out."""
    config = Config()
    config.HTMLExporter.template_name = "feedback"
    formgrader = Path(nbgrader.__file__).parent / "server_extensions" / "formgrader"
    config.HTMLExporter.extra_template_basedirs = [str(formgrader / "templates")]
    config.HTMLExporter.extra_template_paths = [str(formgrader / "static" / "node_modules" / "bootstrap" / "dist" / "css")]
    exporter = HTMLExporter(config=config)
    exporter.register_preprocessor(HideHiddenTests(), enabled=True)
    grades = {"notebook": notebook.stem, "score": 0.0, "max_score": 1.0, "late_penalty": 0.0}  # what GetGrades adds
    body, _ = exporter.from_notebook_node(nbformat.read(notebook, as_version=4), resources={"nbgrader": grades})
    page = notebook.with_suffix(".html")
    page.write_text(body, encoding="utf-8")
    return page


def hidden_failure(evalue: str) -> dict:
    """An AssertionError raised on line 5 of the test cell (inside the hidden block)."""
    return new_output("error", ename="AssertionError", evalue=evalue,
                      traceback=["Cell In[2], line 5", f"AssertionError: {evalue}"])


def test_the_students_own_idiom_does_not_withhold_the_page(tmp_path):
    notebook = graded_notebook(tmp_path, ANSWER, [hidden_failure("hidden kl: values differ")])
    page = render(notebook)
    text = page_text(page.read_text(encoding="utf-8"))
    assert IDIOM in text and "A hidden check failed: hidden kl: values differ" in text  # the page shows both
    assert find_leaks(page, SIGNATURES, authored_text(notebook)) == []


def test_without_the_students_cells_the_idiom_would_count_as_a_leak(tmp_path):
    """The guard tells the two apart only by the authored text: without it the same page is withheld."""
    page = render(graded_notebook(tmp_path, ANSWER, []))
    assert find_leaks(page, SIGNATURES) == [IDIOM]


def test_a_hidden_line_in_a_test_cell_output_is_still_caught(tmp_path):
    notebook = graded_notebook(tmp_path, ANSWER, [hidden_failure(f"{IDIOM} {SECRET}")])
    assert find_leaks(render(notebook), SIGNATURES, authored_text(notebook)) == sorted([IDIOM, SECRET])


def test_a_hidden_line_copied_into_a_later_cell_output_is_caught_beside_the_students_copy(tmp_path):
    """The student's source holds the idiom once; a second copy on the page came from the run."""
    echo = new_output("stream", name="stdout", text=f"{IDIOM}\n")
    notebook = graded_notebook(tmp_path, ANSWER, [], later_outputs=[echo])
    assert find_leaks(render(notebook), SIGNATURES, authored_text(notebook)) == [IDIOM]


@pytest.mark.parametrize("answer", [f"# BEGIN HIDDEN TESTS\n{ANSWER}", f"{ANSWER}\n# {SECRET}"])
def test_markers_and_lines_the_student_wrote_are_theirs(tmp_path, answer):
    notebook = graded_notebook(tmp_path, answer, [])
    assert find_leaks(render(notebook), SIGNATURES, authored_text(notebook)) == []


def test_the_test_cells_hidden_source_is_not_counted_as_the_students(tmp_path):
    notebook = graded_notebook(tmp_path, "pass", [])
    assert SECRET not in authored_text(notebook) and "pass" in authored_text(notebook)
    assert authored_text(tmp_path / "missing.ipynb") == ""


def test_the_provisional_note_counts_answers_and_points_and_says_what_can_still_change():
    from autograder.feedback import provisional_note

    one = provisional_note({"answer_a": (1.0, False)})
    assert one == ("**Provisional score.** 1 answer worth 1 point (answer_a) has not been graded yet and counts as 0 "
                   "in the score above. Your instructor grades it by hand; the final score can only be higher.")
    mixed = provisional_note({"answer_b": (3.0, False), "answer_a": (2.0, False), "answer_c": (2.0, True)})
    assert "2 answers worth 5 points (answer_a, answer_b) have not been graded yet and count as 0" in mixed
    assert "1 hand-scored answer (answer_c) is to be reviewed, because the notebook was graded again." in mixed
    assert mixed.endswith("Your instructor grades them by hand; the score can still change.")
    review = provisional_note({"answer_c": (2.0, True), "answer_d": (1.0, True)})
    assert "not been graded yet" not in review and "2 hand-scored answers (answer_c, answer_d) are to be reviewed" in review


def test_a_notebook_that_was_not_graded_is_explained_by_its_reason():
    """Missing, rejected by collect (the reason and the file named), not gradable (the grader's reason); graded ones not."""
    import json

    from autograder.feedback import not_graded_reasons

    notebooks = ["00-vectors-shapes-and-gradients", "01-probability-and-bayes", "02-shapes-and-loss", "03-maximum-likelihood"]
    log = {"students": {"ann": {"missing": ["00-vectors-shapes-and-gradients", "01-probability-and-bayes"]}},
           "rejected": [{"file": "ann/01-probability-and-bayes (1).ipynb", "reason": "invalid JSON (at line 3)",
                         "student": "ann"},
                        {"file": "bob/00-vectors-shapes-and-gradients.ipynb", "reason": "empty file", "student": "bob"}]}
    job = {"notebooks": json.dumps({"02-shapes-and-loss": {"status": "error", "error": "the kernel died 3 times"},
                                    "03-maximum-likelihood": {"status": "graded"}})}
    reasons = not_graded_reasons("ann", notebooks, log, job)
    assert sorted(reasons) == ["00-vectors-shapes-and-gradients", "01-probability-and-bayes", "02-shapes-and-loss"]
    assert reasons["00-vectors-shapes-and-gradients"].startswith("Not handed in")
    assert "ann/01-probability-and-bayes (1).ipynb was not accepted: invalid JSON (at line 3)" in \
        reasons["01-probability-and-bayes"]
    assert "could not be graded" in reasons["02-shapes-and-loss"] and "kernel died 3 times" in reasons["02-shapes-and-loss"]
    assert not_graded_reasons("cid", notebooks, log, None) == {}
