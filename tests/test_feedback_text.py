"""Feedback pages: the leak guard withholds a page for hidden-test text the grading run put there, never for the
student's own code; the table of contents names each graded cell after its exercise.

Each test renders a tiny graded notebook with the course's feedback template and the
HideHiddenTests and LabelGradedCells preprocessors (as ``python -m autograder feedback`` does),
then scans it with find_leaks or reads its contents. The signatures are written here, as
hidden_lines() would list them.
"""

from __future__ import annotations

import html
import math
import re
from pathlib import Path

import nbformat
import pytest
from nbconvert.exporters import HTMLExporter
from nbformat.v4 import new_code_cell, new_markdown_cell, new_output
from traitlets.config import Config

import feedback_pages
import nbgrader
from autograder.cells import HEADING_CHARS, last_heading
from autograder.course import REPO, load_config
from autograder.feedback import (HideHiddenTests, LabelGradedCells, authored_text, checked_mathjax_url, find_leaks,
                                 graded_cell_labels, page_text, template_config)

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


def render(notebook: Path, mathjax_url: str | None = None, pending: dict | None = None) -> Path:
    """The feedback page the course's template makes of the notebook, hidden tests filtered out, cells labelled
    (MathJax loaded from mathjax_url, as `feedback --mathjax-url` sets it, or from nbconvert's default)."""
    config = load_config()  # the course's, as `feedback` reads it: its HTML settings included
    template_config(config)
    if mathjax_url is not None:
        config.HTMLExporter.mathjax_url = mathjax_url
    formgrader = Path(nbgrader.__file__).parent / "server_extensions" / "formgrader"
    config.HTMLExporter.extra_template_paths = [str(formgrader / "static" / "node_modules" / "bootstrap" / "dist" / "css")]
    exporter = HTMLExporter(config=config)
    exporter.register_preprocessor(HideHiddenTests(), enabled=True)
    exporter.register_preprocessor(LabelGradedCells(), enabled=True)
    grades = {"notebook": notebook.stem, "score": 0.0, "max_score": 1.0, "late_penalty": 0.0}  # what GetGrades adds
    if pending is not None:  # what GetGradesNotingPending adds: {grade id: (points, scored by hand before)}
        grades["pending"] = pending
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
    named = provisional_note({"answer_b": (3.0, False), "answer_a": (2.0, False), "answer_c": (2.0, True)},
                             {"answer_a": "练习 6.4", "answer_c": "练习 2.6"})
    assert "2 answers worth 5 points (练习 6.4: answer_a, answer_b) have not" in named
    assert "1 hand-scored answer (练习 2.6: answer_c) is to be reviewed" in named


def test_a_graded_cell_is_named_by_the_exercise_heading_above_it():
    """The notebook's own name for an exercise (练习 6.4), from the last heading before the cell; not the section
    heading '练习', nor a heading the graded cell itself holds, nor any text of the heading but the number (spaced
    once)."""
    from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

    from autograder.feedback import exercise_names

    def graded(kind, grade_id, source="x"):
        cell = (new_markdown_cell if kind == "markdown" else new_code_cell)(source)
        cell.metadata["nbgrader"] = {"grade": True, "grade_id": grade_id, "solution": kind == "markdown"}
        return cell

    nb = new_notebook(cells=[graded("code", "test_before"), new_markdown_cell("## 练习\n\nrules"),
                             graded("code", "test_section"),
                             new_markdown_cell("### 练习 6.4（3 分，人工评分）<b>更低</b>的困惑度"),
                             graded("markdown", "answer_ppl", "### 练习 9.9 mine"), graded("code", "test_after"),
                             new_markdown_cell("### 练习  12.10 x")])
    nb.cells.append(graded("code", "test_last"))
    assert exercise_names(nb) == {"answer_ppl": "练习 6.4", "test_after": "练习 6.4", "test_last": "练习 12.10"}


def test_the_failed_test_note_points_to_what_a_student_has():
    """A student with only the release zip has JupyterLab, not this repository's check command; the note covers a
    failure by error too (NotImplementedError), not only checks that failed by name."""
    from autograder.feedback import FAILED_CHECKS_NOTE

    assert "autograder" not in FAILED_CHECKS_NOTE and "JupyterLab" in FAILED_CHECKS_NOTE
    assert "the error that stopped it" in FAILED_CHECKS_NOTE and "shows no values" in FAILED_CHECKS_NOTE


def test_the_note_on_test_cells_put_back_names_each_and_says_what_grading_ran():
    from autograder.feedback import tampered_note

    both = tampered_note(["test_a", "test_b"], ["test_c"])
    assert both == ("**Test cells put back.** You changed the test cells test_a, test_b: grading ran them as released, "
                    "so your edits do not count. You deleted the test cell test_c: it was put back and run for grading. "
                    "The test cells below are the released ones.")
    edited_only = tampered_note(["test_a"], [])
    assert "You changed the test cell test_a: grading ran it as released" in edited_only and "deleted" not in edited_only
    deleted_only = tampered_note([], ["test_c", "test_d"])
    assert "You deleted the test cells test_c, test_d: they were put back" in deleted_only and "changed" not in deleted_only


def rendered(markdown: str) -> str:
    """The HTML body nbconvert makes of one markdown cell."""
    body, _ = HTMLExporter().from_notebook_node(nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell(markdown)]))
    return body


def paragraph_text(body: str) -> str:
    """The text of the first paragraph of an HTML body, tags removed and entities decoded."""
    import html

    return html.unescape(re.sub(r"<[^>]+>", "", re.search(r"<p>(.*?)</p>", body, re.S).group(1)))


def test_the_note_on_a_kernel_stop_names_the_cells_and_says_grading_went_on_without_them():
    """The page only showed a KernelDied line in the cell; that the rest ran in a new kernel without it was unsaid."""
    import nbformat

    from autograder.feedback import kernel_stop_note, kernel_stops

    answer = nbformat.v4.new_code_cell("def f():\n    return 1\nexit()")
    answer.metadata["nbgrader"] = {"solution": True, "grade": False, "grade_id": "ex_f"}
    answer.outputs = [nbformat.v4.new_output("error", ename="KernelDied", evalue="", traceback=[])]
    plain = nbformat.v4.new_code_cell("\nimport os; os.fork()")
    plain.outputs = [nbformat.v4.new_output("error", ename="TooManyProcesses", evalue="", traceback=[])]
    later = nbformat.v4.new_code_cell("print(1)")
    later.outputs = [nbformat.v4.new_output("error", ename="NotRun", evalue="", traceback=[])]
    nb = nbformat.v4.new_notebook(cells=[answer, plain, later, nbformat.v4.new_markdown_cell("exit()")])
    stops = kernel_stops(nb)
    assert [paragraph_text(rendered(s)) for s in stops] == ["ex_f", "the cell that begins “import os; os.fork()”"]
    one = kernel_stop_note(["ex_f"])
    assert one.startswith("**The kernel stopped.** The Python kernel stopped, or stopped answering, while ex_f ran "
                          "(`exit()`"), one
    # the student's first line is shown as typed, never as markup: a backtick cannot end a code span and let HTML in
    sneaky = nbformat.v4.new_code_cell("x = '` <img src=x onerror=alert(1)> $y$'; exit()")
    sneaky.outputs = [nbformat.v4.new_output("error", ename="KernelDied", evalue="", traceback=[])]
    (quoted,) = kernel_stops(nbformat.v4.new_notebook(cells=[sneaky]))
    body = rendered(kernel_stop_note([quoted]))
    assert "<img" not in body and "x = '` &lt;img src=x onerror=alert(1)&gt; $y$'; exit()" in body, body[-1500:]
    assert "re-ran the cells before it and went on without it, so nothing it defines exists in later cells" in one
    two = kernel_stop_note(kernel_stops(nb))
    assert "before each and went on without them, so nothing they define exists" in two, two


@pytest.mark.parametrize("ename", ["CellTimeoutError", "KeyboardInterrupt"])
def test_a_test_cell_cut_at_its_time_limit_says_what_to_do(ename):
    """It said only that the cell was interrupted; an answer cell's timeout said what to do (found by review)."""
    from autograder.cells import outcome_message

    cell = new_code_cell("assert slow_answer() == 1", outputs=[new_output("error", ename=ename, evalue="", traceback=[])])
    assert outcome_message(cell) == ("✘ Failed: the cell did not finish within the time limit and was interrupted: what "
                                     "its checks call (your answer, or something it uses) takes too long or never ends; "
                                     "make it finish sooner.")
    if ename == "CellTimeoutError":  # stopped by the notebook's budget, which the cells before it spent (found by review)
        cell.outputs[0].evalue = "the notebook used up its time budget of 600 s while the cell ran, and the grader stopped it"
        assert outcome_message(cell) == ("✘ Failed: the notebook used up its time budget while this cell ran, so it was "
                                         "stopped: this cell and the ones before it took too long together; make the "
                                         "slow ones finish sooner.")


def test_a_stand_in_block_before_the_visible_checks_keeps_their_numbers_as_the_student_s_copy_has_them():
    """Exercises 4.3, 4.4, 5.2 and 6.2 are graded with stand-ins for the earlier exercises' functions, defined in a
    hidden block before the visible checks; a failed visible check was reported by its line in the grader's source,
    which the student's copy (hidden blocks left out) numbers differently, and the page's note went where the
    stand-ins were, not where the hidden checks run."""
    from autograder.cells import HIDDEN_NOTE, outcome_message, visible_source

    source = ('"""Check f"""\n'
              "### BEGIN HIDDEN TESTS\n"
              "def g(x):  # a stand-in\n"
              "    return x\n"
              "### END HIDDEN TESTS\n"
              "check_close('f(1)', f(1), 1.0)\n"
              "check_close('f(2)', f(2), 2.0)\n"
              "### BEGIN HIDDEN TESTS\n"
              "check_close('f(3)', f(3), 3.0, reveal=False)\n"
              "### END HIDDEN TESTS")
    shown = visible_source(source)
    assert shown.split("\n") == ['"""Check f"""', "check_close('f(1)', f(1), 1.0)", "check_close('f(2)', f(2), 2.0)",
                                  HIDDEN_NOTE]
    failed = new_output("error", ename="AssertionError", evalue="f(2): got 0.0, expected 2.0",
                        traceback=["Cell In[7], line 7\n    check_close('f(2)', f(2), 2.0)"])
    cell = new_code_cell(source, outputs=[failed])
    assert outcome_message(cell) == "✘ Failed (line 3 of the visible checks): f(2): got 0.0, expected 2.0"
    assert shown.split("\n")[3 - 1] == "check_close('f(2)', f(2), 2.0)"


