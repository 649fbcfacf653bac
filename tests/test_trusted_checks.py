"""record_assignment: the instructor's expected values, recorded from tiny source notebooks in real kernels.

Each source notebook here has a setup cell that imports checks.py and one autograded test
cell. The expected values come from the literals written in the cells, not from the code
under test.
"""

from __future__ import annotations

import json
from pathlib import Path

import nbformat
import numpy as np
import pytest

from autograder import trusted_checks
from autograder.trusted_checks import record_assignment

REPO = Path(__file__).resolve().parent.parent
SETUP = f"import sys\nsys.path.insert(0, {str(REPO / 'code' / 'part-ii')!r})\nfrom checks import check_close, check_equal\n"


def source_notebook(folder: Path, name: str, test_source: str, before_test: str = "") -> Path:
    """Write folder/name.ipynb: setup, an optional plain cell, then the autograded test cell `test_<name>`."""
    cells = [nbformat.v4.new_code_cell(SETUP)]
    if before_test:
        cells.append(nbformat.v4.new_code_cell(before_test))
    test = nbformat.v4.new_code_cell(test_source)
    test.metadata["nbgrader"] = {"grade": True, "solution": False, "locked": True, "points": 1,
                                 "grade_id": f"test_{name}", "schema_version": 3}
    cells.append(test)
    nb = nbformat.v4.new_notebook(cells=cells)
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    path = folder / f"{name}.ipynb"
    nbformat.write(nb, path)
    return path


def rendezvous(me: str, other: str, folder: Path) -> str:
    """Code that leaves a marker and waits (up to 120 s) for the other notebook's: passes only when both run at once."""
    return (f"import pathlib, time\n"
            f"pathlib.Path({str(folder / me)!r}).touch()\n"
            f"deadline = time.monotonic() + 120\n"
            f"while not pathlib.Path({str(folder / other)!r}).exists():\n"
            f"    assert time.monotonic() < deadline, 'the other notebook never ran at the same time'\n"
            f"    time.sleep(0.05)\n")


def test_a_release_records_again_only_the_notebooks_whose_source_or_course_files_changed(tmp_path, monkeypatch, capsys):
    """grade.expected_records keeps each notebook's records by the notebook's bytes and the code/ and data/ it runs
    with: editing one notebook records that one again, not the whole course (each record run is a kernel per
    notebook); a change to code/ or data/ records all; a cache file that does not parse is recorded again."""
    from types import SimpleNamespace

    from autograder import grade

    source, root = tmp_path / "source", tmp_path / "root"
    source.mkdir()
    for top in ("code", "data"):
        (root / top / "part-ii").mkdir(parents=True)
    (root / "code" / "part-ii" / "checks.py").write_text("VERSION = 1\n")
    names = ["00-a", "01-b", "02-c"]
    for name in names:
        (source / f"{name}.ipynb").write_text(f"{name} first\n")
    calls = []

    def records_now(notebooks):
        """What a record run gives: each notebook's text and the code version it ran with."""
        code = (root / "code" / "part-ii" / "checks.py").read_text()
        return {n: {"test": [(source / f"{n}.ipynb").read_text(), code]} for n in notebooks}

    async def fake_record(paths, timeout, parallel, quiet_after=None):
        """Stand-in for the record run (a kernel per notebook), noting which notebooks it was asked for."""
        assert {Path(p).parent for p in paths} == {source}
        calls.append([Path(p).stem for p in paths])
        return list(records_now(calls[-1]).values())

    monkeypatch.setattr(trusted_checks, "_record_many", fake_record)
    monkeypatch.setenv("PART_II_CACHE", str(tmp_path / "cache"))
    course = SimpleNamespace(source_dir=source, bundle_dir=root)

    def recorded() -> list[list[str]]:
        """Call expected_records, check its file holds what a fresh run of every notebook gives; the runs it made."""
        calls.clear()
        got = json.loads(grade.expected_records(course, names).read_text(encoding="utf-8"))
        assert got == records_now(names) and list(got) == names
        return calls

    assert recorded() == [names]
    assert recorded() == []
    (source / "01-b.ipynb").write_text("01-b second\n")
    assert recorded() == [["01-b"]]
    assert "recording the expected values of 1 source notebook" in capsys.readouterr().err
    (source / "01-b.ipynb").write_text("01-b first\n")  # back as it was: its first records still fit
    assert recorded() == []
    (root / "data" / "part-ii" / "arithmetic.json").write_text("{}")
    assert recorded() == [names]
    for kept in (tmp_path / "cache").glob("*00-a*"):
        kept.write_text("{not json")
    (source / "02-c.ipynb").write_text("02-c second\n")
    assert recorded() == [["00-a", "02-c"]]


