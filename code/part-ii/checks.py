"""Comparisons used by the notebooks' graded test cells.

Every graded check goes through this module, so that the comparison can be moved out
of the student's process by the grader without touching a notebook. A failed check
raises ``AssertionError`` whose message says what was checked and what differed;
hidden checks pass ``reveal=False`` so the message never shows the expected value.
``forbidden_calls`` guards that an exercise is solved without the function it re-implements
(``pp.perplexity``, ``F.softmax``…): it watches those calls while the student's function runs,
also through references to them the student's code already holds, and reports through ``check_true``.
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
import json
import math
import os
import sys
import time
import types
import warnings

import numpy as np

__all__ = ["check_close", "check_equal", "check_true", "check_raises", "forbidden_calls", "calls_watched", "calls_of",
           "standing_in"]

RTOL = 1e-9
ATOL = 1e-12

MODE_ENV = "PART_II_CHECKS"  # "record" in grading kernels; unset everywhere else
RECORD_MIMETYPE = "application/vnd.part-ii.check+json"
MAX_ELEMENTS = 100_000  # values larger than this are not sent (the check then fails)
MAX_DEPTH = 16
SHOWN_ELEMENTS = 100  # a failed check_close shows arrays up to this size in full, larger ones where they differ
EPS = {"float32": 2.0**-23, "float16": 2.0**-10, "bfloat16": 2.0**-7}  # a rounding step of each coarse float type
LOW_PRECISION = ("float32", "float16")  # the ones a record names, for _dtype_note (bfloat16 arrives as float32)


def _from_tensor(value):
    """A torch tensor as a numpy array (numpy cannot read tensors directly); anything else unchanged."""
    if hasattr(value, "detach") and hasattr(value, "numpy"):
        value = value.detach().cpu()
        try:
            return value.numpy()
        except TypeError:  # bfloat16, which numpy lacks: its values are exact in float32
            return value.float().numpy()
    return value


def _as_array(value, label: str) -> np.ndarray:
    """Turn a number, list or tensor-like value of real numbers into a float64 array for comparison."""
    value = _from_tensor(value)
    wrong = f"{label}: expected a number or an array of numbers, got {type(value).__name__}"
    if value is None or isinstance(value, (str, bytes)):  # numpy would read None as nan and "1.0" as 1.0
        raise AssertionError(wrong + (" (does the function return its result?)" if value is None else ""))
    try:
        array = np.asarray(value)
    except Exception:  # noqa: BLE001 - a ragged list, tensors numpy cannot read: not numbers to compare
        raise AssertionError(wrong) from None
    if array.dtype.kind == "c":
        raise AssertionError(f"{label}: expected real numbers, got complex dtype {array.dtype}")
    if array.dtype.kind == "O" and array.size and all(isinstance(v, int) and not isinstance(v, bool) for v in array.flat):
        try:  # Python ints beyond int64 (math.comb(100, 50)): numpy keeps them as objects
            return array.astype(np.float64)
        except OverflowError:
            raise AssertionError(f"{label}: got an integer too large for a float") from None
    if array.dtype.kind not in "biuf":
        raise AssertionError(f"{wrong} holding {DTYPE_KINDS.get(array.dtype.kind, 'dtype ' + str(array.dtype))}")
    return array.astype(np.float64)


# what non-numeric values are, by dtype kind: a string dtype's length (<U336047) is the answer's text length, which a
# hidden check must not report (an answer could choose it from a hidden input)
DTYPE_KINDS = {"U": "text (str)", "S": "bytes", "O": "objects (dtype object)", "M": "datetimes", "m": "timedeltas",
               "V": "raw bytes (dtype void)"}


def _shown(a: np.ndarray, e: np.ndarray) -> tuple[list, list]:
    """a and e as lists to six decimals, or in full where six decimals would print them alike."""
    rounded_a, rounded_e = np.round(a, 6).tolist(), np.round(e, 6).tolist()
    if rounded_a == rounded_e:
        return a.tolist(), e.tolist()
    return rounded_a, rounded_e


def _condition_holds(condition) -> tuple[bool, str]:
    """(holds, why not) for check_true: True/False, or a non-empty array of booleans that must all be True."""
    try:
        value = _from_tensor(condition)
    except Exception:  # noqa: BLE001 - a tensor-like that cannot be read does not hold
        return False, "the condition could not be read"
    if isinstance(value, (bool, np.bool_)):
        return bool(value), ""
    if isinstance(value, (list, tuple)):
        try:
            value = np.asarray(value)  # a list of booleans counts as their array
        except Exception:  # noqa: BLE001 - ragged, or tensors numpy cannot read
            return False, "the condition is a list numpy cannot read as an array of booleans"
    if isinstance(value, np.ndarray) and value.size == 0:
        return False, "the condition is an empty array, which proves nothing"
    if isinstance(value, np.ndarray) and value.dtype == bool:
        return bool(value.all()), ""
    if isinstance(value, np.ndarray) and value.dtype == np.uint8 and hasattr(condition, "detach") and (value <= 1).all():
        return bool(value.all()), ""  # np.isfinite(tensor) and friends give a uint8 tensor of 0/1, not bool
    return False, f"the condition is a {type(value).__name__}, not True/False or an array of booleans"


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
            return f"{label}: the value differs from the expected one{_dtype_note(actual)}"
        with np.errstate(invalid="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # all-nan differences: nothing may reach stderr
            diff = np.nanmax(np.abs(np.where(a == e, 0.0, a - e)))
        note = _precision_note(actual, a, e) or _float32_note(actual, a, e)
        if a.size > SHOWN_ELEMENTS:  # the arrays in full would be megabytes: where they differ, and by how much
            off = ~np.isclose(a, e, rtol=rtol, atol=atol, equal_nan=False)
            at = tuple(int(i) for i in np.argwhere(off)[0])
            shown_a, shown_e = _shown(a[at], e[at])
            return (f"{label}: {int(off.sum())} of {a.size} values differ from the expected ones (max abs difference "
                    f"{diff:.3g}); the first at index {at}: got {shown_a}, expected {shown_e}{note}")
        shown_a, shown_e = _shown(a, e)
        return f"{label}: got {shown_a}, expected {shown_e} (max abs difference {diff:.3g}){note}"
    return None


def _coarse_dtype(actual) -> str:
    """'float32', 'float16' or 'bfloat16' when actual (numpy or torch) has that dtype, else ''."""
    dtype = str(getattr(actual, "dtype", "")).removeprefix("torch.")
    return dtype if dtype in EPS else ""


def _within_rounding(a: np.ndarray, e: np.ndarray, eps: float) -> bool:
    """True when a is within 16 rounding steps eps of e (relative, and relative to e's largest magnitude)."""
    return bool(np.allclose(a, e, rtol=16 * eps, atol=16 * eps * float(np.max(np.abs(e), initial=0.0))))


def _precision_note(actual, a: np.ndarray, e: np.ndarray) -> str:
    """A hint when actual is float32/16 (or bfloat16) and within a few of that type's rounding steps of e (relative
    to e's largest magnitude): the dtype is at fault, not the maths."""
    dtype = _coarse_dtype(actual)
    if not dtype or not _within_rounding(a, e, EPS[dtype]):
        return ""
    return f"; the result is {dtype}, too coarse for this check: compute in float64 (np.float64, torch.float64)"


def _float32_note(actual, a: np.ndarray, e: np.ndarray) -> str:
    """A hint when a float64 value (a Python float from .item() or float()) agrees with e only to float32
    precision, as a float32 computation converted afterwards does; for visible checks only (it uses closeness)."""
    try:
        given = np.asarray(_from_tensor(actual))
    except Exception:  # noqa: BLE001 - not readable as numbers: no hint
        return ""
    if _coarse_dtype(actual) or given.dtype.kind != "f" or not np.isfinite(e).all() or not np.isfinite(a).all():
        return ""
    # a float32 value converted to float64 is exactly a float32 number; a float64 answer that is merely close
    # (a forward difference, an epsilon in a log) almost never is
    with np.errstate(over="ignore"):
        if not np.array_equal(a.astype(np.float32).astype(np.float64), a):
            return ""
    if not _within_rounding(a, e, EPS["float32"]):
        return ""
    return ("; it agrees with the expected value only to float32 precision: was it computed in float32 (PyTorch's "
            "default dtype) and converted with .item() or float()? compute in float64 (torch.float64, np.float64)")


def _dtype_note(actual) -> str:
    """For a hidden comparison: that actual is float32/16 (or bfloat16), whether or not it is close; a note that
    depended on the distance to the expected value would tell something about a value the student may not see."""
    dtype = _coarse_dtype(actual)
    if not dtype:
        return ""
    return f"; the result is {dtype}, and the checks compare at float64 precision: compute in float64 (np.float64, torch.float64)"


def _same(actual, expected, _depth: int = 0) -> bool:
    """actual == expected exactly: lists and tuples item by item (either kind, ragged allowed), arrays and tensors
    by shape and values, anything else by ==."""
    try:
        actual, expected = _from_tensor(actual), _from_tensor(expected)
    except Exception:  # noqa: BLE001 - a tensor numpy cannot read equals nothing
        return False
    # a numpy scalar as the 0-d array grading decodes it to: np.float32(0.1) == 0.1 is True in float32 arithmetic,
    # the array comparison is not, and the notebook and the grader must agree
    actual, expected = (np.asarray(v) if isinstance(v, np.generic) else v for v in (actual, expected))
    if isinstance(actual, (list, tuple)) and isinstance(expected, (list, tuple)) and _depth < MAX_DEPTH:
        return len(actual) == len(expected) and all(_same(a, e, _depth + 1) for a, e in zip(actual, expected))
    try:
        if isinstance(actual, np.ndarray) or isinstance(expected, (list, tuple, np.ndarray)):
            return np.shape(actual) == np.shape(expected) and bool(np.array_equal(actual, expected))
        return bool(actual == expected)
    except (TypeError, ValueError):  # a ragged array, an array compared with a string
        return False


def equal_failure(label: str, actual, expected, *, reveal: bool = True) -> str | None:
    """Why actual is not exactly expected (shapes, strings, integers, tuples), or None."""
    if _same(actual, expected):
        return None
    if not reveal:
        return f"{label}: the value differs from the expected one"
    return f"{label}: got {actual!r}, expected {expected!r}"


def _check_tolerance(name: str, value) -> None:
    """ValueError unless value is a finite, non-negative real number (a test cell's mistake, not a student's)."""
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)) \
            or not math.isfinite(value) or value < 0:
        raise ValueError(f"check_close: {name} must be a finite number >= 0, got {value!r}")


