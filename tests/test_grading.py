"""End to end on the real part-ii assignment: release, sample class, collect, grade, feedback, export.

One sample class is graded once (2 workers, the sandbox when bubblewrap works here) and
shared by the tests. Expected scores come from the source notebooks' nbgrader metadata,
read here directly: a test cell earns its points or 0; free-text answers get no auto score.
"""

from __future__ import annotations

import codecs
import contextlib
import csv
import dataclasses
import html
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import nbformat
import psutil
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from adversarial_catalogue import NOTEBOOK as CATALOGUE_NOTEBOOK
from feedback_pages import contents
from autograder.course import REPO, AutograderError, Course
from autograder.feedback import page_text
from autograder.grade import GradeOptions, earlier_job_dirs, grade, job_rows
from autograder.sample_class import build_sample_class
from processes import process_gone, processes_of_build
from shared_builds import (CELL_TIMEOUT, NOTEBOOK_TIMEOUT, build_env, dump, editable_sources, graded_build,
                           read_grades_csv, released_build, reverse_cell_rows, run_cli, sandbox_works)

SAMPLE = ["perfect", "blank", "partial", "broken", "edited-tests", "infinite-loop"]


def options(workers: int, students=None) -> GradeOptions:
    """Grading options of these tests."""
    return GradeOptions(workers=workers, students=students, cell_timeout=CELL_TIMEOUT, notebook_timeout=NOTEBOOK_TIMEOUT,
                        no_sandbox=not sandbox_works(), progress=False)


# --- expectations, read straight from the source notebooks --------------------------------

def source_notebooks() -> dict[str, nbformat.NotebookNode]:
    """The instructor notebooks of part-ii by name."""
    return {p.stem: nbformat.read(p, as_version=4) for p in sorted((REPO / "notebooks" / "part-ii").glob("*.ipynb"))}


def meta(cell) -> dict:
    """nbgrader metadata of a cell."""
    return cell.metadata.get("nbgrader", {})


def graded_test_cells(nb) -> dict[str, float]:
    """grade id -> points of the autograded test cells (graded code cells that are not solutions)."""
    return {meta(c)["grade_id"]: float(meta(c)["points"]) for c in nb.cells
            if c.cell_type == "code" and meta(c).get("grade") and not meta(c).get("solution")}


def released_points(course: Course, name: str) -> float:
    """Points of every graded cell of the released notebook name, read from its metadata."""
    return sum(float(meta(c).get("points") or 0) for c in nbformat.read(course.release_dir / f"{name}.ipynb", 4).cells)


def answer_cells(nb) -> set[str]:
    """grade ids of manually graded answers (graded solution cells)."""
    return {meta(c)["grade_id"] for c in nb.cells if meta(c).get("grade") and meta(c).get("solution")}


def last_code_exercise(nb) -> tuple[str | None, set[str]]:
    """(answer id, its test ids) of the notebook's last code answer cell ((None, set()) when it has none)."""
    solution, tests = None, set()
    for cell in nb.cells:
        if cell.cell_type == "code" and meta(cell).get("solution"):
            solution, tests = meta(cell)["grade_id"], set()
        elif solution and meta(cell).get("grade") and not meta(cell).get("solution") and cell.cell_type == "code":
            tests.add(meta(cell)["grade_id"])
    return solution, tests


def last_exercise(sources) -> tuple[str, set[str]]:
    """(notebook, its test ids) of the last code exercise of the last notebook that has one."""
    for name in sorted(sources, reverse=True):
        _, tests = last_code_exercise(sources[name])
        if tests:
            return name, tests
    raise AssertionError("no code exercise with tests in part-ii")


def grades_of(dumped: dict, student: str) -> dict[tuple[str, str], tuple]:
    """(notebook, cell) -> (auto, manual, needs_manual) for one student."""
    return {(k[1], k[2]): v for k, v in dumped.items() if k[0] == student and k[3] == "grade"}


def test_a_test_cell_moved_below_a_later_one_with_stand_ins_fails_when_graded_and_says_why(graded):
    """A red-team review: 4.1's and 4.2's test cells moved below 4.3's, whose hidden part stands in for their
    functions, passed with answers that used a reference lifted from the stand-in. Sanitizing names such cells in
    the notebook's metadata; TrustedChecks, in autograde's second pass on the notebook as written, fails them. Here
    the real pipeline grades the perfect answers so moved: the moved cells score 0 with what to do, 4.3 its points."""
    from autograder.cells import MOVED_TEST

    build, course = copy_course(graded["snapshot"])
    try:
        name = "04-entropy-cross-entropy-kl"
        folder = course.step_dir("submitted", "perfect")
        for path in folder.glob("*.ipynb"):
            if path.stem != name:
                path.unlink()  # grade only this notebook
        nb = nbformat.read(folder / f"{name}.ipynb", as_version=4)
        moved = [c for c in nb.cells if meta(c).get("grade_id") in ("test_entropy", "test_kl_direction")]
        nb.cells = [c for c in nb.cells if c not in moved]
        at = next(i for i, c in enumerate(nb.cells) if meta(c).get("grade_id") == "test_decomposition")
        nb.cells[at + 1:at + 1] = moved
        nbformat.write(nb, folder / f"{name}.ipynb")
        grade(course, options(workers=1, students=["perfect"]))
        cells = {cell: auto for (nb_name, cell), (auto, _, _) in grades_of(dump(course.db_url, ["perfect"]),
                                                                           "perfect").items() if nb_name == name}
        assert cells["test_entropy"] == cells["test_kl_direction"] == 0 and cells["test_decomposition"] > 0, cells
        graded_nb = nbformat.read(course.step_dir("autograded", "perfect") / f"{name}.ipynb", as_version=4)
        verdicts = {meta(c)["grade_id"]: [o.get("evalue") for o in c.outputs if o.output_type == "error"]
                    for c in graded_nb.cells if meta(c).get("grade_id", "").startswith("test_")}
        # named with 4.3's heading too, as students see it (Jupyter does not show grade ids)
        assert verdicts["test_entropy"] == [MOVED_TEST.format(later="test_decomposition (under “练习 4.3（2 分）交叉熵 = "
                                                                  "熵 + KL”)")], verdicts
        assert "part_ii_moved_tests" not in graded_nb.metadata
    finally:
        shutil.rmtree(build, ignore_errors=True)


def make_build() -> Path:
    """A build folder under build/ that the sandbox user may traverse (pytest's tmp is private)."""
    (REPO / "build").mkdir(exist_ok=True)
    path = Path(tempfile.mkdtemp(prefix="test-grading-", dir=REPO / "build"))
    path.chmod(0o755)
    return path


def copy_course(course_root: Path) -> tuple[Path, Course]:
    """A fresh build holding a copy of a course folder (e.g. the collected, ungraded one)."""
    build = make_build()
    shutil.copytree(course_root, build / "course")
    db = build / "course" / "gradebook.db"
    with build_env(build):
        course = Course.load(build)
    assert course.db_url == f"sqlite:///{db}"
    return build, course


@pytest.fixture(scope="module")
def graded():
    """The sample class released, collected, graded (2 workers), with feedback and export, by the CLI,
    together with the adversarial catalogue (tests/shared_builds.py) - once for the whole test run."""
    folder, info = graded_build()
    with build_env(folder / "build"):
        course = Course.load(folder / "build")
        students = build_sample_class(course, trimmed=True)  # the same bytes the shared build handed in
    assert [s.student for s in students] == info["sample"] == SAMPLE
    yield {"course": course, "snapshot": folder / "collected", "students": {s.student: s for s in students},
           "outputs": info["outputs"], "dump": dump(course.db_url, SAMPLE)}


def test_every_sample_submission_is_graded_without_job_errors(graded):
    grade_run = graded["outputs"]["grade"]
    assert grade_run["returncode"] == 0, grade_run["stdout"][-2000:] + grade_run["stderr"][-3000:]
    jobs = job_rows(graded["course"].db_url)
    assert {s: (r["state"], r["commits"], r["error"]) for s, r in jobs.items() if s in SAMPLE} == \
        {s: ("done", 1, None) for s in SAMPLE}
    assert f"graded {len(jobs)}, already graded (skipped) 0, errors 0, notebooks not gradable (scored 0) 0" in grade_run["stdout"]


def test_perfect_blank_partial_exact_scores_per_cell(graded):
    sources = source_notebooks()
    got = graded["dump"]
    partial_nb, partial_tests = last_exercise(sources)
    for name, nb in sources.items():
        for cell, points in graded_test_cells(nb).items():
            assert grades_of(got, "perfect")[(name, cell)] == (points, None, False), (name, cell)
            assert grades_of(got, "blank")[(name, cell)] == (0.0, None, False), (name, cell)
            want = 0.0 if name != partial_nb or cell in partial_tests else points  # partial hands in one notebook
            assert grades_of(got, "partial")[(name, cell)] == (want, None, False), (name, cell)
        for cell in answer_cells(nb):
            # a written answer has no auto score and waits for a human; the unchanged stub scores 0
            assert grades_of(got, "perfect")[(name, cell)] == (None, None, True), (name, cell)
            assert grades_of(got, "blank")[(name, cell)] == (0.0, None, False), (name, cell)


def test_totals_in_the_csv_match_the_metadata(graded):
    sources = source_notebooks()
    partial_nb, partial_tests = last_exercise(sources)
    points = {n: graded_test_cells(nb) for n, nb in sources.items()}
    total = sum(sum(p.values()) for p in points.values())
    partial = sum(v for c, v in points[partial_nb].items() if c not in partial_tests)
    rows = read_grades(graded["course"])
    assert float(rows["perfect"]["score"]) == total
    assert float(rows["blank"]["score"]) == 0
    assert float(rows["partial"]["score"]) == partial
    assert float(rows["edited-tests"]["score"]) == partial  # its edited test graded on the original
    for student in ("broken", "infinite-loop"):  # solved notebooks only; the broken file scores 0
        handed_in = [n.removesuffix(".ipynb") for n, d in graded["students"][student].files.items() if not _invalid_json(d)]
        assert float(rows[student]["score"]) == sum(sum(points[n].values()) for n in handed_in), student
    assert list(rows["perfect"])[:11] == ["assignment", "duedate", "timestamp", "student_id", "last_name", "first_name",
                                          "email", "raw_score", "late_submission_penalty", "score", "max_score"]
    assert [float(rows["perfect"][n]) for n in sorted(points)] == [sum(points[n].values()) for n in sorted(points)]
    with open(graded["course"].reports_dir / "grades-per-cell.csv", newline="", encoding="utf-8") as fh:
        every_cell = list(csv.DictReader(fh))
    cells = [r for r in every_cell if r["student_id"] == "perfect"]
    assert sum(float(r["score"]) for r in cells) == total
    assert {r["result"] for r in cells if r["kind"] == "answer"} == {"needs manual grading"}
    waiting = {}  # from the gradebook: cells nbgrader says wait for a grader, per student (catalogue entries too)
    for (student, _, _, kind), values in dump(graded["course"].db_url).items():
        if kind == "grade" and values[2]:
            waiting[student] = waiting.get(student, 0) + 1
    assert waiting, "the sample class has written answers to grade by hand"
    for student, row in rows.items():  # a score that a grader can still raise is not called graded
        assert (row["status"] in ("graded", "awaiting manual grading")) <= (row["needs_manual_grading"] != ""), row
        assert row["status"] != "graded" or student not in waiting, row
        assert row["status"] != "awaiting manual grading" or int(row["needs_manual_grading"]) == waiting[student], row
    assert rows["perfect"]["status"] == "awaiting manual grading", rows["perfect"]
    export_run = graded["outputs"]["export"]["stdout"]
    assert f"{sum(waiting.values())} cells of {len(waiting)} students wait for a grader in formgrader" in export_run, export_run
    # the notebook 'broken' handed in damaged was rejected: its cells were not failed, they were never handed in
    damaged = [n.removesuffix(".ipynb") for n, d in graded["students"]["broken"].files.items() if _invalid_json(d)]
    assert damaged
    lost = [r for r in every_cell if r["student_id"] == "broken" and r["notebook"] in damaged]
    assert lost and {r["result"] for r in lost} == {"not handed in"}, {r["result"] for r in lost}


def test_a_notebook_not_started_from_the_release_is_not_listed_as_every_test_cell_deleted():
    """A notebook written from scratch under a release name holds no cell of the release: grading names it "not
    started from the released notebook", and the notes went on to list all its test cells as deleted by the student,
    put back for grading (a TA's walkthrough). A release notebook whose test cells were deleted is still listed."""
    from autograder.export import tampered_tests

    released = {"02-shapes-and-loss": {"test_a", "test_b"}}
    own = [nbformat.v4.new_markdown_cell("my answers"), nbformat.v4.new_code_cell("def softmax(z): ...")]
    assert tampered_tests({"02-shapes-and-loss": own}, released) == []
    answer = nbformat.v4.new_code_cell("x = 1")
    answer.metadata["nbgrader"] = {"grade_id": "ex_a", "solution": True, "grade": False, "locked": False,
                                   "schema_version": 3, "task": False}
    assert tampered_tests({"02-shapes-and-loss": own + [answer]}, released) == \
        ["02-shapes-and-loss: test cells deleted by the student, put back for grading: test_a, test_b"]


def test_edited_test_cell_is_restored_and_graded_on_the_original(graded):
    sources = source_notebooks()
    partial_nb, partial_tests = last_exercise(sources)
    course = graded["course"]
    autograded = nbformat.read(course.step_dir("autograded", "edited-tests") / f"{partial_nb}.ipynb", as_version=4)
    by_id = {meta(c).get("grade_id"): c for c in autograded.cells}
    originals = {meta(c).get("grade_id"): c.source for c in sources[partial_nb].cells}
    for test_id in partial_tests:
        assert by_id[test_id].source == originals[test_id]  # hidden tests included: the student's `pass` is gone
        assert grades_of(graded["dump"], "edited-tests")[(partial_nb, test_id)][0] == 0.0
    # the test cell the sample deleted is back and earns its points (its exercise is solved)
    submitted = nbformat.read(course.step_dir("submitted", "edited-tests") / f"{partial_nb}.ipynb", as_version=4)
    present = {meta(c).get("grade_id") for c in submitted.cells}
    deleted = [t for nb in [sources[partial_nb]] for t in graded_test_cells(nb) if t not in present]
    assert len(deleted) == 1
    assert deleted[0] in by_id
    points = graded_test_cells(sources[partial_nb])[deleted[0]]
    assert grades_of(graded["dump"], "edited-tests")[(partial_nb, deleted[0])] == (points, None, False)
    # the instructor is told, in the student's row: changed and deleted cells by name; nobody else is flagged
    with open(course.reports_dir / "grades.csv", newline="", encoding="utf-8") as fh:
        rows = {r["student_id"]: r for r in csv.DictReader(fh)}
    notes = rows["edited-tests"]["notes"]
    assert f"{partial_nb}: test cells changed by the student, graded as released: {', '.join(sorted(partial_tests))}" \
        in notes, notes
    assert f"{partial_nb}: test cells deleted by the student, put back for grading: {deleted[0]}" in notes, notes
    assert rows["edited-tests"]["status"] == "incomplete"
    tampered = rows["tampered-test-cells"]["notes"]  # the catalogue's four edits: delete, edit, retype, re-point
    assert ("02-shapes-and-loss: test cells changed by the student, graded as released: test_kl_with_support, "
            "test_masked_mean_loss, test_perplexity_from_loss") in tampered, tampered
    assert "02-shapes-and-loss: test cells deleted by the student, put back for grading: test_stable_softmax" in tampered
    flagged = {s for s, r in rows.items() if "test cells" in r["notes"] and "by the student" in r["notes"]}
    assert flagged == {"edited-tests", "tampered-test-cells", "duplicate-grade-ids"}, flagged
    # and the student, on that notebook's feedback page only: their edits did not count, the deleted cell came back
    pages = {f.parent.parent.name + "/" + f.stem: page_text(f.read_text(encoding="utf-8"))
             for f in (course.root / "feedback").rglob("*.html")}
    page = pages[f"edited-tests/{partial_nb}"]
    assert "Test cells put back." in page, page[:2000]
    assert f"You changed the test cell{'s' if len(partial_tests) > 1 else ''} {', '.join(sorted(partial_tests))}: grading ran" \
        in page, page[:2000]
    assert f"You deleted the test cell {deleted[0]}: it was put back and run for grading." in page, page[:2000]
    # what this hand-in did comes first; the notes every such page carries (manual answers, failed tests) after it
    opening = [page.index(note) for note in ("Test cells put back.", "Provisional score.", "Why a test failed.")]
    assert opening == sorted(opening), page[:2000]
    noted = {name for name, text in pages.items() if "Test cells put back." in text}
    assert {name.split("/")[0] for name in noted} == {"edited-tests", "tampered-test-cells", "duplicate-grade-ids"}, noted
    assert sum(name.startswith("edited-tests/") for name in noted) == 1, noted
    # a page with a failed test says where the values are; one where a cell stopped the kernel says what grading did
    explained = {name for name, text in pages.items() if "Why a test failed." in text}
    assert f"partial/{partial_nb}" in explained and not any(n.startswith("perfect/") for n in explained), explained
    stopped = pages[f"kernel-death/{CATALOGUE_NOTEBOOK}"]
    assert "The kernel stopped." in stopped and "Grading started a new kernel, re-ran the cells before each" in stopped
    assert not any("The kernel stopped." in text for name, text in pages.items() if name.startswith("perfect/"))
    # a deleted answer cell whose test failed is named on its page and in the export, and on no other page; no page of
    # this class ran out of time or had a notebook file rejected while another copy was graded (the broken student's
    # damaged notebook has no other copy: its page says it was not graded)
    assert "Answer cell deleted. Your notebook has no answer cell ex_stable_softmax, and the tests of that exercise " \
           "failed." in pages[f"deleted-answer-cell/{CATALOGUE_NOTEBOOK}"]
    assert [name for name, text in pages.items() if "Answer cell deleted." in text] == \
        [f"deleted-answer-cell/{CATALOGUE_NOTEBOOK}"]
    assert f"{CATALOGUE_NOTEBOOK}: answer cells deleted by the student, and their tests failed (grading does not put " \
           "a deleted answer cell back): ex_stable_softmax" in rows["deleted-answer-cell"]["notes"]
    assert not [name for name, text in pages.items() if "Out of time." in text or "of yours was not graded" in text]


