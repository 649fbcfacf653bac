"""The adversarial catalogue (tests/adversarial/) graded by the real pipeline.

One course graded by the CLI together with the sample class (tests/shared_builds.py):
``release``, one LMS folder per catalogue entry (a solved release notebook with the entry's
bad cells, wrong solutions or file-level damage, see tests/adversarial_catalogue.py), then
``collect``, ``grade --workers 2`` (sandboxed), ``feedback`` and ``export``.
The tests check each entry's outcome from manifest.json, that nothing was lost, that the
sandbox probes were blocked, and that no hidden-test source or hidden expected value reaches
any feedback file or CLI output.
"""

import json
import re
from types import SimpleNamespace

import numpy as np
import pytest

from adversarial_catalogue import ENTRIES, GRADED, NOTEBOOK, REJECTED
from shared_builds import build_env, graded_build


@pytest.fixture(scope="module")
def graded_class():
    """The catalogue graded with the sample class (tests/shared_builds.py): course, CLI outputs, base folder."""
    from autograder.course import Course

    folder, info = graded_build()
    with build_env(folder / "build"):
        course = Course.load(folder / "build")
    outputs = {step: SimpleNamespace(**out) for step, out in info["outputs"].items()}
    yield {"course": course, "outputs": outputs, "base": folder}


def cell_scores(course, student: str) -> dict[str, tuple[float, float]]:
    """grade id -> (auto score, max score) of the student's autograded test cells in NOTEBOOK."""
    from nbgrader.api import Gradebook

    with Gradebook(course.db_url, course.course_id) as gb:
        nb = gb.find_submission_notebook(NOTEBOOK, "part-ii", student)
        return {g.name: (g.auto_score, g.max_score) for g in nb.grades if g.cell_type == "code" and not g.name.startswith("ex_")}


def test_the_grader_survives_every_entry(graded_class):
    """collect, grade, feedback and export all finish without a crash."""
    outputs = graded_class["outputs"]
    for proc in outputs.values():
        assert "Traceback (most recent call last)" not in proc.stdout + proc.stderr, proc.args
    for step in ("feedback", "export"):
        assert outputs[step].returncode == 0, outputs[step].stdout + outputs[step].stderr
    # the catalogue's unreadable files: collect lists them and exits 1 so that a script notices
    assert outputs["collect"].returncode == 1, outputs["collect"].stdout + outputs["collect"].stderr
    assert "rejected files (" in outputs["collect"].stdout, outputs["collect"].stdout


def test_nothing_is_lost(graded_class):
    """Every entry is either filed and graded, or rejected by collect with a readable reason."""
    from autograder.collect import load_collect_log

    log = load_collect_log(graded_class["course"])
    rejected = {r.get("student"): r["reason"] for r in log["rejected"]}
    for entry_id in REJECTED:
        assert ENTRIES[entry_id]["reason"] in rejected.get(entry_id, ""), (entry_id, rejected.get(entry_id))
    for entry_id in GRADED:
        assert NOTEBOOK in log["students"][entry_id]["notebooks"], entry_id
        autograded = graded_class["course"].step_dir("autograded", entry_id) / f"{NOTEBOOK}.ipynb"
        assert autograded.is_file(), f"{entry_id} was not graded"


@pytest.mark.parametrize("entry_id", [i for i in GRADED if not ENTRIES[i].get("needs_trusted_checks")])
def test_sandboxed_entries_score_as_expected(graded_class, entry_id):
    """Resource abuse, escapes, tampering and answers in PyTorch: the failing cells score 0, every honest cell full points."""
    assert_scores(graded_class["course"], entry_id)


@pytest.mark.parametrize("entry_id", [i for i in GRADED if ENTRIES[i].get("needs_trusted_checks")])
def test_monkeypatching_earns_nothing(graded_class, entry_id):
    """Patched numpy, a patched or forging check helper, swallowed errors: only honest work scores.

    These outcomes need the trusted checks (autograder/trusted_checks.py) wired into the grade
    worker; with in-kernel comparisons the cheating cells would score.
    """
    assert_scores(graded_class["course"], entry_id)