def check_close(label: str, actual, expected, *, rtol: float = RTOL, atol: float = ATOL, reveal: bool = True) -> None:
    """Assert actual equals expected elementwise within rtol/atol (same shape; inf must match inf)."""
    _check_tolerance("rtol", rtol)
    _check_tolerance("atol", atol)
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
    """Assert a property holds: condition is True/False or a non-empty array of booleans (all must be True);
    hint says what the property means when it fails."""
    if hint is None:  # no hint, said another way
        hint = ""
    if not isinstance(hint, str):  # a test cell's mistake: check_true(label, cond, 5)
        raise ValueError(f"check_true: hint must be a str saying what the property means, got {type(hint).__name__}")
    holds, why = _condition_holds(condition)
    if recording():  # the grader shows the hint from the instructor's record, never from this one
        _emit("true", label, holds=holds, hint=hint)
        return
    if not holds:
        notes = "; ".join(n for n in (why, hint) if n)
        raise AssertionError(f"{label}: not true" + (f" ({notes})" if notes else ""))


def _exception_names(exc_type) -> str:
    """'ValueError', or 'ValueError or TypeError' for a tuple; ValueError (a test cell's mistake, not a student's)
    unless exc_type is an exception class or a non-empty tuple of them."""
    kinds = exc_type if isinstance(exc_type, tuple) else (exc_type,)
    if not kinds or not all(isinstance(k, type) and issubclass(k, BaseException) for k in kinds):
        raise ValueError(f"check_raises: exc_type must be an exception class or a tuple of them, got {exc_type!r}")
    return " or ".join(k.__name__ for k in kinds)


