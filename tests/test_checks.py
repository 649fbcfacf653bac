"""checks.forbidden_calls and checks.calls_watched: the test cells' guard that an exercise is solved
without the library function it re-implements (spies that record the call and pass it on); then
check_close and check_true on values that are not numbers or booleans; and checks.standing_in, the stand-ins a later
exercise's test cell puts in place of an earlier exercise's functions while it runs."""

from __future__ import annotations

import re
import types

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import checks
import probability_practice as pp


def fake_module() -> types.ModuleType:
    """A module with a function `double` whose calls the tests watch, and `triple`, which calls nothing."""
    module = types.ModuleType("helpers")
    exec("def double(x):\n    return 2 * x\n\ndef triple(x):\n    return 3 * x\n", module.__dict__)
    return module


def test_a_forbidden_call_fails_with_a_label_naming_the_function_and_the_caller():
    helpers = fake_module()
    with pytest.raises(AssertionError) as err:
        with checks.forbidden_calls("quadruple", (helpers, "double")):
            result = helpers.double(helpers.double(3))
    assert result == 12, "the spy must pass the call on, so the value checks still see the real result"
    assert str(err.value) == "quadruple works without calling helpers.double: not true (it called helpers.double)"


def test_a_block_that_calls_nothing_forbidden_passes():
    helpers = fake_module()
    original = helpers.double
    with checks.forbidden_calls("triple", (helpers, "double")):
        result = helpers.triple(4)
    assert result == 12, "the block's own calls run normally inside the guard"
    assert helpers.double is original


def test_the_course_s_modules_are_named_as_the_notebooks_import_them():
    with pytest.raises(AssertionError, match=r"works without calling pp\.softmax, F\.softmax, torch\.softmax, Tensor\.softmax"):
        with checks.forbidden_calls("mine", (pp, "softmax"), (F, "softmax"), (torch, "softmax"), (torch.Tensor, "softmax")):
            torch.zeros(3).softmax(-1)


@pytest.mark.parametrize("use", ["np.logaddexp.reduce(z, axis=-1)", "np.logaddexp.accumulate(z, axis=-1)[..., -1]",
                                 "np.logaddexp(z[..., 0], z[..., 1])", "lae.reduce(z, axis=-1)"])
def test_a_ufunc_and_its_methods_are_watched_and_named_as_numpy_is_imported(use):
    """np.logaddexp.reduce is a library log-sum-exp (exercise 2.6 says to write the formula): a guard on a ufunc
    notes its methods too, also through a name the student's function bound before the guard."""
    namespace = {"np": np, "lae": np.logaddexp, "checks": checks, "z": np.array([[0.0, -1000.0], [2.0, 2.0]])}
    cell = (f"def lse(z):\n    return {use}\n\n"  # a notebook's solution, then its test cell
            "with checks.forbidden_calls('lse', (np, 'logaddexp')):\n    got = lse(z)\n")
    with pytest.raises(AssertionError, match=r"^lse works without calling np\.logaddexp: not true \(it called np\.logaddexp\)$"):
        exec(cell, namespace)
    assert np.allclose(namespace["got"], [0.0, 2.0 + np.log(2.0)]), "the spy passes the call on"
    assert isinstance(np.logaddexp, np.ufunc) and namespace["lae"] is np.logaddexp, "the ufunc is put back"


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


def test_a_test_cell_s_mistakes_in_calling_a_helper_are_named_as_the_test_cell_s():
    """No targets to guard, or a hint that is no text: said in the words of the helper called (found by review: the
    messages named calls_watched, or were Python's 'sequence item 0: expected str instance')."""
    with pytest.raises(ValueError, match=r"^forbidden_calls needs at least one \(owner, name\) pair"):
        with checks.forbidden_calls("f"):
            pass
    with pytest.raises(ValueError, match=r"^calls_of needs at least one \(owner, name\) pair"):
        with checks.calls_of("f"):
            pass
    with pytest.raises(ValueError, match="check_true: hint must be a str saying what the property means, got int"):
        checks.check_true("l", False, 5)
    checks.check_true("l", True, None)  # None: no hint
    with pytest.raises(AssertionError, match=r"^l: not true$"):
        checks.check_true("l", False, None)


def test_a_notebook_global_that_is_not_defined_is_skipped():
    """Nothing to watch: no error, and no spy left in the namespace under the missing name."""
    namespace: dict = {}
    with checks.forbidden_calls("solution", (namespace, "numerical_gradient")):
        assert namespace == {}
    assert namespace == {}


def test_in_record_mode_the_verdict_is_sent_to_the_grader_instead_of_raised(monkeypatch):
    helpers = fake_module()
    sent = []
    monkeypatch.setenv(checks.MODE_ENV, "record")
    monkeypatch.setattr(checks, "_emit", lambda kind, label, **fields: sent.append((kind, label, fields)))
    with checks.forbidden_calls("quadruple", (helpers, "double")):
        helpers.double(1)
    with checks.forbidden_calls("quadruple", (helpers, "double")):
        pass
    # the hint goes with the record; the grader shows the one of the instructor's run, which called nothing
    assert sent == [("true", "quadruple works without calling helpers.double",
                     {"holds": False, "hint": "it called helpers.double"}),
                    ("true", "quadruple works without calling helpers.double", {"holds": True, "hint": ""})]


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
    """A notebook namespace with numpy, pp, F, torch and checks' guard imported, then the student's definitions run."""
    namespace = {"__name__": "__main__"}
    run_cell("import numpy as np\nimport probability_practice as pp\nimport torch\nimport torch.nn.functional as F\n"
             "from checks import forbidden_calls\n" + definitions, namespace)
    return namespace


GUARDED_CALL = ("with forbidden_calls('perplexity_from_loss', (pp, 'perplexity')):\n"
                "    result = perplexity_from_loss(2.0, 'nats')\n")
CALLED = "perplexity_from_loss works without calling pp.perplexity: not true (it called pp.perplexity)"


