"""checks.forbidden_calls and checks.calls_watched: the test cells' guard that an exercise is solved
without the library function it re-implements (spies that record the call and pass it on)."""

from __future__ import annotations

import types

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import checks
import probability_practice as pp


def fake_module() -> types.ModuleType:
    """A module with a function `double` whose calls the tests watch."""
    module = types.ModuleType("helpers")
    exec("def double(x):\n    return 2 * x\n", module.__dict__)
    return module


def test_a_forbidden_call_fails_with_a_label_naming_the_function_and_the_caller():
    helpers = fake_module()
    with pytest.raises(AssertionError) as err:
        with checks.forbidden_calls("quadruple", (helpers, "double")):
            result = helpers.double(helpers.double(3))
    assert result == 12, "the spy must pass the call on, so the value checks still see the real result"
    assert str(err.value) == "quadruple works without calling helpers.double: property does not hold (it called helpers.double)"


def test_a_block_that_calls_nothing_forbidden_passes():
    helpers = fake_module()
    original = helpers.double
    with checks.forbidden_calls("triple", (helpers, "double")):
        result = 3 * 4
    assert result == 12
    assert helpers.double is original


def test_the_course_s_modules_are_named_as_the_notebooks_import_them():
    with pytest.raises(AssertionError, match=r"works without calling pp\.softmax, F\.softmax, torch\.softmax, Tensor\.softmax"):
        with checks.forbidden_calls("mine", (pp, "softmax"), (F, "softmax"), (torch, "softmax"), (torch.Tensor, "softmax")):
            torch.zeros(3).softmax(-1)


def test_calls_watched_lists_each_function_called_once_in_call_order():
    helpers = fake_module()
    namespace = {"square": lambda x: x * x}
    with checks.calls_watched((helpers, "double"), (namespace, "square"), (pp, "softmax")) as called:
        namespace["square"](helpers.double(1))  # double runs first
        helpers.double(2)
    assert called == ["helpers.double", "square"]


def test_originals_are_restored_when_the_block_raises():
    helpers = fake_module()
    original = helpers.double
    with pytest.raises(ZeroDivisionError):
        with checks.forbidden_calls("f", (helpers, "double")):
            helpers.double(1) / 0
    assert helpers.double is original


def test_a_tensor_method_is_caught_and_the_class_is_left_as_it_was():
    assert "softmax" not in torch.Tensor.__dict__  # inherited from the C base class
    with checks.calls_watched((torch.Tensor, "softmax")) as called:
        probs = torch.tensor([0.0, np.log(3.0)], dtype=torch.float64).softmax(-1)
    assert called == ["Tensor.softmax"]
    assert torch.allclose(probs, torch.tensor([0.25, 0.75], dtype=torch.float64))
    assert "softmax" not in torch.Tensor.__dict__, "restoring must not leave a copy on the subclass"


def test_a_notebook_global_is_watched_through_the_namespace_the_student_s_function_reads():
    namespace: dict = {}
    exec("def helper(x):\n    return x + 1\n\ndef solution(x):\n    return helper(x) * 2\n", namespace)
    with checks.calls_watched((namespace, "helper")) as called:
        assert namespace["solution"](1) == 4
    assert called == ["helper"]
    assert namespace["helper"].__name__ == "helper"


def test_a_notebook_global_that_is_not_defined_is_skipped():
    with checks.forbidden_calls("solution", ({}, "numerical_gradient")):
        pass


def test_in_record_mode_the_verdict_is_sent_to_the_grader_instead_of_raised(monkeypatch):
    helpers = fake_module()
    sent = []
    monkeypatch.setenv(checks.MODE_ENV, "record")
    monkeypatch.setattr(checks, "_emit", lambda kind, label, **fields: sent.append((kind, label, fields)))
    with checks.forbidden_calls("quadruple", (helpers, "double")):
        helpers.double(1)
    with checks.forbidden_calls("quadruple", (helpers, "double")):
        pass
    assert sent == [("true", "quadruple works without calling helpers.double", {"holds": False}),
                    ("true", "quadruple works without calling helpers.double", {"holds": True})]


@pytest.mark.parametrize("targets, words", [
    ([(types.ModuleType("m"), "missing")], "m.missing does not exist, so there is nothing to watch"),
    ([("pp", "softmax")], "(owner, name) pairs"),
    ([(pp,)], "(owner, name) pairs"),
    ([(pp, 3)], "(owner, name) pairs"),
    ([], "at least one"),
])
def test_a_badly_written_guard_is_an_error_that_says_what_is_expected(targets, words):
    with pytest.raises(ValueError) as err:
        with checks.calls_watched(*targets):
            pass
    assert words in str(err.value)


def test_forbidden_calls_needs_the_name_of_the_function_it_guards():
    with pytest.raises(ValueError, match="the name of the student's function"):
        with checks.forbidden_calls("", (pp, "softmax")):
            pass


# --- references held before the guard: a spy on pp.x never sees a call through them -----------
def run_cell(source: str, namespace: dict) -> None:
    """Run source as a notebook cell would: module-level code in the namespace the student's functions read."""
    exec(source, namespace)


def guarded_namespace(definitions: str) -> dict:
    """A notebook namespace with pp, F, torch and checks' guard imported, then the student's definitions run."""
    namespace = {"__name__": "__main__"}
    run_cell("import probability_practice as pp\nimport torch\nimport torch.nn.functional as F\n"
             "from checks import forbidden_calls\n" + definitions, namespace)
    return namespace