def test_the_cache_key_ignores_what_release_leaves_out_of_the_bundle(tmp_path):
    """release records with the repository's code/ and data/, grade with the bundle's, which release writes without
    compiled files and editor or OS leftovers: a key over those made grade record everything again (diff review)."""
    from autograder.trusted_checks import _files_digest

    code = tmp_path / "code" / "part-ii"
    code.mkdir(parents=True)
    (code / "checks.py").write_text("VERSION = 1\n")
    key = _files_digest([tmp_path / "code"])
    for leftover in ("checks.pyc", "__pycache__/checks.cpython-311.pyc", ".ipynb_checkpoints/checks-checkpoint.py",
                     ".DS_Store"):
        (code / leftover).parent.mkdir(exist_ok=True)
        (code / leftover).write_text("left over\n")
    assert _files_digest([tmp_path / "code"]) == key
    (code / "checks.py").write_text("VERSION = 2\n")
    assert _files_digest([tmp_path / "code"]) != key
    (code / "checks.py").write_text("VERSION = 1\n")
    (code / "helpers.py").write_text("\n")  # a new file a kernel can import
    assert _files_digest([tmp_path / "code"]) != key


def test_records_come_from_every_notebook_run_side_by_side_and_are_cached(tmp_path, monkeypatch):
    source = tmp_path / "source"
    source.mkdir()
    source_notebook(source, "one", "check_close('half', 1 / 2, 0.5)\n", rendezvous("one.ready", "two.ready", tmp_path))
    source_notebook(source, "two", "check_equal('shape', (2, 3), (2, 3))\n", rendezvous("two.ready", "one.ready", tmp_path))
    cache = tmp_path / "cache"

    records = record_assignment(source, cache_dir=cache, parallel=2)

    assert list(records) == ["one", "two"]
    (half,) = records["one"]["test_one"]
    assert (half["kind"], half["label"], half["expected"]) == ("close", "half", 0.5)
    (shape,) = records["two"]["test_two"]
    assert (shape["kind"], shape["label"]) == ("equal", "shape")
    assert trusted_checks.checks.from_plain(shape["expected"]) == (2, 3)
    assert sorted(p.name.split("-")[0] for p in cache.glob("*.json")) == ["one", "two"]

    def no_kernel(*args, **kwargs):
        raise AssertionError("a cached notebook was run again")

    monkeypatch.setattr(trusted_checks, "_run_in_record_mode", no_kernel)
    assert record_assignment(source, cache_dir=cache) == records
    assert json.loads(next(cache.glob("one-*.json")).read_text()) == records["one"]


def test_a_source_notebook_that_fails_its_own_check_is_reported(tmp_path):
    source = tmp_path / "source"
    source.mkdir()
    source_notebook(source, "wrong", "check_close('third', 1 / 3, 0.5)\n")
    with pytest.raises(ValueError, match="wrong.ipynb: the instructor's solution fails its own check in test_wrong"):
        record_assignment(source)


def test_a_source_notebook_that_raises_is_reported_by_its_notebook_and_cell(tmp_path):
    """grade (and release) said only 'ModuleNotFoundError: No module named ...', the last line of nbclient's traceback:
    not which notebook or cell (found by an authoring review). A cell that runs too long is named too."""
    source = tmp_path / "source"
    source.mkdir()
    source_notebook(source, "imports", "check_close('half', 1 / 2, 0.5)\n", "import numpy\nimport no_such_module_here")
    with pytest.raises(ValueError) as raised:
        record_assignment(source)
    assert str(raised.value) == ("imports.ipynb: cell 2 (import numpy) raised ModuleNotFoundError: No module named "
                                 "'no_such_module_here'")
    (source / "imports.ipynb").unlink()
    source_notebook(source, "slow", "check_close('half', 1 / 2, 0.5)\n", "import time\ntime.sleep(30)")
    with pytest.raises(ValueError, match=r"^slow.ipynb: cell 2 \(import time\) timed out$"):
        record_assignment(source, timeout=2)


@pytest.mark.parametrize("kwargs, error, words", [
    ({"source_dir": "no/such/folder"}, FileNotFoundError, "assignment source folder not found"),
    ({"notebooks": ["missing"]}, FileNotFoundError, "source notebook not found"),
    ({"parallel": 0}, ValueError, "parallel must be a positive integer, got 0"),
    ({"parallel": "2"}, ValueError, "parallel must be a positive integer"),
])
def test_bad_arguments_are_rejected(tmp_path, kwargs, error, words):
    args = {"source_dir": tmp_path, **kwargs}
    with pytest.raises(error, match=words):
        record_assignment(**args)