def test_broken_file_is_reported_and_kept_not_lost(graded):
    course = graded["course"]
    sample = graded["students"]["broken"]
    broken_name = next(n for n, data in sample.files.items() if _invalid_json(data))
    log = json.loads((course.reports_dir / "collect.json").read_text())
    record = next(r for r in log["rejected"] if r["file"] == f"broken/{broken_name}")
    assert record["student"] == "broken" and "invalid JSON" in record["reason"]
    assert Path(record["copy"]).read_bytes() == sample.files[broken_name]
    with open(course.reports_dir / "grades.csv", newline="", encoding="utf-8") as fh:
        row = next(r for r in csv.DictReader(fh) if r["student_id"] == "broken")
    assert row["status"] == "incomplete" and broken_name in row["notes"]
    assert row[broken_name.removesuffix(".ipynb")] == "0"


def _invalid_json(data: bytes) -> bool:
    """True when data does not parse as JSON."""
    try:
        json.loads(data)
    except ValueError:
        return True
    return False


def test_infinite_loop_is_cut_and_the_rest_of_the_notebook_graded(graded):
    sources = source_notebooks()
    sample = graded["students"]["infinite-loop"]
    (name,) = [n.removesuffix(".ipynb") for n in sample.files]
    got = grades_of(graded["dump"], "infinite-loop")
    for cell, points in graded_test_cells(sources[name]).items():
        assert got[(name, cell)] == (points, None, False), cell
    autograded = nbformat.read(graded["course"].step_dir("autograded", "infinite-loop") / f"{name}.ipynb", as_version=4)
    loop = next(c for c in autograded.cells if c.cell_type == "code" and c.source.startswith("while True:"))
    # interrupted in its own kernel, and marked as timed out in the grader's words, with the limit: the
    # student pressed no Ctrl-C, so the interrupt's KeyboardInterrupt is not shown
    assert [(o.output_type, o.ename) for o in loop.outputs] == [("error", "CellTimeoutError")]
    assert loop.outputs[0].evalue == f"the cell ran longer than its {CELL_TIMEOUT:g} s limit and was stopped by the grader"
    # the student's page says so at the top, though no test failed for it; the perfect student's page does not
    feedback = graded["course"].root / "feedback"
    page = page_text((feedback / "infinite-loop" / "part-ii" / f"{name}.html").read_text(encoding="utf-8"))
    begins = loop.source.splitlines()[0][:60]
    assert f"A cell ran out of time. Grading stopped the cell that begins “{begins}”, which ran longer than a cell " \
           "may run" in page, \
        page[page.find("ran out"):][:1500]
    later = [page.index(note) for note in ("Provisional score.", "Why a test failed.") if note in page]
    assert all(page.index("A cell ran out of time.") < at for at in later), page[:1500]
    perfect = page_text((feedback / "perfect" / "part-ii" / f"{name}.html").read_text(encoding="utf-8"))
    assert "ran out of time" not in perfect


def test_each_student_s_overview_gives_the_total_and_every_notebook_s_score_as_the_export_does(graded):
    """feedback/<student>/index.html: the total and each notebook's score equal grades.csv's (found by review: a
    student had to add up seven pages, one of them a not-graded page without its points); every row links to that
    notebook's page; a notebook with answers waiting for a grader is marked provisional, as its page is."""
    from autograder.feedback import INDEX

    course = graded["course"]
    with open(course.reports_dir / "grades.csv", newline="", encoding="utf-8") as fh:
        rows = {r["student_id"]: r for r in csv.DictReader(fh)}
    notebooks = course.notebook_names()
    for student in SAMPLE:
        index = course.root / "feedback" / student / INDEX
        text = page_text(index.read_text(encoding="utf-8"))
        row = rows[student]
        assert f"{course.release_dir.name}: {float(row['score']):g} of {float(row['max_score']):g} points" in text, text
        links = dict(re.findall(r'<a href="([^"]+)">([^<]+)</a>', index.read_text(encoding="utf-8")))
        assert sorted(links.values()) == notebooks, links
        for href, nb in links.items():
            page = (index.parent / href).resolve()
            assert page == (course.step_dir("feedback", student) / f"{nb}.html").resolve() and page.is_file(), href
            page_says = page_text(page.read_text(encoding="utf-8"))
            shown = re.search(rf"{re.escape(nb)}\s*([\d.]+) / ([\d.]+)(, not graded| \(provisional\))?\s", text)
            assert shown, (nb, text)
            assert float(shown.group(1)) == float(row[nb] or 0), (student, nb, shown.group(0), row[nb])
            assert float(shown.group(2)) == released_points(course, nb), (student, nb, shown.group(0))
            assert (shown.group(3) == " (provisional)") == ("provisional)" in page_says), (student, nb)
            assert (shown.group(3) == ", not graded") == (": not graded (0 of" in page_says), (student, nb)
    assert "Provisional:" in page_text((course.root / "feedback" / "perfect" / INDEX).read_text(encoding="utf-8"))
    assert "Provisional:" not in page_text((course.root / "feedback" / "blank" / INDEX).read_text(encoding="utf-8"))
    # the blank copies handed in are named on the overview, the one page a student is sure to open
    for student in SAMPLE:
        said = "Handed in as released, with no answer filled in: " in page_text(
            (course.root / "feedback" / student / INDEX).read_text(encoding="utf-8"))
        assert said == (student == "blank"), student


def test_a_student_whose_pages_fail_to_render_keeps_no_overview_of_an_earlier_run(graded, monkeypatch):
    """The overview of the last run would give a total and links that no longer stand (found by review of the diff)."""
    from autograder import feedback as feedback_module
    from autograder.feedback import INDEX

    build, course = copy_course(graded["course"].root)
    try:
        overview = course.root / "feedback" / "partial" / INDEX
        assert overview.is_file()

        def failing(course, graded, signatures, workers, result, *rest):
            result.errors.update({s: "rendering failed" for s in graded})

        monkeypatch.setattr(feedback_module, "render", failing)
        result = feedback_module.feedback(course, students=["partial"])
        assert result.errors == {"partial": "rendering failed"} and not overview.exists()
        assert (course.root / "feedback" / "perfect" / INDEX).is_file()  # another student's stands
    finally:
        shutil.rmtree(build, ignore_errors=True)


def test_feedback_exists_and_shows_no_hidden_test_text(graded):
    course = graded["course"]
    run = graded["outputs"]["feedback"]
    assert run["returncode"] == 0 and "ERROR" not in run["stdout"], run["stdout"][-3000:] + run["stderr"][-3000:]
    release_text = "\n".join(p.read_text(encoding="utf-8") for p in course.release_dir.glob("*.ipynb"))
    # the sample students hand in the model answers, which the pages show as theirs: a line one shares with a hidden
    # block (`ids = np.asarray(ids)` in 6.2's stand-in for 6.1) is the student's own there
    answers = {line.strip() for nb in source_notebooks().values() for cell in nb.cells
               if cell.metadata.get("nbgrader", {}).get("solution") for line in cell.source.split("\n")}
    hidden = set()
    for nb in source_notebooks().values():
        for cell in nb.cells:
            inside = False
            for line in cell.source.split("\n"):
                if "BEGIN HIDDEN TESTS" in line:
                    inside = True
                elif "END HIDDEN TESTS" in line:
                    inside = False
                elif inside and len(line.strip()) >= 8 and json.dumps(line.strip())[1:-1] not in release_text \
                        and line.strip() not in answers:
                    hidden.add(line.strip())
    assert hidden, "the part-ii notebooks have hidden tests"
    files = sorted(f for f in (course.root / "feedback").rglob("*.html") if f.parent.parent.name in SAMPLE)
    expected = {(s.student, n.removesuffix(".ipynb")) for s in graded["students"].values() for n, d in s.files.items()
                if not _invalid_json(d)}
    # every notebook of every student has a page: nbgrader's for the graded ones, a short one saying why for the rest
    every = {(s, n) for s in SAMPLE for n in course.notebook_names()}
    assert {(f.parent.parent.name, f.stem) for f in files} == every
    explained = {(f.parent.parent.name, f.stem): page_text(f.read_text(encoding="utf-8")) for f in files
                 if ": not graded (0 of " in f.read_text(encoding="utf-8")}
    damaged = next(("broken", n.removesuffix(".ipynb")) for n, d in graded["students"]["broken"].files.items()
                   if _invalid_json(d))
    assert set(explained) == every - expected and damaged in explained
    assert "was not accepted" in explained[damaged] and "invalid JSON" in explained[damaged], explained[damaged]
    assert "What to do: Check that your own copy of" in explained[damaged], explained[damaged]  # not a fresh release copy
    assert all("Not handed in" in text for key, text in explained.items() if key != damaged)
    # each page gives the points the notebook was worth, as the release counts them
    for (student, nb), text in explained.items():
        assert f"{nb}: not graded (0 of {released_points(course, nb):g} points)" in text, text[:300]
    assert "that were not graded" in run["stdout"], run["stdout"]
    for path in files:
        text = html.unescape(re.sub(r"<[^>]+>", "", path.read_text(encoding="utf-8")))
        assert "HIDDEN TESTS" not in text, path
        leaked = [line for line in hidden if line in text]
        assert not leaked, f"{path} shows hidden test lines: {leaked[:3]}"
    # the contents name every test cell after its exercise: the 练习 heading above it in the source notebook
    for name, nb in source_notebooks().items():
        exercise, expected = None, []
        for cell in nb.cells:
            if cell.cell_type == "markdown" and not meta(cell):
                exercise = next((ln.lstrip("#").strip() for ln in reversed(cell.source.splitlines())
                                 if ln.startswith("### 练习")), exercise)
            elif meta(cell).get("grade") and not meta(cell).get("solution"):
                expected.append(f"{exercise.replace('`', '')} · test {meta(cell)['grade_id']} (Score: ")
        page = (course.root / "feedback" / "perfect" / course.release_dir.name / f"{name}.html").read_text(encoding="utf-8")
        listed = [line for line in contents(page) if " · test " in line]
        assert expected and len(listed) == len(expected), (name, listed)
        assert all(line.startswith(e) for line, e in zip(listed, expected)), (name, listed)


def test_grading_twice_changes_nothing(graded, capsys):
    build, course = copy_course(graded["course"].root)  # the shared course stays read-only
    try:
        before = dump(course.db_url)
        capsys.readouterr()
        again = grade(course, dataclasses.replace(options(workers=2), progress=True))
        out, err = capsys.readouterr()
        assert "submission/s" not in err and "0submission" not in err, err  # no progress bar with nothing to grade
        assert "\nnext: nothing to grade (every hand-in named is graded; --force grades again); " in out, out  # review
        assert again.graded == [] and sorted(again.skipped) == sorted(job_rows(course.db_url))
        assert set(SAMPLE) <= set(again.skipped)
        assert dump(course.db_url) == before
        assert dump(course.db_url, SAMPLE) == graded["dump"]
        assert {r["commits"] for r in job_rows(course.db_url).values()} == {1}
    finally:
        shutil.rmtree(build, ignore_errors=True)


def cells_ran(course: Course, student: str) -> tuple[float, float]:
    """(first cell's start, last cell's reply) of a student's autograded notebooks, as the kernels timed them (Unix s)."""
    import datetime as dt

    times = [dt.datetime.fromisoformat(cell.metadata.execution[key]).timestamp()
             for path in (course.root / "autograded" / student / "part-ii").glob("*.ipynb")
             for cell in nbformat.read(path, as_version=4).cells if "execution" in cell.get("metadata", {})
             for key in ("iopub.execute_input", "shell.execute_reply") if key in cell.metadata.execution]
    assert times, f"no cell of {student}'s autograded notebooks has execution times"
    return min(times), max(times)


def test_one_worker_gives_the_same_gradebook_as_two_grading_one_at_a_time_with_the_next_warmed_up(graded, monkeypatch):
    """With --workers 1 the cells of two submissions never run at once, yet each next submission's worker
    (its sandbox and fork server) was started while the one before it still ran its cells."""
    import autograder.grade as grade_module

    subset = ["partial", "edited-tests", "broken"]
    started = {}  # student -> when grade started their worker
    real_start = grade_module.start_worker

    def recording_start(ctx, job_dir, gate=None, ahead=None):
        started[job_dir.name.rsplit("-", 2)[0]] = time.time()
        return real_start(ctx, job_dir, gate, ahead)

    build, course = copy_course(graded["snapshot"])
    try:
        monkeypatch.setattr(grade_module, "start_worker", recording_start)
        result = grade(course, options(workers=1, students=subset))
        assert sorted(result.graded) == sorted(subset)
        assert dump(course.db_url, subset) == dump(graded["course"].db_url, subset)
        spans = sorted((cells_ran(course, student), student) for student in subset)
        for ((_, end), before), ((begin, _), after) in zip(spans, spans[1:]):
            assert end < begin, f"{before}'s cells ran until {end}, after {after}'s began at {begin}"
            assert started[after] < end, f"{after}'s worker started only after {before}'s last cell ({started[after]})"
    finally:
        shutil.rmtree(build, ignore_errors=True)