def check_raises(label: str, exc_type, func, *args, **kwargs) -> str:
    """Assert func(*args, **kwargs) raises exc_type (a class or a tuple of them); return the error message for further
    checks. func must be the function itself, not the result of a call."""
    wanted = _exception_names(exc_type)
    if not callable(func):  # called anyway, it would raise TypeError, and pass a check for TypeError
        if recording():
            _emit("raises", label, raised="TypeError", ok=False)
            return ""
        raise AssertionError(f"{label}: expected a function to call, got {type(func).__name__}"
                             + (" (does the function return its result?)" if func is None else
                                "; pass the function and its arguments apart: check_raises(label, error, f, x)"))
    try:
        func(*args, **kwargs)
    except exc_type as exc:
        if recording():  # a subclass (a student's own, numpy's LinAlgError) is the class asked for, as here; for a
            # tuple, the classes asked for ('ValueError or TypeError'), whichever of them the instructor's run raised
            _emit("raises", label, raised=wanted, ok=True)
        return str(exc)
    except Exception as exc:  # noqa: BLE001 - a wrong error type is a failed check, not a crash
        if recording():
            _emit("raises", label, raised=type(exc).__name__, ok=False)
            return ""
        raise AssertionError(f"{label}: expected {wanted}, got {type(exc).__name__}: {exc}") from None
    if recording():
        _emit("raises", label, raised=None, ok=False)
        return ""
    raise AssertionError(f"{label}: expected {wanted} to be raised, but the call returned normally")