def test_a_test_cell_with_only_verdict_checks_is_listed_as_weak(tmp_path):
    """check_true/check_raises send a verdict the student's process computed; a cell of only those is weak."""
    source = tmp_path / "source"
    source.mkdir()
    source_notebook(source, "verdicts", "from checks import check_true, check_raises\n"
                                        "check_true('positive', 2 > 1)\n"
                                        "check_raises('bad input', ValueError, int, 'x')\n")
    source_notebook(source, "mixed", "from checks import check_true\n"
                                     "check_true('positive', 2 > 1)\n"
                                     "check_close('half', 1 / 2, 0.5)\n")
    records = record_assignment(source, parallel=2)
    assert sorted(r["kind"] for r in records["verdicts"]["test_verdicts"]) == ["raises", "true"]
    assert trusted_checks.weak_cells(records) == ["verdicts/test_verdicts"]


def test_grade_warns_about_weak_test_cells_and_not_about_strong_ones(capsys):
    from autograder.grade import warn_weak_cells

    records = {"nb": {"test_a": [{"kind": "true"}, {"kind": "raises"}], "test_b": [{"kind": "true"}, {"kind": "close"}]}}
    warn_weak_cells(records)
    err = capsys.readouterr().err
    assert "nb/test_a" in err and "test_b" not in err
    assert "check_close" in err  # says what to do about it
    warn_weak_cells({"nb": {"test_b": records["nb"]["test_b"]}})
    assert capsys.readouterr().err == ""
    warn_weak_cells({"nb": {"test_asserts": []}})  # bare asserts only send nothing: named as such (found by review)
    assert "1 test cell has no value check, only plain asserts, check_true or check_raises" in capsys.readouterr().err


RAISES = {"kind": "raises", "label": "an unknown unit raises ValueError", "raised": "ValueError"}


@pytest.mark.parametrize("got, message", [
    ({"kind": "raises", "raised": "ValueError", "ok": True}, None),
    ({"kind": "raises", "raised": "KeyError", "ok": False}, "an unknown unit raises ValueError: expected ValueError, got KeyError"),
    ({"kind": "raises", "raised": "TypeError", "ok": False}, "an unknown unit raises ValueError: expected ValueError, got TypeError"),
    ({"kind": "raises", "raised": None, "ok": False},
     "an unknown unit raises ValueError: expected ValueError, but the call returned normally"),
    # a name the student's process made up (a class of theirs, or a forged record) is not echoed
    ({"kind": "raises", "raised": "nat 0.123456", "ok": False}, "an unknown unit raises ValueError: expected ValueError, got another exception"),
    ({"kind": "raises", "raised": ["KeyError"], "ok": False}, "an unknown unit raises ValueError: expected ValueError, got another exception"),
    ({"kind": "raises", "raised": "ValueError", "ok": False}, "an unknown unit raises ValueError: the expected error was not raised"),
    ({"kind": "close", "actual": 1.0}, "an unknown unit raises ValueError: this check did not report its result"),
])
def test_a_failed_raises_check_names_the_exception_classes_only(got, message):
    """The self-check's wording (checks.py: 'expected ValueError, got KeyError'), without the exception's message."""
    assert trusted_checks.record_failure(RAISES, got) == message


def test_a_float32_answer_graded_outside_the_kernel_gets_the_float64_hint_and_no_value():
    """The grader's records kept only the dtype kind, so the feedback said 'the value differs' where the
    self-check said float32 was too coarse (found by a feedback review)."""
    import numpy as np
    import torch

    from autograder.trusted_checks import checks

    expected = {"kind": "close", "label": "table 6.1 losses", "expected": checks.to_plain(np.log([2.0, 4.0, 8.0])),
                "rtol": checks.RTOL, "atol": checks.ATOL}
    hint = ("; the result is float32, and the checks compare at float64 precision: compute in float64 (np.float64, "
            "torch.float64)")
    # a wrong float32 answer gets the same words: a note that depended on how close it is would be an oracle for
    # hidden values (found by review)
    for answer in (torch.tensor(np.log([2.0, 4.0, 8.0]), dtype=torch.float32), np.log([2.0, 4.0, 8.0]).astype(np.float32),
                   np.float32([0.7, 1.4, 2.0])):
        got = json.loads(json.dumps({"kind": "close", "actual": checks.to_plain(answer)}))  # as the record travels
        assert trusted_checks.record_failure(expected, got) == f"table 6.1 losses: the value differs from the expected one{hint}"
    wrong = {"kind": "close", "actual": checks.to_plain(np.array([0.7, 1.4, 2.0]))}
    assert trusted_checks.record_failure(expected, wrong) == "table 6.1 losses: the value differs from the expected one"
    right = {"kind": "close", "actual": checks.to_plain(np.log([2.0, 4.0, 8.0]))}
    assert trusted_checks.record_failure(expected, right) is None


@pytest.mark.parametrize("answer", [lambda n: ["x" * n], lambda n: [["x", "y" * n]], lambda n: ("x" * n, 1.0),
                                    lambda n: {"unsupported": "x" * n}, lambda n: [{"unsupported": "x" * n}]])