def state_of(namespace: dict) -> dict:
    """What the guard may touch: every global's identity, every function's defaults, kw-defaults and cell contents,
    and the attributes of the notebook's classes and of their instances."""
    state = {}
    for name, value in namespace.items():
        state[name] = id(value)
        if isinstance(value, types.FunctionType):
            cells = tuple(id(c.cell_contents) for c in value.__closure__ or ())
            state[f"{name}:inner"] = (id(value.__defaults__), id(value.__kwdefaults__), cells)
        holder = value if isinstance(value, type) else type(value)
        for klass in holder.__mro__ if holder.__module__ == "__main__" else ():
            state[f"{name}:{klass.__name__}"] = {key: id(item) for key, item in vars(klass).items()}
        if not isinstance(value, type) and type(value).__module__ == "__main__" and hasattr(value, "__dict__"):
            state[f"{name}:attributes"] = {key: id(item) for key, item in vars(value).items()}
    return state


# a class or an instance of the student's own that holds pp.perplexity: a staticmethod, a class-body alias, an
# attribute set in __init__, a callable object, a method reading an alias, a classmethod, an inherited attribute
CLASS_HELD = [
    "class Tools:\n    ppl = staticmethod(pp.perplexity)\n"
    "def perplexity_from_loss(loss, unit):\n    return Tools.ppl(loss, unit)\n",
    "class Tools:\n    ppl = staticmethod(pp.perplexity)\ntools = Tools()\n"
    "def perplexity_from_loss(loss, unit):\n    return tools.ppl(loss, unit)\n",
    "class Tools:\n    ppl = pp.perplexity\ndef perplexity_from_loss(loss, unit):\n    return Tools.ppl(loss, unit)\n",
    "class Model:\n    def __init__(self):\n        self.f = pp.perplexity\n"
    "    def __call__(self, loss, unit):\n        return self.f(loss, unit)\nperplexity_from_loss = Model()\n",
    "p = pp.perplexity\nclass Model:\n    def run(self, loss, unit):\n        return p(loss, unit)\n"
    "perplexity_from_loss = Model().run\n",
    "class Model:\n    f = staticmethod(pp.perplexity)\n    @classmethod\n    def run(cls, loss, unit):\n"
    "        return cls.f(loss, unit)\ndef perplexity_from_loss(loss, unit):\n    return Model.run(loss, unit)\n",
    "class Base:\n    f = staticmethod(pp.perplexity)\nclass Child(Base):\n    pass\n"
    "def perplexity_from_loss(loss, unit):\n    return Child().f(loss, unit)\n",
]
CLASS_HELD_IDS = ["staticmethod", "staticmethod-via-instance", "class-body-alias", "instance-attribute",
                  "bound-method-reading-an-alias", "classmethod", "inherited"]


@pytest.mark.parametrize("definitions", [
    "p = pp.perplexity\ndef perplexity_from_loss(loss, unit):\n    return p(loss, unit)\n",
    "from probability_practice import perplexity as ppl\n"
    "def perplexity_from_loss(loss, unit):\n    return ppl(loss, unit)\n",
    "def perplexity_from_loss(loss, unit, _p=pp.perplexity):\n    return _p(loss, unit)\n",
    "def perplexity_from_loss(loss, unit, *, _p=pp.perplexity):\n    return _p(loss, unit)\n",
    "def make():\n    p = pp.perplexity\n    def perplexity_from_loss(loss, unit):\n        return p(loss, unit)\n"
    "    return perplexity_from_loss\nperplexity_from_loss = make()\n",
    "perplexity_from_loss = pp.perplexity\n",
    "import functools\nperplexity_from_loss = functools.partial(pp.perplexity)\n",
    "import functools\nperplexity_from_loss = functools.cache(pp.perplexity)\n",
    "import functools\np = pp.perplexity\n@functools.lru_cache\ndef perplexity_from_loss(loss, unit):\n    return p(loss, unit)\n",
    "p = pp.perplexity\n@torch.no_grad()\ndef perplexity_from_loss(loss, unit):\n    return p(loss, unit)\n",
    "import functools\ndef apply(f, loss, unit):\n    return f(loss, unit)\n"
    "perplexity_from_loss = functools.partial(apply, pp.perplexity)\n",
    "TOOLS = {'ppl': pp.perplexity}\ndef perplexity_from_loss(loss, unit):\n    return TOOLS['ppl'](loss, unit)\n",
    "TOOLS = (pp.perplexity,)\nhelper = lambda loss, unit: TOOLS[0](loss, unit)\n"
    "def perplexity_from_loss(loss, unit):\n    return helper(loss, unit)\n",
    "p = pp.perplexity\ndef perplexity_from_loss(loss, unit):\n    return (lambda: [p(loss, unit) for _ in (0,)][0])()\n",
    "p = pp.perplexity\ndef perplexity_from_loss(loss, unit):\n    pp.perplexity(loss, unit)\n    return p(loss, unit)\n",
    *CLASS_HELD,
])
def test_a_call_through_a_reference_taken_before_the_guard_fails_it_and_everything_is_put_back(definitions):
    namespace = guarded_namespace(definitions)
    before = state_of(namespace)
    with pytest.raises(AssertionError) as err:
        run_cell(GUARDED_CALL, namespace)
    assert namespace.pop("result") == pytest.approx(np.exp(2.0)), "the guard must not change what the function returns"
    assert str(err.value) == CALLED
    assert state_of(namespace) == before, "the guard left a spy behind"