def test_the_scheduler_grades_at_most_workers_jobs_and_warms_one_up_for_each_nearly_done():
    """fill() starts jobs up to `workers`, starts one more (warming, no go yet) per grading job that wrote to its
    `ahead` pipe, and open_gates() lets a warmed job grade only when a slot frees, its budget counted from then."""
    import multiprocessing
    from collections import deque

    from autograder.grade import Running, Scheduler

    scheduler = Scheduler.__new__(Scheduler)  # the scheduling rules alone: no course, no worker processes
    scheduler.options, scheduler.running = options(workers=2), {}
    worker_ends = {}  # student -> (the worker's end of gate, of ahead)

    def start(student, warm=False):
        gate_in, gate = multiprocessing.Pipe(duplex=False)
        ahead, ahead_out = multiprocessing.Pipe(duplex=False)
        worker_ends[student] = gate_in, ahead_out
        run = Running(student, None, Path(student), time.monotonic(), 100.0, gate, ahead, warming=warm)
        if not warm:
            run.open()
        scheduler.running[student] = run

    def nearly_done(student):
        worker_ends[student][1].send_bytes(b"ahead")

    def has_go(student):
        return worker_ends[student][0].poll()

    def states():
        return {s: "warming" if r.warming else "grading" for s, r in scheduler.running.items()}

    scheduler.start = start
    queue = deque("abcde")
    scheduler.fill(queue)
    assert states() == {"a": "grading", "b": "grading"}
    nearly_done("a")
    scheduler.fill(queue)
    scheduler.fill(queue)  # one warmed job per nearly done one, however often it is called
    assert states() == {"a": "grading", "b": "grading", "c": "warming"}
    nearly_done("b")
    scheduler.fill(queue)
    assert states() == {"a": "grading", "b": "grading", "c": "warming", "d": "warming"}
    assert [has_go(s) for s in "abcd"] == [True, True, False, False]
    long_ago = time.monotonic() - 1000
    scheduler.running["b"].started = scheduler.running["c"].started = long_ago
    assert scheduler.timed_out(scheduler.running["b"]) and not scheduler.timed_out(scheduler.running["c"])
    del scheduler.running["a"]
    scheduler.open_gates()
    assert states() == {"b": "grading", "c": "grading", "d": "warming"}
    assert has_go("c") and not has_go("d")
    assert not scheduler.timed_out(scheduler.running["c"]) and not scheduler.running["c"].nearly_done()
    scheduler.fill(queue)  # c has written nothing to ahead: nothing more warms up
    assert states() == {"b": "grading", "c": "grading", "d": "warming"} and list(queue) == ["e"]
    del scheduler.running["b"]
    scheduler.fill(queue)
    assert states() == {"c": "grading", "d": "grading"} and list(queue) == ["e"] and has_go("d")
    gate_in, gate = multiprocessing.Pipe(duplex=False)
    gate_in.close()  # its worker ended before its go: opening the gate must neither block nor raise
    ended = Running("e", None, Path("e"), time.monotonic(), 100.0, gate, None, warming=True)
    ended.open()
    assert not ended.warming and not ended.nearly_done()


def grade_command(build: Path, students: list[str]) -> list[str]:
    """`python -m autograder grade` with 2 workers on the given students, as a subprocess argv."""
    cmd = [sys.executable, "-m", "autograder", "grade", "--build", str(build), "--workers", "2",
           "--cell-timeout", str(CELL_TIMEOUT)] + [a for s in students for a in ("--student", s)]
    return cmd if sandbox_works() else cmd + ["--no-sandbox"]


def end_grade_run(proc: subprocess.Popen | None) -> None:
    """Kill a grade run a failed assertion left running, so it does not grade on into a deleted build."""
    if proc is not None and proc.poll() is None:
        proc.kill()
        proc.wait()


def wait_for_done_and_running(course: Course, proc: subprocess.Popen, timeout: float = 900) -> dict:
    """Poll the job table until one submission is done and another is being graded; return the rows."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and proc.poll() is None:
        jobs = job_rows(course.db_url)
        if any(r["state"] == "done" for r in jobs.values()) and any(r["state"] == "running" for r in jobs.values()):
            return jobs
        time.sleep(0.5)
    raise AssertionError(f"the grade run ended (exit {proc.poll()}) or timed out before it could be interrupted")


def test_sigkill_mid_run_then_resume_grades_every_submission_exactly_once(graded):
    subset = ["partial", "edited-tests", "broken"]
    build, course = copy_course(graded["snapshot"])
    proc = None
    try:
        cmd = grade_command(build, subset)
        proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_for_done_and_running(course, proc)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        killed = job_rows(course.db_url)
        assert any(r["state"] != "done" for r in killed.values())
        done_before = {s for s, r in killed.items() if r["state"] == "done"}
        result = grade(course, options(workers=2, students=subset))
        assert sorted(result.skipped) == sorted(done_before)
        assert sorted(result.graded) == sorted(set(subset) - done_before)
        assert {s: (r["state"], r["commits"]) for s, r in job_rows(course.db_url).items()} == \
            {s: ("done", 1) for s in subset}
        assert dump(course.db_url, subset) == dump(graded["course"].db_url, subset)
        assert not list(course.grading_dir.glob("*-*")), "job folders of the killed run were not cleaned up"
    finally:
        end_grade_run(proc)
        shutil.rmtree(build, ignore_errors=True)


def started_as_from_a_terminal(argv: list[str], env: dict[str, str]) -> subprocess.Popen:
    """argv started in a process group of its own (for os.killpg), with SIGINT at its default as a terminal's shell
    starts it: a test run started as a background job (a CI runner, `make test &`) has SIGINT ignored, and every
    child would inherit that."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)  # a handler resets to default on exec
    try:
        return subprocess.Popen(argv, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                start_new_session=True)
    finally:
        signal.signal(signal.SIGINT, previous)


def test_ctrl_c_stops_the_run_cleanly_and_the_next_run_grades_the_rest_exactly_once(graded):
    """Ctrl-C in a terminal sends SIGINT to the whole foreground process group, not only to `grade`."""
    subset = ["partial", "edited-tests", "broken"]
    build, course = copy_course(graded["snapshot"])
    proc = None
    try:
        # without $PART_II_BUILD, as from a shell that gives --build only: the advice must repeat it
        proc = started_as_from_a_terminal(grade_command(build, subset),
                                          {k: v for k, v in os.environ.items() if k != "PART_II_BUILD"})
        rows = wait_for_done_and_running(course, proc)
        running = [r["pid"] for r in rows.values() if r["state"] == "running"]
        scratch = []  # the started jobs' scratch folders in /tmp (a job folder still being written: skipped)
        for job in course.grading_dir.glob("*/job.json"):
            with contextlib.suppress(OSError, ValueError):
                scratch.append(Path(json.loads(job.read_text(encoding="utf-8"))["scratch_root"]))
        assert scratch, list(course.grading_dir.iterdir())
        os.killpg(proc.pid, signal.SIGINT)
        _, err = proc.communicate(timeout=120)
        assert proc.returncode == 130, f"exit {proc.returncode} after Ctrl-C:\n{err[-3000:]}"
        assert "interrupted:" in err, err[-3000:]
        assert f"run `python -m autograder grade --build {Path(build).resolve()}` again to resume" in err, err[-3000:]
        stopped = job_rows(course.db_url)
        assert {r["state"] for r in stopped.values()} <= {"done", "pending"}, stopped
        assert any(r["state"] == "pending" for r in stopped.values()), stopped
        assert all(process_gone(pid) for pid in running if pid), "a worker outlived the interrupted run"
        # the stopped jobs' folders and scratch folders are gone (they were left for the next run to sweep), and their
        # logs kept: why a job seemed stuck is what an instructor who pressed Ctrl-C wants to read
        assert not [p for p in course.grading_dir.iterdir() if p.is_dir()], list(course.grading_dir.iterdir())
        assert not [p for p in scratch if p.exists()], scratch
        stopped_logs = [course.reports_dir / "grade-logs" / f"{s}.log" for s, r in rows.items()
                        if r["state"] == "running" and stopped[s]["state"] == "pending"]
        assert stopped_logs and all(p.is_file() and p.stat().st_size > 0 for p in stopped_logs), stopped_logs
        deadline = time.monotonic() + 30  # workers, sandboxes and kernels end within seconds of grade
        while processes_of_build(build) and time.monotonic() < deadline:
            time.sleep(0.2)
        left = processes_of_build(build)
        assert not left, "processes of the interrupted run are still running: " + \
            "; ".join(Path(f"/proc/{pid}/cmdline").read_bytes()[:200].decode(errors="replace") for pid in left)
        done_before = {s for s, r in stopped.items() if r["state"] == "done"}
        result = grade(course, options(workers=2, students=subset))
        assert sorted(result.skipped) == sorted(done_before)
        assert sorted(result.graded) == sorted(set(subset) - done_before)
        assert {s: (r["state"], r["commits"]) for s, r in job_rows(course.db_url).items()} == \
            {s: ("done", 1) for s in subset}
        assert dump(course.db_url, subset) == dump(graded["course"].db_url, subset)
    finally:
        end_grade_run(proc)
        shutil.rmtree(build, ignore_errors=True)


def test_a_forced_regrade_cut_short_leaves_every_grade_standing_and_the_next_run_finishes_it(graded, monkeypatch,
                                                                                             capsys):
    """`grade --force` set every job pending before grading any: Ctrl-C a few seconds in left the whole class
    exported as 'not graded' with empty scores and every feedback page removed, until a full regrade ended (found by
    a TA's walkthrough). Each grade now stands until its new one is committed."""
    import autograder.grade as grade_module
    from autograder.export import export
    from autograder.feedback import feedback

    subset = ["blank", "partial"]
    build, course = copy_course(graded["course"].root)  # graded, with feedback; the shared one stays read-only
    try:
        export(course)
        before = read_grades_csv(course.reports_dir / "grades.csv")
        real_finish = grade_module.Scheduler.finish
        at_interrupt = {}

        def finish_then_ctrl_c(self, run, rc, timed_out=False):
            """Commit the first job to end, then stop the run as Ctrl-C does, with the other job being graded."""
            real_finish(self, run, rc, timed_out)
            at_interrupt.update(job_rows(course.db_url))
            raise KeyboardInterrupt

        monkeypatch.setattr(grade_module.Scheduler, "finish", finish_then_ctrl_c)
        forced = dataclasses.replace(options(workers=2, students=subset), force=True)
        with pytest.raises(AutograderError, match="interrupted: 1 submission graded in this run, 1 not"):
            grade(course, forced)
        monkeypatch.undo()
        first = next(s for s in subset if at_interrupt[s]["state"] == "done")
        other = next(s for s in subset if s != first)
        assert at_interrupt[other]["state"] == "regrading", at_interrupt[other]  # its worker was grading it
        stopped = job_rows(course.db_url)
        assert {s: (stopped[s]["state"], stopped[s]["commits"]) for s in subset} == \
            {first: ("done", 2), other: ("requeued", 1)}
        assert dump(course.db_url, subset) == dump(graded["course"].db_url, subset)

        export(course)
        after = read_grades_csv(course.reports_dir / "grades.csv")
        assert {s: (after[s]["status"], after[s]["score"]) for s in subset} == \
            {s: (before[s]["status"], before[s]["score"]) for s in subset}
        assert after[other]["score"] != "", after[other]
        assert "queued to be graded again (a `grade --force` run stopped or failed before its new grades were in; " \
            "these are the earlier ones)" in after[other]["notes"]
        assert "queued" not in after[first]["notes"], after[first]
        capsys.readouterr()
        pages = feedback(course, students=subset)
        assert pages.errors == {}, pages.errors
        assert {p.parent.parent.name for p in pages.written} == set(subset)

        with course.gradebook() as gb:  # as a run killed while it regraded `other` would leave it
            gb.db.execute(grade_module.JOBS.update().where(grade_module.JOBS.c.student_id == other)
                          .values(state="regrading", pid=None))
            gb.db.commit()
        export(course)
        assert read_grades_csv(course.reports_dir / "grades.csv")[other]["score"] == before[other]["score"]
        result = grade(course, options(workers=2, students=subset))  # no --force: the rest of the forced queue
        assert result.graded == [other] and result.skipped == [first]
        assert {s: (r["state"], r["commits"]) for s, r in job_rows(course.db_url).items() if s in subset} == \
            {s: ("done", 2) for s in subset}
        assert dump(course.db_url, subset) == dump(graded["course"].db_url, subset)

        with course.gradebook() as gb:  # queued again (and one left regrading by a killed run), then a release
            jobs = grade_module.JOBS       # changes the tests: neither grade stands any more
            gb.db.execute(jobs.update().where(jobs.c.student_id == other).values(state="requeued"))
            gb.db.execute(jobs.update().where(jobs.c.student_id == first).values(state="regrading", pid=4242))
            gb.db.commit()
        assert set(subset) <= set(grade_module.regrade_after_new_tests(course))
        rows = job_rows(course.db_url)
        # running keeps the pid: the next grade stops that worker if it still runs, then grades the hand-in again
        assert (rows[other]["state"], rows[first]["state"], rows[first]["pid"]) == ("pending", "running", 4242), rows
    finally:
        shutil.rmtree(build, ignore_errors=True)


def test_a_forced_regrade_that_fails_keeps_the_grade_and_one_cut_short_while_installing_drops_it(graded, monkeypatch):
    """A review of the forced regrade: one that failed for good blanked the standing grade of an unchanged hand-in
    (status error, pages removed); and one cut short after its new graded notebooks replaced the old but before its
    grades were committed left the old scores standing beside the new notebooks."""
    import autograder.grade as grade_module
    from autograder.export import export

    build, course = copy_course(graded["course"].root)
    try:
        export(course)
        before = read_grades_csv(course.reports_dir / "grades.csv")["blank"]
        real_finish = grade_module.Scheduler.finish
        monkeypatch.setattr(grade_module.Scheduler, "finish",
                            lambda self, run, rc, timed_out=False: real_finish(self, run, None, True))  # out of time
        result = grade(course, dataclasses.replace(options(workers=1, students=["blank"]), force=True))
        monkeypatch.undo()
        assert list(result.errors) == ["blank"] and result.graded == []
        row = job_rows(course.db_url)["blank"]
        assert (row["state"], row["commits"]) == ("requeued", 1) and row["error"] == result.errors["blank"], row
        assert dump(course.db_url, ["blank"]) == dump(graded["course"].db_url, ["blank"])
        export(course)
        after = read_grades_csv(course.reports_dir / "grades.csv")["blank"]
        assert (after["status"], after["score"]) == (before["status"], before["score"]), after
        assert "queued to be graded again" in after["notes"], after

        def cut_short(*args, **kwargs):
            raise KeyboardInterrupt

        monkeypatch.setattr(grade_module, "install_autograded", cut_short)
        with pytest.raises(AutograderError, match="interrupted"):
            grade(course, options(workers=1, students=["blank"]))  # the rest of the queue: blank, requeued
        monkeypatch.undo()
        assert job_rows(course.db_url)["blank"]["state"] == "pending"  # its notebooks may be half replaced: no grade stands
    finally:
        shutil.rmtree(build, ignore_errors=True)


