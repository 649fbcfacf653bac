"""Comparisons used by the notebooks' graded test cells.

Every graded check goes through this module, so that the comparison can be moved out
of the student's process by the grader without touching a notebook. A failed check
raises ``AssertionError`` whose message says what was checked and what differed;
hidden checks pass ``reveal=False`` so the message never shows the expected value.
``forbidden_calls`` guards that an exercise is solved without the function it re-implements
(``pp.perplexity``, ``F.softmax``…): it watches those calls while the student's function runs,
looks for references to them the function already holds, and reports through ``check_true``.
Nothing here writes to stderr (nbgrader scores a test cell 0 when it does).

Record mode (set by the grader: ``PART_II_CHECKS=record`` in the kernel's environment):
a check compares nothing in the student's process. It sends one display output of type
``application/vnd.part-ii.check+json`` holding plain JSON - the label, the kind of check
and the values it was given (numbers, lists, strings; never a pickle) - and returns.
The grader (``autograder/trusted_checks.py``) compares those values, in its own process,
with the expected values recorded from the instructor's notebook, using the same
functions as below (``close_failure``, ``equal_failure``) on the decoded values
(``from_plain``). Students and notebooks never need to know about this mode.
"""

from __future__ import annotations

import contextlib
import dis
import functools
import itertools
import json
import math
import os
import sys
import types

import numpy as np

__all__ = ["check_close", "check_equal", "check_true", "check_raises", "forbidden_calls", "calls_watched"]

RTOL = 1e-9
ATOL = 1e-12

MODE_ENV = "PART_II_CHECKS"  # "record" in grading kernels; unset everywhere else
RECORD_MIMETYPE = "application/vnd.part-ii.check+json"
MAX_ELEMENTS = 100_000  # values larger than this are not sent (the check then fails)
MAX_DEPTH = 16


def _from_tensor(value):
    """A torch tensor as a numpy array (numpy cannot read tensors directly); anything else unchanged."""
    if hasattr(value, "detach") and hasattr(value, "numpy"):
        return value.detach().cpu().numpy()
    return value


def _as_array(value, label: str) -> np.ndarray:
    """Turn a number, list or tensor-like value into a float64 array for comparison."""
    value = _from_tensor(value)
    try:
        return np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError):
        raise AssertionError(f"{label}: expected a number or an array of numbers, got {type(value).__name__}") from None


def close_failure(label: str, actual, expected, *, rtol: float = RTOL, atol: float = ATOL, reveal: bool = True) -> str | None:
    """Why actual is not elementwise close to expected (same shape, inf matches inf), or None."""
    try:
        a = _as_array(actual, label)
        e = _as_array(expected, label)
    except AssertionError as err:
        return str(err)
    if a.shape != e.shape:
        if not reveal:
            return f"{label}: the shape differs from the expected one"
        return f"{label}: expected shape {e.shape}, got shape {a.shape}"
    if np.isnan(a).any():
        return f"{label}: the result contains nan"
    if not np.allclose(a, e, rtol=rtol, atol=atol, equal_nan=False):
        if not reveal:
            return f"{label}: the value differs from the expected one"
        with np.errstate(invalid="ignore"):
            diff = np.nanmax(np.abs(np.where(a == e, 0.0, a - e)))
        return f"{label}: got {np.round(a, 6).tolist()}, expected {np.round(e, 6).tolist()} (max abs difference {diff:.3g})"
    return None


def equal_failure(label: str, actual, expected, *, reveal: bool = True) -> str | None:
    """Why actual is not exactly expected (shapes, strings, integers, tuples), or None."""
    if isinstance(expected, (list, np.ndarray)):
        try:
            same = np.shape(actual) == np.shape(expected) and bool(np.array_equal(actual, expected))
        except (TypeError, ValueError):  # e.g. a ragged list
            same = False
    else:
        try:
            same = bool(actual == expected)
        except (TypeError, ValueError):  # e.g. an array compared with a scalar
            same = False
    if same:
        return None
    if not reveal:
        return f"{label}: the value differs from the expected one"
    return f"{label}: got {actual!r}, expected {expected!r}"


def check_close(label: str, actual, expected, *, rtol: float = RTOL, atol: float = ATOL, reveal: bool = True) -> None:
    """Assert actual equals expected elementwise within rtol/atol (same shape; inf must match inf)."""
    if recording():
        _emit("close", label, actual=actual, expected=expected, rtol=float(rtol), atol=float(atol), reveal=bool(reveal))
        return
    message = close_failure(label, actual, expected, rtol=rtol, atol=atol, reveal=reveal)
    if message:
        raise AssertionError(message)