def test_a_hidden_check_s_message_does_not_depend_on_text_the_kernel_chose(answer):
    """A red-team review read a hidden input off the feedback page: an answer of ['x' * int(hidden * 1e5)] failed
    with 'holding dtype <U336047'. What a failed hidden check says about the answer's kind must not vary with the
    text in it, whatever the kernel sends as its record."""
    expected = {"kind": "close", "label": "perplexity", "expected": trusted_checks.checks.to_plain(np.array([2.0, 3.0])),
                "rtol": 1e-9, "atol": 1e-12}
    messages = {trusted_checks.record_failure(expected, {"kind": "close", "actual": answer(n)}) for n in (1, 7, 336047)}
    assert len(messages) == 1, messages
    assert "336047" not in messages.pop()


@pytest.mark.parametrize("forged", [
    {"ndarray": [1.0], "dtype": "f", "shape": [1], "precision": "float128"},
    {"ndarray": [1], "dtype": "i", "shape": [1], "precision": "float32"},
    {"ndarray": [1.0], "dtype": "f", "shape": [1], "precision": ["float32"]},
])
def test_a_record_naming_a_precision_it_cannot_have_is_unsupported(forged):
    from autograder.trusted_checks import checks

    assert isinstance(checks.from_plain(forged), checks.Unsupported)


def record_mode(monkeypatch) -> list[dict]:
    """Put checks.py in record mode, as in a grading kernel; returns the list its records are appended to."""
    sent: list[dict] = []
    monkeypatch.setenv(trusted_checks.checks.MODE_ENV, "record")
    monkeypatch.setattr(trusted_checks.checks, "_emit", lambda kind, label, **fields: sent.append({"kind": kind, "label": label, **fields}))
    return sent


def test_records_check_raises_sends_are_judged_as_the_self_check_words_them(monkeypatch, capsys):
    """Records made by checks.py's check_raises in record mode (kind, label, raised, ok) give the same names."""
    sent = record_mode(monkeypatch)
    trusted_checks.checks.check_raises("unit", ValueError, {"nats": 1.0}.__getitem__, "decibans")
    trusted_checks.checks.check_raises("unit", ValueError, float, "1.5")
    trusted_checks.checks.check_raises("unit", ValueError, float, "x")
    keyerror, returned, right = sent
    want = {"kind": "raises", "label": "unit", "raised": "ValueError"}
    assert trusted_checks.record_failure(want, keyerror) == "unit: expected ValueError, got KeyError"
    assert "decibans" not in trusted_checks.record_failure(want, keyerror)
    assert trusted_checks.record_failure(want, returned) == "unit: expected ValueError, but the call returned normally"
    assert trusted_checks.record_failure(want, right) is None


@pytest.mark.parametrize("func", [None, "abc", 3.0])
def test_a_result_passed_where_the_function_goes_fails_even_a_check_for_type_error(monkeypatch, func):
    """check_raises(label, TypeError, f("abc")) called the string f returned; Python's TypeError for that ('str'
    object is not callable) passed the check, in the notebook and when graded (found by review)."""
    with pytest.raises(AssertionError, match=rf"x: expected a function to call, got {type(func).__name__}"):
        trusted_checks.checks.check_raises("x", TypeError, func)
    sent = record_mode(monkeypatch)
    assert trusted_checks.checks.check_raises("x", TypeError, func) == ""
    assert trusted_checks.record_failure({"kind": "raises", "label": "x", "raised": "TypeError"}, sent[0]) is not None


def test_a_tuple_of_errors_is_judged_graded_as_at_home(monkeypatch):
    """The instructor's run raising ValueError and the student's TypeError both satisfy (ValueError, TypeError): the
    records name the classes asked for, not the one raised (found by review: graded, it said 'expected ValueError, got
    TypeError')."""
    sent = record_mode(monkeypatch)
    trusted_checks.checks.check_raises("t", (ValueError, TypeError), int, "x")  # the instructor's: ValueError
    trusted_checks.checks.check_raises("t", (ValueError, TypeError), _raise, TypeError("bad"))  # the student's
    trusted_checks.checks.check_raises("t", (ValueError, TypeError), int, "1")  # returned normally
    instructor, student, returned = sent
    assert trusted_checks.record_failure(instructor, student) is None
    assert trusted_checks.record_failure(instructor, returned) == ("t: expected ValueError or TypeError, but the call "
                                                                   "returned normally")


def test_check_raises_takes_a_tuple_of_errors_and_refuses_what_is_no_error_class():
    """A tuple of classes, as `except` takes: the message names each; anything else is the test cell's mistake."""
    assert trusted_checks.checks.check_raises("x", (ValueError, TypeError), int, "x").startswith("invalid literal")
    with pytest.raises(AssertionError, match=r"^x: expected ValueError or KeyError to be raised, but the call returned "
                                             r"normally$"):
        trusted_checks.checks.check_raises("x", (ValueError, KeyError), int, "1")
    for wrong in ["ValueError", (), (ValueError, "KeyError"), ValueError("x")]:
        with pytest.raises(ValueError, match="check_raises: exc_type must be an exception class or a tuple of them"):
            trusted_checks.checks.check_raises("x", wrong, int, "1")