# --- guards: solved without the library function it re-implements -----------------------
SHORT_MODULE_NAMES = {"probability_practice": "pp", "torch.nn.functional": "F", "numpy": "np"}  # as the notebooks import them
UFUNC_METHODS = ("reduce", "accumulate", "reduceat", "outer", "at")  # np.logaddexp.reduce computes with the ufunc too


MAX_HELD_ITEMS = 1000  # a dict, list, tuple or set with more items is not searched for a forbidden function
MAX_WRAPPERS = 8  # wrappers (partial, bound method, a decorator's __wrapped__) looked through for a forbidden function
MAX_SEARCHED = 2000  # the student's functions, classes and objects searched per guard (a big tree of objects takes long)


@contextlib.contextmanager
def forbidden_calls(user: str, *targets):
    """Check that the block (a call of the student's function `user`) calls none of targets, (owner, name) pairs.

    Each target is replaced by a spy that notes the call and passes it on, so the block's results stay
    real. A reference the student's code took before the guard (`p = pp.perplexity`, an import under
    another name, a default argument, a closure, a dict or list of functions, a partial or a decorated
    copy, an attribute of a class or object of the student's, or the forbidden function itself bound
    to the exercise's name) never meets those spies, so
    the places where the function `user` of the calling namespace holds a target get spies too
    (_held_references_watched). Afterwards one check_true names what the exercise must do without.
    An in-kernel guard, as strong as plain nbgrader (autograder/trusted_checks.py).
    """
    if not isinstance(user, str) or not user:
        raise ValueError("forbidden_calls needs the name of the student's function it guards, e.g. 'stable_softmax'")
    if not targets:
        raise ValueError("forbidden_calls needs at least one (owner, name) pair after the function's name, "
                         "e.g. forbidden_calls('perplexity_from_loss', (pp, 'perplexity'))")
    with calls_of(user, *targets) as called:
        yield
    names = ", ".join(_display_name(owner, name) for owner, name in targets)
    check_true(f"{user} works without calling {names}", not called, f"it called {', '.join(called)}" if called else "")


@contextlib.contextmanager
def calls_of(user: str, *targets):
    """Within the block (a call of the student's function `user`), note which targets it calls; yields the list of
    their names, filled when the block ends. Like calls_watched, but a target the function holds in a way of its own
    (`from torch.nn.functional import cross_entropy`, a default argument, an alias: see forbidden_calls) counts too,
    so a test that requires a library call does not fail an honest answer written that way."""
    if not isinstance(user, str) or not user:
        raise ValueError("calls_of needs the name of the student's function it watches, e.g. 'batch_kl'")
    if not targets:
        raise ValueError("calls_of needs at least one (owner, name) pair after the function's name, "
                         "e.g. calls_of('batch_kl', (F, 'kl_div'))")
    namespace = _caller_globals()
    result: list[str] = []
    with _held_references_watched(user, namespace, targets) as called_through, calls_watched(*targets) as called:
        yield result
    result.extend(called + [label for label in called_through if label not in called])


@contextlib.contextmanager
def calls_watched(*targets):
    """Within the block, note which targets - (module, class or namespace dict, name) pairs - are called;
    yields the list of their names, in the order of first call. A name missing from a dict is skipped."""
    if not targets:
        raise ValueError("calls_watched needs at least one (owner, name) pair to watch")
    called: list[str] = []
    saved = []  # (owner, name, original, whether the owner itself held it)
    try:
        for owner, name, original in _originals(targets):
            spy = _Spy(original, _display_name(owner, name), called)
            if isinstance(owner, dict):
                saved.append((owner, name, original, True))
                owner[name] = spy
            else:
                saved.append((owner, name, original, name in vars(owner)))
                setattr(owner, name, spy)
        yield called
    finally:
        for owner, name, original, own in reversed(saved):
            if isinstance(owner, dict):
                owner[name] = original
            elif own:
                setattr(owner, name, original)
            else:
                delattr(owner, name)  # it was inherited (e.g. Tensor.softmax): leave no copy on the subclass


def _originals(targets) -> list[tuple]:
    """(owner, name, the function there) of each target; a name missing from a dict owner is skipped."""
    found = []
    for target in targets:
        owner, name = _checked_target(target)
        if not isinstance(owner, dict):
            found.append((owner, name, getattr(owner, name)))
        elif name in owner:
            found.append((owner, name, owner[name]))
    return found


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