def test_ctrl_c_while_the_sources_are_recorded_stops_grade_without_blaming_them(graded, tmp_path):
    """The first grade after a release runs the instructor notebooks to record the expected values. Ctrl-C then
    reached only the kernel nbclient had started last: the others ran on for seconds, and grade ended with "the
    instructor notebooks cannot be used for grading: AssertionError" and screens of ZMQ tracebacks (or graded on)."""
    build, course = copy_course(graded["snapshot"])
    proc = None
    try:
        env = {**os.environ, "PART_II_CACHE": str(tmp_path / "cache")}  # empty: the sources are recorded again
        env.pop("PART_II_BUILD", None)
        proc = started_as_from_a_terminal(grade_command(build, ["partial"]), env)
        seen = []
        while "recording the expected values" not in "".join(seen) and (line := proc.stderr.readline()):
            seen.append(line)
        assert proc.poll() is None, f"grade ended before recording:\n{''.join(seen)}"
        time.sleep(3)  # the kernels are running the source notebooks' cells
        os.killpg(proc.pid, signal.SIGINT)
        time.sleep(0.5)  # an impatient second Ctrl-C, while the kernels are being shut down
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGINT)
        _, err = proc.communicate(timeout=120)
        err = "".join(seen) + err
        assert proc.returncode == 130, f"exit {proc.returncode} after Ctrl-C:\n{err[-3000:]}"
        assert err.rstrip().endswith("grade: interrupted"), err[-3000:]
        assert "Traceback" not in err and "Exception ignored" not in err and "cannot be used" not in err, err[-3000:]
        assert not list((tmp_path / "cache").glob("*.json")), "an interrupted recording was cached"
        deadline = time.monotonic() + 30
        while processes_of_build(build) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not processes_of_build(build), "a kernel of the interrupted recording is still running"
        assert {r["state"] for r in job_rows(course.db_url).values()} <= {"done", "pending"}
    finally:
        end_grade_run(proc)
        shutil.rmtree(build, ignore_errors=True)


def test_ctrl_c_stops_feedback_without_a_traceback_from_its_workers(graded):
    """Ctrl-C reaches every process of the foreground group: each feedback worker printed a KeyboardInterrupt
    traceback under `feedback: interrupted`."""
    from shared_builds import cli_env

    build, course = copy_course(graded["course"].root)
    shutil.rmtree(course.root / "feedback", ignore_errors=True)
    proc = None
    try:
        proc = started_as_from_a_terminal([sys.executable, "-m", "autograder", "feedback", "--build", str(build),
                                           "--workers", "2"], cli_env(build))
        deadline = time.monotonic() + 300
        while proc.poll() is None and time.monotonic() < deadline and not list(course.root.glob("feedback/*/*/*.html")):
            time.sleep(0.05)  # the first page is written: both workers are at work
        assert proc.poll() is None, "feedback ended before it could be interrupted"
        os.killpg(proc.pid, signal.SIGINT)
        begun = {p.parent.parent.name for p in course.root.glob("feedback/*/*/*.html")}
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 130 and "feedback: interrupted" in err, f"exit {proc.returncode}:\n{err[-3000:]}"
        assert "Traceback" not in err and "KeyboardInterrupt" not in err, err[-3000:]
        # it stops: at most the two students being worked on got pages after the interrupt, none of those queued
        written = {p.parent.parent.name for p in course.root.glob("feedback/*/*/*.html")}
        assert len(written - begun) <= 2 and written < {p.name for p in (course.root / "autograded").iterdir()}, written
    finally:
        end_grade_run(proc)
        shutil.rmtree(build, ignore_errors=True)


def _exit_at_once() -> None:
    """A stand-in worker: ends without grading anything."""


def test_an_interrupt_while_a_job_is_being_committed_leaves_it_pending(graded, monkeypatch):
    """Ctrl-C can land while the grader commits a finished job, when that job is no longer among the
    running ones: it must be left pending like them, not marked running for ever."""
    import multiprocessing

    import autograder.grade as grade_module

    def start_stand_in(ctx, job_dir, gate=None, ahead=None):
        proc = multiprocessing.get_context("fork").Process(target=_exit_at_once)
        proc.start()
        return proc

    def interrupted(self, run, rc, timed_out=False):
        raise KeyboardInterrupt

    build, course = copy_course(graded["snapshot"])
    try:
        with monkeypatch.context() as patch:
            patch.setattr(grade_module, "start_worker", start_stand_in)
            patch.setattr(grade_module.Scheduler, "finish", interrupted)
            with pytest.raises(AutograderError, match=r"interrupted: 0 submissions graded in this run, 1 not") as err:
                grade(course, options(workers=1, students=["partial"]))
        assert err.value.exit_code == 130
        row = job_rows(course.db_url)["partial"]
        assert (row["state"], row["pid"], row["commits"]) == ("pending", None, 0), row
        result = grade(course, options(workers=1, students=["partial"]))
        assert result.graded == ["partial"]
        assert (job_rows(course.db_url)["partial"]["state"], job_rows(course.db_url)["partial"]["commits"]) == ("done", 1)
        assert dump(course.db_url, ["partial"]) == dump(graded["course"].db_url, ["partial"])
    finally:
        shutil.rmtree(build, ignore_errors=True)


def test_a_worker_killed_alone_is_retried_and_every_submission_graded_once(graded):
    subset = ["partial", "edited-tests", "broken"]
    build, course = copy_course(graded["snapshot"])
    try:
        cmd = grade_command(build, subset)
        proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        victim = None
        deadline = time.monotonic() + 900
        while victim is None and time.monotonic() < deadline and proc.poll() is None:
            running = [r for r in job_rows(course.db_url).values() if r["state"] == "running" and r["pid"]]
            if running:
                victim = running[0]
            else:
                time.sleep(0.2)
        assert victim is not None, "no worker was seen running before the grade run ended"
        os.kill(victim["pid"], signal.SIGKILL)  # the worker alone; the parent grader lives on
        _, err = proc.communicate(timeout=1800)
        assert proc.returncode == 0, f"grade failed after a worker was killed:\n{err[-3000:]}"
        jobs = job_rows(course.db_url)
        assert {s: (r["state"], r["commits"]) for s, r in jobs.items()} == {s: ("done", 1) for s in subset}
        assert jobs[victim["student_id"]]["attempts"] >= 2, "the killed worker's submission was not retried"
        assert dump(course.db_url, subset) == dump(graded["course"].db_url, subset)
    finally:
        shutil.rmtree(build, ignore_errors=True)


def test_a_worker_killed_while_warming_up_ends_with_its_sandbox_and_its_submission_is_graded_once(graded):
    """grade starts the next submission's worker (its sandbox, fork server and first kernel) while the current one
    grades, and it waits there for its go; killed then (the OOM killer, an operator), it must be retried like a
    grading worker, and what it started must end with it, not run on beside the class."""
    subset = ["infinite-loop", "partial"]  # one notebook each; the loop's cell runs until its timeout
    build, course = copy_course(graded["snapshot"])
    proc = None
    try:
        # one worker: partial warms up as soon as infinite-loop's only notebook starts, and waits at least the
        # loop cell's timeout for its go
        cmd = grade_command(build, subset)
        cmd[cmd.index("--workers") + 1] = "1"
        cmd[cmd.index("--cell-timeout") + 1] = "20"
        proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        warmed, deadline = None, time.monotonic() + 600
        while warmed is None and proc.poll() is None and time.monotonic() < deadline:
            for log in course.grading_dir.glob("partial-*/worker.log") if course.grading_dir.is_dir() else []:
                text = log.read_text(errors="replace")
                if "waiting for the grade run's go" in text and "go after" not in text:
                    warmed = log.parent
            time.sleep(0.1)
        assert warmed is not None, "partial's worker was never seen warmed up and waiting for its go (did it take " \
                                   "longer to warm up than infinite-loop's notebook, 20 s or more, took to grade?)"
        rows = job_rows(course.db_url)
        assert rows["infinite-loop"]["state"] == "running" and not process_gone(rows["infinite-loop"]["pid"])
        victim = rows["partial"]["pid"]
        below = [child.pid for child in psutil.Process(victim).children(recursive=True)]  # sandboxed ones too
        assert below, "a warmed-up worker has no sandbox or kernel below it"
        os.kill(victim, signal.SIGKILL)  # the worker alone; the grade run and the grading worker live on
        gone_by = time.monotonic() + 30
        while (left := [p for p in below if not process_gone(p)]) and time.monotonic() < gone_by:
            time.sleep(0.2)
        assert not left, f"the killed worker's processes run on: {left}"
        _, err = proc.communicate(timeout=900)
        assert proc.returncode == 0, f"grade failed after a warming worker was killed:\n{err[-3000:]}"
        jobs = job_rows(course.db_url)
        assert {s: (r["state"], r["commits"]) for s, r in jobs.items()} == {s: ("done", 1) for s in subset}
        assert jobs["partial"]["attempts"] == 2 and jobs["infinite-loop"]["attempts"] == 1
        assert dump(course.db_url, ["partial"]) == dump(graded["course"].db_url, ["partial"])
    finally:
        end_grade_run(proc)
        shutil.rmtree(build, ignore_errors=True)


def test_an_interrupt_inside_commit_after_the_database_committed_is_an_interrupt_and_the_job_stays_done(tmp_path):
    """Ctrl-C can land inside SQLAlchemy's commit() after the database has committed (seen once in CI):
    rolling back then raised InvalidRequestError over the interrupt, and `grade` exited 1 with a traceback
    instead of 130. The grades are saved; the interrupt must come through and stop_all must still work."""
    import datetime as dt

    from sqlalchemy import event

    from autograder.grade import JOBS, Scheduler, commit_grades

    shutil.copytree(released_build()[0], tmp_path / "build", symlinks=True)
    with build_env(tmp_path / "build"):
        course = Course.load(tmp_path / "build")
    stamp = dt.datetime(2026, 3, 1, 10, 0)
    with course.gradebook() as gb:
        JOBS.create(gb.engine, checkfirst=True)
        gb.db.execute(JOBS.insert().values(student_id="ann", assignment="part-ii", digest="d", state="running",
                                           attempts=1, commits=0, pid=None))
        gb.db.commit()

        commits = []

        def interrupt(session):
            commits.append(1)
            if len(commits) == 2:  # the first is nbgrader's update_or_create_student, the second has the grades
                raise KeyboardInterrupt  # after the COMMIT went to the database, before the session's clean-up

        event.listen(gb.db.registry(), "after_commit", interrupt)
        with pytest.raises(KeyboardInterrupt):
            commit_grades(gb, "ann", {"timestamp": stamp, "notebooks": {}}, {"state": "done", "commits": 1})
        event.remove(gb.db.registry(), "after_commit", interrupt)
        assert len(commits) == 2
        scheduler = Scheduler(course, gb, options(workers=1), course.notebook_names(), False, None, None)
        assert scheduler.stop_all(["ann"]) == 0  # nothing left pending: ann's grades were committed
        assert gb.find_submission("part-ii", "ann").timestamp == stamp
    row = job_rows(course.db_url)["ann"]
    assert (row["state"], row["commits"]) == ("done", 1), row


def test_a_worker_dies_with_the_grade_run_that_started_it(tmp_path):
    """When `grade` is killed, its workers must not live on: the next run would grade the same student
    beside them (multiprocessing's fork server, their real parent, outlives `grade`). The stand-in
    `grade` here starts a worker and exits at once without clean-up, as a SIGKILLed one would."""
    marker = tmp_path / "survived"
    starter = (
        "import os, sys\n"
        f"sys.path[:0] = [{str(REPO)!r}, {str(REPO / 'tests')!r}]\n"
        "from autograder.grade import worker_context\n"
        "import orphan_probe\n"
        f"proc = worker_context().Process(target=orphan_probe.main, args=({str(marker)!r}, 15))\n"
        "proc.start()\n"
        "print(proc.pid, flush=True)\n"
        "import time\n"
        f"armed, deadline = {str(marker) + '.armed'!r}, time.monotonic() + 60\n"
        "while not os.path.exists(armed) and time.monotonic() < deadline:\n"
        "    time.sleep(0.02)\n"
        "os._exit(0 if os.path.exists(armed) else 3)  # ends after the worker armed: its watcher must act\n"
    )
    done = subprocess.run([sys.executable, "-c", starter], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, f"the worker never armed die_with_parent():\n{done.stderr[-3000:]}"
    pid = int(done.stdout.split()[-1])
    deadline = time.monotonic() + 60
    while not process_gone(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert process_gone(pid), "the worker is still running 60 s after its grade run ended"
    assert not marker.exists(), "the worker went on working after its grade run ended"


def test_a_retry_discards_only_the_students_own_earlier_job_folders(tmp_path):
    """Job folders are student-ATTEMPT-RANDOM; a retry for ann removes ann's, never ann-lee's running one."""
    for name in ("ann-1-abc123", "ann-2-x_9", "ann-lee-1-def456", "ann-lee-x", "annie-1-q"):
        (tmp_path / name).mkdir()
    (tmp_path / "ann-3-file").write_text("not a folder")
    assert [p.name for p in earlier_job_dirs(tmp_path, "ann")] == ["ann-1-abc123", "ann-2-x_9"]
    assert [p.name for p in earlier_job_dirs(tmp_path, "ann-lee")] == ["ann-lee-1-def456"]


def test_largest_submissions_are_graded_first(tmp_path):
    """Jobs start in order of notebooks handed in, most first, ties by student id."""
    from autograder.grade import largest_first

    with build_env(tmp_path):
        course = Course.load(tmp_path)
    for student, count in {"ann": 1, "bob": 3, "cy": 0, "dee": 3}.items():
        folder = course.step_dir("submitted", student)
        folder.mkdir(parents=True)
        for k in range(count):
            (folder / f"nb{k}.ipynb").write_text("{}")
        (folder / "timestamp.txt").write_text("2026-03-01 10:00:00")
    assert largest_first(course, ["ann", "bob", "cy", "dee"]) == ["bob", "dee", "ann", "cy"]


def test_the_summary_names_notebooks_that_could_not_be_graded(tmp_path, capsys):
    """A notebook nbgrader failed on scores 0 inside a graded submission: the summary counts and names it."""
    from autograder.grade import GradeResult, print_summary

    with build_env(tmp_path):
        course = Course.load(tmp_path)
    result = GradeResult(mode="sandbox", graded=["ann", "bob"], errors={"cy": "worker died"},
                         notebook_errors={"bob": {"02-shapes-and-loss": "ValueError: bad cell metadata"}})
    print_summary(course, result)
    out = capsys.readouterr().out.splitlines()
    assert out[0] == ("graded 2, already graded (skipped) 0, errors 1, notebooks not gradable (scored 0) 1; "
                      "mode: sandbox")
    assert out[1:3] == ["  cy: ERROR worker died",
                        "  bob: 02-shapes-and-loss not gradable, scored 0: ValueError: bad cell metadata"]
    # then what to do next, on this course (a build folder of its own: --build repeated)
    assert out[3:] == [f"next: `python -m autograder feedback --build {tmp_path.resolve()}` (a page per student and "
                       f"notebook) and `python -m autograder export --build {tmp_path.resolve()}` (grades.csv); "
                       "free-text answers are graded by hand in formgrader"], out


def test_a_run_that_graded_nothing_still_ends_with_what_to_do_next(tmp_path, capsys):
    """Nothing left to grade, or only failures: a next: line each, as after a run that graded (found by review)."""
    from autograder.grade import GradeResult, print_summary

    with build_env(tmp_path):
        course = Course.load(tmp_path)
    build = f" --build {tmp_path.resolve()}"
    print_summary(course, GradeResult(mode="sandbox", skipped=["ann"]))
    assert capsys.readouterr().out.splitlines()[1:] == [
        "next: nothing to grade (every hand-in named is graded; --force grades again); "
        f"`python -m autograder feedback{build}` and `python -m autograder export{build}` write the pages and "
        f"grades.csv, `python -m autograder collect PATH{build}` files new hand-ins"]
    print_summary(course, GradeResult(mode="sandbox", skipped=["ann"], errors={"cy": "worker died"}))
    assert capsys.readouterr().out.splitlines()[2:] == [
        f"next: `python -m autograder grade{build}` tries the submissions that failed again (the errors above say "
        "why they failed)"]


def test_the_summary_does_not_advise_grading_again_what_ran_out_of_memory(tmp_path, capsys):
    """A submission whose worker ran out of memory would run out again: the summary asks for a corrected hand-in
    instead of another `grade`, alone or beside other failures and grades."""
    from autograder.grade import GradeResult, print_summary

    with build_env(tmp_path):
        course = Course.load(tmp_path)
    build = f" --build {tmp_path.resolve()}"
    memory = {"cy": "the grading process ran out of memory grading 02-shapes-and-loss (its limit: 2 GiB): ...",
              "al": "the grading process ran out of memory (its limit: 2 GiB): ..."}
    same = (f"grading al, cy again would most likely run out of memory again: `python -m autograder collect "
            f"PATH{build}` files a corrected hand-in, and `python -m autograder grade{build}` grades it")
    print_summary(course, GradeResult(mode="sandbox", skipped=["ann"], errors=memory))
    assert capsys.readouterr().out.splitlines()[3:] == ["next: " + same]
    print_summary(course, GradeResult(mode="sandbox", errors={**memory, "bob": "worker died"}))
    assert capsys.readouterr().out.splitlines()[4:] == [
        f"next: `python -m autograder grade{build}` tries the submissions that failed again (the errors above say "
        "why they failed)", same]
    print_summary(course, GradeResult(mode="sandbox", graded=["ann"], errors=memory))
    assert capsys.readouterr().out.splitlines()[3:] == [
        f"next: `python -m autograder feedback{build}` (a page per student and notebook) and "
        f"`python -m autograder export{build}` (grades.csv); free-text answers are graded by hand in formgrader", same]


def test_the_summary_names_collected_students_a_limited_run_left_ungraded(tmp_path, capsys, monkeypatch):
    """`grade --student ann` leaves the others of the class ungraded: the summary says so, and how to grade them (the
    failed ones are listed as errors already)."""
    import autograder.grade
    from autograder.grade import GradeResult, print_summary

    with build_env(tmp_path):
        course = Course.load(tmp_path)
    monkeypatch.setattr(autograder.grade, "to_grade", lambda c: ["bob", "cy", "dee"] if c is course else [])
    print_summary(course, GradeResult(mode="sandbox", graded=["ann"], errors={"cy": "worker died"}))
    out = capsys.readouterr().out.splitlines()
    assert out[-1] == (f"2 other collected students are not graded yet (bob, dee): `python -m autograder grade --build "
                       f"{tmp_path.resolve()}` grades them"), out


def test_a_notebook_without_the_answer_cells_is_scored_0_with_a_reason_the_student_can_act_on(graded):
    """A fresh notebook saved under a released name: nbgrader fails with a bare KeyError; the reason names the lost cells."""
    build, course = copy_course(graded["snapshot"])
    try:
        folder = course.step_dir("submitted", "partial")
        for path in folder.glob("*.ipynb"):
            if path.stem != "02-shapes-and-loss":
                path.unlink()  # grade only this notebook: it fails before any kernel starts
        fresh = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("print('my own work')")])
        fresh.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
        nbformat.write(fresh, folder / "02-shapes-and-loss.ipynb")
        source = nbformat.read(REPO / "notebooks" / "part-ii" / "02-shapes-and-loss.ipynb", as_version=4)
        answers = sorted(c.metadata["nbgrader"]["grade_id"] for c in source.cells
                         if c.metadata.get("nbgrader", {}).get("solution"))
        result = grade(course, options(workers=1, students=["partial"]))
        reason = result.notebook_errors["partial"]["02-shapes-and-loss"]
        assert f"the notebook lacks {len(answers)} of its {len(answers)} answer cells ({', '.join(answers[:4])}" in reason
        assert "not started from the released notebook" in reason and "nbgrader" not in reason, reason
        cells = {cell: v for (nb, cell), v in grades_of(dump(course.db_url, ["partial"]), "partial").items()
                 if nb == "02-shapes-and-loss"}
        assert cells and all(not auto for auto, _, _ in cells.values()), cells
    finally:
        shutil.rmtree(build, ignore_errors=True)


