"""Comparisons used by the notebooks' graded test cells.

Every graded check goes through this module, so that the comparison can be moved out
of the student's process by the grader without touching a notebook. A failed check
raises ``AssertionError`` whose message says what was checked and what differed;
hidden checks pass ``reveal=False`` so the message never shows the expected value.
Nothing here writes to stderr (nbgrader scores a test cell 0 when it does).
"""

from __future__ import annotations

import numpy as np

__all__ = ["check_close", "check_equal", "check_true", "check_raises"]

RTOL = 1e-9
ATOL = 1e-12


def _as_array(value, label: str) -> np.ndarray:
    """Turn a number, list or tensor-like value into a float64 array for comparison."""
    if hasattr(value, "detach"):  # a torch tensor crossed in by a student
        value = value.detach().cpu().numpy()
    try:
        return np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError):
        raise AssertionError(f"{label}: expected a number or an array of numbers, got {type(value).__name__}") from None


def check_close(label: str, actual, expected, *, rtol: float = RTOL, atol: float = ATOL, reveal: bool = True) -> None:
    """Assert actual equals expected elementwise within rtol/atol (same shape; inf must match inf)."""
    a = _as_array(actual, label)
    e = _as_array(expected, label)
    if a.shape != e.shape:
        raise AssertionError(f"{label}: expected shape {e.shape}, got shape {a.shape}")
    if np.isnan(a).any():
        raise AssertionError(f"{label}: the result contains nan")
    if not np.allclose(a, e, rtol=rtol, atol=atol, equal_nan=False):
        if not reveal:
            raise AssertionError(f"{label}: the value differs from the expected one")
        with np.errstate(invalid="ignore"):
            diff = np.nanmax(np.abs(np.where(a == e, 0.0, a - e)))
        raise AssertionError(f"{label}: got {np.round(a, 6).tolist()}, expected {np.round(e, 6).tolist()} (max abs difference {diff:.3g})")


def check_equal(label: str, actual, expected, *, reveal: bool = True) -> None:
    """Assert actual == expected exactly (shapes, strings, integers, tuples)."""
    if isinstance(expected, (list, np.ndarray)):
        same = np.shape(actual) == np.shape(expected) and bool(np.array_equal(actual, expected))
    else:
        try:
            same = bool(actual == expected)
        except (TypeError, ValueError):  # e.g. an array compared with a scalar
            same = False
    if not same:
        if not reveal:
            raise AssertionError(f"{label}: the value differs from the expected one")
        raise AssertionError(f"{label}: got {actual!r}, expected {expected!r}")


def check_true(label: str, condition, hint: str = "") -> None:
    """Assert a property holds; hint says what the property means when it fails."""
    if not bool(np.all(condition)):
        raise AssertionError(f"{label}: property does not hold" + (f" ({hint})" if hint else ""))


def check_raises(label: str, exc_type, func, *args, **kwargs) -> str:
    """Assert func(*args, **kwargs) raises exc_type; return the error message for further checks."""
    try:
        func(*args, **kwargs)
    except exc_type as exc:
        return str(exc)
    except Exception as exc:  # noqa: BLE001 - a wrong error type is a failed check, not a crash
        raise AssertionError(f"{label}: expected {exc_type.__name__}, got {type(exc).__name__}: {exc}") from None
    raise AssertionError(f"{label}: expected {exc_type.__name__} to be raised, but the call returned normally")