GUARDED_CALL = ("with forbidden_calls('perplexity_from_loss', (pp, 'perplexity')):\n"
                "    result = perplexity_from_loss(2.0, 'nats')\n")


@pytest.mark.parametrize("definitions, spelled", [
    ("p = pp.perplexity\ndef perplexity_from_loss(loss, unit):\n    return p(loss, unit)\n", "p"),
    ("from probability_practice import perplexity as ppl\n"
     "def perplexity_from_loss(loss, unit):\n    return ppl(loss, unit)\n", "ppl"),
    ("def perplexity_from_loss(loss, unit, _p=pp.perplexity):\n    return _p(loss, unit)\n",
     "a default of perplexity_from_loss"),
    ("def perplexity_from_loss(loss, unit, *, _p=pp.perplexity):\n    return _p(loss, unit)\n",
     "a default of perplexity_from_loss"),
    ("def make():\n    p = pp.perplexity\n    def perplexity_from_loss(loss, unit):\n        return p(loss, unit)\n"
     "    return perplexity_from_loss\nperplexity_from_loss = make()\n", "p"),
    ("perplexity_from_loss = pp.perplexity\n", "perplexity_from_loss"),
    ("import functools\nperplexity_from_loss = functools.partial(pp.perplexity)\n", "perplexity_from_loss"),
    ("TOOLS = {'ppl': pp.perplexity}\ndef perplexity_from_loss(loss, unit):\n    return TOOLS['ppl'](loss, unit)\n",
     "TOOLS"),
    ("TOOLS = [pp.perplexity]\nhelper = lambda loss, unit: TOOLS[0](loss, unit)\n"
     "def perplexity_from_loss(loss, unit):\n    return helper(loss, unit)\n", "TOOLS"),
    ("p = pp.perplexity\ndef perplexity_from_loss(loss, unit):\n    return (lambda: [p(loss, unit) for _ in (0,)][0])()\n",
     "p"),
])
def test_a_reference_taken_before_the_guard_fails_it_and_the_hint_says_through_what(definitions, spelled):
    namespace = guarded_namespace(definitions)
    with pytest.raises(AssertionError) as err:
        run_cell(GUARDED_CALL, namespace)
    assert namespace["result"] == pytest.approx(np.exp(2.0)), "the guard must not change what the function returns"
    assert str(err.value) == ("perplexity_from_loss works without calling pp.perplexity: property does not hold "
                              f"(it reaches pp.perplexity through {spelled})")


@pytest.mark.parametrize("definitions", [
    # the forbidden function imported, used only by a function the guarded one never reaches
    "from probability_practice import perplexity\n"
    "def perplexity_from_loss(loss, unit):\n    base = {'nats': np.e, 'bits': 2.0}\n    return base[unit] ** loss\n"
    "def unused(x):\n    return perplexity(x)\n",
    # an attribute spelled like a global that holds the forbidden function is not that global
    "from probability_practice import perplexity\nimport types\n"
    "def perplexity_from_loss(loss, unit):\n"
    "    r = types.SimpleNamespace(perplexity=float(np.exp(loss)) if unit == 'nats' else 2.0 ** loss)\n"
    "    return r.perplexity\n",
    # a function of the student's own named like the reference one
    "def perplexity(loss, unit):\n    return (np.e if unit == 'nats' else 2.0) ** loss\n"
    "def perplexity_from_loss(loss, unit):\n    return perplexity(loss, unit)\n",
    # the module itself and an allowed function of it
    "def perplexity_from_loss(loss, unit):\n    pp.entropy\n    return float(np.exp(loss)) if unit == 'nats' else 2.0 ** loss\n",
])
def test_names_that_are_not_a_forbidden_function_pass(definitions):
    namespace = guarded_namespace("import numpy as np\n" + definitions)
    run_cell(GUARDED_CALL, namespace)
    assert namespace["result"] == pytest.approx(np.exp(2.0))


def test_a_call_and_a_reference_are_both_named():
    namespace = guarded_namespace("p = pp.perplexity\ndef perplexity_from_loss(loss, unit):\n"
                                  "    pp.perplexity(loss, unit)\n    return p(loss, unit)\n")
    with pytest.raises(AssertionError, match=r"\(it called pp\.perplexity; it reaches pp\.perplexity through p\)$"):
        run_cell(GUARDED_CALL, namespace)


def test_a_tensor_method_taken_from_the_class_is_caught():
    namespace = guarded_namespace("sm = torch.Tensor.softmax\n"
                                  "def stable(x):\n    return sm(torch.as_tensor(x, dtype=torch.float64), -1)\n")
    with pytest.raises(AssertionError, match=r"\(it reaches Tensor\.softmax through sm\)$"):
        run_cell("with forbidden_calls('stable', (torch.Tensor, 'softmax')):\n    stable([0.0, 1.0])\n", namespace)


def test_a_notebook_global_the_spy_replaces_is_reported_as_called_not_as_held():
    namespace = guarded_namespace("def helper(x):\n    return x + 1\n\ndef solution(x):\n    return helper(x) * 2\n")
    with pytest.raises(AssertionError) as err:
        run_cell("with forbidden_calls('solution', (globals(), 'helper')):\n    result = solution(1)\n", namespace)
    assert namespace["result"] == 4
    assert str(err.value).endswith("(it called helper)")