@pytest.mark.parametrize("definitions", [
    # the forbidden function imported, used only by a function the guarded one never reaches
    "from probability_practice import perplexity\n"
    "def perplexity_from_loss(loss, unit):\n    return {'nats': np.e, 'bits': 2.0}[unit] ** loss\n"
    "def unused(x):\n    return perplexity(x)\n",
    # an attribute spelled like a global that holds the forbidden function is not that global
    "from probability_practice import perplexity\nimport types\n"
    "def perplexity_from_loss(loss, unit):\n"
    "    r = types.SimpleNamespace(perplexity=float(np.exp(loss)) if unit == 'nats' else 2.0 ** loss)\n"
    "    return r.perplexity\n",
    # nor is a class attribute of that name
    "from probability_practice import perplexity\n"
    "def perplexity_from_loss(loss, unit):\n    class Base:\n        perplexity = {'nats': np.e, 'bits': 2.0}\n"
    "        table = perplexity\n    return Base.table[unit] ** loss\n",
    # held but not called on this input: only calls count
    "from probability_practice import perplexity as reference\n"
    "def perplexity_from_loss(loss, unit, compare=False):\n    mine = {'nats': np.e, 'bits': 2.0}[unit] ** loss\n"
    "    return reference(loss, unit) if compare else mine\n",
    # a function of the student's own named like the reference one
    "def perplexity(loss, unit):\n    return (np.e if unit == 'nats' else 2.0) ** loss\n"
    "def perplexity_from_loss(loss, unit):\n    return perplexity(loss, unit)\n",
    # the module itself and an allowed function of it
    "def perplexity_from_loss(loss, unit):\n    pp.entropy\n    return float(np.exp(loss)) if unit == 'nats' else 2.0 ** loss\n",
])
def test_a_solution_that_does_not_call_the_forbidden_function_passes(definitions):
    namespace = guarded_namespace(definitions)
    before = state_of(namespace)
    run_cell(GUARDED_CALL, namespace)
    assert namespace.pop("result") == pytest.approx(np.exp(2.0))
    assert state_of(namespace) == before


@pytest.mark.parametrize("odd", [
    "import weakref\nclass Box:\n    pass\nODD = weakref.proxy(Box())\n",  # a dead proxy: any use raises
    "from unittest import mock\nODD = mock.Mock(spec=dict)\n",
    "class Table(dict):\n    def values(self, unit):\n        return 1\nODD = Table(a=pp.perplexity)\n",
    "ODD = (x for x in range(3))\n",
    "ODD = list(range(10**6)) + [pp.perplexity]\n",
    "class Slotted:\n    __slots__ = ('f',)\n    def __init__(self):\n        self.f = pp.perplexity\nODD = Slotted()\n",
    "class Angry:\n    def __getattribute__(self, name):\n        raise RuntimeError(name)\nODD = Angry()\n",
])
def test_an_odd_global_the_student_s_function_reads_neither_crashes_the_guard_nor_is_spent(odd):
    namespace = guarded_namespace(odd + "def perplexity_from_loss(loss, unit):\n    ODD\n"
                                        "    return float(np.exp(loss)) if unit == 'nats' else 2.0 ** loss\n")
    run_cell(GUARDED_CALL, namespace)
    assert namespace["result"] == pytest.approx(np.exp(2.0))
    if type(namespace["ODD"]) is types.GeneratorType:
        assert list(namespace["ODD"]) == [0, 1, 2], "the guard consumed a generator"


def test_deeply_nested_lambdas_do_not_exhaust_the_stack():
    nested = "lambda: " * 1200 + "0"
    namespace = guarded_namespace(f"def perplexity_from_loss(loss, unit):\n    f = {nested}\n"
                                  "    return float(np.exp(loss))\n")
    run_cell(GUARDED_CALL, namespace)
    assert namespace["result"] == pytest.approx(np.exp(2.0))


def test_a_tensor_method_taken_from_the_class_is_caught():
    namespace = guarded_namespace("sm = torch.Tensor.softmax\n"
                                  "def stable(x):\n    return sm(torch.as_tensor(x, dtype=torch.float64), -1)\n")
    with pytest.raises(AssertionError, match=r"\(it called Tensor\.softmax\)$"):
        run_cell("with forbidden_calls('stable', (torch.Tensor, 'softmax')):\n    stable([0.0, 1.0])\n", namespace)
    assert namespace["sm"] is torch.Tensor.softmax


@pytest.mark.parametrize("definitions", [
    # two instances holding the function still compare equal, and a frozen one still finds its dict entry
    "import dataclasses, typing\n@dataclasses.dataclass\nclass Cfg:\n    ppl: typing.Callable = pp.perplexity\n"
    "DEFAULT = Cfg()\ncfg = Cfg()\ndef perplexity_from_loss(loss, unit):\n"
    "    return cfg.ppl(loss, unit) if cfg == DEFAULT else 'not the default'\n",
    "import dataclasses, typing\n@dataclasses.dataclass(frozen=True)\nclass Cfg:\n    ppl: typing.Callable = pp.perplexity\n"
    "cfg = Cfg()\nMEMO = {cfg: 1.0}\ndef perplexity_from_loss(loss, unit):\n"
    "    return MEMO.get(cfg, 'missed') * cfg.ppl(loss, unit)\n",
    # a wrapper that binds stays a method (lru_cache), and the function's own attributes read through
    "import functools\ndef helper(self, loss, unit):\n    return pp.perplexity(loss, unit)\nclass C:\n"
    "    h = functools.lru_cache(helper)\nc = C()\nname = pp.perplexity.__name__\n"
    "def perplexity_from_loss(loss, unit):\n    assert C.ppl.__name__ == name\n    return c.h(loss, unit)\n"
    "C.ppl = pp.perplexity\n",
    # slots, a dataclass with slots, a cached_property reading an alias, a SimpleNamespace
    "class Box:\n    __slots__ = ('__f',)\n    def __init__(self):\n        self.__f = pp.perplexity\n"
    "    def run(self, loss, unit):\n        return self.__f(loss, unit)\nbox = Box()\n"
    "def perplexity_from_loss(loss, unit):\n    return box.run(loss, unit)\n",
    "import dataclasses, typing\n@dataclasses.dataclass(slots=True)\nclass Cfg:\n    ppl: typing.Callable\n"
    "cfg = Cfg(pp.perplexity)\ndef perplexity_from_loss(loss, unit):\n    return cfg.ppl(loss, unit)\n",
    "import functools\np = pp.perplexity\nclass C:\n    @functools.cached_property\n    def value(self):\n"
    "        return p(2.0, 'nats')\ndef perplexity_from_loss(loss, unit):\n    return C().value\n",
    "import types\ntools = types.SimpleNamespace(ppl=pp.perplexity)\ndef perplexity_from_loss(loss, unit):\n"
    "    return tools.ppl(loss, unit)\n",
    # the function referred to weakly, its attributes read and set (torch.compile reads its __dict__)
    "import weakref\np = pp.perplexity\nSEEN = weakref.WeakValueDictionary()\ndef perplexity_from_loss(loss, unit):\n"
    "    SEEN['p'] = p\n    assert p.__name__ == 'perplexity' and p.__doc__ == pp.perplexity.__doc__ and p.__dict__ is not None\n"
    "    p.last_loss = loss\n    result = p(loss, unit) * (pp.perplexity.last_loss == loss)\n    del p.last_loss\n"
    "    return result\n",
], ids=["dataclass-equality", "frozen-dataclass-hash", "lru-cache-method", "slots", "dataclass-slots", "cached-property",
        "simple-namespace", "weakref-and-attributes"])