class ZeroEvidenceError(ValueError):
    """A student's own ValueError subclass: `except ValueError` catches it, so it is a ValueError."""


def _raise(error):
    raise error


@pytest.mark.parametrize("error", [ZeroEvidenceError("evidence is 0"), np.linalg.LinAlgError("singular"),
                                   UnicodeDecodeError("utf-8", b"\xff", 0, 1, "invalid start byte")])
def test_a_subclass_of_the_expected_error_passes_graded_as_it_passes_the_self_check(monkeypatch, error):
    """The self-check (`except ValueError`) accepts any subclass (numpy's LinAlgError, a student's own class); the
    grader compares the record with the instructor's "ValueError", so the record names the class the check asked for
    (review of exercise 1.2: a custom ZeroEvidenceError(ValueError) passed at home and failed when graded)."""
    sent = record_mode(monkeypatch)
    trusted_checks.checks.check_raises("evidence 0", ValueError, _raise, error)
    monkeypatch.delenv(trusted_checks.checks.MODE_ENV)
    assert trusted_checks.checks.check_raises("evidence 0", ValueError, _raise, error) == str(error)  # the self-check
    want = {"kind": "raises", "label": "evidence 0", "raised": "ValueError"}
    assert trusted_checks.record_failure(want, sent[0]) is None


HIDDEN_TEST = ("check_close('loss', ex2_loss(z), 1.0)\n"
               "### BEGIN HIDDEN TESTS\n"
               "_z_hidden = np.array([0.25, 0.75])\n"
               "check_close('hidden loss', ex2_loss(_z_hidden), 0.5)\n"
               "### END HIDDEN TESTS")


def verdict_of(ename: str, evalue: str) -> str:
    """The verdict TrustedChecks gives a test cell (blinded first, as in grading) that stopped with this error."""
    test = nbformat.v4.new_code_cell(HIDDEN_TEST)
    test.metadata["nbgrader"] = {"grade": True, "solution": False, "locked": True, "points": 1,
                                 "grade_id": "test_loss", "schema_version": 3}
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("import numpy as np"), test])
    resources = {"unique_key": "nb"}
    nb, resources = trusted_checks.BlindExpectedValues().preprocess(nb, resources)
    assert "HIDDEN" not in test.source  # the blinded source has lost its markers (comments)
    test.outputs = [nbformat.v4.new_output("error", ename=ename, evalue=evalue, traceback=[])]
    judge = trusted_checks.TrustedChecks(expected_records={"nb": {"test_loss": [{"kind": "close", "label": "loss"}]}})
    nb, _ = judge.preprocess(nb, resources)
    (output,) = nb.cells[1].outputs
    return output["evalue"]


FIRST = " before its first check, 'loss', reported"  # where it stopped, from its records: none reported


def test_a_name_error_names_a_name_the_visible_checks_use():
    assert verdict_of("NameError", "name 'ex2_loss' is not defined") == (
        "the test cell stopped with NameError (ex2_loss is not defined: did the cell that defines it run without error?)"
        + FIRST)


@pytest.mark.parametrize("evalue", [
    "name '_z_hidden' is not defined",          # only the hidden tests use it
    "name 'secret_0_123456' is not defined",    # made up by the student's code
    "free variable 'ex2_loss' referenced before assignment",
])
def test_a_name_error_never_names_what_the_visible_checks_do_not_show(evalue):
    assert verdict_of("NameError", evalue) == "the test cell stopped with NameError" + FIRST


def test_only_the_missing_name_is_taken_from_a_name_error_message():
    """Python's 'Did you mean' hint (or anything after the name) is not copied."""
    assert "_z_hidden" not in verdict_of("NameError", "name 'ex2_loss' is not defined. Did you mean: '_z_hidden'?")
    assert verdict_of("KeyError", "name 'ex2_loss' is not defined") == "the test cell stopped with KeyError" + FIRST