@contextlib.contextmanager
def _held_references_watched(user: str, namespace: dict, targets):
    """Within the block, spies where namespace[user] holds a target other than through the names calls_watched replaces.

    Searched: the global `user` itself, the globals read by it and by the student's own functions it
    reaches (functions whose globals are namespace, also behind a decorator's __wrapped__), their
    defaults and closure cells, and the attributes of the classes defined in the notebook that it
    reaches (with their bases defined there) and of their objects. A place holding a target - directly,
    through a wrapper, or as an item of a dict, list, tuple, set or partial held there - gets a copy
    that calls a spy first, and its value back afterwards. Yields the labels of the targets called through them. Nothing is searched
    when `user` is not a global of the namespace the guard was entered from.
    """
    # id -> (object, label); the object is kept so that no other object can take its id
    originals = {id(original): (original, _display_name(owner, name)) for owner, name, original in _originals(targets)}
    spied_names = {name for owner, name in targets if owner is namespace}  # calls_watched puts spies there
    called: list[str] = []
    restore: list = []
    try:
        if originals and user in namespace:
            _spy_held(user, namespace, spied_names, originals, called, restore)
        yield called
    finally:
        for put_back in reversed(restore):
            try:
                put_back()
            except Exception:  # noqa: BLE001 - a place the student's code removed meanwhile stays removed
                pass


def _spy_held(user: str, namespace: dict, spied_names: set, originals: dict, called: list, restore: list) -> None:
    """Put spies where namespace[user] and the student's functions, classes and objects it reaches hold a target (at
    most MAX_SEARCHED of them); note how to undo each: a place the block changed meanwhile keeps the block's value."""
    todo: list = []  # the student's functions, and classes and objects of the student's classes, to search
    seen: set[int] = set()
    searched: set[str] = set()
    module = namespace.get("__name__")

    def queue(item) -> None:
        """Queue item for searching once when it is the student's: a function of namespace, a class or an object of one."""
        if isinstance(item, types.FunctionType):
            ours = item.__globals__ is namespace
        else:
            ours = (getattr(item if isinstance(item, type) else type(item), "__module__", None) == module
                    or type(item) is types.SimpleNamespace)
        if ours and id(item) not in seen and len(seen) < MAX_SEARCHED:
            seen.add(id(item))
            todo.append(item)

    def place(get, put, wrap=None, raw=None, current=None) -> None:
        """Put a copy with spies at one place when its value (get()) holds a target - wrapped by wrap, e.g. back into
        its staticmethod - and note the undo: put raw (default: the value) back while the place (current()) still holds
        the copy. Queue the student's things the value holds."""
        try:
            value = get()
            spied = _with_spies(value, originals, called)
            if spied is not value:
                placed = wrap(spied) if wrap else spied
                original, now = (value if raw is None else raw), (current or get)
                restore.append(lambda: put(original) if now() is placed else None)  # first: an interrupt may come
                put(placed)
            for item in _parts(value):
                queue(item)
        except Exception:  # noqa: BLE001 - a value that cannot be searched (an empty cell, an odd object) holds nothing seen
            return

    def global_place(name: str) -> None:
        """Search the global `name` of the namespace once."""
        if name in namespace and name not in spied_names and name not in searched:
            searched.add(name)
            place(lambda: namespace[name], lambda value: namespace.__setitem__(name, value))

    def class_place(klass: type, name: str) -> None:
        """Search one attribute of the student's class; a staticmethod or classmethod stays one (spies bind as their
        target does, see _Spy)."""
        attr = vars(klass)[name]
        put, current = (lambda value: setattr(klass, name, value)), (lambda: vars(klass).get(name))
        if isinstance(attr, (staticmethod, classmethod)):
            place(lambda: attr.__func__, put, wrap=type(attr), raw=attr, current=current)
        elif isinstance(attr, property):
            for func in (attr.fget, attr.fset, attr.fdel):
                queue(func)
        elif isinstance(attr, functools.cached_property):
            queue(attr.func)
        else:
            place(lambda: attr, put, current=current)

    def search_object(item) -> None:
        """Search the attributes of a class of the student's (and of its bases of theirs), or of an object of one (its
        __dict__ and its slots)."""
        if isinstance(item, type):
            for klass in item.__mro__:
                if getattr(klass, "__module__", None) == module and len(vars(klass)) <= MAX_HELD_ITEMS:
                    for name in list(vars(klass)):
                        class_place(klass, name)
            return
        queue(type(item))
        for klass in type(item).__mro__:
            for slot in _slots(klass) if getattr(klass, "__module__", None) == module else ():
                place(lambda d=slot: d.__get__(item, klass), lambda value, d=slot: d.__set__(item, value))
        try:
            attributes = object.__getattribute__(item, "__dict__")
        except AttributeError:  # only slots
            return
        if type(attributes) is dict and len(attributes) <= MAX_HELD_ITEMS:
            for name in list(attributes):
                place(lambda n=name: attributes[n], lambda value, n=name: attributes.__setitem__(n, value))

    global_place(user)
    while todo:
        item = todo.pop()
        if isinstance(item, types.FunctionType):
            for name in sorted(_global_names(item.__code__)):
                global_place(name)
            place(lambda f=item: f.__defaults__, lambda value, f=item: setattr(f, "__defaults__", value))
            place(lambda f=item: f.__kwdefaults__, lambda value, f=item: setattr(f, "__kwdefaults__", value))
            for cell in item.__closure__ or ():
                place(lambda c=cell: c.cell_contents, lambda value, c=cell: setattr(c, "cell_contents", value))
        else:
            try:
                search_object(item)
            except Exception:  # noqa: BLE001 - a class or object that resists being read (a __getattribute__ that raises)
                continue


