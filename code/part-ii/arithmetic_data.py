"""Load data/part-ii/arithmetic.json: the seeds' numbers with exact symbolic expected values.

``CASES = load_cases()`` validates the file against its JSON Schema, evaluates every
symbolic string exactly with sympy (``"log(8)/2"``, ``"9/13"``, ``"oo"``) and hands out
floats and float64 arrays: ``CASES["ch6-table6.1-mean-loss"].expected``. Compare
unrounded values; ``book_text`` is the number as the book prints it, for display only.
"""

from __future__ import annotations

import difflib
import functools
import json
import math
import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

__all__ = ["Case", "DataFileError", "CaseMap", "load_cases", "DATA_PATH", "SCHEMA_PATH"]

DATA_PATH = Path(__file__).resolve().parents[2] / "data" / "part-ii" / "arithmetic.json"
SCHEMA_PATH = DATA_PATH.with_name("arithmetic.schema.json")
INT_INPUTS = frozenset({"target", "targets", "k", "n"})  # class indices and counts stay integers
BOOL_INPUTS = frozenset({"mask"})


class DataFileError(ValueError):
    """The data file is missing, not JSON, violates the schema, or holds an expression sympy cannot evaluate."""


@dataclass(frozen=True)
class Case:
    """One numbered result of a seed: inputs, what it computes, and the exact expected value."""

    id: str
    quantity: str
    inputs: dict  # name -> float, int, or np.ndarray (float64; int64 for targets; bool for masks)
    expected: float | np.ndarray  # float64, from the exact value; inf for "oo"
    symbolic: str | list  # the expected value's sympy strings, as stored
    unit: str
    source: dict  # {"seed": "001", "label": "例 6.3"}
    book_text: str | None  # the number exactly as the book prints it; None if it prints none
    options: dict = field(default_factory=dict)  # e.g. {"unit": "bits"}, {"reduction": "mean"}
    book_index: int | None = None  # which element of a list-valued expected value book_text shows
    rtol: float = 1e-12  # relative tolerance for comparing float results with expected
    note: str = ""

    def exact(self):
        """The expected value as sympy objects (a nested list for list values)."""
        return _map_nested(self.symbolic, _sympify)


class CaseMap(dict):
    """dict of id -> Case whose missing-key error lists the closest ids."""

    def __missing__(self, key):
        close = difflib.get_close_matches(str(key), list(self), n=5, cutoff=0.4)
        hint = f"; close ids: {', '.join(close)}" if close else ""
        raise KeyError(f"no case with id {key!r} in {DATA_PATH.name}{hint}")


@functools.lru_cache(maxsize=None)  # the file repeats strings (209 leaves, 82 distinct); sympy values are immutable
def _sympify(text):
    """Evaluate a symbolic string exactly; only numbers, no free symbols."""
    import sympy  # deferred: sympy is slow to import and only needed here

    try:
        value = sympy.sympify(text, rational=True)
    except (sympy.SympifyError, SyntaxError, TypeError) as exc:
        raise DataFileError(f"cannot parse {text!r} as a sympy expression: {exc}") from None
    if not isinstance(value, sympy.Expr) or value.free_symbols:
        raise DataFileError(f"{text!r} must be a number without free symbols, got {value!r}")
    return value


def _to_float(value) -> float:
    """Exact sympy number or JSON number -> float64 (oo -> inf)."""
    import sympy

    if isinstance(value, (int, float)) and not isinstance(value, bool):  # first: a JSON inf equals sympy's oo
        try:
            result = float(value)
        except OverflowError:  # a JSON integer beyond float64
            result = math.inf
    elif value in (sympy.oo, -sympy.oo):  # the one way to write an infinite value
        return float(value)
    else:
        try:
            exact = complex(sympy.N(value, 30))
        except TypeError:  # foo(1): an undefined function has no number to give
            raise DataFileError(f"{_shown(value)} is not a number (an undefined function?)") from None
        if exact.imag != 0:
            raise DataFileError(f"{_shown(value)} is not a real number")
        result = exact.real
    if not math.isfinite(result):  # 10**400, a JSON 1e400 (read as inf), or Infinity
        raise DataFileError(f"{_shown(value)} is too large for float64; write \"oo\" for an infinite value")
    return result


def _shown(value) -> str:
    """repr(value) for a message, cut to 60 characters (10**400 has 401 digits)."""
    try:
        text = repr(value)
    except ValueError:  # an int beyond Python's 4300-digit limit for str()
        return "an integer of more than 4300 digits"
    return text if len(text) <= 60 else f"{text[:40]}…({len(text)} characters)"


def _float_array(value, what: str) -> np.ndarray:
    """A nested list of floats as a float64 array; DataFileError for a ragged one."""
    try:
        return np.asarray(value, dtype=np.float64)
    except ValueError:
        raise DataFileError(f"{what} must be a rectangular nested list (every row the same length)") from None


def _map_nested(obj, fn):
    """Apply fn to every leaf of a nested list."""
    return [_map_nested(x, fn) for x in obj] if isinstance(obj, list) else fn(obj)


def _leaf_value(leaf):
    """A JSON leaf (number or symbolic string) as a float."""
    return _to_float(_sympify(leaf) if isinstance(leaf, str) else leaf)