def test_calls_of_sees_a_call_held_by_an_object_and_leaves_the_answer_s_result_alone(definitions):
    """Spies put into the student's objects compare, hash and bind as the function they stand for: an honest answer
    comparing two configs took its other branch while spies differed, and a cached method lost its self."""
    namespace = guarded_namespace(definitions)
    before = state_of(namespace)
    run_cell("from checks import calls_of\n"
             "with calls_of('perplexity_from_loss', (pp, 'perplexity')) as called:\n"
             "    result = perplexity_from_loss(2.0, 'nats')\n", namespace)
    assert namespace.pop("result") == pytest.approx(np.exp(2.0)) and namespace.pop("called") == ["pp.perplexity"]
    namespace.pop("calls_of")
    assert state_of(namespace) == before, "calls_of left a spy behind"


def test_a_guard_keeps_what_the_block_wrote_and_ends_on_objects_that_make_objects():
    """Restoring put the function back over the student's own write; an object whose __getattr__ makes a child for
    every name asked (hasattr(obj, '__wrapped__')) kept the search going forever; a tree of objects is searched only
    up to MAX_SEARCHED of them."""
    import time

    namespace = guarded_namespace("class Model:\n    def __init__(self):\n        self.f, self.cache = pp.perplexity, None\n"
                                  "    def __call__(self, loss, unit):\n        self.cache = self.f(loss, unit)\n"
                                  "        self.f = None\n        return self.cache\nperplexity_from_loss = Model()\n")
    with pytest.raises(AssertionError, match="it called pp.perplexity"):
        run_cell(GUARDED_CALL, namespace)
    assert namespace["perplexity_from_loss"].f is None and namespace["result"] == pytest.approx(np.exp(2.0))
    namespace = guarded_namespace(
        "class Auto:\n    def __init__(self, parent=None):\n        self.parent = parent\n"
        "    def __getattr__(self, name):\n        child = Auto(self)\n        self.__dict__[name] = child\n        return child\n"
        "    def __call__(self, *args):\n        return 1\nauto = Auto()\n"
        "class Node:\n    def __init__(self, depth):\n        self.children = [Node(depth - 1) for _ in range(4)] if depth else []\n"
        "tree = Node(8)\ndef perplexity_from_loss(loss, unit):\n    auto, tree\n    return float(np.exp(loss))\n")
    start = time.perf_counter()
    run_cell(GUARDED_CALL, namespace)
    assert time.perf_counter() - start < 5 and list(vars(namespace["auto"])) == ["parent"], "the search made objects"


def test_a_builtin_held_by_a_class_is_caught_and_still_does_not_bind_to_the_instance():
    """torch.softmax in a class body is called as self.sm(x): a spy put there as a plain function would get self too."""
    namespace = guarded_namespace("class Model:\n    sm = torch.softmax\n    def __call__(self, x):\n"
                                  "        return self.sm(torch.as_tensor(x, dtype=torch.float64), -1)\nstable = Model()\n")
    before = state_of(namespace)
    with pytest.raises(AssertionError, match=r"\(it called torch\.softmax\)$"):
        run_cell("with forbidden_calls('stable', (torch, 'softmax')):\n    result = stable([0.0, 0.0])\n", namespace)
    assert namespace.pop("result").tolist() == [0.5, 0.5]
    assert state_of(namespace) == before


def test_a_notebook_global_the_spy_replaces_is_named_once():
    namespace = guarded_namespace("def helper(x):\n    return x + 1\n\nhelp_too = helper\n\n"
                                  "def solution(x):\n    return helper(x) * help_too(1)\n")
    with pytest.raises(AssertionError) as err:
        run_cell("with forbidden_calls('solution', (globals(), 'helper')):\n    result = solution(1)\n", namespace)
    assert namespace["result"] == 4
    assert str(err.value).endswith("(it called helper)")


# --- check_close and check_true on values that are not what they should be ------------------------

@pytest.mark.parametrize("actual, words", [
    (None, ["got NoneType", "return its result"]),
    ("1.0", ["got str"]),
    (np.array([1 + 5j]), ["complex"]),
    ([1.0, [2.0]], ["got list"]),
    ([1.0, None], ["dtype object"]),
], ids=["none", "string", "complex", "ragged", "list-with-none"])
def test_check_close_names_a_value_that_is_not_numbers_instead_of_comparing_it(actual, words):
    """numpy reads None as nan, "1.0" as 1.0 and drops an imaginary part: each would pass or mislead."""
    with pytest.raises(AssertionError) as err:
        checks.check_close("x", actual, 1.0)
    assert str(err.value).startswith("x: ") and all(w in str(err.value) for w in words), str(err.value)
    # the grader judges the recorded value with the same function: the same verdict
    assert checks.close_failure("x", checks.from_plain(checks.to_plain(actual)), 1.0) is not None


def test_check_close_compares_python_integers_beyond_int64():
    import math

    checks.check_close("C(100, 50)", math.comb(100, 50), float(math.comb(100, 50)))
    checks.check_close("C(100, 50)", checks.from_plain(checks.to_plain(math.comb(100, 50))), float(math.comb(100, 50)))
    with pytest.raises(AssertionError, match="too large for a float"):
        checks.check_close("huge", 10**400, 1.0)