def test_a_test_cell_that_raised_says_before_which_check_it_stopped_from_its_records():
    """A student's walkthrough: an answer that raised inside a hidden check (a ValueError on a tiny vector) got only
    "the test cell stopped with ValueError", naming no check, while self-check had passed. The records the cell sent
    before it raised say which check came next; the failures of those before it are given too."""
    from nbformat.v4 import new_code_cell, new_output

    from autograder.trusted_checks import TrustedChecks, checks

    expected = [{"kind": "true", "label": "shape"}, {"kind": "true", "label": "sums to 1"},
                {"kind": "close", "label": "tiny vector: same direction", "expected": 1.0}]

    def verdict(*holds, ename="ValueError"):
        cell = new_code_cell("check_true('shape', ...)")
        cell.metadata["nbgrader"] = {"grade": True, "solution": False, "grade_id": "test_unit", "points": 1}
        cell.outputs = [new_output("display_data", data={checks.RECORD_MIMETYPE: {"kind": "true", "holds": h}})
                        for h in holds] + [new_output("error", ename=ename, evalue="tiny: 1e-12", traceback=[])]
        nb = nbformat.v4.new_notebook(cells=[cell])
        judge = TrustedChecks(expected_records={"nb": {"test_unit": expected}})
        judge.preprocess(nb, {"unique_key": "nb"})
        (output,) = nb.cells[0].outputs
        return output["evalue"]

    assert verdict(True, True) == ("the test cell stopped with ValueError before the check 'tiny vector: same "
                                   "direction' reported (the 2 checks before it passed)")
    assert verdict(True) == ("the test cell stopped with ValueError before the check 'sums to 1' reported (the check "
                             "before it passed)")
    assert verdict(False, True) == ("the test cell stopped with ValueError before the check 'tiny vector: same "
                                    "direction' reported; before that: shape: not true")
    assert verdict() == "the test cell stopped with ValueError before its first check, 'shape', reported"
    assert verdict(True, True, True) == "the test cell stopped with ValueError"  # after its last check: nothing to add
    assert verdict(True, ename="CellTimeoutError").endswith("before the check 'sums to 1' reported (the check before "
                                                            "it passed)")
    assert verdict(ename="NotebookTimeout") == "not run: the notebook used up its time budget"
    # many failures before the error: whole ones, then how many more, within the verdict's length (found by review)
    expected[:] = [{"kind": "true", "label": f"check number {n} of a long row of checks"} for n in range(8)]
    long = verdict(*[False] * 6)
    assert len(long) <= trusted_checks.VERDICT_CHARS and long.endswith("more checks failed"), long
    assert long.startswith("the test cell stopped with ValueError before the check 'check number 6 of a long row of "
                           "checks' reported; before that: check number 0 of a long row of checks: not true;"), long


def test_a_grader_error_after_a_test_cell_keeps_the_grader_s_words_and_any_other_error_shows_none():
    """Cells after a test cell hide their outputs (they could print its hidden inputs), but a time-out says so."""
    from nbformat.v4 import new_output

    from autograder.trusted_checks import GRADER_ERRORS, hidden_outputs

    timeout = hidden_outputs([new_output("error", ename="CellTimeoutError", evalue="hidden _q = [0.1, 0.9]",
                                          traceback=[])])
    assert (timeout[0].ename, timeout[0].evalue) == ("CellTimeoutError", GRADER_ERRORS["CellTimeoutError"])
    own = hidden_outputs([new_output("error", ename="MyError", evalue="hidden _q = [0.1, 0.9]", traceback=[])])
    assert own[0].ename == "Exception" and "details not shown" in own[0].evalue and "_q" not in own[0].evalue


@pytest.mark.parametrize("ename, words", [
    ("KernelDied", "the Python kernel stopped, or stopped answering, while this cell ran (exit(), quit(), os._exit(), "
                   "running out of memory or past the CPU time limit stop it): the grader started a new kernel, re-ran "
                   "the cells before this one and went on without it, so nothing this cell defines exists in later "
                   "cells"),
    ("TooManyProcesses", "this cell started too many processes (a fork bomb?), so the grader stopped it together with "
                         "the kernel"),
    ("NotRun", "not run: the kernel stopped too many times in this notebook"),
])
def test_each_grader_error_after_a_test_cell_says_what_the_grader_did(ename, words):
    """All three used to read 'the kernel stopped while running this cell or before it' (found by a feedback review):
    not what happened, nor that grading went on without the cell."""
    from nbformat.v4 import new_output

    from autograder.trusted_checks import hidden_outputs

    (shown,) = hidden_outputs([new_output("error", ename=ename, evalue="student text _q = [0.1]", traceback=[])])
    assert shown.ename == ename and shown.evalue.startswith(words) and "_q" not in shown.evalue, shown


def test_cells_never_run_after_too_many_kernel_stops_are_not_blamed_for_stopping_it():
    import nbformat

    from autograder.sandbox import GradingExecute

    cells = [nbformat.v4.new_code_cell("x = 1"), nbformat.v4.new_markdown_cell("text"), nbformat.v4.new_code_cell("  ")]
    GradingExecute()._fail_rest(cells, "not run: the kernel died too many times")
    assert [[o.ename for o in c.get("outputs", [])] for c in cells] == [["NotRun"], [], []]