def check_equal(label: str, actual, expected, *, reveal: bool = True) -> None:
    """Assert actual == expected exactly (shapes, strings, integers, tuples)."""
    if recording():
        _emit("equal", label, actual=actual, expected=expected, reveal=bool(reveal))
        return
    message = equal_failure(label, actual, expected, reveal=reveal)
    if message:
        raise AssertionError(message)


def check_true(label: str, condition, hint: str = "") -> None:
    """Assert a property holds; hint says what the property means when it fails."""
    try:
        holds = bool(np.all(_from_tensor(condition)))
    except Exception:  # noqa: BLE001 - a condition that cannot be evaluated does not hold
        holds = False
    if recording():
        _emit("true", label, holds=holds)
        return
    if not holds:
        raise AssertionError(f"{label}: property does not hold" + (f" ({hint})" if hint else ""))


def check_raises(label: str, exc_type, func, *args, **kwargs) -> str:
    """Assert func(*args, **kwargs) raises exc_type; return the error message for further checks."""
    try:
        func(*args, **kwargs)
    except exc_type as exc:
        if recording():
            _emit("raises", label, raised=type(exc).__name__, ok=True)
        return str(exc)
    except Exception as exc:  # noqa: BLE001 - a wrong error type is a failed check, not a crash
        if recording():
            _emit("raises", label, raised=type(exc).__name__, ok=False)
            return ""
        raise AssertionError(f"{label}: expected {exc_type.__name__}, got {type(exc).__name__}: {exc}") from None
    if recording():
        _emit("raises", label, raised=None, ok=False)
        return ""
    raise AssertionError(f"{label}: expected {exc_type.__name__} to be raised, but the call returned normally")


# --- guards: solved without the library function it re-implements -----------------------
SHORT_MODULE_NAMES = {"probability_practice": "pp", "torch.nn.functional": "F"}  # as the notebooks import them


MAX_HELD_ITEMS = 1000  # items of one dict, list, tuple or set searched for a forbidden function


@contextlib.contextmanager
def forbidden_calls(user: str, *targets):
    """Check that the block (a call of the student's function `user`) calls none of targets, (owner, name) pairs.

    Each target is replaced by a spy that notes the call and passes it on, so the block's results stay
    real. A spy cannot see a call through a reference the student's code took before the guard
    (`p = pp.perplexity`, `from probability_practice import perplexity`, a default argument, a closure,
    a dict or list of functions, or the forbidden function itself bound to the exercise's name), so the
    function `user` of the calling namespace is searched for those too, following the student's own
    functions it reads. Afterwards one check_true names what the exercise must do without. An in-kernel
    guard, as strong as plain nbgrader (autograder/trusted_checks.py).
    """
    if not isinstance(user, str) or not user:
        raise ValueError("forbidden_calls needs the name of the student's function it guards, e.g. 'stable_softmax'")
    namespace = _caller_globals()
    held = _held_references(user, namespace.get(user), namespace, targets)
    with calls_watched(*targets) as called:
        yield
    names = ", ".join(_display_name(owner, name) for owner, name in targets)
    why = ([f"it called {', '.join(called)}"] if called else []) + \
        [f"it reaches {label} through {spelled}" for label, spelled in held.items()]
    check_true(f"{user} works without calling {names}", not why, "; ".join(why))


@contextlib.contextmanager
def calls_watched(*targets):
    """Within the block, note which targets - (module, class or namespace dict, name) pairs - are called;
    yields the list of their names, in the order of first call. A name missing from a dict is skipped."""
    if not targets:
        raise ValueError("calls_watched needs at least one (owner, name) pair to watch")
    called: list[str] = []
    saved = []  # (owner, name, original, whether the owner itself held it)
    try:
        for target in targets:
            owner, name = _checked_target(target)
            if isinstance(owner, dict):
                if name not in owner:
                    continue
                saved.append((owner, name, owner[name], True))
                owner[name] = _spy(owner[name], _display_name(owner, name), called)
            else:
                saved.append((owner, name, getattr(owner, name), name in vars(owner)))
                setattr(owner, name, _spy(getattr(owner, name), _display_name(owner, name), called))
        yield called
    finally:
        for owner, name, original, own in reversed(saved):
            if isinstance(owner, dict):
                owner[name] = original
            elif own:
                setattr(owner, name, original)
            else:
                delattr(owner, name)  # it was inherited (e.g. Tensor.softmax): leave no copy on the subclass