def test_a_large_array_that_fails_check_close_is_told_by_where_it_differs_not_printed_in_full():
    """Two 300 x 300 arrays differing in one value made a 1.8 MB message (found by review); an array up to
    SHOWN_ELEMENTS values is still shown whole."""
    expected = np.zeros((300, 300))
    actual = expected.copy()
    actual[5, 5], actual[7, 1] = 0.25, 1e-3
    with pytest.raises(AssertionError) as failed:
        checks.check_close("probs", actual, expected)
    message = str(failed.value)
    assert message == ("probs: 2 of 90000 values differ from the expected ones (max abs difference 0.25); the first "
                       "at index (5, 5): got 0.25, expected 0.0")
    small = np.zeros(checks.SHOWN_ELEMENTS)
    with pytest.raises(AssertionError, match=r"^v: got \[1\.0, 0\.0, .*\], expected \[0\.0, 0\.0, "):
        checks.check_close("v", np.eye(1, checks.SHOWN_ELEMENTS)[0], small)


def test_check_close_shows_full_digits_when_six_decimals_would_print_both_alike():
    with pytest.raises(AssertionError) as err:
        checks.check_close("p", np.float32(0.1), 0.1)
    assert "got 0.10000000149011612, expected 0.1" in str(err.value), str(err.value)
    with pytest.raises(AssertionError) as err:
        checks.check_close("p", 0.25, 0.5)
    assert "got 0.25, expected 0.5" in str(err.value), str(err.value)


@pytest.mark.parametrize("actual, dtype", [
    (torch.tensor(float(np.log(4 / 3))), "float32"),  # torch.tensor(x) without a dtype: the student's usual slip
    (np.float32([0.25, 0.75]) + np.float32(1e-7), "float32"),
    (torch.tensor(float(np.log(4 / 3)), dtype=torch.bfloat16), "bfloat16"),
], ids=["torch-float32", "numpy-float32", "bfloat16"])
def test_check_close_says_a_float32_answer_is_too_coarse_when_rounding_is_all_that_differs(actual, dtype):
    expected = np.log(4 / 3) if np.ndim(actual) == 0 else [0.25, 0.75]
    message = checks.close_failure("x", actual, expected)
    assert message.endswith(f"; the result is {dtype}, too coarse for this check: compute in float64 "
                            "(np.float64, torch.float64)"), message


@pytest.mark.parametrize("actual, expected", [
    (torch.tensor([0.3, 0.7]), [0.25, 0.75]), (np.float32([0.25, 0.76]), [0.25, 0.75]),
    (np.array([0.25, 0.75]) + 1e-7, [0.25, 0.75]),
    # wrong answers near zero or in a coarse type are wrong, not rounded (found by review)
    (torch.tensor(5e-6), 1e-6), (np.float32(0.0), 1e-6), (torch.tensor(-3e-6), 3e-6),
    (torch.tensor(0.15, dtype=torch.float16), 0.1), (torch.tensor(0.7, dtype=torch.bfloat16), 0.3),
    (torch.tensor(1.4, dtype=torch.bfloat16), 1.0),
], ids=["wrong-float32", "wrong-float32-numpy", "float64", "float32-5x", "float32-zero", "float32-sign", "float16",
        "bfloat16-0.7", "bfloat16-1.4"])
def test_check_close_gives_no_precision_note_for_a_wrong_or_float64_answer(actual, expected):
    message = checks.close_failure("x", actual, expected)
    assert message and "too coarse" not in message, message


def test_a_float32_result_converted_to_a_python_float_gets_the_float64_hint_only_where_values_are_shown():
    """F.cross_entropy(...).item() on float32 logits is a Python float with float32's error: the hint used to need
    the dtype, which .item() drops. A hidden check says nothing that depends on how close the value is."""
    logits, target = np.array([[1.0, 2.0, 0.5]]), np.array([1])
    expected = F.cross_entropy(torch.tensor(logits), torch.tensor(target)).item()  # float64
    got = F.cross_entropy(torch.tensor(logits, dtype=torch.float32), torch.tensor(target)).item()
    assert got != expected
    message = checks.close_failure("ce", got, expected)
    assert "only to float32 precision" in message and ".item()" in message, message
    assert checks.close_failure("ce", got, expected, reveal=False) == "ce: the value differs from the expected one"
    assert "float32" not in checks.close_failure("ce", expected + 1e-3, expected)  # wrong, not rounded
    # close float64 answers that are not float32 numbers (a forward difference, an epsilon in a log), and integers,
    # get no such hint (found by review)
    forward = ((1.0 + 1e-6) ** 3 - 1.0) / 1e-6
    assert "float32" not in checks.close_failure("gradient", forward, 3.0, atol=1e-6)
    assert "float32" not in checks.close_failure("count", 1_000_001, 1_000_000)


@pytest.mark.parametrize("actual, expected, same", [
    ([[1, 2], [3]], [[1, 2], [3]], True),  # ragged lists (token ids per document) used never to pass
    ([[1, 2], [3]], [[1, 2], [4]], False),
    ((2, 3), [2, 3], True), ([2, 3], (2, 3), True),  # either order of list and tuple
    (torch.Size([2, 3]), (2, 3), True),
    (np.array([3]), 3, False), (torch.tensor([3]), 3, False),  # the shape counts, as in check_close
    (np.array([[np.inf]]), np.inf, False),
    (np.int64(3), 3, True), ("b", "b", True), ((1, 2), [1, 2, 3], False),
    ([np.array([1, 2]), np.array([3])], [np.array([1, 2]), np.array([3])], True),
    # the notebook and the grader (which decodes a numpy scalar to a 0-d array) must agree (found by review)
    (np.float32(0.1), 0.1, False), ([np.float32(0.1)], [0.1], False), (np.float32(0.5), 0.5, True),
    ([1, 2], torch.tensor([1, 2]), True),
], ids=["ragged", "ragged-differs", "tuple-vs-list", "list-vs-tuple", "torch-size", "array-vs-scalar",
        "tensor-vs-scalar", "inf-array-vs-inf", "numpy-int", "string", "lengths", "list-of-arrays", "float32-scalar",
        "float32-in-list", "float32-exact", "tensor-expected"])