def test_only_autograded_tests_that_lost_points_count_as_failed():
    import nbformat

    from autograder.feedback import failed_tests

    def cell(meta):
        c = nbformat.v4.new_code_cell("check_true('x', True)")
        c.metadata["nbgrader"] = meta
        return c

    nb = nbformat.v4.new_notebook(cells=[
        cell({"grade": True, "solution": False, "grade_id": "test_full", "points": 2, "score": 2.0}),
        cell({"grade": True, "solution": False, "grade_id": "test_half", "points": 2, "score": 1.0}),
        cell({"grade": True, "solution": False, "grade_id": "test_zero", "points": 1, "score": 0}),
        cell({"grade": True, "solution": True, "grade_id": "answer_hand", "points": 2, "score": 0}),  # written answer
        cell({"solution": True, "grade_id": "ex_code"}),
    ])
    assert failed_tests(nb) == ["test_half", "test_zero"]


def test_a_notebook_that_was_not_graded_is_explained_by_its_reason():
    """Missing, rejected by collect (the reason and the file named), not gradable (the grader's reason); graded ones not."""
    import json

    from autograder.feedback import not_graded_reasons

    notebooks = ["00-vectors-shapes-and-gradients", "01-probability-and-bayes", "02-shapes-and-loss", "03-maximum-likelihood",
                 "04-entropy-cross-entropy-kl"]
    log = {"students": {"ann": {"missing": ["00-vectors-shapes-and-gradients", "01-probability-and-bayes"]}},
           "rejected": [{"file": "ann/01-probability-and-bayes (1).ipynb", "reason": "invalid JSON (at line 3)",
                         "student": "ann"},
                        {"file": "bob/00-vectors-shapes-and-gradients.ipynb", "reason": "empty file", "student": "bob"}]}
    job = {"notebooks": json.dumps({
        # what follows the harness's words is jupyter_client's, which may quote the kernel: a kernel whose start-up a
        # student's file patched sent 26 KB of another notebook's hidden tests as its signature (red-team review)
        "02-shapes-and-loss": {"status": "error", "error": "RuntimeError: no kernel could start (3 tries): Invalid "
                                                           "Signature: b'LEAK[eNq1hidden]'"},
        "03-maximum-likelihood": {"status": "graded"},
        # nbgrader's own error quotes what the kernel sent (review: a forged execution count carried hidden tests)
        "04-entropy-cross-entropy-kl": {"status": "error", "error": "ValidationError: 'LEAK hidden test text' is not "
                                                                    "of type 'integer'"}})}
    reasons = not_graded_reasons("ann", notebooks, log, job)
    assert sorted(reasons) == ["00-vectors-shapes-and-gradients", "01-probability-and-bayes", "02-shapes-and-loss",
                               "04-entropy-cross-entropy-kl"]
    assert reasons["00-vectors-shapes-and-gradients"].startswith("Not handed in")
    assert "ann/01-probability-and-bayes (1).ipynb was not accepted: invalid JSON (at line 3)" in \
        reasons["01-probability-and-bayes"]
    assert reasons["02-shapes-and-loss"].endswith("could not be graded, so it scored 0: RuntimeError: no kernel could "
                                                  "start (3 tries)"), reasons["02-shapes-and-loss"]
    assert reasons["04-entropy-cross-entropy-kl"].endswith(
        "could not be graded, so it scored 0: grading it stopped with an error (your instructor has the details and "
        "can grade it again)"), reasons["04-entropy-cross-entropy-kl"]
    assert not_graded_reasons("cid", notebooks, log, None) == {}


def test_a_page_of_a_notebook_not_graded_says_what_to_do_for_its_reason():
    """Not handed in: hand it in; a damaged file: the student's own copy again, not a fresh one; a file holding another
    notebook's exercises: save each under its name; not gradable: the instructor, unless the reason says what to do."""
    import json

    from autograder.feedback import not_graded_advice, not_graded_reasons

    notebooks = ["00-vectors-shapes-and-gradients", "01-probability-and-bayes", "02-shapes-and-loss",
                 "03-maximum-likelihood", "04-entropy-cross-entropy-kl"]
    log = {"students": {"ann": {"missing": ["00-vectors-shapes-and-gradients", "01-probability-and-bayes",
                                            "02-shapes-and-loss"],
                                "notebooks": {"03-maximum-likelihood": "ann/02-shapes-and-loss.ipynb"}}},
           "rejected": [{"file": "ann/01-probability-and-bayes.ipynb", "reason": "invalid JSON (at line 3)",
                         "student": "ann"}]}
    job = {"notebooks": json.dumps({
        "03-maximum-likelihood": {"status": "error", "error": "the notebook lacks 1 of its 6 answer cells (ex1): ... hand "
                                                              "in the released notebook with the answers written in it"},
        "04-entropy-cross-entropy-kl": {"status": "error", "error": "ValidationError: something"}})}
    reasons = not_graded_reasons("ann", notebooks, log, job)
    advice = {nb: not_graded_advice(why, nb) for nb, why in reasons.items()}
    assert advice["00-vectors-shapes-and-gradients"] == ("Hand in your work on this notebook, saved as "
                                                         "00-vectors-shapes-and-gradients.ipynb, and ask your instructor "
                                                         "to collect it again.")
    assert advice["01-probability-and-bayes"].startswith("Check that your own copy of 01-probability-and-bayes.ipynb "
                                                         "opens in Jupyter"), advice
    assert "holds the exercises of 03-maximum-likelihood" in reasons["02-shapes-and-loss"]
    assert advice["02-shapes-and-loss"].startswith("Save your work on this notebook as 02-shapes-and-loss.ipynb, one "
                                                   "notebook's exercises per file"), advice
    assert advice["03-maximum-likelihood"] is None  # the reason says it: hand in the released notebook
    assert advice["04-entropy-cross-entropy-kl"] == "Ask your instructor: they have the details and can grade it again."


def contents(page: Path) -> list[str]:
    """The entries of a feedback page's table of contents, as plain text (feedback_pages.contents)."""
    return feedback_pages.contents(page.read_text(encoding="utf-8"))


def labelled_notebook(folder: Path, cells: list) -> Path:
    """folder/nb.ipynb of the given cells, each graded one given as (cell, nbgrader metadata)."""
    nb = nbformat.v4.new_notebook()
    for item in cells:
        cell, meta = item if isinstance(item, tuple) else (item, None)
        if meta:
            cell.metadata["nbgrader"] = {"schema_version": 3, "locked": False, "points": 1, "score": 1.0, **meta}
        nb.cells.append(cell)
    path = folder / "nb.ipynb"
    nbformat.write(nb, path)
    return path


def test_after_the_due_date_a_page_of_a_notebook_not_handed_in_does_not_promise_it_will_be_collected(tmp_path):
    """An end-of-term walkthrough: the pages of notebooks not handed in told students, after the term, to hand in and
    ask for it to be collected again. Once their due date (or their extension's end) has passed, they are told to ask
    whether it is still collected."""
    import datetime as dt

    from autograder.course import Course
    from autograder.extensions import grant
    from autograder.feedback import NOT_HANDED_IN, due_date_passed, not_graded_advice
    from autograder.release import set_due_date
    from shared_builds import build_env, released_copy

    nb = "01-probability-and-bayes"
    assert not_graded_advice(f"{NOT_HANDED_IN} no file", nb, past_due=True) == (
        f"Hand in your work on this notebook, saved as {nb}.ipynb, and ask your instructor whether they still collect "
        "it: your due date has passed.")
    build = released_copy(tmp_path)
    with build_env(build):
        course = Course.load(build)
        due = dt.datetime(2026, 3, 1, 15, 59)
        assert not due_date_passed(course, "s1", now=due + dt.timedelta(days=400))  # no due date: nothing has passed
        set_due_date(course, due)
        assert due_date_passed(course, "s1", now=due + dt.timedelta(minutes=1))
        assert not due_date_passed(course, "s1", now=due)
        with course.gradebook() as gb:
            gb.update_or_create_student("s1")
        grant(course, ["s1"], due + dt.timedelta(days=2))
        assert not due_date_passed(course, "s1", now=due + dt.timedelta(days=1))  # the extension runs on
        assert due_date_passed(course, "s2", now=due + dt.timedelta(days=1))


def test_the_contents_name_each_graded_cell_after_the_exercise_heading_above_it(tmp_path):
    """Test cells by heading and grade id, written answers and comments by heading; nbgrader's word above any heading."""
    page = render(labelled_notebook(tmp_path, [
        (new_code_cell("check_true('setup', True)"), {"grade": True, "solution": False, "grade_id": "test_early",
                                                       "toc_label": "a label the hand-in brought along"}),
        new_markdown_cell("## 2.1 小节\n\n### 练习 2.1（3 分）逐行的 `softmax`\n\n写出 **稳定** 的版本。"),
        (new_code_cell("def f(): pass"), {"grade": False, "solution": True, "grade_id": "ex_softmax",
                                          "comment": "No response."}),
        (new_code_cell("check_true('f', True)"), {"grade": True, "solution": False, "grade_id": "test_softmax"}),
        new_markdown_cell("### 练习 2.5（2 分，人工评分）简答"),
        (new_markdown_cell("### My answer\n\nbecause"), {"grade": True, "solution": True, "grade_id": "answer_why",
                                                          "points": 2, "score": 0.0}),
        (new_code_cell("check_true('g', True)"), {"grade": True, "solution": False, "grade_id": "test_after_answer"}),
    ]))
    assert contents(page) == [
        "Test cell (Score: 1.0 / 1.0)",
        "练习 2.1（3 分）逐行的 softmax · comment on your answer",
        "练习 2.1（3 分）逐行的 softmax · test test_softmax (Score: 1.0 / 1.0)",
        "练习 2.5（2 分，人工评分）简答 · your written answer (Score: 0.0 / 2.0)",
        # the student's own heading inside their answer names nothing: the exercise heading still does
        "练习 2.5（2 分，人工评分）简答 · test test_after_answer (Score: 1.0 / 1.0)",
    ]
    anchors = page.read_text(encoding="utf-8")
    assert all(f'href="#{a}"' in anchors and f'name="{a}"' in anchors
               for a in ("test_early", "comment-ex_softmax", "test_softmax", "answer_why"))
    # each heading once, over its entries (it was repeated on every line), linked to the first of them
    toc = anchors.split('<div id="toc">')[1].split("</div>")[0]
    assert toc.count("逐行的 <code>softmax</code>") + toc.count("逐行的 softmax") == 1, toc
    assert toc.count("练习 2.5（2 分，人工评分）简答") == 1, toc
    assert '<li class="exercise"><a href="#comment-ex_softmax">练习 2.1' in toc, toc