def _input_value(name: str, raw):
    """Convert one input to float / float64 array, int / int64 array (targets, counts) or bool array (mask)."""
    value = _map_nested(raw, _leaf_value)
    if name in INT_INPUTS or name in BOOL_INPUTS:
        arr = _float_array(value, f"input {name!r}")
        # read through float64, where 2**53 + 1 already rounds to 2**53: below 2**53 every integer is exact
        if not np.all(np.isfinite(arr)) or not np.all(arr == np.round(arr)) or np.any(np.abs(arr) >= 2**53):
            raise DataFileError(f"input {name!r} must hold integers of magnitude below 2**53, got {raw!r}")
        if name in BOOL_INPUTS:
            if not np.all((arr == 0) | (arr == 1)):
                raise DataFileError(f"input {name!r} must hold 0 or 1 (1 = scored), got {raw!r}")
            return arr.astype(bool)
        return int(arr) if arr.ndim == 0 else arr.astype(np.int64)
    return value if not isinstance(value, list) else _float_array(value, f"input {name!r}")


def _import_jsonschema():
    """Import jsonschema without its optional IRI format checker, whose grammar takes ~2 s to build."""
    import sys

    if "jsonschema" in sys.modules or "rfc3987_syntax" in sys.modules:
        import jsonschema
        return jsonschema
    sys.modules["rfc3987_syntax"] = None  # makes the optional import fail fast; we check no "iri" formats
    try:
        import jsonschema
    finally:
        del sys.modules["rfc3987_syntax"]
    return jsonschema


def _validate(doc, path: Path) -> None:
    """Check doc against the JSON Schema beside the data file; raise DataFileError with every problem."""
    jsonschema = _import_jsonschema()

    schema = json.loads(SCHEMA_PATH.read_text(encoding="utf-8"))
    validator = jsonschema.Draft202012Validator(schema)
    errors = sorted(validator.iter_errors(doc), key=lambda e: list(e.absolute_path))
    if errors:
        lines = []
        for err in errors[:10]:
            where = "/".join(str(p) for p in err.absolute_path) or "(top level)"
            case_id = _case_id_at(doc, err.absolute_path)
            lines.append(f"  at {where}{f' (case {case_id!r})' if case_id else ''}: {_short(err)}")
        raise DataFileError(f"{path} does not match {SCHEMA_PATH.name} ({len(errors)} error(s)):\n" + "\n".join(lines))


def _short(err) -> str:
    """One readable line for a schema error (oneOf errors name the best sub-error)."""
    best = min(err.context, key=lambda e: len(e.message)) if err.context else err
    return best.message if len(best.message) < 200 else best.message[:200] + "..."


def _case_id_at(doc, path) -> str | None:
    """The id of the case an error path points into, if any."""
    parts = list(path)
    if len(parts) >= 2 and parts[0] == "cases" and isinstance(parts[1], int):
        try:
            return doc["cases"][parts[1]].get("id")
        except (IndexError, AttributeError):
            return None
    return None


def _build_case(raw: dict) -> Case:
    """Turn one validated JSON case into a Case with floats."""
    try:
        inputs = {name: _input_value(name, value) for name, value in raw["inputs"].items()}
        expected = _map_nested(raw["expected"], lambda s: _to_float(_sympify(s)))
        expected = float(expected) if not isinstance(expected, list) else _float_array(expected, "expected")
    except DataFileError as exc:
        raise DataFileError(f"case {raw['id']!r}: {exc}") from None
    if raw.get("book_index") is not None and (np.ndim(expected) != 1 or raw["book_index"] >= len(expected)):
        raise DataFileError(f"case {raw['id']!r}: book_index {raw['book_index']} does not select an element of expected")
    return Case(
        id=raw["id"], quantity=raw["quantity"], inputs=inputs, expected=expected, symbolic=raw["expected"],
        unit=raw["unit"], source=dict(raw["source"]), book_text=raw["book_text"], options=dict(raw.get("options", {})),
        book_index=raw.get("book_index"), rtol=raw.get("rtol", 1e-12), note=raw.get("note", ""),
    )


def load_cases(path: str | Path | None = None) -> CaseMap:
    """Read, validate and evaluate the data file: path (default data/part-ii/arithmetic.json) -> {id: Case}."""
    if (path is not None and not isinstance(path, (str, os.PathLike))) or path == "":
        raise DataFileError(f"path must name the JSON data file (a str or Path), got {path!r}")
    path = Path(path) if path is not None else DATA_PATH
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise DataFileError(f"data file not found: {path}") from None
    except UnicodeDecodeError:
        raise DataFileError(f"{path} is not UTF-8 text; expected the JSON data file") from None
    except OSError as exc:  # a folder, no permission
        raise DataFileError(f"cannot read the data file {path}: {exc.strerror or exc}") from None
    except json.JSONDecodeError as exc:
        raise DataFileError(f"{path} is not valid JSON: {exc}") from None
    except ValueError as exc:  # a JSON integer beyond Python's 4300-digit limit
        raise DataFileError(f"{path} holds a number JSON cannot be read with here: {exc}") from None
    _validate(doc, path)
    cases = CaseMap()
    for raw in doc["cases"]:
        if raw["id"] in cases:
            raise DataFileError(f"{path}: case id {raw['id']!r} appears more than once; ids must be unique")
        cases[raw["id"]] = _build_case(raw)
    return cases