def test_the_private_gradebook_lists_each_notebook_s_cells_in_notebook_order(tmp_path):
    """nbgrader puts a deleted test cell back after the cell the gradebook lists before it, and reads the cells in
    the database's order. A course gradebook whose rows are not in notebook order (PostgreSQL after a release
    rewrote them) must still give the workers' gradebooks the notebooks' own order."""
    from nbgrader.api import Gradebook

    from autograder.cells import nbgrader_meta
    from autograder.grade import build_template

    shutil.copytree(released_build()[0], tmp_path / "build", symlinks=True)
    with build_env(tmp_path / "build"):
        course = Course.load(tmp_path / "build")
    reverse_cell_rows(course.db_url)
    released = {p.stem: [nbgrader_meta(c)["grade_id"] for c in nbformat.read(p, as_version=4).cells
                         if nbgrader_meta(c).get("grade_id")] for p in sorted(course.source_dir.glob("*.ipynb"))}
    with Gradebook(course.db_url, course.course_id) as gb:  # the course's gradebook is out of order now
        shuffled = [c.name for c in gb.find_notebook("02-shapes-and-loss", "part-ii").source_cells]
    assert shuffled != [g for g in released["02-shapes-and-loss"] if g in shuffled]
    template = tmp_path / "template.db"
    with course.gradebook() as gb:
        build_template(course, gb.engine, template)
    with Gradebook(f"sqlite:///{template}", course.course_id) as private:
        for name, grade_ids in released.items():
            nb = private.find_notebook(name, "part-ii")
            sources = [c.name for c in nb.source_cells]
            assert sources and sources == [g for g in grade_ids if g in sources], name
            for cells in (nb.grade_cells, nb.solution_cells, nb.task_cells):
                names = [c.name for c in cells]
                assert names == [g for g in grade_ids if g in names], name


# --- deleted test cells: where they go back ------------------------------------------------

def release_cell(kind: str, grade_id: str, source: str = "", **flags):
    """A release cell as nbgrader's generate step leaves it: nbgrader metadata with flags and its checksum (source
    after a first line naming the grade id)."""
    from nbgrader.utils import compute_checksum

    cell = (nbformat.v4.new_code_cell if kind == "code" else nbformat.v4.new_markdown_cell)(f"# {grade_id}{source}")
    cell.metadata["nbgrader"] = {"grade": False, "solution": False, "locked": False, "grade_id": grade_id,
                                 "schema_version": 3, **flags}
    cell.metadata.nbgrader["checksum"] = compute_checksum(cell)
    return cell


RELEASE = [release_cell("code", "setup", locked=True),
           release_cell("code", "answer1", solution=True),
           release_cell("markdown", "note", locked=True),  # read-only text between an answer and its test
           release_cell("code", "test1", grade=True, locked=True, points=1),
           release_cell("code", "answer2", solution=True),
           release_cell("code", "test2a", grade=True, locked=True, points=2),
           release_cell("code", "test2b", "\n### BEGIN HIDDEN TESTS\nchecks.standing_in(globals(), answer1=_ref)\n"
                                          "### END HIDDEN TESTS", grade=True, locked=True, points=1),  # stand-ins
           release_cell("code", "answer3", solution=True),
           release_cell("code", "test3", grade=True, locked=True, points=1)]
RELEASE_ORDER = [meta(c)["grade_id"] for c in RELEASE]
TESTS = {g for g in RELEASE_ORDER if g.startswith("test")}


@pytest.fixture(scope="module")
def release_gradebook(tmp_path_factory):
    """A gradebook in which nbgrader's own SaveCells recorded RELEASE as notebook 'nb' of assignment 'a'."""
    from nbgrader.api import Gradebook
    from nbgrader.preprocessors import SaveCells

    db_url = f"sqlite:///{tmp_path_factory.mktemp('release-gradebook') / 'gradebook.db'}"
    with Gradebook(db_url) as gb:
        gb.add_assignment("a")
    SaveCells().preprocess(nbformat.v4.new_notebook(cells=RELEASE), resources_for(db_url))
    return db_url


def resources_for(db_url: str) -> dict:
    """The resources nbgrader's preprocessors read for notebook 'nb' of assignment 'a'."""
    return {"nbgrader": {"notebook": "nb", "assignment": "a", "db_url": db_url}}


def submission_without(deleted: set[str]) -> list:
    """RELEASE without the deleted cells, with a cell of the student's own after answer1's and answer2's places."""
    cells = []
    for cell in RELEASE:
        if meta(cell)["grade_id"] not in deleted:
            cells.append(nbformat.from_dict(cell))
        if meta(cell)["grade_id"] in ("answer1", "answer2"):
            cells.append(nbformat.v4.new_code_cell("print('my own cell')"))
    return cells


def overwritten(db_url: str, cells: list, preprocessor):
    """The notebook of cells once the preprocessor class (OverwriteCells or ours) ran on it with add_missing_cells."""
    from traitlets.config import Config

    config = Config()
    config.OverwriteCells.add_missing_cells = True
    nb, _ = preprocessor(config=config).preprocess(nbformat.v4.new_notebook(cells=cells), resources_for(db_url))
    return nb


def restore(db_url: str, deleted: set[str], preprocessor) -> list[str]:
    """Grade ids, in order ('own' for the student's cells), of submission_without(deleted) once the preprocessor
    class ran on it with add_missing_cells."""
    return [meta(c).get("grade_id", "own") for c in overwritten(db_url, submission_without(deleted), preprocessor).cells]


def assert_next_to_release_cells(got: list[str], order: list[str], restored: set[str]) -> None:
    """Each put-back cell in got ('own' for the student's cells) sits right after the release cell just before it in
    order when the notebook holds that one, else right before a release cell (after the student's cells) or last."""
    for k, grade_id in enumerate(got):
        if grade_id in restored:
            at = order.index(grade_id)
            if at > 0 and order[at - 1] in got:
                assert got[k - 1] == order[at - 1], (grade_id, got)
            else:
                assert k + 1 == len(got) or got[k + 1] != "own", (grade_id, got)


def assert_tests_restored(got: list[str], deleted: set[str]) -> None:
    """The release's cells in release order, deleted tests included; the rest of the submission as it was handed in;
    each test next to the release cells as assert_next_to_release_cells says."""
    assert [g for g in got if g != "own"] == [g for g in RELEASE_ORDER if g not in deleted or g in TESTS]
    handed_in = [meta(c).get("grade_id", "own") for c in submission_without(deleted)]
    assert [g for g in got if g not in deleted] == handed_in
    assert_next_to_release_cells(got, RELEASE_ORDER, deleted & TESTS)


@pytest.mark.parametrize("deleted", [{"test1"}, {"answer2", "test2a", "test2b"}, {"setup", "answer1", "note", "test1"},
                                     {"test2b", "answer3", "test3"}])
def test_a_deleted_test_goes_back_in_release_order_where_nbgrader_s_own_restore_fails(release_gradebook, deleted):
    """nbgrader puts a deleted test after the release cell just before it and raises KeyError when that one is not
    a grade or answer cell of the submission (a read-only note, an answer deleted with its test): the whole notebook
    would score 0. Ours puts it after the nearest earlier release cell still there, else before the next one."""
    from nbgrader.preprocessors import OverwriteCells

    from autograder.worker import RestoreMissingCells

    with pytest.raises(KeyError):
        restore(release_gradebook, deleted, OverwriteCells)
    assert_tests_restored(restore(release_gradebook, deleted, RestoreMissingCells), deleted)


@pytest.mark.parametrize("deleted", [set(), {"test3"}, {"test2a", "test2b"}, {"test2b", "test3"}])
def test_where_nbgrader_s_restore_works_ours_gives_the_same_notebook(release_gradebook, deleted):
    """On submissions nbgrader's OverwriteCells can handle, RestoreMissingCells changes nothing it does."""
    from nbgrader.preprocessors import OverwriteCells

    from autograder.worker import RestoreMissingCells

    theirs = restore(release_gradebook, deleted, OverwriteCells)
    assert_tests_restored(theirs, deleted)
    assert restore(release_gradebook, deleted, RestoreMissingCells) == theirs


@pytest.mark.parametrize("order, moved", [
    (RELEASE_ORDER, {}),
    (["setup", "answer1", "note", "answer2", "test2a", "test2b", "test1", "answer3", "test3"], {"test1": "test2b"}),
    (["setup", "answer1", "note", "answer2", "test2b", "test2a", "test1", "answer3", "test3"],
     {"test2a": "test2b", "test1": "test2b"}),
    (["setup", "answer1", "note", "answer2", "test2a", "test1", "test2b", "answer3", "test3"], {}),  # no stand-ins passed
    (["setup", "answer1", "note", "test1", "answer2", "test2a", "answer3", "test3", "test2b"], {}),  # a later one moved up
])
def test_a_test_cell_moved_below_a_later_test_cell_with_stand_ins_is_named_for_trusted_checks(release_gradebook, order,
                                                                                            moved):
    """A red-team review: with 4.1's and 4.2's test cells moved below 4.3's, whose hidden part stands in for their
    functions, an answer that lifted the stand-in's reference from its closure passed them unanswered. Sanitizing
    names such cells in the notebook's metadata (a student's own value of it is dropped), and TrustedChecks fails
    them."""
    from autograder.cells import MOVED_TESTS_KEY
    from autograder.worker import RestoreMissingCells

    by_id = {meta(c)["grade_id"]: c for c in RELEASE}
    cells = [nbformat.from_dict(by_id[g]) for g in order]
    nb = nbformat.v4.new_notebook(cells=cells, metadata={MOVED_TESTS_KEY: {"test3": "test1"}})  # the student's own
    from traitlets.config import Config

    config = Config()
    config.OverwriteCells.add_missing_cells = True
    nb, _ = RestoreMissingCells(config=config).preprocess(nb, resources_for(release_gradebook))
    assert nb.metadata[MOVED_TESTS_KEY] == moved


@pytest.mark.parametrize("kept", [None, {"grade_id": "answer1"}])
def test_a_submission_without_any_answer_cell_is_refused_not_given_its_tests(release_gradebook, kept):
    """With no answer cell left there is no place to put the tests back: MissingAnswerCells, which grading reports.
    A cell that only names an answer's grade id, without being an answer cell, does not count as one."""
    from autograder.worker import MissingAnswerCells, RestoreMissingCells

    cells = submission_without({"answer1", "answer2", "answer3", "test3"})
    if kept is not None:
        cells.insert(0, nbformat.v4.new_code_cell("def f(): pass", metadata={"nbgrader": kept}))
    with pytest.raises(MissingAnswerCells) as caught:
        overwritten(release_gradebook, cells, RestoreMissingCells)
    assert str(caught.value) == ("the submission holds none of the 3 answer cells of notebook 'nb': there is nowhere "
                                 "to put back its 1 missing grade cell")


@pytest.mark.parametrize("metadata", [
    {"grade_id": "cell-from-another-notebook", "solution": True, "grade": False, "locked": False, "schema_version": 3},
    {"grade": False, "solution": False, "locked": False, "schema_version": 3},
])
def test_a_cell_with_nbgrader_metadata_the_release_does_not_know_is_graded_as_the_student_s_own(release_gradebook,
                                                                                                 metadata):
    """A cell pasted from another notebook (nbgrader drops its unknown grade id) or with no grade id at all: nbgrader's
    restore crashes on it (KeyError 'grade_id') and the notebook would score 0; here it becomes a plain cell."""
    from nbgrader.preprocessors import OverwriteCells

    from autograder.worker import RestoreMissingCells

    def submission():
        cells = submission_without(set())
        cells.insert(2, nbformat.v4.new_code_cell("def f(): pass", metadata={"nbgrader": dict(metadata)}))
        return cells

    with pytest.raises(KeyError, match="grade_id"):
        overwritten(release_gradebook, submission(), OverwriteCells)
    nb = overwritten(release_gradebook, submission(), RestoreMissingCells)
    handed_in = [meta(c).get("grade_id", "own") for c in submission_without(set())]
    assert [meta(c).get("grade_id", "own") for c in nb.cells] == handed_in[:2] + ["own"] + handed_in[2:]
    assert "nbgrader" not in nb.cells[2].metadata and nb.cells[2].source == "def f(): pass"