@pytest.mark.parametrize("source, ename, shown", [
    ("def loss(p:\n    return 1", "SyntaxError", "'(' was never closed (line 1 of the cell)"),
    ("if ok\n    x = 1", "SyntaxError", "expected ':' (line 1 of the cell)"),
    ("def f():\nreturn 1", "IndentationError", "expected an indented block after function definition on line 1 "
                                                "(line 2 of the cell)"),
    # IPython syntax compiles there, not here: no guess
    ("%timeit f(\nx = 1", "SyntaxError", "details not shown"),
    # a cell that compiles raised its SyntaxError at run time (eval, exec): its message could hold anything
    ("eval(secret)", "SyntaxError", "details not shown"),
])
def test_a_syntax_error_after_a_test_cell_is_described_from_the_cell_s_own_source(source, ename, shown):
    """An answer cell with a syntax error said only 'details not shown: ... could display its hidden inputs': a cell
    that never ran cannot, and the student needs the line (found by a feedback review)."""
    from nbformat.v4 import new_output

    from autograder.trusted_checks import hidden_outputs

    (out,) = hidden_outputs([new_output("error", ename=ename, evalue="from the kernel: _q = [0.1]", traceback=[])],
                             source)
    assert out.ename == ename and out.evalue.startswith(shown) and "_q" not in out.evalue, out


def test_a_module_the_grading_environment_lacks_is_named_when_the_cell_names_it():
    """Feedback pages show a cell's error only by name: a ModuleNotFoundError that happens only where the notebook is
    graded said 'run the notebook to see it', which shows nothing on the student's machine (review). The module is
    named when the cell's own source names it; any other text of the kernel's stays hidden."""
    from nbformat.v4 import new_output

    from autograder.trusted_checks import hidden_outputs

    def shown(evalue: str, source: str) -> str:
        (out,) = hidden_outputs([new_output("error", ename="ModuleNotFoundError", evalue=evalue, traceback=[])], source)
        return out.evalue

    assert shown("No module named 'scipy'", "from scipy.special import logsumexp") == (
        "No module named 'scipy' when the notebook was graded (the grading environment does not have it)")
    assert shown("No module named 'scipy.special'", "import scipy.special").startswith("No module named 'scipy.special'")
    assert shown("No module named 'leak_0x1f'", "import importlib\nimportlib.import_module(name)").startswith(
        "details not shown")  # a name only the kernel chose
    assert shown("No module named 'a'; hidden _q = [0.1]", "import a").startswith("details not shown")
    # a module from a from-import: 'scipy.special' spelt as `from scipy import special`
    assert shown("No module named 'scipy.special'", "from scipy import special").startswith("No module named 'scipy.special'")


@pytest.mark.parametrize("evalue, source", [
    # only the first part is the cell's (a red-team review carried the hidden tests of the notebook before out on
    # the feedback page of the next, hex-encoded after 'np.x', 1,900 characters per cell)
    ("No module named 'np.x78dab55a0f'", "np = np\nraise ModuleNotFoundError('No module named np.x' + _blob[:10])"),
    # every part is the cell's, but not in this order: a few bits per part, chosen by the kernel
    ("No module named 'a.b.b.a'", "import a.b\nimport b.a"),
    ("No module named 'special.scipy'", "from scipy import special"),
])
def test_a_missing_module_is_named_only_as_the_cell_s_source_spells_it(evalue, source):
    """The module named on the page must be one the cell's source spells out (a dotted name in it, a prefix of one, or
    a from-import's module.name), not one the kernel put together from the source's identifiers."""
    from nbformat.v4 import new_output

    from autograder.trusted_checks import hidden_outputs

    (out,) = hidden_outputs([new_output("error", ename="ModuleNotFoundError", evalue=evalue, traceback=[])], source)
    assert out.evalue.startswith("details not shown"), out.evalue


@pytest.mark.parametrize("moved", [{"test_loss": "test_later"}, "not a dict", None])
def test_a_test_cell_sanitizing_named_as_moved_fails_whatever_its_records_say(moved):
    """A red-team review: a test cell moved below a later one with stand-ins could pass with a reference lifted from
    the stand-in. RestoreMissingCells names such cells in the notebook's metadata; TrustedChecks fails them with
    what to do, and removes the key. Anything else there is ignored."""
    from autograder.cells import MOVED_TEST, MOVED_TESTS_KEY

    test = nbformat.v4.new_code_cell(HIDDEN_TEST)
    test.metadata["nbgrader"] = {"grade": True, "solution": False, "locked": True, "points": 1,
                                 "grade_id": "test_loss", "schema_version": 3}
    test.outputs = [nbformat.v4.new_output("display_data", data={trusted_checks.checks.RECORD_MIMETYPE: record})
                    for record in ({"kind": "close", "actual": 1.0}, {"kind": "close", "actual": 0.5})]
    later = nbformat.v4.new_code_cell("pass")
    later.metadata["nbgrader"] = {"grade": True, "solution": False, "locked": True, "points": 1,
                                  "grade_id": "test_later", "schema_version": 3}
    cells = [nbformat.v4.new_markdown_cell("### 练习 1.2（1 分）`later`, whose heading goes on and on and on"), later, test]
    nb = nbformat.v4.new_notebook(cells=cells, metadata={} if moved is None else {MOVED_TESTS_KEY: moved})
    expected = [{"kind": "close", "label": "loss", "expected": 1.0}, {"kind": "close", "label": "hidden", "expected": 0.5}]
    nb, _ = trusted_checks.TrustedChecks(expected_records={"nb": {"test_loss": expected, "test_later": []}}).preprocess(
        nb, {"unique_key": "nb"})
    assert MOVED_TESTS_KEY not in nb.metadata
    verdicts = [out["evalue"] for out in nb.cells[2].outputs]
    # the later cell named by its heading as well, as plain text: Jupyter does not show grade ids
    named = MOVED_TEST.format(later="test_later (under “练习 1.2（1 分）later, whose heading goes on…”)")
    assert len(named) < trusted_checks.VERDICT_CHARS
    assert verdicts == ([named] if isinstance(moved, dict) else []), verdicts