def test_check_equal_compares_items_lists_and_tuples_alike_and_arrays_by_shape(actual, expected, same):
    message = checks.equal_failure("x", actual, expected)
    assert (message is None) == same, message
    graded = checks.equal_failure("x", checks.from_plain(checks.to_plain(actual)), checks.from_plain(checks.to_plain(expected)))
    assert (graded is None) == same, f"the grader's verdict differs from the notebook's: {graded}"


@pytest.mark.parametrize("kwargs", [{"rtol": float("nan")}, {"rtol": "a"}, {"atol": -1e-9}, {"atol": float("inf")},
                                    {"rtol": None}, {"atol": True}])
def test_check_close_refuses_a_tolerance_that_is_not_a_finite_non_negative_number(kwargs):
    """A mistake in a test cell: said as such, not a numpy warning on stderr or a bare TypeError."""
    name, value = next(iter(kwargs.items()))
    with pytest.raises(ValueError, match=f"check_close: {name} must be a finite number >= 0, got {value!r}"):
        checks.check_close("x", 1.0, 1.0, **kwargs)


def test_check_close_reads_bfloat16_tensors_and_writes_nothing_to_stderr(capfd):
    checks.check_close("bf16", torch.tensor([1.5, -2.0], dtype=torch.bfloat16), [1.5, -2.0])
    with pytest.raises(AssertionError, match="x: got"):
        checks.check_close("x", [1.0], [float("nan")])
    assert capfd.readouterr().err == ""


@pytest.mark.parametrize("condition, why", [
    (float("nan"), "is a float"),
    ("False", "is a str"),
    ((c for c in [False]), "is a generator"),
    ([], "empty array"),
    (np.array([], dtype=bool), "empty array"),
    (1, "is a int"),
    ([True, [False]], "list numpy cannot read"),
    ([torch.tensor(1.0, requires_grad=True)], "list numpy cannot read"),
    (torch.tensor([2], dtype=torch.uint8), "is a ndarray"),  # a count, not np.isfinite's 0/1
], ids=["nan", "string", "generator", "empty-list", "empty-array", "number", "ragged", "tensors-requiring-grad",
        "uint8-count"])
def test_check_true_holds_only_for_true_or_booleans_all_true(condition, why):
    """bool(np.all(x)) is True for nan, any non-empty string, a generator and an empty list."""
    with pytest.raises(AssertionError) as err:
        checks.check_true("L", condition, "the hint")
    assert str(err.value).startswith("L: not true (") and why in str(err.value), str(err.value)
    assert "the hint" in str(err.value)


@pytest.mark.parametrize("make", [
    lambda: True, lambda: np.True_, lambda: np.array([1.0, 2.0]) > 0, lambda: [True, True], lambda: torch.tensor([True]),
    lambda: np.isfinite(torch.softmax(torch.zeros(1, 3), -1)),  # numpy on a tensor: a uint8 tensor of 0/1
    lambda: np.isfinite(torch.softmax(torch.zeros(1, 3), -1)).all(),
], ids=["true", "numpy-true", "bool-array", "bool-list", "bool-tensor", "isfinite-of-tensor", "isfinite-of-tensor-all"])
@pytest.mark.filterwarnings("ignore:__array_wrap__:DeprecationWarning")  # numpy 2 on torch's tensor wrapper
def test_check_true_passes_true_and_arrays_of_true(make):
    condition = make()
    checks.check_true("L", condition)
    with pytest.raises(AssertionError, match=r"^L: not true$"):
        checks.check_true("L", np.array([True, False]) if not isinstance(condition, bool) else False)


@pytest.mark.parametrize("definitions", [
    "def perplexity_from_loss(loss, unit):\n    return pp.perplexity(loss, unit)\n",
    "from probability_practice import perplexity as ppl\ndef perplexity_from_loss(loss, unit):\n    return ppl(loss, unit)\n",
    "def perplexity_from_loss(loss, unit, _p=pp.perplexity):\n    return _p(loss, unit)\n",
    "perplexity_from_loss = pp.perplexity\n",
    *CLASS_HELD,
], ids=["attribute", "from-import", "default-argument", "the-function-itself", *CLASS_HELD_IDS])
def test_calls_of_counts_a_required_call_however_the_student_s_function_holds_it(definitions):
    """calls_watched sees only calls through pp.perplexity itself: a test that requires F.cross_entropy failed an
    answer that imported it under its own name."""
    namespace = guarded_namespace(definitions)
    before = state_of(namespace)
    run_cell("from checks import calls_of\n"
             "with calls_of('perplexity_from_loss', (pp, 'perplexity')) as called:\n"
             "    result = perplexity_from_loss(2.0, 'nats')\n", namespace)
    assert namespace.pop("called") == ["pp.perplexity"] and namespace.pop("result") == pytest.approx(np.exp(2.0))
    namespace.pop("calls_of")
    assert state_of(namespace) == before, "calls_of left a spy behind"


def test_calls_of_is_empty_when_the_call_is_not_made_and_needs_the_function_s_name():
    namespace = guarded_namespace("def perplexity_from_loss(loss, unit):\n    return float(np.exp(loss))\n")
    run_cell("from checks import calls_of\nwith calls_of('perplexity_from_loss', (pp, 'perplexity')) as called:\n"
             "    perplexity_from_loss(2.0, 'nats')\n", namespace)
    assert namespace["called"] == []
    with pytest.raises(ValueError, match="calls_of needs the name of the student's function"):
        with checks.calls_of("", (pp, "perplexity")):
            pass


def test_calls_of_counts_a_call_through_a_spy_a_previous_block_left_in_the_student_s_global():
    """An answer that caches the library function on its first call kept the first block's spy: the next blocks of
    a test's loop saw no call, and an honest answer failed."""
    namespace = guarded_namespace("_p = None\ndef perplexity_from_loss(loss, unit):\n    global _p\n"
                                  "    if _p is None:\n        _p = pp.perplexity\n    return _p(loss, unit)\n")
    run_cell("from checks import calls_of\nseen = []\nfor _ in range(3):\n"
             "    with calls_of('perplexity_from_loss', (pp, 'perplexity')) as called:\n"
             "        perplexity_from_loss(2.0, 'nats')\n    seen.append(called)\n", namespace)
    assert namespace["seen"] == [["pp.perplexity"]] * 3