def _checked_target(target) -> tuple:
    """(owner, name) of a target, or ValueError saying what a target must be."""
    pair = isinstance(target, tuple) and len(target) == 2
    if not (pair and not isinstance(target[0], str) and isinstance(target[1], str)):
        raise ValueError(f"targets must be (owner, name) pairs such as (pp, 'softmax') or (globals(), 'helper'), got {target!r}")
    owner, name = target
    if not isinstance(owner, dict) and not hasattr(owner, name):
        raise ValueError(f"{_display_name(owner, name)} does not exist, so there is nothing to watch")
    return owner, name


def _display_name(owner, name: str) -> str:
    """How a notebook spells the target: pp.softmax, F.kl_div, torch.softmax, Tensor.softmax, or a global's bare name."""
    if isinstance(owner, dict):
        return name
    prefix = getattr(owner, "__name__", type(owner).__name__)
    return f"{SHORT_MODULE_NAMES.get(prefix, prefix)}.{name}"


def _caller_globals() -> dict:
    """The global namespace of the code that entered the guard (a notebook's), past this module and contextlib."""
    frame = sys._getframe(1)
    while frame is not None and frame.f_globals.get("__name__") in (__name__, "contextlib"):
        frame = frame.f_back
    return frame.f_globals if frame is not None else {}


def _held_references(user: str, func, namespace: dict, targets) -> dict[str, str]:
    """{label: spelling} of each target that func (namespace[user]) holds other than through the name the spy replaces.

    Followed: func itself, the globals it and the code inside it read, its defaults and closure cells, one
    level into a partial, a bound method or a container among those, and the student's own functions
    (those whose globals are namespace) reached so. A name missing from a dict owner has nothing to hold.
    """
    originals, patched = {}, set()
    for target in targets:
        owner, name = _checked_target(target)
        if isinstance(owner, dict) and name not in owner:
            continue
        original = owner[name] if isinstance(owner, dict) else getattr(owner, name)
        originals[id(original)] = (original, _display_name(owner, name))
        patched.add((id(owner), name))
    found: dict[str, str] = {}
    seen: set[int] = set()
    todo: list[types.FunctionType] = []

    def visit(value, spelled: str) -> None:
        """Note value (or what it wraps or holds) when it is a target; queue the student's functions among them."""
        for item in _unpacked(value):
            if id(item) in originals:
                found.setdefault(originals[id(item)][1], spelled)
            elif isinstance(item, types.FunctionType) and item.__globals__ is namespace and id(item) not in seen:
                seen.add(id(item))
                todo.append(item)

    visit(func, user)
    while todo:
        func = todo.pop()
        for name in sorted(_global_names(func.__code__)):
            if name in func.__globals__ and (id(func.__globals__), name) not in patched:
                visit(func.__globals__[name], name)
        for value in (*(func.__defaults__ or ()), *(func.__kwdefaults__ or {}).values()):
            visit(value, f"a default of {func.__name__}")
        for name, cell in zip(func.__code__.co_freevars, func.__closure__ or ()):
            with contextlib.suppress(ValueError):  # a cell not filled yet holds nothing
                visit(cell.cell_contents, name)
    return found


def _unpacked(value) -> list:
    """value, and what it wraps or holds one level down: a partial's or a bound method's function, a container's items."""
    if isinstance(value, functools.partial):
        return [value, value.func]
    if isinstance(value, types.MethodType):
        return [value, value.__func__]
    if isinstance(value, dict):
        return [value, *itertools.islice(value.values(), MAX_HELD_ITEMS)]
    if isinstance(value, (list, tuple, set, frozenset)):
        return [value, *itertools.islice(value, MAX_HELD_ITEMS)]
    return [value]


def _global_names(code: types.CodeType) -> set[str]:
    """The names code reads as globals, with those of the functions, lambdas and comprehensions defined in it
    (attribute names, which code.co_names lists too, are not globals)."""
    names = {ins.argval for ins in dis.get_instructions(code) if ins.opname in ("LOAD_GLOBAL", "LOAD_NAME")}
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names |= _global_names(const)
    return names


def _spy(original, label: str, called: list):
    """A stand-in for original that notes label in called (once) and returns what original returns."""
    def spy(*args, **kwargs):
        if label not in called:
            called.append(label)
        return original(*args, **kwargs)
    return spy