def test_the_contents_take_the_release_s_heading_where_the_release_has_the_cell(tmp_path):
    """Points changed after the release (4 where the student's copy says 3) read as the release says, next to the score
    out of 4 (a TA's walkthrough: '练习 2.1（3 分）… (Score: 4.0 / 4.0)'); a cell the release lacks keeps its heading."""
    notebook = labelled_notebook(tmp_path, [
        new_markdown_cell("### 练习 2.1（3 分）逐行的 softmax"),
        (new_code_cell("check_true('f', True)"), {"grade": True, "solution": False, "grade_id": "test_softmax"}),
        (new_code_cell("check_true('g', True)"), {"grade": True, "solution": False, "grade_id": "test_extra"})])
    released = nbformat.read(notebook, as_version=4)
    released.cells[0].source = "### 练习 2.1（4 分）逐行的 softmax"
    labels = {"nb": graded_cell_labels(released)}
    assert labels == {"nb": {"test_softmax": "练习 2.1（4 分）逐行的 softmax", "test_extra": "练习 2.1（4 分）逐行的 softmax"}}
    del labels["nb"]["test_extra"]  # as if the release had no such cell
    nb = nbformat.read(notebook, as_version=4)
    LabelGradedCells(release_labels=labels).preprocess(nb, {"nbgrader": {"notebook": "nb"}})
    assert [c.metadata["nbgrader"].get("toc_label") for c in nb.cells[1:]] == ["练习 2.1（4 分）逐行的 softmax",
                                                                              "练习 2.1（3 分）逐行的 softmax"]
    LabelGradedCells(release_labels=labels).preprocess(nb, {"nbgrader": {"notebook": "other"}})  # another notebook's
    assert nb.cells[1].metadata["nbgrader"]["toc_label"] == "练习 2.1（3 分）逐行的 softmax"


def test_a_score_waiting_for_a_grader_reads_as_such_in_the_contents_and_the_heading(tmp_path):
    """0 / 2 for an answer nobody graded yet is not a score: its entry and the page's total say so."""
    cells = [new_markdown_cell("### 练习 2.5（2 分，人工评分）简答"),
             (new_markdown_cell("because"), {"grade": True, "solution": True, "grade_id": "answer_why", "points": 2,
                                             "score": 0.0}),
             new_markdown_cell("### 练习 2.6（1 分，人工评分）"),
             (new_markdown_cell("so"), {"grade": True, "solution": True, "grade_id": "answer_so", "score": 0.5}),
             (new_code_cell("check_true('g', True)"), {"grade": True, "solution": False, "grade_id": "test_g"})]
    page = render(labelled_notebook(tmp_path, cells), pending={"answer_why": (2.0, False), "answer_so": (1.0, True)})
    assert contents(page) == ["练习 2.5（2 分，人工评分）简答 · your written answer (not graded yet: 0.0 / 2.0)",
                              "练习 2.6（1 分，人工评分） · your written answer (to be reviewed: 0.5 / 1.0)",
                              "练习 2.6（1 分，人工评分） · test test_g (Score: 1.0 / 1.0)"]
    assert "nb (Score: 0.0 / 1.0, provisional)" in page_text(page.read_text(encoding="utf-8"))
    graded = render(labelled_notebook(tmp_path, cells), pending={})
    assert contents(graded)[0].endswith("your written answer (Score: 0.0 / 2.0)")
    assert "provisional" not in page_text(graded.read_text(encoding="utf-8"))


def test_extra_credit_is_named_where_a_score_goes_beyond_its_points(tmp_path):
    """An end-of-term walkthrough: a cell given extra credit in formgrader read 'Score: 1.5 / 1.0', unexplained, as if
    the page were wrong. It now says how much of the score is extra credit; a score within its points says nothing."""
    page = render(labelled_notebook(tmp_path, [
        (new_code_cell("check_true('f', True)"), {"grade": True, "solution": False, "grade_id": "test_f", "score": 1.5}),
        (new_code_cell("check_true('g', True)"), {"grade": True, "solution": False, "grade_id": "test_g"}),
    ]))
    assert contents(page) == ["Test cell (Score: 1.5 / 1.0, with 0.5 extra credit)",
                              "Test cell (Score: 1.0 / 1.0)"], contents(page)


def test_a_heading_typed_into_the_notebook_is_shown_as_text_not_markup(tmp_path):
    """A student can edit ordinary markdown cells: their heading is escaped in the contents."""
    page = render(labelled_notebook(tmp_path, [
        new_markdown_cell("# <img src=x onerror=alert(1)> & co"),
        (new_code_cell("check_true('f', True)"), {"grade": True, "solution": False, "grade_id": "test_f"}),
    ]))
    toc = page.read_text(encoding="utf-8").split('<div id="toc">')[1].split("</div>")[0]
    assert "<img" not in toc and "&lt;img src=x onerror=alert(1)&gt; &amp; co" in toc
    assert contents(page) == ["<img src=x onerror=alert(1)> & co · test test_f (Score: 1.0 / 1.0)"]


@pytest.mark.parametrize("markdown, heading", [
    ("### 练习 6.1（2 分）计数模型的最大似然估计", "练习 6.1（2 分）计数模型的最大似然估计"),
    ("## A\ntext\n### B ###", "B"),  # the last heading; closing #s dropped
    ("### `F.kl_div` 与 **KL**", "F.kl_div 与 KL"),
    ("### 实现 `__init__` 与 __加粗__", "实现 __init__ 与 加粗"),  # a code span is shown as written
    ("### ``a`b`` 与 `x**2`", "a`b 与 x**2"),
    ("### A\n```python\n# a comment, not a heading\n```", "A"),
    ("#hashtag, not a heading\n    # indented code", None),
    ("plain text", None),
])
def test_last_heading_reads_atx_headings_outside_code(markdown, heading):
    assert last_heading(markdown) == heading


@pytest.mark.parametrize("line, heading", [
    ("# " + "`" * 40_000 + "a", "a"),  # no closing run: the backticks are dropped as markup, as before
    ("# " + " #" * 20_000 + " x", "# " * 20_000 + "x"),  # spaces and #s, no closing sequence
    ("# a" + " `b`" * 10_000, "a" + " b" * 10_000),
])
def test_a_heading_a_student_made_huge_is_read_in_linear_time(line, heading):
    """A red-team review: a markdown cell of the student's own with a heading of 40,000 backticks held `feedback` for
    the whole class (the code-span and heading patterns backtracked: 12 s at 8,000 backticks, cubic). The heading is
    now read by a linear scan. Run in a child process with a minute to spare: the old patterns take hours here."""
    import subprocess
    import sys

    code = ("import sys; from autograder.cells import last_heading; "
            "sys.stdout.write(last_heading(sys.stdin.read()) or '')")
    done = subprocess.run([sys.executable, "-c", code], input=line, capture_output=True, text=True, timeout=60,
                          cwd=Path(__file__).resolve().parent.parent)
    assert done.returncode == 0, done.stderr
    shown = heading if len(heading) <= HEADING_CHARS else heading[:HEADING_CHARS - 1] + "…"  # a line of contents
    assert done.stdout == shown, done.stdout[:200]


CDNJS = "https://cdnjs.cloudflare.com/ajax/libs/mathjax/2.7.7/latest.js?config=TeX-AMS_CHTML-full,Safe"  # nbconvert 7's


def script_sources(page: Path) -> list[str]:
    """The src of every script tag of the page, in order."""
    return re.findall(r'<script[^>]*\bsrc="([^"]*)"', page.read_text(encoding="utf-8"))


@pytest.mark.parametrize("url", ["https://mirror.example.cn/mathjax/2.7.7/MathJax.js?config=TeX-AMS_CHTML-full,Safe",
                                 "../mathjax/MathJax.js?config=TeX-AMS_CHTML-full,Safe"])
def test_the_page_loads_mathjax_from_the_address_it_is_given_and_is_otherwise_the_same(tmp_path, url):
    """nbgrader's page header calls the MathJax macro without an address (so HTMLExporter.mathjax_url did nothing):
    the course's template puts the configured one there, and changes nothing else."""
    notebook = graded_notebook(tmp_path, ANSWER, [])
    default = render(notebook).read_text(encoding="utf-8")
    assert script_sources(notebook.with_suffix(".html")) == [CDNJS]
    page = render(notebook, mathjax_url=url)
    assert script_sources(page) == [url]
    assert page.read_text(encoding="utf-8").replace(url, CDNJS) == default


NO_SAFE = ("it does not load MathJax's Safe extension (',Safe' at the end of its config=), which keeps a formula a "
           "student wrote from holding a link or a script")