class _Shell:
    """What standing_in uses of an IPython shell: its events, with post_run_cell run as IPython runs it."""

    def __init__(self):
        from IPython.core.events import EventManager, available_events

        self.events = EventManager(self, available_events)

    def end_cell(self):
        self.events.trigger("post_run_cell", None)


def test_a_stand_in_lives_for_the_running_cell_only_and_the_student_s_functions_come_back():
    """4.3's test cell puts reference versions of 4.1's and 4.2's functions in place; afterwards - with or without an
    error - a test cell of 4.1 moved below it must test the student's own function again (review: the stand-ins
    stayed, so moving 4.1's test cell below 4.3's gave 4.1's points for an unanswered exercise)."""
    shell, namespace = _Shell(), {"entropy_nats": "the student's"}
    checks.standing_in(namespace, shell=shell, entropy_nats=lambda p: "reference", kl_nats=lambda p, q: "reference kl")
    held = namespace["entropy_nats"]
    assert (held([1.0]), namespace["kl_nats"]([1.0], [1.0])) == ("reference", "reference kl")
    assert held.__name__ == "entropy_nats"  # a traceback through it names the function the student knows
    shell.end_cell()
    assert namespace == {"entropy_nats": "the student's"}  # kl_nats was not defined before: it is gone again
    with pytest.raises(RuntimeError, match="stand-in for entropy_nats works only in the test cell that put it there"):
        held([1.0])  # a reference the student's code kept during the cell is spent
    assert shell.events.callbacks["post_run_cell"] == []
    shell.end_cell()  # a later cell: nothing left to do, nothing printed
    assert namespace == {"entropy_nats": "the student's"}


def test_a_stand_in_answers_in_the_type_the_student_s_own_function_returns(capsys):
    """A student's walkthrough: an all-torch 4.4 that ends kl_nats(...).clamp(min=0) passed check with the student's
    tensor-returning kl_nats, then scored 0 at grading, where the stand-in returned numpy. The stand-in now gives the
    reference's values in the type the student's own function returns for those arguments."""
    import warnings

    def own_tensor32(p):
        p.fill(7.0)  # in place, on the stand-in's copy: neither the caller nor the reference sees it
        print("the student's own output")
        warnings.warn("the student's own warning")
        return torch.zeros(2, dtype=torch.float32)

    def reference(p):
        return np.asarray(p, dtype=np.float64) * 2

    def broken(p):
        raise ZeroDivisionError("the student's bug")

    def calls_the_other(p):
        return namespace["as_float"](p)  # the stand-in for as_float, while this one runs for its type

    namespace = {"as_tensor": own_tensor32, "as_float": lambda p: 1.5, "raises": broken, "calls": calls_the_other,
                 "not_callable": "a string"}
    shell = _Shell()
    checks.standing_in(namespace, shell=shell, as_tensor=reference, as_float=lambda p: np.float64(p[0]),
                       raises=reference, calls=lambda p: np.float64(p[1]), not_callable=reference, absent=reference)
    given = np.array([0.25, 0.5])
    got = namespace["as_tensor"](given)
    assert isinstance(got, torch.Tensor) and got.dtype == torch.float32, got
    assert got.tolist() == [0.5, 1.0] and given.tolist() == [0.25, 0.5]
    assert type(namespace["as_float"](given)) is float and namespace["as_float"](given) == 0.25
    # theirs calls another stand-in, which then only answers (no probe within a probe): bounded, and the reference's
    assert isinstance(namespace["calls"](given), float) and namespace["calls"](given) == 0.5
    for name in ("raises", "not_callable", "absent"):  # theirs fails, is no function, or there is none: numpy
        got = namespace[name](given)
        assert isinstance(got, np.ndarray) and got.tolist() == [0.5, 1.0], (name, got)
    assert capsys.readouterr() == ("", "")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        namespace["as_tensor"](given)
    assert caught == []
    shell.end_cell()


def test_a_stand_in_s_look_at_the_student_s_function_costs_the_later_exercise_nothing(monkeypatch):
    """A code review: the stand-in ran the student's own earlier function inside the later exercise's forbidden_calls,
    so an earlier answer calling pp.entropy failed 4.4 too; and a looping earlier answer would hang every later test
    cell. A probe's calls are now not charged (nor counted by calls_of), and it stops at the stand-in's time; a
    SystemExit, a non-leaf tensor argument and a student's `except Exception` change nothing of that."""
    import time

    helpers = fake_module()
    monkeypatch.setattr(checks, "PROBE_SECONDS", 0.3)

    def loops(p):
        while True:
            try:
                time.sleep(0.01)
            except Exception:  # noqa: BLE001 - what a student may write
                pass

    def leaves(p):
        raise SystemExit

    namespace = {"calls_double": lambda p: torch.as_tensor(helpers.double(p)), "loops": loops, "leaves": leaves}
    shell = _Shell()
    reference = lambda p: np.asarray(p, dtype=np.float64) * 2  # noqa: E731
    checks.standing_in(namespace, shell=shell, calls_double=reference, loops=reference, leaves=reference)
    with checks.forbidden_calls("later_answer", (helpers, "double")):
        got = namespace["calls_double"](np.array([1.0]))
    assert isinstance(got, torch.Tensor)  # the probe ran, and its call of helpers.double was not charged
    with checks.calls_of("later_answer", (helpers, "double")) as called:
        namespace["calls_double"](np.array([1.0]))
    assert called == []
    start = time.perf_counter()
    assert namespace["loops"](np.array([1.0])).tolist() == [2.0]
    assert namespace["loops"](np.array([1.0])).tolist() == [2.0]  # its time is spent: no second wait
    assert time.perf_counter() - start < 2.0
    assert namespace["leaves"](np.array([1.0])).tolist() == [2.0]
    leaf = torch.ones(2, dtype=torch.float64, requires_grad=True)
    namespace["own"] = lambda p: p * 1
    checks.standing_in(namespace, shell=shell, own=lambda p: np.asarray(p.detach()) * 2)
    got = namespace["own"](leaf * 2)  # not a leaf: deepcopy refuses it
    assert isinstance(got, torch.Tensor) and got.tolist() == [4.0, 4.0]
    shell.end_cell()