# --- record mode -------------------------------------------------------------------------
def recording() -> bool:
    """True in a grading kernel, where checks send their values to the grader instead of comparing."""
    return os.environ.get(MODE_ENV) == "record"


def _emit(kind: str, label: str, **fields) -> None:
    """Send one check record (plain JSON) as a display output of the running cell."""
    record = {"kind": kind, "label": str(label)}
    for key, value in fields.items():
        record[key] = to_plain(value) if key in ("actual", "expected") else value
    try:
        text = json.dumps(record, allow_nan=False)
    except (TypeError, ValueError):
        text = json.dumps({"kind": kind, "label": str(label), "actual": {"unsupported": "unserialisable"}})
    from IPython.display import display

    display({RECORD_MIMETYPE: json.loads(text)}, raw=True)


def to_plain(value, _depth: int = 0):
    """Encode a value as plain JSON: numbers, strings, lists, tagged arrays/tuples/non-finite floats."""
    if _depth > MAX_DEPTH:
        return {"unsupported": "nested too deeply"}
    try:
        value = _from_tensor(value)
    except Exception:  # noqa: BLE001 - a tensor-like that cannot become an array is not plain data
        return {"unsupported": type(value).__name__}
    if isinstance(value, np.ndarray):
        if value.dtype.kind not in "biuf" or value.size > MAX_ELEMENTS:
            return {"unsupported": f"array of {value.size} {value.dtype}"}
        return {"ndarray": _finite_list(value.tolist()), "dtype": value.dtype.kind, "shape": list(value.shape)}
    if isinstance(value, np.generic):
        value = value.item()
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return float(value) if math.isfinite(value) else {"float": repr(float(value))}
    if isinstance(value, (list, tuple)):
        if len(value) > MAX_ELEMENTS:
            return {"unsupported": f"sequence of {len(value)} items"}
        items = [to_plain(v, _depth + 1) for v in value]
        return {"tuple": items} if isinstance(value, tuple) else items
    return {"unsupported": type(value).__name__}


def _finite_list(items):
    """Replace non-finite floats in a nested list by their tagged form."""
    if isinstance(items, list):
        return [_finite_list(v) for v in items]
    if isinstance(items, float) and not math.isfinite(items):
        return {"float": repr(items)}
    return items


class Unsupported:
    """A value the kernel could not send as plain data; it equals nothing."""

    def __init__(self, what: str):
        self.what = str(what)[:80]

    def __eq__(self, other):
        return False

    __hash__ = None

    def __repr__(self):
        return f"<unsupported {self.what}>"


def from_plain(data, _depth: int = 0):
    """Decode to_plain's JSON back into Python and numpy values; anything malformed is Unsupported."""
    if _depth > MAX_DEPTH + 2:
        return Unsupported("nested too deeply")
    if data is None or isinstance(data, (bool, str, int)):
        return data
    if isinstance(data, float):
        return data
    if isinstance(data, list):
        return [from_plain(v, _depth + 1) for v in data]
    if isinstance(data, dict):
        if set(data) == {"float"} and data["float"] in ("inf", "-inf", "nan"):
            return float(data["float"])
        if set(data) == {"tuple"} and isinstance(data["tuple"], list):
            return tuple(from_plain(v, _depth + 1) for v in data["tuple"])
        if set(data) == {"ndarray", "dtype", "shape"}:
            return _decode_array(data)
        if set(data) == {"unsupported"}:
            return Unsupported(data["unsupported"])
    return Unsupported(type(data).__name__)


def _decode_array(data: dict):
    """Rebuild a numeric array from its tagged form, checking dtype and shape."""
    dtypes = {"b": np.bool_, "i": np.int64, "u": np.uint64, "f": np.float64}
    if data["dtype"] not in dtypes or not isinstance(data["shape"], list):
        return Unsupported("array")
    try:
        array = np.array(_decode_floats(data["ndarray"]), dtype=dtypes[data["dtype"]])
    except (TypeError, ValueError, OverflowError):
        return Unsupported("array")
    if list(array.shape) != data["shape"]:
        return Unsupported("array")
    return array


def _decode_floats(items):
    """Turn tagged non-finite floats inside a nested list back into floats."""
    if isinstance(items, list):
        return [_decode_floats(v) for v in items]
    if isinstance(items, dict) and set(items) == {"float"} and items["float"] in ("inf", "-inf", "nan"):
        return float(items["float"])
    if isinstance(items, (bool, int, float)):
        return items
    raise ValueError("not a number")