def assert_scores(course, entry_id: str) -> None:
    """Compare one student's per-cell auto scores with the manifest."""
    failing = set(ENTRIES[entry_id]["failing"])
    scores = cell_scores(course, entry_id)
    assert scores, f"{entry_id}: no autograded test cells in the gradebook"
    got = {gid: score for gid, (score, _) in scores.items()}
    want = {gid: (0.0 if gid in failing else maximum) for gid, (_, maximum) in scores.items()}
    assert got == want, entry_id


def test_escape_probes_are_blocked(graded_class):
    """Network, the source notebook, the gradebook, a copy of the course beside the repository and the host
    file system were out of reach."""
    course = graded_class["course"]
    text = (course.step_dir("autograded", "escape-probes") / f"{NOTEBOOK}.ipynb").read_text(encoding="utf-8")
    for line in ENTRIES["escape-probes"]["probes"]:
        assert line in text
    assert not re.search(r"probe [^:\n]*: SUCCEEDED", text)
    assert not (graded_class["base"] / "escaped.txt").exists()


def test_a_solution_that_calls_the_reference_is_told_which_call_cost_the_points(graded_class):
    """Solutions that call the pp function an exercise re-implements score 0 on its test (the manifest's `failing`);
    the student's feedback page names, for each, the functions the exercise must do without."""
    course = graded_class["course"]
    page = (course.step_dir("feedback", "reference-shortcut") / f"{NOTEBOOK}.html").read_text(encoding="utf-8")
    for line in ENTRIES["reference-shortcut"]["probes"]:
        assert line in page, line


def test_no_hidden_source_or_expected_value_leaks(graded_class):
    """No feedback file and no CLI output holds a hidden-test line or a hidden expected value."""
    from autograder.feedback import hidden_lines

    course = graded_class["course"]
    secrets = hidden_lines(course)
    assert secrets, "the source notebook has no hidden-test lines to look for"
    feedback = list((course.root / "feedback").rglob("*.html"))
    assert len(feedback) >= len(GRADED)
    texts = [p.read_text(encoding="utf-8") for p in feedback]
    texts += [proc.stdout + proc.stderr for proc in graded_class["outputs"].values()]
    for text in texts:
        leaked = [line for line in secrets if line in text]
        assert not leaked, leaked[:3]
    # every expected value the grader recorded, at full precision (notebooks print six decimals)
    from autograder.grade import expected_records
    from autograder.trusted_checks import checks

    # the grader's own records of this course (cached by content: the run above made them)
    records = json.loads(expected_records(course, course.notebook_names()).read_text(encoding="utf-8"))[NOTEBOOK]
    values = set()
    for cell_records in records.values():
        for record in cell_records:
            flat = np.ravel(np.asarray(checks.from_plain(record.get("expected")), dtype=object))
            values |= {repr(float(v)) for v in flat if isinstance(v, float) and len(repr(v)) >= 12}
    assert len(values) > 20
    for text in texts:
        leaked = [v for v in values if v in text]
        assert not leaked, leaked[:3]



def test_every_course_test_cell_has_a_check_judged_outside_the_student_process(graded_class):
    """No test cell of the course is only check_true/check_raises (a patched helper would pass it)."""
    from autograder.grade import expected_records
    from autograder.trusted_checks import weak_cells

    course = graded_class["course"]
    records = json.loads(expected_records(course, course.notebook_names()).read_text(encoding="utf-8"))
    assert sorted(records) == sorted(course.notebook_names())
    assert sum(len(cells) for cells in records.values()) >= 2 * len(records)
    assert weak_cells(records) == []
    assert "check_true/check_raises" not in graded_class["outputs"]["grade"].stderr

# --- the trusted-check machinery without a kernel (fast) ----------------------------------------