@pytest.mark.parametrize("url, words", [
    ("", "it is empty"),
    ("javascript:alert(1)", "its scheme is 'javascript'"),
    ("file:///srv/mathjax/MathJax.js", "its scheme is 'file'"),
    ('x.js" onload="alert(1)', "it holds ' ' '\"'"),
    ("x.js'><script>", "it holds \"'\" '<' '>'"),
    ("//cdn.example.cn/MathJax.js", "it starts with //"),
    ("https:mirror.example.cn/MathJax.js", "https: is not followed by //"),
    ("https://mirror.example.cn/MathJax.js?config=TeX-AMS_CHTML-full", NO_SAFE),
    ("mathjax/MathJax.js", NO_SAFE),
])
def test_a_mathjax_address_that_could_not_load_or_would_break_the_page_is_refused(url, words):
    with pytest.raises(ValueError) as caught:
        checked_mathjax_url(url)
    assert f"cannot load MathJax from {url!r}: {words}; expected an http:// or https:// address" in str(caught.value)


def test_a_student_whose_pages_take_too_long_gets_an_error_no_page_and_the_others_go_on(monkeypatch, tmp_path):
    """A red-team review: one student's hand-in (a heading that made a pattern backtrack) held feedback for the whole
    class, which waited on every student's pages without a limit. Each student's pages now have PAGES_SECONDS; past
    them the student gets an error naming the limit, the pages written before it are removed (none was checked for
    hidden test text: found by review), and the alarm is cleared for the next student."""
    import re
    import signal
    from types import SimpleNamespace

    from autograder import feedback

    pages = tmp_path / "feedback" / "ann" / "part-ii"
    course = SimpleNamespace(step_dir=lambda step, student: tmp_path / step / student / "part-ii")

    def backtrack(*args):
        pages.mkdir(parents=True)
        (pages / "00-vectors-shapes-and-gradients.html").write_text("<html>written before the slow notebook</html>")
        return list(re.finditer(r"(`+)(.+?)\1", "`" * 100_000 + "a"))  # the pattern the review broke: hours

    monkeypatch.setattr(feedback, "generate_for", backtrack)
    monkeypatch.setattr(feedback, "quiet_nbgrader_logs", lambda: None)
    monkeypatch.setattr(feedback, "PAGES_SECONDS", 1)
    files, reason = feedback._generate_safely(course, "ann", None, {})
    assert files == [] and reason == "writing the pages took over 1 s and was stopped (a notebook with very large or " \
                                     "unusual content?)", reason
    assert list(pages.iterdir()) == []
    assert signal.alarm(0) == 0 and signal.getsignal(signal.SIGALRM) is signal.SIG_DFL


def test_a_report_the_disk_refuses_is_named_with_its_file_not_errno_jargon(monkeypatch, tmp_path):
    """feedback lists each student it could not write for; a read-only folder reads as such, not '[Errno 30]'."""
    import errno
    from types import SimpleNamespace

    from autograder import feedback

    course = SimpleNamespace(step_dir=lambda step, student: tmp_path / step / student / "part-ii")  # nothing written

    def refuse(*args):
        raise OSError(errno.EROFS, "Read-only file system", "/course/feedback/ann/part-ii/02-shapes-and-loss.html")

    monkeypatch.setattr(feedback, "generate_for", refuse)
    monkeypatch.setattr(feedback, "quiet_nbgrader_logs", lambda: None)
    files, reason = feedback._generate_safely(course, "ann", None, {})
    assert files == []
    assert reason == "cannot write /course/feedback/ann/part-ii/02-shapes-and-loss.html: Read-only file system"

    def vanish(*args):
        raise FileNotFoundError(errno.ENOENT, "No such file or directory", "/course/autograded/ann/part-ii/x.ipynb")

    monkeypatch.setattr(feedback, "generate_for", vanish)
    _, reason = feedback._generate_safely(course, "ann", None, {})
    assert reason == "file system error on /course/autograded/ann/part-ii/x.ipynb: No such file or directory"


@pytest.mark.parametrize("name", ["ann/my_work_*final*.ipynb", "<img src=x onerror=alert(1)>.ipynb",
                                  "`code` [link](http://x) &amp; \\\\ #1.ipynb", "my$work$v2 \\(x\\).ipynb"])
def test_the_file_a_page_was_graded_from_is_named_verbatim_without_markup_or_html(name):
    """A student chooses the file name: the note must show it as typed, never as markdown or HTML."""
    from autograder.feedback import graded_from_note, note_cell

    resources = {}
    note = note_cell(resources, graded_from_note(name, "02-shapes-and-loss"))  # rendered with the course's settings
    body, _ = HTMLExporter(config=load_config()).from_notebook_node(nbformat.v4.new_notebook(cells=[note]),
                                                                    resources=resources)
    text = page_text(body)
    assert f"Graded from your file {name}. It is named otherwise, but it holds the exercises of 02-shapes-and-loss" \
           in text, text[-600:]
    assert "<img" not in body and "<a href" not in body and "<em>" not in body
    # MathJax typesets $...$ and \(...\) in the page's text unless an element says not to
    assert re.search(r'<span class="tex2jax_ignore">[^<]*\.ipynb</span>', body), body[-800:]


def test_a_line_break_in_a_file_name_cannot_start_a_heading_or_code_block():
    """'a\\n===\\nb.ipynb' made the graded-from note a heading (found by review): a name is shown on one line."""
    from autograder.feedback import graded_from_note

    for name in ("a\n===\nb.ipynb", "a\n\n    b_c.ipynb", "x\r\n# y.ipynb"):
        body = rendered(graded_from_note(name, "02-shapes-and-loss"))
        assert "<h1" not in body and "<h2" not in body and "<pre" not in body, name
        shown = paragraph_text(body)
        # every character still there, in order, the line breaks as spaces
        assert " ".join(shown.split()).startswith("Graded from your file " + " ".join(name.split())), shown


def test_the_kernel_stop_note_quoting_the_student_s_line_does_not_withhold_the_page(tmp_path):
    """The note quotes the stopped cell's first line: a line the student shares with a hidden test was then on the
    page twice and counted once, and the page was withheld as a leak (found by review)."""
    from autograder.feedback import kernel_stop_note, kernel_stops

    path = graded_notebook(tmp_path, ANSWER, [new_output("stream", name="stdout", text="ok\n")])
    nb = nbformat.read(path, as_version=4)
    stopped = new_code_cell(f"{SECRET}\nimport os; os._exit(0)", execution_count=4,
                            outputs=[new_output("error", ename="KernelDied", evalue="", traceback=[])])
    nb.cells.append(stopped)
    nbformat.write(nb, path)
    nb.cells.insert(0, new_markdown_cell(kernel_stop_note(kernel_stops(nb))))  # as GetGradesNotingPending puts it
    shown = tmp_path / "shown.ipynb"
    nbformat.write(nb, shown)
    page = render(shown)
    assert page_text(page.read_text(encoding="utf-8")).count(SECRET.strip()) >= 2
    assert find_leaks(page, SIGNATURES, authored_text(path)) == []


def test_a_notebook_out_of_time_says_which_graded_cells_were_not_run_on_the_page_and_in_the_export(tmp_path):
    """The budget's failures were only seen deep inside the cells: a correct answer's test at 0 with 'not run'.
    The grader marks an unrun cell NotebookTimeout, and a test cell's failure repeats that it was not run."""
    from types import SimpleNamespace

    import nbformat

    from autograder.export import out_of_time
    from autograder.cells import not_run_for_time, stopped_for_time
    from autograder.feedback import budget_note, cell_label
    from autograder.trusted_checks import GRADER_ERRORS

    def graded(source, grade_id, ename, evalue, **meta):
        cell = nbformat.v4.new_code_cell(source)
        if grade_id:
            cell.metadata["nbgrader"] = {"grade_id": grade_id, **meta}
        cell.outputs = [nbformat.v4.new_output("error", ename=ename, evalue=evalue, traceback=[])] if ename else []
        return cell

    unrun = GRADER_ERRORS["NotebookTimeout"]
    nb = nbformat.v4.new_notebook(cells=[
        graded("f = 1", "ex_f", None, None, solution=True, grade=False),
        graded("check(f)", "test_f", "AssertionError", "f: not equal", grade=True, solution=False),
        graded("while True: pass", "ex_g", "CellTimeoutError", GRADER_ERRORS["CellTimeoutError"], solution=True),
        graded("print(g)", None, "NotebookTimeout", unrun),
        graded("check(g)", "test_g", "AssertionError", unrun, grade=True, solution=False),
        graded("h = 3", "ex_h", "NotebookTimeout", unrun, solution=True, grade=False)])
    assert not_run_for_time(nb) == ["test_g"], "answer cells carry no points: only tests are named"
    assert stopped_for_time(nb) is nb.cells[2], "ex_g ran out of time right before the first cell not run"
    nb.cells[2].outputs = []  # ex_g finished, and the budget ran out between it and print(g)
    assert stopped_for_time(nb) is None
    nb.cells[3].outputs = []  # print(g) ran too, and the budget ran out in a cell of the student's after it
    nb.cells.insert(4, graded("while True: pass  # mine", None, "CellTimeoutError", GRADER_ERRORS["CellTimeoutError"]))
    assert nb.cells[4] is stopped_for_time(nb)
    stopped = paragraph_text(rendered(budget_note(["test_g"], cell_label(nb.cells[4]))))
    assert "It was not run and count as failed. It ran out while the cell that begins “while True: pass  # mine” ran, " \
           "which was stopped: make that cell faster" in stopped, stopped
    note = budget_note(["test_g", "test_h"])
    text = paragraph_text(rendered(note))
    assert note.startswith("**Out of time.**"), note
    assert "before it reached these tests: test_g, test_h. They were not run and count as failed" in text, text
    assert "this test: test_g. It was not run" in paragraph_text(rendered(budget_note(["test_g"])))
    folder = tmp_path / "autograded" / "ann" / "part-ii"
    folder.mkdir(parents=True)
    nbformat.write(nb, folder / "03-maximum-likelihood.ipynb")
    nbformat.write(nbformat.v4.new_notebook(cells=[nb.cells[0], nb.cells[1]]), folder / "02-shapes-and-loss.ipynb")
    course = SimpleNamespace(step_dir=lambda step, student: tmp_path / step / student / "part-ii")
    assert out_of_time(course, "ann") == [
        "03-maximum-likelihood: used up its time budget; tests not run (failed): test_g"]