def test_grading_runs_the_restoring_overwrite_with_and_without_trusted_checks(tmp_path):
    """The worker's nbgrader config swaps in RestoreMissingCells (and BudgetedExecute), also after the trusted checks
    rewrite the preprocessor lists."""
    from nbgrader.preprocessors import OverwriteCells

    from autograder.trusted_checks import DropEmptyGradeMetadata
    from autograder.worker import BudgetedExecute, RestoreMissingCells, notebook_config

    records = tmp_path / "records.json"
    records.write_text("{}", encoding="utf-8")
    for expected in (None, str(records)):
        job = {"course_root": str(tmp_path / "course"), "db_url": f"sqlite:///{tmp_path / 'gb.db'}", "cell_timeout": 60,
               "notebook_timeout": 600, "sandbox": False, "expected_records": expected}
        config = notebook_config(job, tmp_path / "scratch")
        sanitize = config.Autograde.sanitize_preprocessors
        assert RestoreMissingCells in sanitize and OverwriteCells not in sanitize, sanitize
        assert (DropEmptyGradeMetadata in sanitize) == (expected is not None), sanitize
        assert BudgetedExecute in config.Autograde.autograde_preprocessors
        assert config.OverwriteCells.add_missing_cells is True


@settings(max_examples=300, deadline=None)
@given(kinds=st.lists(st.sampled_from(["answer", "test", "note"]), min_size=1, max_size=12), data=st.data())
def test_put_back_tests_keep_the_release_order_and_the_student_s_cells_in_place(kinds, data):
    """insert_missing on any layout: release cells in release order, the handed-in cells in their order, each put-back
    test next to the release cells as assert_next_to_release_cells says."""
    from autograder.worker import insert_missing

    def cell(grade_id):
        return nbformat.from_dict({"metadata": {"nbgrader": {"grade_id": grade_id}} if grade_id != "own" else {},
                                   "id": grade_id})

    order = [f"{kind}{k}" for k, kind in enumerate(kinds)]
    deleted = data.draw(st.sets(st.sampled_from(order)))
    handed_in = []
    for grade_id in order:
        if grade_id not in deleted:
            handed_in.append(grade_id)
        if data.draw(st.booleans()):
            handed_in.append("own")
    restored = [g for g in order if g in deleted and g.startswith("test")]
    cells = [cell(g) for g in handed_in]
    insert_missing(cells, order, {g: cell(g) for g in restored})
    got = [c["id"] for c in cells]
    assert [g for g in got if g != "own"] == [g for g in order if g not in deleted or g in restored]
    assert [g for g in got if g not in restored] == handed_in
    assert_next_to_release_cells(got, order, set(restored))


def test_deleting_an_exercise_s_answer_and_tests_scores_that_exercise_0_and_grades_the_rest(graded):
    """A student who deleted the last exercise of a notebook (its answer cell and its tests) gets every other test's
    points: the tests go back and fail, the rest of the notebook is graded as before."""
    name = "02-shapes-and-loss"
    source = source_notebooks()[name]
    answer, tests = last_code_exercise(source)  # nothing after the last exercise uses its function
    assert answer and tests
    build, course = copy_course(graded["snapshot"])
    try:
        folder = course.step_dir("submitted", "perfect")
        for path in folder.glob("*.ipynb"):
            if path.stem != name:
                path.unlink()
        submitted = nbformat.read(folder / f"{name}.ipynb", as_version=4)
        submitted.cells = [c for c in submitted.cells if meta(c).get("grade_id") not in tests | {answer}]
        nbformat.write(submitted, folder / f"{name}.ipynb")
        result = grade(course, options(workers=1, students=["perfect"]))
        assert result.graded == ["perfect"] and not result.notebook_errors, result
        got = grades_of(dump(course.db_url, ["perfect"]), "perfect")
        for cell, points in graded_test_cells(source).items():
            assert got[(name, cell)] == ((0.0 if cell in tests else points), None, False), cell
    finally:
        shutil.rmtree(build, ignore_errors=True)


def test_the_course_config_sets_the_sandbox_limits_and_a_wrong_value_is_named():
    """c.SandboxedKernelManager.* and c.GradingExecute.output_bytes in nbgrader_config.py set the sandbox's limits
    (configure_sandbox overrode them with its defaults); limits given to grade() win; a value that is no positive
    integer is refused with the setting named, before any kernel starts."""
    from traitlets.config import Config

    from autograder.grade import configured_limits
    from autograder.sandbox import SandboxLimits

    config = Config()
    config.SandboxedKernelManager.memory_bytes = 6 * 2**30
    config.SandboxedKernelManager.cpu_seconds = 900
    config.GradingExecute.output_bytes = 2**16
    config.GradingExecute.timeout = 5  # not a limit: left to nbgrader
    limits = configured_limits(config, {"cpu_seconds": 100})
    assert limits == {"memory_bytes": 6 * 2**30, "cpu_seconds": 100, "output_bytes": 2**16}, limits
    assert SandboxLimits(**limits).memory_bytes == 6 * 2**30
    assert configured_limits(Config(), {}) == {}
    for section, name, value, unit in [("SandboxedKernelManager", "memory_bytes", "4G", "bytes"),
                                       ("SandboxedKernelManager", "max_processes", 0, "processes"),
                                       ("SandboxedKernelManager", "cpu_seconds", 1.5, "seconds"),
                                       ("GradingExecute", "output_bytes", True, "bytes")]:
        wrong = Config()
        wrong[section][name] = value
        with pytest.raises(AutograderError) as caught:
            configured_limits(wrong, {})
        assert str(caught.value).startswith(f"autograder/nbgrader_config.py sets c.{section}.{name} = {value!r}; "
                                            f"expected a positive integer ({unit}"), caught.value


def test_a_kernel_that_cannot_start_is_reported_with_the_cause_its_log_gives(graded):
    """No kernel can start (here: a memory limit below what Python needs to load its libraries): the notebook is
    scored 0, and the instructor's summary gives the last line the kernel wrote, not only jupyter_client's "Kernel
    died". The student's feedback page does not: a student's code can write that log (from an earlier notebook's
    kernel in the same sandbox)."""
    from autograder.feedback import feedback

    if not sandbox_works():
        pytest.fail("bubblewrap is not usable here (`make sysdeps` installs it): without it no limit applies to "
                    "kernels, so this test cannot make one fail to start")
    build, course = copy_course(graded["snapshot"])
    try:
        for path in course.step_dir("submitted", "perfect").glob("*.ipynb"):
            if path.stem != "02-shapes-and-loss":
                path.unlink()
        # set as an instructor sets it, in the course's nbgrader_config.py (which the sandbox once overrode)
        course.config.SandboxedKernelManager.memory_bytes = 16 * 2**20
        result = grade(course, options(workers=1, students=["perfect"]))
        reason = result.notebook_errors["perfect"]["02-shapes-and-loss"]
        error = "RuntimeError: no kernel could start (3 tries): Kernel died before replying to kernel_info"
        assert reason.startswith(f"{error}; the kernel's log ends: "), reason
        cause = reason.rsplit("the kernel's log ends: ", 1)[1]
        assert "failed to map segment from shared object" in cause, reason  # the loader's words, in the kernel
        assert len(reason) < 500 and "\n" not in reason, reason
        notebooks = json.loads(job_rows(course.db_url)["perfect"]["notebooks"])  # what the job table keeps
        assert notebooks["02-shapes-and-loss"] == {"status": "error", "error": error, "kernel_log": cause,
                                                   "seconds": notebooks["02-shapes-and-loss"]["seconds"]}, notebooks
        log = (course.reports_dir / "grade-logs" / "perfect.log").read_text(encoding="utf-8")
        assert "kernel log:" in log and cause.rstrip("…") in log, log[-3000:]  # the instructor's view: the log around it
        with build_env(build):
            pages = feedback(course, students=["perfect"]).explained  # the pages of notebooks not graded
        page = next(p for p in pages if p.stem == "02-shapes-and-loss")
        text = page_text(page.read_text(encoding="utf-8"))
        assert "it could not be graded, so it scored 0: RuntimeError: no kernel could start (3 tries)" in text, text
        assert "kernel_info" not in text, text  # jupyter_client's words may quote the kernel (red-team review)
        assert cause not in text and "kernel's log" not in text, text
    finally:
        shutil.rmtree(build, ignore_errors=True)


def test_export_bom_writes_the_same_csvs_after_a_byte_order_mark_and_reads_them_back_alike(graded, capsys):
    """export --bom: for Excel's double click, each CSV is the plain export's text after a UTF-8 byte-order mark, and
    export's own summary (read back from grades.csv) is unchanged."""
    from autograder.cli import main
    from autograder.export import not_graded, waiting_for_a_grader

    build, course = copy_course(graded["course"].root)
    reports = course.reports_dir
    try:
        outputs, files = {}, {}
        for flags in ([], ["--bom"]):
            with build_env(build):
                code = main(["export", *flags, "--build", str(build)])
            outputs[tuple(flags)] = (code, capsys.readouterr().out)
            files[tuple(flags)] = {name: (reports / name).read_bytes() for name in ("grades.csv", "grades-per-cell.csv")}
            readings = (waiting_for_a_grader(reports / "grades.csv"), not_graded(reports / "grades.csv"))
            if not flags:
                plain_readings = readings
        assert outputs[("--bom",)] == outputs[()], outputs
        assert plain_readings[0], "the shared class has cells waiting for a grader: the summary line is exercised"
        assert readings == plain_readings
        for name, plain in files[()].items():
            assert not plain.startswith(codecs.BOM_UTF8), name
            assert files[("--bom",)][name] == codecs.BOM_UTF8 + plain, name
        assert "student_id" in files[()]["grades.csv"].decode("utf-8").splitlines()[0]
    finally:
        shutil.rmtree(build, ignore_errors=True)


def test_a_dropped_graded_student_leaves_export_and_feedback_and_grade_does_not_bring_them_back(graded, capsys):
    """A TA's walkthrough: after `nbgrader db student remove`, export and feedback exited 1 saying to run grade, and grade
    put the student back. `drop` takes a graded student out for good: export has no row of theirs and exits as it
    did, grade grades nobody, and grade and feedback asked for them say they were dropped."""
    from autograder.cli import main

    build, course = copy_course(graded["course"].root)
    try:
        with build_env(build):
            before = main(["export"])
            with open(course.reports_dir / "grades.csv", encoding="utf-8") as fh:
                students = [row["student_id"] for row in csv.DictReader(fh)]
            assert "perfect" in students
            assert main(["drop", "--student", "perfect"]) == 0
            assert (course.root / "dropped" / "perfect").is_dir() and not course.step_dir("autograded", "perfect").exists()
            assert main(["export"]) == before
            with open(course.reports_dir / "grades.csv", encoding="utf-8") as fh:
                assert [row["student_id"] for row in csv.DictReader(fh)] == [s for s in students if s != "perfect"]
            capsys.readouterr()
            assert main(["grade"]) == 0
            assert "perfect" not in capsys.readouterr().out
            with course.gradebook() as gb:
                assert "perfect" not in {s.id for s in gb.students}
            for command in (["grade", "--student", "perfect"], ["feedback", "--student", "perfect"]):
                assert main(command) == 2
                err = capsys.readouterr().err
                assert "perfect was dropped from the course on " in err and "drop --undo --student ID" in err, err
    finally:
        shutil.rmtree(build, ignore_errors=True)


def test_a_hand_in_collected_after_grading_is_not_exported_or_fed_back_as_graded(graded, capsys):
    """collect files newer notebooks for a graded student: export and feedback must not serve the old grades."""
    from autograder.cli import main
    from autograder.export import not_graded
    from autograder.feedback import feedback

    build, course = copy_course(graded["course"].root)  # graded, with feedback; the shared one stays read-only
    try:
        changed = course.step_dir("submitted", "perfect") / "02-shapes-and-loss.ipynb"
        nb = nbformat.read(changed, as_version=4)
        nb.cells.append(nbformat.v4.new_markdown_cell("a second thought, handed in after grading"))
        nbformat.write(nb, changed)
        with build_env(build):  # Course.load exports PART_II_BUILD; restored after
            code = main(["export", "--build", str(build)])  # an empty score: exit 1, so that a script notices
        out = capsys.readouterr().out
        assert code == 1 and "1 student is not graded yet (perfect): its scores are left empty" in out, out
        rerun = f"run `python -m autograder grade --build {Path(build).resolve()}`"  # as printed, runs on this course
        assert f"{rerun}, then export again" in out, out
        with open(course.reports_dir / "grades.csv", newline="", encoding="utf-8") as fh:
            rows = {r["student_id"]: r for r in csv.DictReader(fh)}
        assert rows["perfect"]["status"] == "not graded", rows["perfect"]
        assert "handed in again after grading" in rows["perfect"]["notes"]
        # empty, not 0: an upload to the LMS must not read it as a score
        assert rows["perfect"]["score"] == rows["perfect"]["raw_score"] == rows["perfect"]["02-shapes-and-loss"] == ""
        assert not_graded(course.reports_dir / "grades.csv") == ["perfect"]
        assert rows["partial"]["status"] != "not graded" and "handed in again" not in rows["partial"]["notes"]
        assert float(rows["partial"]["score"]) > 0
        earlier = sorted(course.step_dir("feedback", "perfect").glob("*.html"))
        assert earlier, "the shared class has feedback for perfect"
        result = feedback(course, students=["perfect", "partial"])
        assert "handed in again after grading" in result.errors["perfect"]
        assert f"{rerun} first" in result.errors["perfect"], result.errors["perfect"]
        # the earlier pages showed the grades of the replaced hand-in: a student must not be sent them
        assert f"removed the {len(earlier)} earlier pages" in result.errors["perfect"], result.errors["perfect"]
        assert not any(p.exists() for p in earlier)
        assert {p.parent.parent.name for p in result.written} == {"partial"}
        with pytest.raises(AutograderError) as unknown:  # a typo: the list of graded students must not offer perfect
            feedback(course, students=["perfekt"])
        assert "perfect (handed in again since: grade it again)" in str(unknown.value), unknown.value
        assert "partial (" not in str(unknown.value), unknown.value
    finally:
        shutil.rmtree(build, ignore_errors=True)


def test_a_hand_score_outside_its_cell_s_points_is_named_by_export_and_feedback_which_exit_1(graded, capsys):
    """formgrader's page keeps a hand score within 0..points, but its API and scripts on nbgrader's Gradebook do not:
    5 on a 2-point answer made 02 read 19 / 16 in grades.csv and on the student's overview, and -1 passed as well,
    export exiting 0 (found by review). Export now names each such score and exits 1. Feedback showed the student
    'Score: 7.0 / 2.0' and exited 0 (found by a later review): it now writes none of that student's pages (the earlier
    ones removed), names the scores and exits 1; the other students get theirs."""
    from autograder.cli import main

    build, course = copy_course(graded["course"].root)
    try:
        with course.gradebook() as gb:
            submission = gb.find_submission("part-ii", "partial")
            cells = [g for nb in sorted(submission.notebooks, key=lambda n: n.name)
                     for g in sorted(nb.grades, key=lambda g: g.name) if g.max_score > 0]
            by_hand = [g for g in cells if g.auto_score is None]
            assert by_hand, "the shared class has an answer graded by hand"
            # the other: a test cell, whose autograded score a hand score replaces (formgrader allows it)
            high, low = by_hand[0], next(g for g in cells if g.auto_score is not None)
            named = [(g.notebook.name, g.name, g.max_score) for g in (high, low)]
            high.manual_score, low.manual_score = high.max_score + 3, -1
            gb.db.commit()
        with build_env(build):
            code = main(["export", "--build", str(build)])
        out = capsys.readouterr().out
        assert code == 1, out
        assert "1 student has a hand score below 0 or above its cell's points (partial; the notes name the cells)" in out
        notes = read_grades(course)["partial"]["notes"]
        (nb_high, id_high, max_high), (nb_low, id_low, max_low) = named
        assert f"{nb_high} {id_high} {max_high + 3:g} of {max_high:g}" in notes, notes
        assert f"{nb_low} {id_low} -1 of {max_low:g}" in notes, notes
        assert "hand score" not in read_grades(course)["perfect"]["notes"]
        from autograder.feedback import index_page

        earlier = sorted(course.step_dir("feedback", "partial").glob("*.html"))
        assert earlier, "the shared class has feedback pages for partial"
        with build_env(build):
            code = main(["feedback", "--build", str(build), "--student", "partial", "--student", "perfect"])
        out = capsys.readouterr().out
        assert code == 1, out
        scores = sorted([f"{nb_high} {id_high} {max_high + 3:g} of {max_high:g}", f"{nb_low} {id_low} -1 of {max_low:g}"])
        assert (f"partial: ERROR hand score below 0 or above the cell's points ({'; '.join(scores)}): no feedback "
                "written") in out, out
        assert not any(p.exists() for p in earlier) and not index_page(course, "partial").exists()
        written = sorted(p.stem for p in course.step_dir("feedback", "perfect").glob("*.html"))
        assert "perfect: ERROR" not in out and written == course.notebook_names(), out
    finally:
        shutil.rmtree(build, ignore_errors=True)