@pytest.mark.parametrize("namespace, functions, words", [
    ([], {"f": len}, "the notebook's namespace, globals(), got list"),
    ({}, {}, "name=function pairs"),
    ({}, {"f": 3}, "name=function pairs"),
])
def test_a_badly_written_stand_in_is_an_error_that_says_what_is_expected(namespace, functions, words):
    with pytest.raises(ValueError, match=re.escape(words)):
        checks.standing_in(namespace, shell=_Shell(), **functions)


def test_a_stand_in_outside_a_kernel_says_it_needs_one():
    with pytest.raises(RuntimeError, match="runs in an IPython kernel"):
        checks.standing_in({}, f=len)


# --- the checks' own verdicts and messages (gaps a mutation audit of checks.py found) -----------------------------

def failure(check, *args, **kwargs) -> str:
    """The message of the AssertionError a check raises (the test fails if it passes)."""
    with pytest.raises(AssertionError) as err:
        check(*args, **kwargs)
    return str(err.value)


def test_check_close_wants_the_expected_shape_not_one_that_broadcasts():
    """A mean returned where per-position losses were wanted would pass by broadcasting."""
    assert "expected shape (2,), got shape ()" in failure(checks.check_close, "losses", 0.5, [0.5, 0.5])
    assert "expected shape (3,), got shape (2,)" in failure(checks.check_close, "losses", [1.0, 2.0], [1.0, 2.0, 3.0])


def test_a_hidden_check_names_no_expected_value_or_shape():
    assert failure(checks.check_close, "x", [1.0, 2.0], [1.0, 2.0, 3.0], reveal=False) == \
        "x: the shape differs from the expected one"
    message = failure(checks.check_equal, "count", 3, 4917, reveal=False)
    assert "4917" not in message and message.startswith("count"), message
    message = failure(checks.check_close, "p", 0.25, 0.123456789, reveal=False)
    assert "0.123456" not in message and "0.1234568" not in message, message


def test_nan_never_matches_and_is_named():
    """Even where nan is expected: no exercise's answer is nan, and equal_nan would let a broken answer through."""
    assert "nan" in failure(checks.check_close, "x", float("nan"), float("nan"))
    assert "contains nan" in failure(checks.check_close, "x", [1.0, float("nan")], [1.0, 2.0])


def test_a_test_cell_s_own_tolerances_are_used():
    checks.check_close("x", 1.0 + 1e-6, 1.0, rtol=1e-5)  # within the cell's looser rtol, not within RTOL
    assert failure(checks.check_close, "x", 1.0 + 1e-6, 1.0)  # the default RTOL = 1e-9 refuses it
    assert failure(checks.check_close, "x", 1.0 + 1e-13, 1.0, rtol=0, atol=0)  # and exact means exact


def test_in_record_mode_the_tolerances_and_the_reveal_flag_go_to_the_grader(monkeypatch):
    sent = []
    monkeypatch.setenv(checks.MODE_ENV, "record")
    monkeypatch.setattr(checks, "_emit", lambda kind, label, **fields: sent.append((kind, fields)))
    checks.check_close("x", 1.0, 1.0, rtol=1e-3, atol=0.0, reveal=False)
    checks.check_equal("n", 1, 2, reveal=False)
    assert (sent[0][1]["rtol"], sent[0][1]["atol"], sent[0][1]["reveal"]) == (1e-3, 0.0, False)
    assert sent[1][0] == "equal" and sent[1][1]["reveal"] is False


def test_check_true_takes_booleans_not_numbers():
    """check_true(label, np.abs(err)) would pass on any non-zero error."""
    with pytest.raises(AssertionError):
        checks.check_true("x", np.array([0.5]))


def test_a_long_array_s_message_counts_the_values_that_differ():
    message = failure(checks.check_close, "x", np.r_[np.zeros(100), 1.0], np.zeros(101))
    assert "1 of 101 values differ" in message, message


@pytest.mark.parametrize("call, words", [
    (lambda: checks.check_raises("x", ValueError, int, []), "expected ValueError, got TypeError"),
    (lambda: checks.check_raises("x", TypeError, None), "expected a function to call"),
    (lambda: checks.check_raises("x", ValueError, lambda: None), "returned normally"),
])
def test_check_raises_fails_for_another_error_no_function_or_no_error(call, words):
    """The check that decides the validation exercises (raise ValueError on a bad PMF...)."""
    with pytest.raises(AssertionError, match=re.escape(words)):
        call()


def test_check_raises_returns_the_message_of_the_error_it_wanted():
    def refuse():
        raise ValueError("pmf must sum to 1")

    assert checks.check_raises("x", ValueError, refuse) == "pmf must sum to 1"


def test_calls_watched_puts_back_a_name_in_a_namespace_dict():
    namespace = {"helper": abs}
    with checks.calls_watched((namespace, "helper")):
        namespace["helper"](-1)
    assert namespace["helper"] is abs


def test_infinite_values_travel_to_the_grader_tagged_and_come_back_infinite():
    """KL off the support and perplexity at p = 0 are inf: sent untagged, json with allow_nan=False refuses them and a
    right answer would fail."""
    assert checks.to_plain(float("inf")) == {"float": "inf"}
    assert checks.to_plain(np.array([np.inf]))["ndarray"] == [{"float": "inf"}]
    back = checks.from_plain(checks.to_plain(np.array([1.0, -np.inf])))
    assert np.asarray(back).tolist() == [1.0, -np.inf]
    checks.check_close("kl", back, [1.0, -np.inf])


def test_arrays_up_to_max_elements_are_sent_and_a_record_s_shape_must_match_its_values():
    assert "ndarray" in checks.to_plain(np.zeros(checks.MAX_ELEMENTS))
    assert isinstance(checks.from_plain({"ndarray": [1.0, 2.0], "dtype": "f", "shape": [3]}), checks.Unsupported)


def test_a_value_that_could_not_be_sent_equals_nothing():
    assert checks.equal_failure("x", checks.from_plain({"unsupported": "object"}), 3) is not None