def test_a_deleted_answer_cell_whose_tests_failed_is_named_and_one_answered_elsewhere_is_not(tmp_path):
    """Grading puts a deleted test cell back but not a deleted code answer, and the page only showed a NameError
    asking whether the defining cell ran; the export said nothing. A student's own cell may define the answer as well
    (full marks: nothing to say), and hand-graded answers come back, so neither is named."""
    from types import SimpleNamespace

    import nbformat

    from autograder.export import deleted_answers, failing_without_answer, released_answers, submitted_cells
    from autograder.feedback import deleted_answers_note

    def cell(grade_id, **meta):
        made = nbformat.v4.new_code_cell("x = 1")
        made.metadata["nbgrader"] = {"grade_id": grade_id, **meta}
        return made

    release = tmp_path / "release" / "part-ii"
    release.mkdir(parents=True)
    released = [cell("ex_a", solution=True, grade=False), cell("test_a", grade=True, solution=False),
                cell("ex_b", solution=True, grade=False), cell("test_b1", grade=True, solution=False),
                cell("test_b2", grade=True, solution=False), cell("answer_c", solution=True, grade=True)]
    nbformat.write(nbformat.v4.new_notebook(cells=released), release / "03-maximum-likelihood.ipynb")
    nbformat.write(nbformat.v4.new_notebook(cells=released[:2]), release / "02-shapes-and-loss.ipynb")
    course = SimpleNamespace(release_dir=release, step_dir=lambda step, student: tmp_path / step / student / "part-ii")
    answers = released_answers(course)
    assert answers == {"03-maximum-likelihood": {"ex_a": ("test_a",), "ex_b": ("test_b1", "test_b2")},
                       "02-shapes-and-loss": {"ex_a": ("test_a",)}}
    handed = tmp_path / "submitted" / "ann" / "part-ii"
    handed.mkdir(parents=True)
    # 03 without ex_b and answer_c; 02 without its only answer (not gradable: its own note says so)
    nbformat.write(nbformat.v4.new_notebook(cells=released[:2] + released[3:5]), handed / "03-maximum-likelihood.ipynb")
    nbformat.write(nbformat.v4.new_notebook(cells=[released[1]]), handed / "02-shapes-and-loss.ipynb")
    gone = deleted_answers(submitted_cells(course, "ann"), answers)
    assert gone == {"03-maximum-likelihood": {"ex_b": ("test_b1", "test_b2")}}
    assert failing_without_answer(gone["03-maximum-likelihood"], {"test_a", "test_b2"}) == ["ex_b"]
    assert failing_without_answer(gone["03-maximum-likelihood"], {"test_a"}) == [], "answered in a cell of their own"
    text = paragraph_text(rendered(deleted_answers_note(["ex_b"])))
    assert text.startswith("Answer cell deleted. Your notebook has no answer cell ex_b, and the tests of that exercise "
                           "failed. Grading does not put a deleted answer cell back"), text
    assert "answer cells ex_b, ex_d, and the tests of those exercises failed" in \
        paragraph_text(rendered(deleted_answers_note(["ex_b", "ex_d"])))


def test_a_graded_page_says_which_files_of_its_notebook_collect_did_not_accept():
    """A damaged resubmission is rejected and the earlier hand-in stays graded: grades.csv said so, the student's page
    did not, so the student believed the new file was graded. An older copy or a duplicate that lost to the notebook
    graded, or a PDF or HTML export of it, is no such file (found by review: the note misfired on them)."""
    from autograder.feedback import rejected_files_note, rejected_for

    log = {"students": {}, "ignored": [], "rejected": [
        {"student": "ann", "file": "ann/03-maximum-likelihood.ipynb", "reason": "invalid JSON"},
        {"student": "ann", "file": "ann/notes.txt", "reason": "not a notebook"},
        {"student": "ann", "file": "ann/03-maximum-likelihood.html", "reason": "not a notebook (.html)"},
        {"student": "ann", "file": "ann/03-maximum-likelihood (old).ipynb",
         "reason": "duplicate: ann handed in 03-maximum-likelihood.ipynb more than once; kept the newer"},
        {"student": "ann", "file": "ann/v0/03-maximum-likelihood.ipynb",
         "reason": "older (2026-03-01 10:00 UTC) than the 03-maximum-likelihood.ipynb collected before"},
        {"student": "bob", "file": "bob/03-maximum-likelihood.ipynb", "reason": "invalid JSON"}]}
    notebooks = ["02-shapes-and-loss", "03-maximum-likelihood"]
    assert rejected_for("ann", notebooks, log) == {"03-maximum-likelihood": ["ann/03-maximum-likelihood.ipynb (invalid JSON)"]}
    assert rejected_for("cy", notebooks, log) == {}
    text = paragraph_text(rendered(rejected_files_note(["ann/03-maximum-likelihood.ipynb (invalid JSON)"],
                                                       "03-maximum-likelihood")))
    assert text.startswith("A file of yours was not graded. This file was not accepted when your hand-in was "
                           "collected: ann/03-maximum-likelihood.ipynb (invalid JSON). This page grades the copy of "
                           "03-maximum-likelihood.ipynb that was filed for you instead"), text


HOSTILE = "window.__hostile_ran = 1"


def _live_script(page: str) -> list[str]:
    """Places where the hostile marker would run in a browser: inside a <script> element or an attribute (an event
    handler, a javascript: address), rather than as text."""
    from html.parser import HTMLParser

    found = []

    class Scan(HTMLParser):
        in_script = False

        def handle_starttag(self, tag, attrs):
            self.in_script = tag == "script"
            found.extend(f"<{tag} {name}=...>" for name, value in attrs if value and ("__hostile" in value or
                                                                                       "javascript:" in value.lower()))

        def handle_endtag(self, tag):
            self.in_script = False

        def handle_data(self, data):
            if self.in_script and "__hostile" in data:
                found.append("<script>")

    Scan().feed(page)
    return found


def hostile_notebook() -> nbformat.NotebookNode:
    """An autograded hand-in whose answer, course text and outputs carry HTML and JavaScript, beside math with '<'."""
    answer = new_markdown_cell(f"## 我的回答\n\n$p(x_t\\mid x_{{<t}})$ 与 $0<k<n$。<img src=x onerror=\"{HOSTILE}\">"
                               f"<script>{HOSTILE}</script> [link](javascript:{HOSTILE})\n\n"
                               f"<div onmouseover=\"{HOSTILE}\">block</div>\n\n"
                               f"```mermaid\n<img src=x onerror=\"{HOSTILE}\">\n```\n\n"
                               "![a figure](attachment:fig.svg) ![lost](attachment:missing.png)")
    answer.attachments = {"fig.svg": {"image/svg+xml": "PHN2Zy8+"}}  # an SVG drawing: shown, as an <img>
    answer.metadata["nbgrader"] = {"grade": True, "solution": True, "locked": False, "points": 2,
                                   "grade_id": "answer_x", "schema_version": 3, "score": 1.0}
    text = new_markdown_cell(f"course text the student edited <svg onload=\"{HOSTILE}\"></svg>")
    forged = new_markdown_cell(f"a note of the grader's? <img src=y onerror=\"{HOSTILE}\">",
                               metadata={"autograder_note": "a guess at the token"})
    outputs = [new_output("display_data", data={"text/html": f"<b>bold</b><img src=x onerror=\"{HOSTILE}\">",
                                                "text/plain": "bold"}),
               new_output("display_data", data={"application/javascript": HOSTILE}),
               new_output("display_data", data={"text/markdown": f"<script>{HOSTILE}</script> *md*"}),
               new_output("display_data", data={"image/svg+xml": f"<svg onload=\"{HOSTILE}\"></svg>"}),
               new_output("display_data", data={"image/png": "iVBORw0KGgo=", "text/plain": "fig"},
                          metadata={"image/png": {"width": f"1 onload={HOSTILE}//", "height": 240}}),
               new_output("display_data", data={"image/jpeg": "AAAA"},
                          metadata={"height": f"5 onerror={HOSTILE}", "filenames": {"image/jpeg": "https://x.example/"}}),
               new_output("display_data", data={"text/latex": "$p(x_t \\mid x_{<t})$",  # display(Math(...))
                                                "text/plain": "<IPython.core.display.Math object>"}),
               new_output("execute_result", execution_count=1, data={  # a pandas DataFrame
                   "text/html": "<table><thead><tr><th>loss</th></tr></thead><tbody><tr><td>0.25</td></tr></tbody></table>",
                   "text/plain": "   loss\n0  0.25"})]
    code = new_code_cell("show()", outputs=outputs, execution_count=1)
    return nbformat.v4.new_notebook(cells=[text, forged, answer, code])


def test_html_a_student_wrote_runs_neither_in_formgrader_nor_on_the_feedback_page(tmp_path, monkeypatch):
    """Formgrader (the grader's Jupyter session) and the feedback pages render a hand-in's markdown and outputs:
    its HTML and JavaScript must arrive as text (review: <img onerror> in a written answer ran in formgrader),
    while markdown's own headings and the math, '<' included, still render."""
    monkeypatch.setenv("PART_II_BUILD", str(tmp_path / "build"))
    formgrader = Path(nbgrader.__file__).parent / "server_extensions" / "formgrader"
    css = [str(formgrader / "static" / "node_modules" / "bootstrap" / "dist" / "css")]  # what the pages inline
    pages = {"formgrader": formgrader_page(hostile_notebook())}
    config = load_config()
    template_config(config)
    config.HTMLExporter.extra_template_paths = css
    exporter = HTMLExporter(config=config)
    exporter.register_preprocessor(LabelGradedCells(), enabled=True)
    pages["feedback"], _ = exporter.from_notebook_node(
        hostile_notebook(), resources={"nbgrader": {"notebook": "nb", "score": 0.0, "max_score": 2.0, "late_penalty": 0.0},
                                       "autograder_note": "this render's token"})
    for where, page in pages.items():
        assert _live_script(page) == [], (where, _live_script(page))
        text = page_text(page)
        assert f'<img src=x onerror="{HOSTILE}">' in text, where  # the grader reads what the student wrote
        assert "x_{<t}" in text and "0<k<n" in text and re.search(r"<h2[^>]*>我的回答", page), where
        assert '<img alt="a figure" src="data:image/svg+xml;base64,PHN2Zy8+"' in page.replace(' />', '/>') or \
            'src="data:image/svg+xml;base64,PHN2Zy8+" alt="a figure"' in page, where
        assert "[missing attachment: attachment:missing.png]" in text, where  # the page is still made
        assert "0  0.25" in text and "<thead>" not in text, where  # a table's plain text, not its escaped HTML
        assert "$p(x_t \\mid x_{<t})$" in text and "Math object" not in text, where  # MathJax sets the LaTeX