def test_after_a_failed_regrade_feedback_writes_no_page_and_export_leaves_the_scores_empty(graded, capsys):
    """A grading that failed (job state error) leaves the earlier grading's pages and scores standing for other files:
    feedback wrote pages from the old autograded notebook and export showed the old scores, exiting 0 (found by
    review). Now feedback removes the pages, export leaves the scores empty (not 0) and exits 1 saying who."""
    from sqlalchemy import create_engine

    from autograder.cli import main
    from autograder.feedback import feedback
    from autograder.grade import JOBS

    build, course = copy_course(graded["course"].root)
    try:
        error = "the grading process was killed by signal 9 (SIGKILL)"
        engine = create_engine(course.db_url, future=True)
        with engine.begin() as db:  # what two killed workers leave: the job failed after an earlier grading
            db.execute(JOBS.update().where(JOBS.c.student_id == "perfect").values(state="error", error=error))
        engine.dispose()
        earlier = sorted(course.step_dir("feedback", "perfect").glob("*.html"))
        assert earlier, "the shared class has feedback for perfect"
        with build_env(build):
            result = feedback(course, students=["perfect", "partial"])
        again = f"`python -m autograder grade --build {Path(build).resolve()}` tries again"
        assert result.errors["perfect"].startswith(f"grading failed ({error}): no feedback written; {again}"), \
            result.errors["perfect"]
        assert not any(p.exists() for p in earlier)
        assert {p.parent.parent.name for p in result.written} == {"partial"}
        with build_env(build):
            code = main(["export", "--build", str(build)])
        out = capsys.readouterr().out
        assert code == 1, out
        assert ("1 student could not be graded (perfect): its scores are left empty and the notes say why; "
                f"`python -m autograder grade --build {Path(build).resolve()}` tries again, then export again") in out, out
        rows = read_grades_csv(course.reports_dir / "grades.csv")
        assert rows["perfect"]["status"] == "error" and error in rows["perfect"]["notes"], rows["perfect"]
        assert rows["perfect"]["score"] == rows["perfect"]["raw_score"] == rows["perfect"]["02-shapes-and-loss"] == ""
        assert rows["partial"]["status"] != "error" and float(rows["partial"]["score"]) > 0
    finally:
        shutil.rmtree(build, ignore_errors=True)


def read_grades(course: Course) -> dict[str, dict]:
    """student_id -> row of the course's reports/grades.csv."""
    return read_grades_csv(course.reports_dir / "grades.csv")