def _slots(klass: type) -> list:
    """The member descriptors of the slots klass itself declares (names mangled as Python mangles them)."""
    declared = vars(klass).get("__slots__", ())
    names = [declared] if isinstance(declared, str) else list(declared)
    mangled = [f"_{klass.__name__.lstrip('_')}{n}" if n.startswith("__") and not n.endswith("__") else n for n in names]
    return [d for n in mangled if type(d := vars(klass).get(n)) is types.MemberDescriptorType]


def _wrapped(value):
    """What value wraps (a decorator's function, a spy's target: its __wrapped__), read without running code of value's
    class (a __getattr__ that makes a new object for every name asked); None when it wraps nothing."""
    if not callable(value):
        return None
    try:
        return object.__getattribute__(value, "__wrapped__")
    except Exception:  # noqa: BLE001 - no such attribute, or an object that refuses the generic lookup
        return None


def _target_label(value, originals: dict) -> str | None:
    """The label of the target value is or wraps (a partial's function, a bound method's, a decorator's __wrapped__)."""
    for _ in range(MAX_WRAPPERS):
        if id(value) in originals:
            return originals[id(value)][1]
        if isinstance(value, functools.partial):
            value = value.func
        elif isinstance(value, types.MethodType):
            value = value.__func__
        elif (inner := _wrapped(value)) is not None:
            value = inner
        else:
            return None
    return None


def _with_spies(value, originals: dict, called: list, depth: int = 1):
    """value itself when it holds no target, else a copy that calls a spy first: the value as a whole when it is
    or wraps a target, else (depth levels down) a dict, list, tuple, set or partial with its targets spied."""
    label = _target_label(value, originals)
    if label is not None:
        return _Spy(value, label, called)
    if depth == 0:
        return value
    if type(value) in (list, tuple, set, frozenset) and len(value) <= MAX_HELD_ITEMS:
        items = [_with_spies(item, originals, called, depth - 1) for item in value]
        return type(value)(items) if any(a is not b for a, b in zip(items, value)) else value
    if type(value) is dict and len(value) <= MAX_HELD_ITEMS:
        items = {key: _with_spies(item, originals, called, depth - 1) for key, item in value.items()}
        return items if any(items[key] is not item for key, item in value.items()) else value
    if isinstance(value, functools.partial):
        args = _with_spies(value.args, originals, called, depth)
        keywords = _with_spies(value.keywords, originals, called, depth)
        if args is not value.args or keywords is not value.keywords:
            return functools.partial(value.func, *args, **keywords)
    return value


def _parts(value) -> list:
    """value and what it wraps or holds one level down (wrapped functions, a partial's arguments, a container's items)."""
    parts, inner = [value], value
    for _ in range(MAX_WRAPPERS):
        if isinstance(inner, functools.partial):
            parts += [inner.func, *inner.args, *inner.keywords.values()]
            inner = inner.func
        elif isinstance(inner, types.MethodType):
            parts.append(inner.__self__)
            inner = inner.__func__
            parts.append(inner)
        elif (wrapped := _wrapped(inner)) is not None:
            inner = wrapped
            parts.append(inner)
        else:
            break
    if type(value) is dict and len(value) <= MAX_HELD_ITEMS:
        parts += value.values()
    elif type(value) in (list, tuple, set, frozenset) and len(value) <= MAX_HELD_ITEMS:
        parts += value
    return parts


def _global_names(code: types.CodeType) -> set[str]:
    """The names code reads as globals, with those of the functions, lambdas, comprehensions and class bodies
    defined in it (attribute names, which code.co_names lists too, are not globals)."""
    names: set[str] = set()
    stack = [code]
    while stack:
        current = stack.pop()
        names |= {ins.argval for ins in dis.get_instructions(current) if ins.opname in ("LOAD_GLOBAL", "LOAD_NAME")}
        stack += [const for const in current.co_consts if isinstance(const, types.CodeType)]
    return names