def cells_page(folder: Path, cells: list, **metadata) -> str:
    """The feedback page of a notebook of these cells (notebook metadata as given), as render() makes it."""
    path = folder / "cells.ipynb"
    nbformat.write(nbformat.v4.new_notebook(cells=cells, metadata=metadata), path)
    return render(path).read_text(encoding="utf-8")


NESTED_EMPHASIS = "*a **b " * 800 + " c** d*" * 800  # 11,200 characters; formatted, some 10 s (an audit)


def test_a_cell_crafted_to_take_the_parsers_minutes_is_shown_as_written_and_a_long_honest_one_formatted(tmp_path):
    """Markdown, code and raw cells over FORMAT_CELL_CHARS reach the page as written, escaped, saying why; a cell
    under it is formatted as before."""
    from autograder.feedback import FORMAT_CELL_CHARS

    blank_lines = "    \n" * 2100 + "x = 1"  # indented blank lines: the IPython lexer's square
    items = "<li>" * 2600  # the HTML cleaner's
    honest = "*a* " * (FORMAT_CELL_CHARS // 4)
    raw = nbformat.v4.new_raw_cell(items)
    page = cells_page(tmp_path, [new_markdown_cell(NESTED_EMPHASIS), new_code_cell(blank_lines), raw,
                                 new_markdown_cell(honest)])
    why = "(shown as written: this cell has {:,} characters; a page formats cells of up to {:,})"
    shown = [(len(text), why.format(len(text), FORMAT_CELL_CHARS) in page, f">{html.escape(text)}</pre>" in page)
             for text in (NESTED_EMPHASIS, blank_lines, items)]  # not `in page` asserted: pytest would diff the page
    assert shown == [(len(NESTED_EMPHASIS), True, True), (len(blank_lines), True, True), (len(items), True, True)]
    assert page.count("shown as written") == 3
    assert page.count("<em>a</em>") == FORMAT_CELL_CHARS // 4  # the honest cell, formatted


def test_a_page_formats_cells_until_its_budget_is_spent_then_shows_the_rest_as_written(tmp_path):
    """Each formatted cell counts its length squared against FORMAT_PAGE_WORK: of cells of 9,000 characters, as
    many as fit are formatted and the rest shown as written."""
    from autograder.feedback import FORMAT_PAGE_WORK

    cell = "*a* " * 2250
    fit = FORMAT_PAGE_WORK // len(cell) ** 2
    page = cells_page(tmp_path, [new_markdown_cell(cell) for _ in range(fit + 2)])
    assert page.count("<em>a</em>") == 2250 * fit
    assert page.count("(shown as written: the cells above it took all the formatting one page gets)") == 2


def test_a_whole_course_notebook_is_formatted_on_its_page(tmp_path):
    """The course's notebook with the most text, hidden tests and all, is far within the bounds: every cell formatted."""
    from autograder.feedback import FORMAT_CELL_CHARS, FORMAT_PAGE_WORK

    def work(path):
        return sum(len(cell.source) ** 2 for cell in nbformat.read(path, as_version=4).cells)

    sources = sorted((REPO / "notebooks" / "part-ii").glob("*.ipynb"))
    largest = max(sources, key=work)
    assert work(largest) < FORMAT_PAGE_WORK / 4
    assert max(len(c.source) for s in sources for c in nbformat.read(s, as_version=4).cells) < FORMAT_CELL_CHARS / 2
    nb = nbformat.read(largest, as_version=4)
    for cell in nb.cells:  # scored, as GetGrades leaves a graded cell
        if cell.metadata.get("nbgrader", {}).get("grade"):
            cell.metadata.nbgrader["score"] = cell.metadata.nbgrader["points"]
    nbformat.write(nb, tmp_path / largest.name)
    page = render(tmp_path / largest.name).read_text(encoding="utf-8")
    assert page.count("shown as written") == 0
    assert page.count('class="highlight hl-ipython3"><pre><span></span>') == sum(c.cell_type == "code" for c in nb.cells)


def test_a_hand_in_cannot_choose_the_highlighter_and_only_python_fences_are_highlighted(tmp_path):
    """A notebook's language_info and a cell's magics_language choose nbconvert's lexer, one of pygments' 600 (an
    audit: hundreds take superlinear time): code is highlighted as Python whatever they say, and a fence only when
    it is Python."""
    code = new_code_cell("using System;", metadata={"magics_language": "csharp"})
    fences = new_markdown_cell("```csharp\nusing System;\n```\n\n```python\ndef f():\n    pass\n```")
    page = cells_page(tmp_path, [code, fences], language_info={"name": "csharp", "pygments_lexer": "csharp"})
    assert "hl-csharp" not in page and 'class="highlight hl-ipython3"><pre><span></span>' in page
    assert not re.search(r'<span class="k\w*">using</span>', page)  # C#'s keyword; a name to Python
    assert '<code class="language-csharp">using System;\n</code>' in page
    assert '<span class="k">def</span>' in page


def formgrader_page(nb) -> str:
    """The page formgrader's template makes of a notebook with the course config (which formgrader's config file
    loads too), as a grader sees a submission."""
    formgrader = Path(nbgrader.__file__).parent / "server_extensions" / "formgrader"
    config = load_config()
    config.HTMLExporter.extra_template_paths = [str(formgrader / "static" / "node_modules" / "bootstrap" / "dist" / "css")]
    config.HTMLExporter.template_name = "formgrade"  # as formgrader builds its exporter
    config.HTMLExporter.extra_template_basedirs = [str(formgrader / "templates")]
    page, _ = HTMLExporter(config=config).from_notebook_node(
        nb, resources={"base_url": "/", "mathjax_url": "", "index": 0, "total": 1, "notebook_id": "nb",
                       "assignment_id": "part-ii", "student": "s"})
    return page


def test_formgrader_shows_a_crafted_output_as_written_and_an_honest_one_coloured():
    """Formgrader shows a submission's outputs (up to 16 MiB), through bleach and the colour-code converter, which take
    superlinear time on crafted text: beyond the bounds an output's HTML is shown as written and its text without
    colour codes, in linear time; a short coloured output keeps its colours."""
    from autograder.feedback import FORMAT_CELL_CHARS

    codes = "\x1b[38;5;" * 2000  # 14,000 characters
    items = "<li>" * 3000
    outputs = [new_output("stream", name="stdout", text="\x1b[31mred\x1b[0m\n"),
               new_output("stream", name="stdout", text=codes),
               new_output("display_data", data={"text/html": items})]
    page = formgrader_page(nbformat.v4.new_notebook(cells=[new_code_cell("show()", outputs=outputs, execution_count=1)]))
    assert page.count('<span class="ansi-red-fg">red</span>') == 1
    assert page.count(html.escape("[38;5;" * 2000)) == 1 and page.count("\x1b") == 0
    assert page.count(f"(shown as written: this output has 12,000 characters; a page formats outputs of up to "
                      f"{FORMAT_CELL_CHARS:,})") == 1
    assert page.count(html.escape(items)) == 1


def test_a_long_markdown_output_is_shown_as_written_once_in_formgrader():
    """A text/markdown output goes through markdown2html, then clean_html: over the cap, the first shows it as written,
    and the second leaves that as it is (a review: it was escaped again, under a second note)."""
    from autograder.feedback import FORMAT_CELL_CHARS

    text = "<b>bold?</b> " * (FORMAT_CELL_CHARS // 10)
    output = new_output("display_data", data={"text/markdown": text})
    page = formgrader_page(nbformat.v4.new_notebook(cells=[new_code_cell("show()", outputs=[output], execution_count=1)]))
    assert page.count("shown as written") == 1
    assert page.count(html.escape(text)) == 1 and page.count("&amp;lt;b&amp;gt;") == 0


def test_honest_long_outputs_in_formgrader_leave_the_answers_below_them_formatted():
    """Printed text without colour codes is escaped as ansi2html escapes it and not counted against the page: four
    printed arrays of 10,000 characters would otherwise leave the student's written answer below them unformatted."""
    from autograder.feedback import FORMAT_CELL_CHARS, FORMAT_PAGE_WORK

    printed = ("0.125 " * FORMAT_CELL_CHARS)[:FORMAT_CELL_CHARS - 2] + "\n"
    outputs = [new_output("stream", name="stdout", text=printed) for _ in range(FORMAT_PAGE_WORK // FORMAT_CELL_CHARS ** 2)]
    code = new_code_cell("show()", outputs=outputs, execution_count=1)
    left = FORMAT_PAGE_WORK - len(code.source) ** 2 - len(outputs) * len(printed) ** 2  # if the outputs counted
    answer = new_markdown_cell("我的回答：*交叉熵* = 熵 + KL & <b>" + "。" * math.isqrt(left))
    page = formgrader_page(nbformat.v4.new_notebook(cells=[code, answer]))
    assert page.count("shown as written") == 0
    assert page.count("<em>交叉熵</em>") == 1 and page.count("&amp; &lt;b&gt;") == 1
    assert page.count(printed.strip()) == len(outputs)


def test_a_line_of_only_whitespace_is_highlighted_empty_and_every_other_line_as_written():
    """The lexers read a run of whitespace-only lines again from each line: such a line is emptied, which looks the
    same; lines end as the lexer ends them."""
    from autograder.feedback import blank_whitespace_lines

    assert blank_whitespace_lines("def f(x):\r\n    \t\n    return x  \r\f\n") == "def f(x):\n\n    return x  \n\n"
    assert blank_whitespace_lines("    \n" * 3 + "x") == "\n\n\nx"


def test_magic_shell_and_help_lines_are_highlighted_as_ipython_and_a_run_of_names_in_linear_time():
    """Code is highlighted with pygments' Python lexer plus IPython's syntax: the IPython lexer read a run of names
    again from each of its characters (an audit: 16,000 characters of 'a.' took 6 s; 200,000 would take some 15
    minutes). What a cell of IPython syntax looks like stays as the IPython lexer shows it."""
    from linear_time import run_on

    from autograder.feedback import python_html

    page = python_html("%timeit f(x)\n!pip install numpy\nnp.sum?\nx = a % b\n")
    assert '<span class="o">%</span><span class="k">timeit</span>' in page
    assert '<span class="o">!</span>pip install numpy' in page
    assert '<span class="n">sum</span><span class="o">?</span>' in page
    assert '<span class="n">a</span> <span class="o">%</span> <span class="n">b</span>' in page  # the operator
    assert 'class="err"' not in page  # pygments' red box
    chain = "x = " + "a." * 100_000 + "a"
    setup = "from autograder.feedback import python_html"
    assert run_on("python_html(text).count('<span class=\"o\">.</span>')", chain, setup) == "100000"
    # a run of empty lines between two lines (a review: every '%%' rule of the IPython lexer reads the run again
    # from each of its newlines; 10,000 characters took 12 s); at the start or end pygments strips it
    lines = "x\n" + "    \n" * 50_000 + "x"
    assert run_on("python_html(text).count('\\n')", lines, setup) == repr(python_html(lines).count("\n"))


def test_a_link_into_files_loses_the_prefix_and_text_in_code_stays_as_written(tmp_path):
    """strip_files_prefix keeps nbconvert's src/href rewrite; its markdown pattern, which rewrote code spans and
    took cubic time, is gone."""
    page = cells_page(tmp_path, [new_markdown_cell("[data](files/data.csv) and `[a](files/b)`")])
    assert 'href="data.csv"' in page
    assert "<code>[a](files/b)</code>" in page


def test_a_feedback_page_shows_no_output_of_the_students_cells_only_that_a_cell_failed(tmp_path):
    """A later notebook's cell could print what an earlier notebook's hidden tests were (they share a sandbox; review:
    encoded in a cell before the first test cell): no cell output reaches the page, only errors' names and the
    grader's own words; the test cell keeps its outcome."""
    from autograder.feedback import HideCellOutputs
    from autograder.trusted_checks import GRADER_ERRORS

    leak = "eJzLSM3JyQcABiwCFQ=="  # what a cell printed
    notebook = graded_notebook(tmp_path, ANSWER, [hidden_failure("hidden kl: values differ")],
                               later_outputs=[new_output("stream", name="stdout", text=leak),
                                              new_output("display_data", data={"image/png": "iVBORw0KGgo=",
                                                                               "text/plain": leak})])
    nb = nbformat.read(notebook, as_version=4)
    nb.cells[1].outputs = [new_output("error", ename="ValueError", evalue=leak, traceback=[leak])]
    nb.cells.append(new_code_cell("import os\nos._exit(1)", execution_count=4, outputs=[
        new_output("error", ename="KernelDied", evalue=leak, traceback=[leak])]))
    nb.cells.append(new_code_cell("x = (", execution_count=int.from_bytes(leak.encode(), "big"), outputs=[
        new_output("error", ename="SyntaxError", evalue=leak, traceback=[leak])]))  # a kernel sets its own count
    nbformat.write(nb, notebook)
    config = load_config()
    template_config(config)
    formgrader = Path(nbgrader.__file__).parent / "server_extensions" / "formgrader"
    config.HTMLExporter.extra_template_paths = [str(formgrader / "static" / "node_modules" / "bootstrap" / "dist" / "css")]
    exporter = HTMLExporter(config=config)
    for preprocessor in (HideHiddenTests(), HideCellOutputs(), LabelGradedCells()):
        exporter.register_preprocessor(preprocessor, enabled=True)
    body, _ = exporter.from_notebook_node(nb, resources={"nbgrader": {"notebook": "nb", "score": 0.0, "max_score": 1.0,
                                                                        "late_penalty": 0.0}})
    text = page_text(body)
    assert leak not in body and "iVBORw0KGgo=" not in body
    prompts = re.findall(r"In\xa0\[(\d+)\]", body)
    assert prompts == ["1", "2", "3", "4"], prompts  # counted on the page: not the kernel's 3,854-digit count
    assert "[output not shown: feedback pages show no cell output; run the notebook to see it]" in text
    assert "ValueError: details not shown: feedback pages show no cell output; run the notebook to see it" in text
    assert f"KernelDied: {GRADER_ERRORS['KernelDied']}" in text
    assert "SyntaxError: '(' was never closed (line 1 of the cell)" in text
    assert "A hidden check failed: hidden kl: values differ" in text  # the test cell's outcome stays


def test_only_a_cell_stopped_at_its_own_time_limit_gets_the_time_limit_note():
    """Not a test cell (its failure says so), not the cell the notebook's budget stopped (the budget's note), not a
    cell that raised something else; the note names each cell and what grading did."""
    from nbformat.v4 import new_code_cell, new_output

    from autograder.cells import BUDGET_SPENT, cut_at_time_limit
    from autograder.feedback import time_limit_note

    def ran(ename, evalue="", test=False):
        cell = new_code_cell("while True:\n    pass", outputs=[new_output("error", ename=ename, evalue=evalue, traceback=[])])
        if test:
            cell.metadata["nbgrader"] = {"grade": True, "grade_id": "test_x", "solution": False, "points": 1}
        return cell

    assert cut_at_time_limit(ran("CellTimeoutError", "the cell ran longer than its 60 s limit"))
    assert cut_at_time_limit(ran("KeyboardInterrupt"))
    assert not cut_at_time_limit(ran("CellTimeoutError", test=True))
    assert not cut_at_time_limit(ran("CellTimeoutError", f"{BUDGET_SPENT} (600 s)"))
    assert not cut_at_time_limit(ran("ValueError", "bad"))
    one = time_limit_note(["the cell that begins while True:"])
    assert one.startswith("**A cell ran out of time.** Grading stopped the cell that begins while True:, which ran "
                          "longer than a cell may run when graded, and went on with the next cell")
    two = time_limit_note(["a", "b"])
    assert "Grading stopped a, b, which ran longer" in two and "whatever they had" in two and "Make them faster" in two


def test_grade_says_whose_scores_grading_again_changed_and_by_how_much():
    """The line grade prints after grading again submissions graded before (a changed test, a new hand-in)."""
    from autograder.grade import regrade_line, score_changes

    before = {"ann": {"01-a": 5.0, "02-b": 9.0}, "bo": {"01-a": 3.0}, "cy": {"01-a": 1.0}}
    after = {"ann": {"01-a": 5.0, "02-b": 11.0}, "bo": {"01-a": 3.0}, "cy": {"01-a": 0.5, "02-b": 2.0},
             "dee": {"01-a": 4.0}}  # dee is graded for the first time: not graded again
    changes = score_changes(before, after)
    assert changes == {"ann": [("02-b", 9.0, 11.0)], "bo": [], "cy": [("01-a", 1.0, 0.5), ("02-b", None, 2.0)]}
    assert regrade_line(changes) == ("graded again 3 submissions graded before: scores changed for 2: "
                                     "ann +2 (02-b 9 -> 11); cy +1.5 (01-a 1 -> 0.5, 02-b - -> 2)")
    assert regrade_line({"bo": []}) == "graded again 1 submission graded before: no score changed"
    many = {f"s{i}": [("01-a", 0.0, 1.0)] for i in range(7)}
    assert regrade_line(many).endswith("s4 +1 (01-a 0 -> 1), and 2 more (export's grades.csv has every score)")


def test_an_error_that_may_quote_the_kernel_reaches_the_instructor_cut_to_300_characters():
    """nbgrader's validation error quotes a forged execution count whole: the job table, grade's summary and
    grades.csv's notes carried it at any length (red-team review)."""
    import logging

    from autograder.worker import ErrorLog

    errors = ErrorLog()
    forged = "{'LEAK': '" + "x" * 5000 + "'}"
    errors.emit(logging.makeLogRecord({"msg": f"Traceback (most recent call last):\n  ...\nValidationError: {forged}"}))
    reason = errors.reason()
    assert reason.startswith("ValidationError: {'LEAK'") and len(reason) == 300 and reason.endswith("…"), reason
    short = ErrorLog()
    short.emit(logging.makeLogRecord({"msg": "Traceback (most recent call last):\n  ...\nValueError: bad cell"}))
    assert short.reason() == "ValueError: bad cell"
    # nbgrader's first message when no traceback came: one line, no terminal control of the kernel's choosing
    bare = ErrorLog()
    bare.emit(logging.makeLogRecord({"msg": "kernel said:\n\x1b]0;pwned\x07\x1b[2Jdone"}))
    assert bare.reason() == "kernel said:??]0;pwned??[2Jdone"


def test_a_failed_worker_s_last_log_line_reaches_the_instructor_as_one_printable_line_of_at_most_300(tmp_path):
    """The worker's log may end with words of a kernel's (an exception quoting what it sent): grade's summary and the
    job table show them without terminal control, cut to 300 characters."""
    from autograder.grade import Running, _failure_reason

    (tmp_path / "worker.log").write_text("Traceback (most recent call last):\nValueError: \x1b[2J" + "y" * 500 + "\n")
    reason = _failure_reason(Running("s1", None, tmp_path, 0.0, 60.0), 1, timed_out=False)
    assert reason == "the grading process failed (exit code 1): ValueError: ?[2J" + "y" * 283 + "…"
    (tmp_path / "worker.log").unlink()
    assert _failure_reason(Running("s1", None, tmp_path, 0.0, 60.0), 1, timed_out=False).endswith(": no output")


def test_grading_s_preprocessors_recognise_every_option_of_the_course_config(caplog):
    """nbgrader's preprocessors and the harness's executor know each option the course config gives their classes:
    the output priority, once set on NbConvertBase, which nbgrader's preprocessors redefine without config, made
    each of them warn on every notebook graded (half of each worker's log)."""
    import logging

    import nbgrader.preprocessors

    from autograder.worker import BudgetedExecute

    config = load_config()
    with caplog.at_level(logging.WARNING):
        for cls in [*(getattr(nbgrader.preprocessors, name) for name in nbgrader.preprocessors.__all__),
                    BudgetedExecute]:
            cls(config=config)
    assert [r.getMessage() for r in caplog.records if "not recognized" in r.getMessage()] == []


def test_the_overview_notes_blank_copies_and_files_no_notebook_page_names():
    """A student's overview (index.html) names the notebooks handed in as released and the rejected files that no
    notebook's page names (a .docx, say: it was told only on the pages of notebooks not handed in; an instructor's
    walkthrough); a rejected notebook file is left to its notebook's page, and another student's files are not theirs."""
    from autograder.feedback import hand_in_notes

    notebooks = ["01-probability-and-bayes", "02-shapes-and-loss"]
    log = {"students": {"ann": {"unanswered": ["02-shapes-and-loss"]}, "bob": {}},
           "rejected": [{"file": "ann/notes.docx", "reason": "not a notebook", "student": "ann"},
                        {"file": "ann/01-probability-and-bayes.ipynb", "reason": "invalid JSON", "student": "ann"},
                        {"file": "bob/essay.pdf", "reason": "not a notebook", "student": "bob"}]}
    assert hand_in_notes("ann", notebooks, log) == [
        "handed in as released, with no answer filled in: 02-shapes-and-loss; if you meant to hand in another file, "
        "tell your instructor", "files you handed in that were not accepted: ann/notes.docx (not a notebook)"]
    assert hand_in_notes("bob", notebooks, log) == [
        "files you handed in that were not accepted: bob/essay.pdf (not a notebook)"]
    assert hand_in_notes("cyd", notebooks, log) == []


def test_feedback_says_no_pages_yet_for_the_term_s_routine_and_error_for_the_rest(capsys):
    """An end-of-term walkthrough: feedback printed `s1004: ERROR handed in again after grading` for a routine
    resubmission. A hand-in not graded yet or handed in again reads 'no pages yet'; a failed grading stays an ERROR."""
    from autograder.feedback import FeedbackResult, print_feedback

    print_feedback(FeedbackResult(errors={
        "ann": "handed in again after grading (collect filed newer files): no feedback written; run grade first",
        "bob": "collected but not graded yet: no feedback written; run grade first",
        "cy": "grading failed (worker died): no feedback written; see `grade`'s summary"}))
    out = capsys.readouterr().out
    assert "  ann: no pages yet: handed in again after grading (collect filed newer files)" in out, out
    assert "  bob: no pages yet: collected but not graded yet" in out, out
    assert "  cy: ERROR grading failed (worker died)" in out, out


def test_a_student_whose_pages_need_too_much_memory_gets_an_error_and_the_machine_keeps_its_memory(tmp_path):
    """An audit of the parsers feedback runs on student text: markdown takes hundreds of MiB per MiB of a crafted cell
    (2.5 GiB for 4 MiB; some 28 GiB projected for a 50 MiB hand-in), and the time limit came too late for the machine.
    A pages worker now has PAGES_MEMORY_BYTES more than it holds at start; past it the student gets an error. Here in
    a child process, with 200 MiB, a real markdown render of 1 MiB of emphasis."""
    import subprocess
    import sys
    import textwrap

    script = textwrap.dedent('''
        from types import SimpleNamespace
        from pathlib import Path
        from nbconvert.filters.markdown_mistune import markdown2html_mistune
        from autograder import feedback

        def render(*args):
            markdown2html_mistune("*a* " * 250_000)
            return []

        feedback.generate_for, feedback.quiet_nbgrader_logs = render, lambda: None
        feedback._start_pages_worker(200 * 2**20)
        course = SimpleNamespace(step_dir=lambda step, student: Path(%r) / step / student / "part-ii")
        print(feedback._generate_safely(course, "ann", None, {}))
        ''' % str(tmp_path))
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300,
                          cwd=Path(__file__).resolve().parent.parent)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == ("([], \"writing the pages ran out of the memory a student's pages may take, and was "
                                   "stopped (a notebook with very large or unusual content?)\")"), done.stdout


# --- mutation audit: behaviour no test pinned -------------------------------------------------------------------


def test_a_javascript_link_and_html_printed_by_a_cell_stay_inert_in_formgrader_and_on_the_page(tmp_path):
    """A well-formed javascript: link in a written answer (hostile_notebook's has a space, so markdown never reads it
    as a link) must not become a live href; HTML a cell printed (plain text, no colour codes) is shown as text in
    formgrader, which shows every output."""
    printed = f'<img src=x onerror="{HOSTILE}">'
    link = new_markdown_cell("[click me](javascript:window.__hostile_ran=1)")
    code = new_code_cell("print(x)", execution_count=1,
                         outputs=[new_output("stream", name="stdout", text=printed + "\n")])
    page = formgrader_page(nbformat.v4.new_notebook(cells=[link, code]))
    assert _live_script(page) == [], _live_script(page)
    assert printed in page_text(page) and "click me" in page_text(page)
    feedback = cells_page(tmp_path, [link])
    assert _live_script(feedback) == [], _live_script(feedback)


def test_the_page_gives_times_in_utc_and_beijing_time():
    import datetime as dt

    from autograder.feedback import both_clocks

    assert both_clocks(dt.datetime(2026, 3, 1, 16, 3)) == "2026-03-01 16:03 UTC, 2026-03-02 00:03 Beijing time"


def test_only_hidden_lines_the_release_does_not_show_and_long_enough_to_mean_something_are_leak_signatures(tmp_path):
    """hidden_lines: a hidden line that the release shows anyway (a visible check repeated in the hidden block) or one
    shorter than MIN_LEAK_LINE is no signature: counted, it would withhold every page that shows it."""
    from types import SimpleNamespace

    from autograder.feedback import hidden_lines

    visible = "check_close('kl is finite', ex_kl(p, q), 0.0)"
    secret = "_q = np.array([0.125, 0.375, 0.5])  # hidden input"
    source = tmp_path / "source"
    release = tmp_path / "release"
    for folder, text in ((source, f"{visible}\n### BEGIN HIDDEN TESTS\n{visible}\nx = 1\n{secret}\n"
                                  "### END HIDDEN TESTS"), (release, visible)):
        folder.mkdir()
        nbformat.write(nbformat.v4.new_notebook(cells=[new_code_cell(text)]), folder / "nb.ipynb")
    assert hidden_lines(SimpleNamespace(source_dir=source, release_dir=release)) == {secret}


def test_a_page_lists_at_most_five_files_no_notebook_page_names():
    from autograder.feedback import unmatched_rejections

    log = {"students": {}, "ignored": [], "rejected": [
        {"file": f"ann/venv/lib/f{i}.py", "reason": "not a notebook (.py)", "student": "ann", "copy": None}
        for i in range(7)]}
    assert unmatched_rejections("ann", ["02-shapes-and-loss"], log) == "; ".join(
        f"ann/venv/lib/f{i}.py (not a notebook (.py))" for i in range(5)) + "; …"


def test_a_late_notebook_that_scored_0_is_told_the_penalty_takes_nothing():
    import datetime as dt

    from autograder.feedback import late_note

    due = dt.datetime(2026, 3, 1, 15, 59)
    note = late_note(due + dt.timedelta(hours=1), due, 3600, 0.0, capped=True)
    assert note.endswith("The late penalty takes nothing: this notebook scored 0."), note


def test_a_lost_cells_error_reaches_the_page_without_nbgrader_s_words():
    from autograder.cells import LOST_CELLS
    from autograder.feedback import error_for_the_page

    ours = f"{LOST_CELLS}1 of its 2 answer cells (ex_a)"
    assert error_for_the_page(f"{ours} (nbgrader: CellExecutionError: _q = [0.125, 0.375])") == ours


def _preprocessor(**gradebook):
    """GetGradesNotingPending as nbgrader's preprocess leaves it for one cell: a gradebook answering find_*."""
    from types import SimpleNamespace

    from autograder.feedback import GetGradesNotingPending

    pre = GetGradesNotingPending()
    pre.gradebook = SimpleNamespace(**gradebook)
    pre.notebook_id, pre.assignment_id, pre.student_id = "nb", "part-ii", "ann"
    return pre


def test_an_answer_left_as_released_says_no_answer_also_after_a_grader_emptied_the_comment_box():
    from types import SimpleNamespace

    from autograder.feedback import UNANSWERED

    comment = SimpleNamespace(manual_comment="", auto_comment="No response.", comment="")
    cell = new_markdown_cell("YOUR ANSWER HERE")
    cell.metadata["nbgrader"] = {"grade": True, "solution": True, "grade_id": "answer_x", "points": 2}
    _preprocessor(find_comment=lambda *args: comment)._get_comment(cell, {})
    assert cell.metadata.nbgrader["comment"] == UNANSWERED


def test_a_hand_score_a_regrade_flagged_again_is_to_be_reviewed_not_ungraded():
    from types import SimpleNamespace

    from autograder.feedback import REVIEWED_COMMENT

    grade = SimpleNamespace(score=1.5, max_score=2.0, needs_manual_grade=True, manual_score=1.5)
    cell = new_markdown_cell("my answer")
    cell.metadata["nbgrader"] = {"grade": True, "solution": True, "grade_id": "answer_x", "points": 2,
                                 "comment": "good"}
    resources = {"nbgrader": {"pending": {}}}
    _preprocessor(find_grade=lambda *args: grade, find_comment=lambda *args: SimpleNamespace(manual_comment="good")
                  )._get_score(cell, resources)
    assert resources["nbgrader"]["pending"] == {"answer_x": (2.0, True)}
    assert cell.metadata.nbgrader["comment"] == (
        f"{REVIEWED_COMMENT}good\n\nTo be reviewed: your notebook was graded again after your instructor scored this "
        "answer; the 1.5 of 2 points shown can change.")