def test_blinding_removes_expected_values_and_variables_used_only_for_them():
    """Expected arguments become None, and so do assignments feeding only them; actual inputs stay."""
    from autograder.trusted_checks import blind_source

    source = (
        "_z = rng.normal(size=3)\n"
        "_expected = torch.softmax(torch.from_numpy(_z), -1).numpy()\n"
        "check_close('agrees', f(_z), _expected, reveal=False)\n"
        "checks.check_equal('shape', f(_z).shape, expected=(3,))\n"
        "check_true('finite', np.isfinite(f(_z)).all())\n"
    )
    blinded = blind_source(source)
    assert "torch.softmax" not in blinded and "(3,)" not in blinded
    assert "_expected = None" in blinded
    assert "_z = rng.normal(size=3)" in blinded and "np.isfinite(f(_z)).all()" in blinded
    assert blind_source("def broken(:\n") == "def broken(:\n"


def test_blinding_reaches_references_unpacked_from_one_call():
    """References computed together (a, b = reference(...)) and used only as expected values are blinded too: a
    patched check could otherwise read them from the kernel and pass them off as the student's results."""
    from autograder.trusted_checks import blind_source

    source = (
        "_x, _W = rng.normal(size=3), rng.normal(size=(3, 3))\n"
        "_t_skip, [_t_layer] = reference_grads(_x, _W)\n"
        "_skip, _layer = student_grads(_x, _W)\n"
        "check_close('skip', _skip, _t_skip)\n"
        "check_close('layer', _layer, _t_layer)\n"
    )
    blinded = blind_source(source)
    assert "reference_grads" not in blinded and "_t_skip, [_t_layer] = (None, (None,))" in blinded, blinded
    spaces = {"rng": __import__("numpy").random.default_rng(0), "student_grads": lambda x, W: (x, W),
              "reference_grads": lambda x, W: (x, [W]), "check_close": lambda *args: None}
    exec(compile(blinded, "<cell>", "exec"), spaces)  # the blinded cell still runs
    assert spaces["_skip"] is not None and spaces["_t_skip"] is None and spaces["_t_layer"] is None
    flat = blind_source("_a, _b = ref(_x)\ncheck_close('a', f(_x), _a)\ncheck_close('b', g(_x), _b)\n")
    assert "_a, _b = (None, None)" in flat and "ref(" not in flat, flat
    # a name also used elsewhere keeps its value (the student's call may need it)
    kept = blind_source("_a, _b = ref(_x)\ncheck_close('a', f(_b), _a)\n")
    assert "ref(_x)" in kept, kept


def test_plain_values_round_trip_and_reject_objects():
    """Numbers, arrays, tensors, tuples and non-finite floats cross as JSON; other objects do not."""
    import numpy as np
    import torch

    from autograder.trusted_checks import checks

    values = [1.5, float("inf"), -3, True, "nats", (2, 3), [1.0, float("nan")],
              np.array([[0.25, np.inf]]), torch.tensor([1.0, 2.0], dtype=torch.float64), np.float64(0.5)]
    for value in values:
        plain = checks.to_plain(value)
        assert json.loads(json.dumps(plain, allow_nan=False)) == plain
        back = checks.from_plain(plain)
        expected = value.numpy() if isinstance(value, torch.Tensor) else value
        if isinstance(expected, (np.ndarray, list)):
            assert np.array_equal(np.asarray(back, dtype=float), np.asarray(expected, dtype=float), equal_nan=True)
        else:
            assert back == expected or (back != back and expected != expected)
    assert isinstance(checks.from_plain(checks.to_plain(object())), checks.Unsupported)
    assert isinstance(checks.from_plain({"ndarray": [[1], [2, 3]], "dtype": "f", "shape": [2]}), checks.Unsupported)
    assert isinstance(checks.from_plain({"__reduce__": "os.system"}), checks.Unsupported)