class _Spy:
    """A stand-in for a target that notes its label in called (once) and returns what the target returns.

    Code that holds it behaves as with the target: it compares and hashes as the target (a dataclass instance holding
    it still equals one holding the target, and finds its dict entry), binds as the target does when it is a class
    attribute (a function becomes a method, a builtin does not), reads and sets the target's attributes (__name__,
    __doc__, a counter the student keeps on their function), is copied as itself, and can be referred to weakly and
    compiled (torch.compile reads a function's __dict__); a ufunc's methods (np.logaddexp.reduce) are spies too.
    Its __wrapped__ is the target: a student's function that kept a spy (a global cached on first call) still holds
    the target for the next guard, which looks through __wrapped__.
    """

    __slots__ = ("__wrapped__", "_label", "_called", "__dict__", "__weakref__")

    def __init__(self, original, label: str, called: list):
        for name, value in (("__wrapped__", original), ("_label", label), ("_called", called)):
            object.__setattr__(self, name, value)
        for name in ("__module__", "__name__", "__qualname__", "__doc__"):  # the class's own would answer first
            try:
                self.__dict__[name] = getattr(original, name)
            except AttributeError:
                pass

    def __call__(self, *args, **kwargs):
        if self._label not in self._called and not _PROBING[0]:  # a probe's calls are the earlier exercise's
            self._called.append(self._label)
        return self.__wrapped__(*args, **kwargs)

    def __get__(self, instance, owner=None):
        bind = getattr(type(self.__wrapped__), "__get__", None)
        if bind is None:
            return self
        bound = bind(self.__wrapped__, instance, owner)
        return self if bound is self.__wrapped__ else _Spy(bound, self._label, self._called)

    def __eq__(self, other):
        return self.__wrapped__ == (other.__wrapped__ if isinstance(other, _Spy) else other)

    def __hash__(self):
        return hash(self.__wrapped__)

    def __getattr__(self, name):
        if name in _Spy.__slots__:  # not set yet (a copy being made): no recursion through __wrapped__
            raise AttributeError(name)
        value = getattr(self.__wrapped__, name)
        if isinstance(self.__wrapped__, np.ufunc) and name in UFUNC_METHODS:
            return _Spy(value, self._label, self._called)
        return value

    def __setattr__(self, name, value):
        setattr(self.__wrapped__, name, value)

    def __delattr__(self, name):
        delattr(self.__wrapped__, name)

    def __copy__(self):
        return self

    def __deepcopy__(self, memo):
        return self

    def __repr__(self):
        return repr(self.__wrapped__)


# --- record mode -------------------------------------------------------------------------
# --- stand-ins: a later exercise graded on its own ------------------------------------------
_ABSENT = object()  # a name the namespace did not have before its stand-in


def standing_in(namespace: dict, *, shell=None, **functions) -> None:
    """Put each of functions (name=function) into namespace under its name for the rest of the running cell only.

    A hidden test of an exercise whose answer may call an earlier exercise's function (4.3 calls 4.1's
    entropy_nats) puts a reference version there first, so one wrong answer costs one exercise's points.
    A stand-in answers with the reference's values in the type the student's own function returns for the same
    arguments (run on copies of them, its errors and output dropped, for PROBE_SECONDS per stand-in and cell, and what it
    calls not seen by forbidden_calls or calls_of): a tensor where theirs gives one, so that an answer using tensor
    methods on the result scores as it does with their own function. After the cell -
    with or without an error - every name gets back what it held before, and a stand-in still held somewhere
    raises when called. (Its reference can be lifted from its closure while the cell runs,
    so grading fails a test cell of the earlier exercise moved below this one.) shell: the IPython shell whose
    post_run_cell event ends the cell (default: the running kernel's).
    """
    if not isinstance(namespace, dict):
        raise ValueError(f"standing_in needs the notebook's namespace, globals(), got {type(namespace).__name__}")
    if not functions or not all(callable(f) for f in functions.values()):
        raise ValueError("standing_in needs name=function pairs, e.g. standing_in(globals(), entropy_nats=_entropy)")
    if shell is None:
        from IPython import get_ipython

        shell = get_ipython()
    if shell is None:
        raise RuntimeError("standing_in runs in an IPython kernel: it gives the names back when the cell ends")
    live = [True]
    saved = {name: namespace.get(name, _ABSENT) for name in functions}

    def limited(name: str, function):
        left = [PROBE_SECONDS]  # this stand-in's time for running the student's own function, in this cell

        def stand_in(*args, **kwargs):
            if not live[0]:
                raise RuntimeError(f"the grader's stand-in for {name} works only in the test cell that put it there")
            value = function(*args, **kwargs)
            own = saved[name]
            if _PROBING[0] or not callable(own) or left[0] <= 0:  # within a probe, stand-ins only answer
                return value
            start = time.perf_counter()
            theirs = _quietly(own, args, kwargs, left[0])
            left[0] -= time.perf_counter() - start
            try:
                return _in_type_of(theirs, value)
            except Exception:  # noqa: BLE001 - no such type for this value: the reference's own
                return value

        stand_in.__name__ = stand_in.__qualname__ = name
        return stand_in

    def give_back(*_) -> None:
        """Give every name back its value from before the cell; never raises (IPython would print a traceback)."""
        live[0] = False
        for name, value in saved.items():
            if value is _ABSENT:
                namespace.pop(name, None)
            else:
                namespace[name] = value
        with contextlib.suppress(ValueError):
            shell.events.unregister("post_run_cell", give_back)

    for name, function in functions.items():
        namespace[name] = limited(name, function)
    shell.events.register("post_run_cell", give_back)