def test_a_due_date_makes_export_and_feedback_say_who_handed_in_late_and_a_new_release_keeps_it(graded, capsys, monkeypatch):
    """release --due-date records it; export then names each later hand-in and by how much, with the
    scores as they were, and the feedback pages tell the student; a release without the option keeps it."""
    import datetime as dt

    from autograder.cli import main
    from autograder.export import export
    from autograder.release import set_due_date

    build, course = copy_course(graded["course"].root)
    monkeypatch.setenv("PATH", f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")  # alembic
    try:
        with course.gradebook() as gb:
            stamps = {s.student.id: s.timestamp for s in gb.assignment_submissions("part-ii")}
        due = stamps["perfect"] - dt.timedelta(hours=2, minutes=3)
        before = read_grades(graded["course"])
        with build_env(build):
            shanghai = due + dt.timedelta(hours=8)  # as an instructor in China types it
            assert main(["release", "--due-date", f"{shanghai.isoformat(sep=' ')} Asia/Shanghai", "--build", str(build)]) == 0
            typed = f"{shanghai:%Y-%m-%d %H:%M}" + (f":{shanghai:%S}" if shanghai.second else "")  # ':00' left out
            assert f"due date: {due:%Y-%m-%d %H:%M:%S} UTC ({typed} Asia/Shanghai as given)" in capsys.readouterr().out
            assert main(["release", "--build", str(build)]) == 0  # no --due-date: the recorded one stays
            assert f"due date: {due:%Y-%m-%d %H:%M:%S} UTC" in capsys.readouterr().out
            readme = (course.bundle_dir / "README.md").read_text(encoding="utf-8")  # the students read it too
            assert f"截止时间：**{shanghai:%Y-%m-%d %H:%M}（北京时间）**，即 {due:%Y-%m-%d %H:%M} UTC。" in readme
            export(course)
        rows = read_grades(course)
        assert rows["perfect"]["duedate"] == str(due)
        assert rows["perfect"]["seconds_late"] == str(int((stamps["perfect"] - due).total_seconds()))
        assert "handed in 2 h 3 min after the due date (the score is not reduced for it)" in rows["perfect"]["notes"]
        for student, stamp in stamps.items():
            if rows[student]["status"] in ("graded", "awaiting manual grading", "incomplete"):
                assert ("after the due date" in rows[student]["notes"]) == (stamp > due), rows[student]
            assert rows[student]["score"] == before[student]["score"], student
        from autograder.feedback import feedback

        with build_env(build):
            pages = feedback(course, students=["perfect"]).written
        assert pages
        for page in pages:  # the student is told too, on every page
            text = page_text(page.read_text(encoding="utf-8"))
            beijing = dt.timedelta(hours=8)  # Asia/Shanghai, as the student README gives the due date
            assert (f"Handed in late. Your hand-in is dated {stamps['perfect']:%Y-%m-%d %H:%M} UTC, "
                    f"{stamps['perfect'] + beijing:%Y-%m-%d %H:%M} Beijing time, 2 h 3 min after the due "
                    f"date ({due:%Y-%m-%d %H:%M} UTC, {shanghai:%Y-%m-%d %H:%M} Beijing time). No late penalty is taken "
                    "off the score above") in text, text[:1500]
        set_due_date(course, max(stamps.values()) + dt.timedelta(minutes=1))  # everyone on time
        with build_env(build):
            export(course)
        assert not [s for s, r in read_grades(course).items() if "after the due date" in r["notes"]]
    finally:
        shutil.rmtree(build, ignore_errors=True)


def test_an_extension_puts_a_late_hand_in_on_time_in_export_and_feedback_and_counts_lateness_from_its_end(graded, capsys):
    """extend --student X --until WHEN on a graded class: X's hand-in is no longer late; a hand-in after
    the end of an extension is late by the time since that end, and the student is told so."""
    import datetime as dt

    from autograder.cli import main
    from autograder.export import export
    from autograder.feedback import feedback
    from autograder.release import set_due_date

    build, course = copy_course(graded["course"].root)
    try:
        with course.gradebook() as gb:
            stamps = {s.student.id: s.timestamp for s in gb.assignment_submissions("part-ii")}
        due = stamps["perfect"] - dt.timedelta(hours=2, minutes=3)
        set_due_date(course, due)
        perfect_until = stamps["perfect"] + dt.timedelta(minutes=1)
        partial_until = due + dt.timedelta(hours=1)
        with build_env(build):
            for student, until in (("perfect", perfect_until), ("partial", partial_until)):
                assert main(["extend", "--student", student, "--until", f"{until.isoformat(sep=' ')} UTC",
                             "--build", str(build)]) == 0
                out = capsys.readouterr().out
                assert f"{student}: until {until:%Y-%m-%d %H:%M} UTC" in out, out
                # the pages written before still say late: the next step writes them again (found by review)
                assert (f"next: `python -m autograder feedback --student {student} --build {build}` and `python -m "
                        f"autograder export --build {build}` write the new lateness") in out, out
            export(course)
        rows = read_grades(course)
        assert f"extension until {perfect_until:%Y-%m-%d %H:%M} UTC" in rows["perfect"]["notes"]
        assert "after the" not in rows["perfect"]["notes"], rows["perfect"]
        assert stamps["partial"] == stamps["perfect"]  # one LMS download: partial is 1 h 3 min past its extension
        assert "handed in 1 h 3 min after the extended due date" in rows["partial"]["notes"], rows["partial"]
        assert "handed in 2 h 3 min after the due date" in rows["blank"]["notes"] and "extension" not in rows["blank"]["notes"]
        with build_env(build):
            pages = feedback(course, students=["perfect", "partial"]).written
        for page in pages:
            text = page_text(page.read_text(encoding="utf-8"))
            student = page.parent.parent.name
            if student == "perfect":
                assert "Handed in late" not in text, page
            else:
                beijing = partial_until + dt.timedelta(hours=8)
                assert (f"1 h 3 min after your extended due date ({partial_until:%Y-%m-%d %H:%M} UTC, "
                        f"{beijing:%Y-%m-%d %H:%M} Beijing time)") in text, text[:1500]
        assert {p.parent.parent.name for p in pages} == {"perfect", "partial"}
        # the overview says it too, which said nothing of lateness (found by review)
        from autograder.feedback import index_page

        overview = {s: page_text(index_page(course, s).read_text(encoding="utf-8")) for s in ("perfect", "partial")}
        assert (f"Handed in late: 1 h 3 min after your extended due date ({partial_until:%Y-%m-%d %H:%M} UTC, "
                f"{partial_until + dt.timedelta(hours=8):%Y-%m-%d %H:%M} Beijing time)") in overview["partial"], \
            overview["partial"]
        assert "late" not in overview["perfect"].lower(), overview["perfect"]
    finally:
        shutil.rmtree(build, ignore_errors=True)


def test_an_extension_granted_before_grading_is_what_nbgrader_sees_in_the_worker_and_in_the_gradebook(graded, capsys):
    """Granted before the first grade: the new submission row gets it, and so does the worker's private
    gradebook, where nbgrader's Autograde logs 'is N seconds late' (and its late penalty would count)."""
    import datetime as dt

    from nbgrader.utils import parse_utc

    from autograder.cli import main
    from autograder.release import set_due_date

    subset = ["partial", "edited-tests"]
    build, course = copy_course(graded["snapshot"])
    try:
        stamps = {s: parse_utc((course.step_dir("submitted", s) / "timestamp.txt").read_text()).replace(tzinfo=None)
                  for s in subset}
        due = max(stamps.values()) - dt.timedelta(hours=1)
        set_due_date(course, due)
        with build_env(build):
            until = stamps["partial"] + dt.timedelta(minutes=5)
            assert main(["extend", "--student", "partial", "--until", f"{until.isoformat(sep=' ')} UTC",
                         "--build", str(build)]) == 0
        capsys.readouterr()
        result = grade(course, options(workers=2, students=subset))
        assert sorted(result.graded) == sorted(subset)
        with course.gradebook() as gb:
            rows = {s.student.id: s for s in gb.assignment_submissions("part-ii")}
            assert (rows["partial"].duedate, rows["partial"].total_seconds_late) == (until, 0)
            assert rows["edited-tests"].total_seconds_late == (stamps["edited-tests"] - due).total_seconds() > 0
        logs = {s: (course.reports_dir / "grade-logs" / f"{s}.log").read_text(encoding="utf-8") for s in subset}
        assert "seconds late" not in logs["partial"]
        for log in logs.values():  # a test cell restored from the gradebook (hidden tests, an edit), and the config's
            assert "Attribute 'checksum' for cell" not in log and "not recognized by" not in log, log[-3000:]
        assert f"is {(stamps['edited-tests'] - due).total_seconds()} seconds late" in logs["edited-tests"]
        assert dump(course.db_url, subset) == {k: v for k, v in graded["dump"].items() if k[0] in subset}
    finally:
        shutil.rmtree(build, ignore_errors=True)


def test_an_answer_handed_in_as_released_reads_as_no_answer_not_as_the_graders_silence(graded):
    """nbgrader comments 'No response.' on every answer cell left as released; the page says what it means."""
    from autograder.feedback import page_text

    course = graded["course"]
    for path in sorted(course.release_dir.glob("*.ipynb")):
        answers = sum(1 for c in nbformat.read(path, as_version=4).cells if meta(c).get("solution"))
        blank = page_text((course.step_dir("feedback", "blank") / f"{path.stem}.html").read_text(encoding="utf-8"))
        perfect = page_text((course.step_dir("feedback", "perfect") / f"{path.stem}.html").read_text(encoding="utf-8"))
        assert blank.count("Comments: No answer: you handed this cell in as it was released.") == answers > 0, path.name
        assert "No response." not in blank and "No answer:" not in perfect, path.name


def test_feedback_before_manual_grading_says_the_score_is_provisional_and_drops_it_once_graded(graded):
    """A written answer not graded yet must not read as a final 0 / N; after manual grading the note goes."""
    from autograder.feedback import feedback, page_text

    run = graded["outputs"]["feedback"]
    assert "show a provisional score" in run["stdout"], run["stdout"][-2000:]
    build, course = copy_course(graded["course"].root)
    try:
        page = course.step_dir("feedback", "perfect") / "02-shapes-and-loss.html"
        before = page_text(page.read_text(encoding="utf-8"))
        assert "Provisional score. 1 answer worth 2 points (练习 2.5: answer_ppl_evidence) has not been graded yet" in before
        assert "Not graded yet: your instructor grades this answer by hand; until then it counts as 0 of 2 points." in before
        assert "your written answer (not graded yet: 0.0 / 2.0)" in before
        assert re.search(r"02-shapes-and-loss \(Score: [\d.]+ / [\d.]+, provisional\)", before), before[:500]

        def set_grade(manual_score, needs_manual_grade):
            """What formgrader's grade API does (and, for needs_manual_grade=True, a later regrade)."""
            with course.gradebook() as gb:
                grade = gb.find_grade("answer_ppl_evidence", "02-shapes-and-loss", "part-ii", "perfect")
                assert grade.max_score == 2
                grade.manual_score, grade.needs_manual_grade = manual_score, needs_manual_grade
                gb.db.commit()
                notebook = gb.find_submission_notebook("02-shapes-and-loss", "part-ii", "perfect")
                return notebook.score, notebook.max_score

        total, max_points = set_grade(1.5, False)
        result = feedback(course, students=["perfect"])
        assert page in result.written and page not in result.provisional
        assert set(result.provisional) == set(result.written) - {page}  # the other notebooks still wait
        after = page_text(page.read_text(encoding="utf-8"))
        assert "Provisional score." not in after and "Not graded yet" not in after and "provisional)" not in after
        assert f"(Score: {round(total, 2)} / {round(max_points, 2)})" in after  # nbgrader's header, the 1.5 counted
        assert total > 1.5 and "your written answer (Score: 1.5 / 2.0)" in after

        def answer_row() -> dict:
            """The answer's row of grades-per-cell.csv, freshly exported."""
            from autograder.export import export

            export(course)
            with open(course.reports_dir / "grades-per-cell.csv", newline="", encoding="utf-8") as fh:
                return next(r for r in csv.DictReader(fh) if (r["student_id"], r["cell"]) == ("perfect", "answer_ppl_evidence"))

        assert answer_row()["result"] == "partial"
        set_grade(1.5, True)  # graded again after the manual score: nbgrader flags the cell for review
        with course.gradebook() as gb:  # the grader had left a comment, which the note must not replace
            gb.find_comment("answer_ppl_evidence", "02-shapes-and-loss", "part-ii", "perfect").manual_comment = \
                "Names the tokenizer problem; say which evidence would settle it."
            gb.db.commit()
        row = answer_row()
        assert (row["result"], row["manual_score"], row["needs_manual_grade"]) == ("to be reviewed", "1.5", "true"), row
        result = feedback(course, students=["perfect"])
        assert page in result.provisional
        review = page_text(page.read_text(encoding="utf-8"))
        assert "1 hand-scored answer (练习 2.5: answer_ppl_evidence) is to be reviewed" in review
        assert "the 1.5 of 2 points shown can change" in review and "Not graded yet" not in review
        # the comment was written before the regrade, for what was handed in then (a TA's walkthrough: it read as
        # said of the answer now shown)
        comment = review.index("Comments: Given before your notebook was graded again: Names the tokenizer problem; "
                               "say which evidence would settle it.")
        assert review.index("To be reviewed: your notebook was graded again", comment) > comment  # after it
        assert "your written answer (to be reviewed: 1.5 / 2.0)" in review and ", provisional)" in review
    finally:
        shutil.rmtree(build, ignore_errors=True)


def test_test_cells_edited_after_release_stop_grading_until_released_again(graded, tmp_path, monkeypatch):
    """nbgrader runs the released test cells kept in the gradebook; values recorded from edited ones would fail
    correct code. grade refuses and names the cells; a new release records them, keeps the submissions and
    sends every graded submission back to be graded again; a removed cell is refused before nbgrader runs."""
    import dataclasses

    from autograder.export import export
    from autograder.grade import job_rows, release_drift
    from autograder.release import release

    build, course = copy_course(graded["course"].root)
    try:
        edited = editable_sources(tmp_path, monkeypatch) / "02-shapes-and-loss.ipynb"
        nb = nbformat.read(edited, as_version=4)
        tests = [c for c in nb.cells if c.cell_type == "code" and c.metadata.get("nbgrader", {}).get("grade")
                 and not c.metadata["nbgrader"].get("solution")]
        tests[0].source += "\nassert True  # a check added after the release"
        tests[-1].metadata["nbgrader"]["points"] += 1
        nbformat.write(nb, edited)
        with build_env(build):
            course = Course.load(build)
        assert course.source_dir == edited.parent
        changed = sorted(c.metadata["nbgrader"]["grade_id"] for c in (tests[0], tests[-1]))
        with pytest.raises(AutograderError, match=r"test cells of the source notebooks changed \(source or points\) "
                                                  rf"after the assignment was released: 02-shapes-and-loss \({', '.join(changed)}\)"
                                                  rf".*release --build {build}"):
            grade(course, dataclasses.replace(options(workers=1, students=["perfect"]), force=True))
        assert dump(course.db_url, SAMPLE) == graded["dump"]  # refused before anything changed
        done = sorted(s for s, row in job_rows(course.db_url).items() if row["state"] == "done")
        assert set(SAMPLE) <= set(done)
        result = release(course)
        assert result.changed == {"02-shapes-and-loss": changed} and result.regrade == done
        with course.gradebook() as gb:
            assert release_drift(course, gb, course.notebook_names())[1] == {}
        assert dump(course.db_url, SAMPLE) == graded["dump"]  # the submissions' grades are kept until regraded...
        assert {row["state"] for s, row in job_rows(course.db_url).items() if s in done} == {"pending"}  # ...which is due
        export(course)
        with open(course.reports_dir / "grades.csv", newline="", encoding="utf-8") as fh:
            assert {r["status"] for r in csv.DictReader(fh) if r["student_id"] in done} == {"not graded"}
        assert sorted(course.submitted_students()) == sorted(graded["course"].submitted_students())

        del nb.cells[nb.cells.index(tests[-1])]  # removing a graded cell: nbgrader cannot record it any more
        nbformat.write(nb, edited)
        released = {p.name: p.read_bytes() for p in course.release_dir.glob("*.ipynb")}
        gone = tests[-1].metadata["nbgrader"]["grade_id"]
        with pytest.raises(AutograderError, match=rf"added to or removed from .*02-shapes-and-loss \({gone}\)"):
            release(course)
        assert {p.name: p.read_bytes() for p in course.release_dir.glob("*.ipynb")} == released  # left as it was
        with pytest.raises(AutograderError, match=rf"02-shapes-and-loss \({gone}\).*put those cells back"):
            grade(course, options(workers=1, students=["perfect"]))
    finally:
        shutil.rmtree(build, ignore_errors=True)


def test_a_release_interrupted_after_nbgrader_recorded_changed_tests_still_sends_the_class_back_to_grading(
        graded, tmp_path, monkeypatch):
    """nbgrader records the new test cells in the gradebook before a release can fail or be interrupted; the next
    release then saw no change, and nobody was graded again under the new tests (found by review)."""
    import autograder.release as release_module
    from autograder.grade import job_rows

    build, course = copy_course(graded["course"].root)
    try:
        edited = editable_sources(tmp_path, monkeypatch) / "02-shapes-and-loss.ipynb"
        nb = nbformat.read(edited, as_version=4)
        test = next(c for c in nb.cells if c.cell_type == "code" and c.metadata.get("nbgrader", {}).get("grade")
                    and not c.metadata["nbgrader"].get("solution"))
        test.source += "\nassert True  # a check added after the release"
        nbformat.write(nb, edited)
        with build_env(build):
            course = Course.load(build)
        done = sorted(s for s, row in job_rows(course.db_url).items() if row["state"] == "done")
        assert set(SAMPLE) <= set(done)
        write_bundle = release_module.write_bundle

        def interrupted(*_args):
            raise KeyboardInterrupt  # Ctrl-C once nbgrader has written the release and the gradebook

        monkeypatch.setattr(release_module, "write_bundle", interrupted)
        with pytest.raises(KeyboardInterrupt):
            release_module.release(course)
        assert {row["state"] for s, row in job_rows(course.db_url).items() if s in done} == {"pending"}
        monkeypatch.setattr(release_module, "write_bundle", write_bundle)
        release_module.release(course)  # nbgrader has the new cells now: nothing new to compare, the jobs stay due
        assert {row["state"] for s, row in job_rows(course.db_url).items() if s in done} == {"pending"}
    finally:
        shutil.rmtree(build, ignore_errors=True)


def test_new_points_on_a_hand_graded_answer_flag_its_hand_scores_for_review(graded, tmp_path, monkeypatch, capsys):
    """A hand-graded answer's points changed in a new release: the hand scores given under the old points stood
    unflagged, even above the new maximum (3 of 1 counted in raw_score), and release said nothing (found by review)."""
    from autograder.cli import main
    from autograder.export import waiting_for_a_grader

    build, course = copy_course(graded["course"].root)
    try:
        (name,) = [n.removesuffix(".ipynb") for n in graded["students"]["partial"].files]
        edited = editable_sources(tmp_path, monkeypatch) / f"{name}.ipynb"
        nb = nbformat.read(edited, as_version=4)
        answer = next(c for c in nb.cells if meta(c).get("solution") and meta(c).get("grade") and c.cell_type == "markdown")
        answer.metadata["nbgrader"]["points"] = 1
        nbformat.write(nb, edited)
        key = (meta(answer)["grade_id"], name, "part-ii", "partial")
        with course.gradebook() as gb:
            found = gb.find_grade(*key)
            found.manual_score, found.needs_manual_grade = 2.5, False  # scored and resolved by a grader
            gb.db.commit()
        with build_env(build):  # before the release: grade does not refuse new points, but says so
            main(["grade", "--build", str(build), *([] if sandbox_works() else ["--no-sandbox"])])
        err = capsys.readouterr().err
        assert (f"warning: the source notebooks changed after the release: the points of hand-graded answers: {name} "
                f"({meta(answer)['grade_id']}). The grades follow the released cells until `python -m autograder "
                f"release --build {build}` and then `grade` run.") in err, err
        with build_env(build):
            assert main(["release", "--build", str(build)]) == 0
        out = capsys.readouterr().out
        assert (f"points of hand-graded answers changed since the last release: {name} ({meta(answer)['grade_id']}); "
                "1 hand score given under the old points is flagged for review in formgrader") in out, out
        with course.gradebook() as gb:
            found = gb.find_grade(*key)
            assert (found.manual_score, found.needs_manual_grade, found.max_score) == (2.5, True, 1.0)
        with build_env(build):
            main(["export", "--build", str(build)])
        capsys.readouterr()
        assert waiting_for_a_grader(course.reports_dir / "grades.csv").get("partial", 0) >= 1
        with build_env(build):
            assert main(["release", "--build", str(build)]) == 0  # the same points again: nothing to say
        assert "points of hand-graded answers" not in capsys.readouterr().out
    finally:
        shutil.rmtree(build, ignore_errors=True)


FORMGRADER_BUTTONS = """
import json, os, sys
from traitlets.config.loader import PyFileConfigLoader
from nbgrader.apps import NbGraderAPI
from nbgrader.coursedir import CourseDirectory
root = sys.argv[1]
os.chdir(root)  # as JupyterLab started in the course folder, which is where formgrader reads its config
config = PyFileConfigLoader("nbgrader_config.py", path=root).load_config()
api = NbGraderAPI(CourseDirectory(config=config), config=config)
calls = {"Generate": lambda: api.generate_assignment("part-ii"),
         "Autograde": lambda: api.autograde("part-ii", "perfect"),
         "Generate Feedback": lambda: api.generate_feedback("part-ii", "perfect")}
print(json.dumps({name: call() for name, call in calls.items()}))
"""


def test_formgrader_cannot_generate_autograde_or_write_feedback_behind_the_harness_s_back(graded):
    """Formgrader's buttons run nbgrader with nbgrader's defaults: marking notes released, student code run
    unsandboxed over the graded copy, hidden tests shown. The course's formgrader config refuses all three,
    with the command to use, before anything is touched; manual grading (the gradebook) stays open to it."""
    import hashlib

    build, course = copy_course(graded["course"].root)
    try:
        def state() -> dict:
            """A digest of every file formgrader's converters could write, and of the gradebook."""
            out = {}
            for name in ("release", "autograded", "feedback", "submitted", "gradebook.db"):
                h = hashlib.sha256()
                for f in sorted((course.root / name).rglob("*")) if (course.root / name).is_dir() else [course.root / name]:
                    if f.is_file():
                        h.update(str(f.relative_to(course.root)).encode() + f.read_bytes())
                out[name] = h.hexdigest()
            return out

        before = state()
        proc = subprocess.run([sys.executable, "-c", FORMGRADER_BUTTONS, str(course.root)], capture_output=True,
                              text=True, timeout=600, env={**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"})
        assert proc.returncode == 0, proc.stderr[-3000:]
        results = json.loads(proc.stdout.strip().splitlines()[-1])
        commands = {"Generate": "release", "Autograde": "grade", "Generate Feedback": "feedback"}
        for button, result in results.items():
            assert result["success"] is False, (button, result.get("log", "")[-2000:])
            assert f"formgrader's {button} is turned off for this course" in result["error"], result["error"][-2000:]
            assert f"python -m autograder {commands[button]} --build {build}" in result["error"]
            # formgrader shows the log above the traceback, whose box does not wrap: the message is there, in short lines
            shown = result["log"][result["log"].index(f"formgrader's {button} is turned off"):].splitlines()
            command = f".venv/bin/python -m autograder {commands[button]} --build {build}"
            assert command in [line.strip() for line in shown], shown
            assert all(len(line) <= 80 for line in shown if command not in line), shown
        assert state() == before
    finally:
        shutil.rmtree(build, ignore_errors=True)


def test_feedback_with_a_mathjax_mirror_loads_it_on_every_graded_page_and_changes_nothing_else(graded):
    """`feedback --mathjax-url` (for students who cannot reach cdnjs): every page of the student loads that address,
    and is otherwise the page the default run wrote."""
    mirror = "https://mirror.example.cn/ajax/libs/mathjax/2.7.7/MathJax.js?config=TeX-AMS_CHTML-full,Safe"
    default_url = "https://cdnjs.cloudflare.com/ajax/libs/mathjax/2.7.7/latest.js?config=TeX-AMS_CHTML-full,Safe"
    build, course = copy_course(graded["course"].root)
    try:
        folder = course.step_dir("feedback", "partial")
        before = {p.name: p.read_text(encoding="utf-8") for p in sorted(folder.glob("*.html"))}
        run = run_cli(build, "feedback", "--student", "partial", "--mathjax-url", mirror)
        assert run["returncode"] == 0, run["stdout"][-2000:] + run["stderr"][-2000:]
        after = {p.name: p.read_text(encoding="utf-8") for p in sorted(folder.glob("*.html"))}
        assert after.keys() == before.keys()
        graded_pages = [name for name, text in before.items() if default_url in text]
        assert graded_pages, before.keys()  # partial's graded notebook; the others are not-graded notes
        for name in graded_pages:
            assert f'<script src="{mirror}">' in after[name] and default_url not in after[name], name
        assert {name: text.replace(mirror, default_url) for name, text in after.items()} == before
    finally:
        shutil.rmtree(build, ignore_errors=True)


def test_a_regrade_flags_a_hand_score_for_review_only_when_the_answer_changed(graded, capsys):
    """nbgrader flags every hand-scored answer again on any regrade; an unchanged answer keeps its review state. grade
    names a hand score that now waits for review (an end-of-term walkthrough: it said only 'no score changed')."""
    import dataclasses

    build, course = copy_course(graded["course"].root)
    try:
        (name,) = [n.removesuffix(".ipynb") for n in graded["students"]["partial"].files]
        submitted = course.step_dir("submitted", "partial") / f"{name}.ipynb"
        nb = nbformat.read(submitted, as_version=4)
        answer = next(c for c in nb.cells if meta(c).get("solution") and meta(c).get("grade") and c.cell_type == "markdown")
        key = (meta(answer)["grade_id"], name, "part-ii", "partial")

        def set_state(manual_score, needs_manual_grade):
            """What formgrader does when a grader scores the answer (and Resolve, or a flag)."""
            with course.gradebook() as gb:
                found = gb.find_grade(*key)
                found.manual_score, found.needs_manual_grade = manual_score, needs_manual_grade
                gb.db.commit()

        def state():
            with course.gradebook() as gb:
                found = gb.find_grade(*key)
                return found.manual_score, found.needs_manual_grade

        forced = dataclasses.replace(options(workers=1, students=["partial"]), force=True)
        set_state(1.5, False)
        result = grade(course, forced)
        assert result.graded == ["partial"] and result.to_review == {}
        assert state() == (1.5, False)  # the same answer: the hand score stands, nothing to review
        assert "for review in formgrader" not in capsys.readouterr().out
        set_state(1.5, True)  # flagged earlier and not reviewed yet: another regrade must not clear that
        grade(course, forced)
        assert state() == (1.5, True)
        set_state(1.5, False)
        answer.source += "\n\nA second thought, handed in later."
        nbformat.write(nb, submitted)
        result = grade(course, options(workers=1, students=["partial"]))
        assert result.graded == ["partial"] and result.to_review == {"partial": [f"{name}: {key[0]}"]}
        assert state() == (1.5, True)  # another answer than the one scored: nbgrader's rule, to be reviewed
        assert (f"1 hand score waits for review in formgrader, given before the answer changed: partial ({name}: "
                f"{key[0]}); the pages and grades.csv mark it provisional until a grader scores or resolves it") in \
            capsys.readouterr().out
    finally:
        shutil.rmtree(build, ignore_errors=True)