def test_the_notes_on_a_hidden_cell_s_syntax_error_or_missing_module_take_linear_time_on_crafted_source():
    """An audit of the patterns applied to student text: a SyntaxError cell followed by 64,000 newlines took 22 s
    (\\s in the IPython-syntax pattern crossed every later newline from each line start), and a ModuleNotFoundError
    cell naming a module of 32,000 parts took 2 GiB and 10 s (every dotted prefix collected). Both run in feedback,
    for every cell after the first test cell, with no time or memory limit. What they say is unchanged."""
    from linear_time import run_on

    from autograder.trusted_checks import missing_module, syntax_error

    setup = "from autograder.trusted_checks import missing_module, syntax_error"
    newlines = "x = (\n" + "\n" * 2_000_000
    assert run_on("syntax_error(text, 'SyntaxError')", newlines, setup) == repr(syntax_error(newlines, "SyntaxError"))
    assert "line 1 of the cell" in syntax_error(newlines, "SyntaxError")
    assert syntax_error("x = 1\n  %time f(\n", "SyntaxError") is None  # IPython syntax: not Python's to judge
    # the kernel names the error: a cell the compiler cannot take (its parser overflows) gets no line, not a crash
    assert syntax_error("-" * 100_000 + "1 )", "SyntaxError") is None
    dotted = "import a" + ".a" * 200_000
    error = {"ename": "ModuleNotFoundError", "evalue": "No module named 'a.a.a'"}
    assert run_on(f"missing_module({error!r}, text)", dotted, setup).startswith("\"No module named 'a.a.a' when")
    for source, module, named in [("import numpy.linalg", "numpy", True), ("import numpy.linalg", "numpy.linalg", True),
                                  ("import numpy.linalg", "linalg", False), ("from sklearn import tree", "sklearn.tree",
                                                                             True),
                                  ("importlib.import_module('scipy.special')", "scipy.special", True),
                                  ("import numpyx", "numpy", False)]:
        found = missing_module({"ename": "ModuleNotFoundError", "evalue": f"No module named '{module}'"}, source)
        assert (found is not None) == named, (source, module, found)


def test_a_failed_check_true_gives_the_instructor_s_hint_never_the_student_s(tmp_path):
    """A student's walkthrough: check said "no nan or inf for logits of +-1000: not true (subtract each row's maximum
    before exp)", the feedback page only "...: not true": a record sent no hint. The instructor's record now keeps it,
    and the verdict shows that one; a hint in the student's record is never shown."""
    source = tmp_path / "source"
    source.mkdir()
    source_notebook(source, "hinted", "from checks import check_true\n"
                                      "check_true('finite for large logits', True, 'subtract the maximum first')\n"
                                      "check_true('no hint here', True)\n")
    expected = record_assignment(source)["hinted"]["test_hinted"]
    assert [e.get("hint") for e in expected] == ["subtract the maximum first", ""], expected
    got = [{"kind": "true", "holds": False, "hint": "<script>a hint of the student's</script>"}] * 2
    assert trusted_checks.cell_failure(expected, got) == ("finite for large logits: not true (subtract the maximum "
                                                          "first); no hint here: not true")


def test_a_pasted_test_cell_is_named_by_the_heading_of_its_last_copy():
    """Grading keeps the last copy of a pasted test cell (nbgrader's DeduplicateIds); the moved-test message named
    the heading of the first (a code review)."""
    from autograder.cells import test_headings

    def test_cell():
        cell = nbformat.v4.new_code_cell("pass")
        cell.metadata["nbgrader"] = {"grade": True, "solution": False, "locked": True, "points": 1,
                                     "grade_id": "test_later", "schema_version": 3}
        return cell

    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell("### 练习 1.1"), test_cell(),
                                         nbformat.v4.new_markdown_cell("### 练习 1.2"), test_cell()])
    assert test_headings(nb) == {"test_later": "练习 1.2"}