PROBE_SECONDS = 2.0  # per stand-in and cell: a slow or looping earlier answer costs the later exercise no more
_PROBING = [0]  # > 0 while a stand-in runs a student's own function: forbidden_calls and calls_of do not see it


class _ProbeTimeUp(BaseException):
    """Stops a probe at its time (a BaseException: a student's `except Exception` does not swallow it)."""


def _time_up(signum, frame):
    """SIGALRM handler of _quietly."""
    raise _ProbeTimeUp


def _copied(value):
    """A copy of an argument the student's function may change in place (a tensor detached: deepcopy refuses one
    that is not a leaf of the autograd graph)."""
    import copy

    torch = sys.modules.get("torch")
    if torch is not None and isinstance(value, torch.Tensor):
        return value.detach().clone()
    return copy.deepcopy(value)


def _quietly(function, args: tuple, kwargs: dict, seconds: float):
    """function(*args, **kwargs) on copies of the arguments, its output, warnings and errors dropped, stopped after
    seconds: its result, or None (an error, out of time, or not on the main thread, where no timer can stop it).
    What a stand-in learns the student's function's return type from."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        return None
    try:
        handler = signal.signal(signal.SIGALRM, _time_up)
    except (ValueError, OSError):  # no timer to be had here: no look
        return None
    outer, _ = signal.setitimer(signal.ITIMER_REAL, seconds)
    start = time.perf_counter()
    _PROBING[0] += 1
    try:
        try:
            args, kwargs = tuple(_copied(a) for a in args), {k: _copied(v) for k, v in kwargs.items()}
            with open(os.devnull, "w") as sink, contextlib.redirect_stdout(sink), contextlib.redirect_stderr(sink), \
                    warnings.catch_warnings(), np.errstate(all="ignore"):
                warnings.simplefilter("ignore")
                return function(*args, **kwargs)
        finally:  # first: a timer that goes off after the return is caught below, not in the caller
            signal.setitimer(signal.ITIMER_REAL, 0)
    except (Exception, SystemExit, _ProbeTimeUp):  # noqa: BLE001 - a wrong earlier answer costs this exercise nothing
        return None
    finally:
        _PROBING[0] -= 1
        signal.signal(signal.SIGALRM, signal.SIG_DFL if handler is None else handler)  # None: not set from Python
        if outer:  # a timer of the student's own was running: it goes on from where it was
            signal.setitimer(signal.ITIMER_REAL, max(outer - (time.perf_counter() - start), 1e-3))


def _in_type_of(own, value):
    """value, a reference's result, in own's type (the student's function's result for the same arguments): a
    torch tensor (of own's dtype when it is a floating one), a Python float, or value unchanged (numpy, anything
    else)."""
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(own, torch.Tensor):
        tensor = torch.tensor(np.array(value))  # a copy: a flipped or read-only array is no tensor's memory
        return tensor.to(own.dtype) if own.dtype.is_floating_point and tensor.dtype.is_floating_point else tensor
    if type(own) is float and np.ndim(value) == 0:
        return float(value)
    return value


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
        plain = {"ndarray": _finite_list(value.tolist()), "dtype": value.dtype.kind, "shape": list(value.shape)}
        if value.dtype.name in LOW_PRECISION:  # so the grader's comparison can name the dtype (_dtype_note)
            plain["precision"] = value.dtype.name
        return plain
    if isinstance(value, np.floating) and value.dtype.name in LOW_PRECISION:
        return to_plain(np.asarray(value), _depth)
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
        if set(data) in ({"ndarray", "dtype", "shape"}, {"ndarray", "dtype", "shape", "precision"}):
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
    if "precision" in data:  # the values came from that dtype: converting back is exact
        if data["dtype"] != "f" or data["precision"] not in LOW_PRECISION:
            return Unsupported("array")
        return array.astype(data["precision"])
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