def test_records_are_judged_against_the_instructor_not_the_kernel():
    """A record passes only with the instructor's value; missing, extra or forged verdicts fail."""
    from autograder.trusted_checks import cell_failure, checks

    expected = [{"kind": "close", "label": "p", "expected": checks.to_plain(np.array([0.25, 0.75])), "rtol": 1e-9, "atol": 1e-12},
                {"kind": "equal", "label": "shape", "expected": checks.to_plain((2,))}]
    good = [{"kind": "close", "actual": checks.to_plain(np.array([0.25, 0.75]))}, {"kind": "equal", "actual": {"tuple": [2]}}]
    assert cell_failure(expected, good) is None
    wrong = [{"kind": "close", "actual": 0.5, "rtol": 1e9}, good[1]]  # a forged tolerance is ignored
    assert cell_failure(expected, wrong) == "p: the shape differs from the expected one"
    assert "did not report" in cell_failure(expected, good[:1])
    assert "more checks" in cell_failure(expected, good + good[:1])
    assert cell_failure([{"kind": "true", "label": "t"}], [{"kind": "true", "holds": "yes"}]) == "t: not true"
    # every failed check of the cell is named, not only the first (the student fixed one, to learn of the next)
    both = [wrong[0], {"kind": "equal", "actual": {"tuple": [3]}}]
    assert cell_failure(expected, both) == ("p: the shape differs from the expected one; "
                                            "shape: the value differs from the expected one"), cell_failure(expected, both)
    # after a check that sent nothing, the rest are not judged: they no longer line up
    assert cell_failure(expected, [{"kind": "equal", "actual": 1}, good[0]]) == "p: this check did not report its result"
    many = [{"kind": "true", "label": f"property {i} of the answer"} for i in range(20)]
    verdict = cell_failure(many, [{"kind": "true", "holds": False}] * 20)
    assert len(verdict) <= 300 and verdict.startswith("property 0 of the answer: not true; ")
    assert verdict.endswith(" more checks failed") and "property 19" not in verdict, verdict
    long = [{"kind": "true", "label": "x" * 400}, {"kind": "true", "label": "y"}]  # the first alone is too long
    verdict = cell_failure(long, [{"kind": "true", "holds": False}] * 2)
    assert len(verdict) <= 300 and verdict.endswith("…; and 1 more check failed"), verdict
    # one check in a loop failing five times is named once, with its count (it was repeated until cut)
    looped = [{"kind": "true", "label": "the same loss in bits gives the same perplexity"}] * 5 + many[:1]
    assert cell_failure(looped, [{"kind": "true", "holds": False}] * 6) == (
        "the same loss in bits gives the same perplexity: not true (5 checks); property 0 of the answer: not true")
    verdict = cell_failure(looped[:5] + long, [{"kind": "true", "holds": False}] * 7)
    assert verdict == ("the same loss in bits gives the same perplexity: not true (5 checks); and 2 more checks "
                       "failed"), verdict
    verdict = cell_failure([long[0]] * 3 + looped[:1], [{"kind": "true", "holds": False}] * 4)
    assert len(verdict) <= 300 and verdict.endswith("x… (3 checks); and 1 more check failed"), verdict  # review


def test_checks_keep_their_in_process_behaviour_outside_the_grader(monkeypatch):
    """Without PART_II_CHECKS the public checks compare and raise exactly as before."""
    from autograder.trusted_checks import checks

    monkeypatch.delenv("PART_II_CHECKS", raising=False)
    checks.check_close("x", [1.0, 2.0], np.array([1.0, 2.0]))
    with pytest.raises(AssertionError, match=r"x: got 1.0, expected 2.0 \(max abs difference 1\)"):
        checks.check_close("x", 1.0, 2.0)
    with pytest.raises(AssertionError, match="the value differs from the expected one"):
        checks.check_equal("y", (1, 2), [1, 2, 3], reveal=False)
    with pytest.raises(AssertionError, match="z: not true"):
        checks.check_true("z", [True, False])
    assert checks.check_raises("r", ValueError, int, "x").startswith("invalid literal")
    with pytest.raises(AssertionError, match="expected ValueError to be raised"):
        checks.check_raises("r", ValueError, int, "3")
