"""Reference path for Part II: softmax, losses, entropy, KL, perplexity, likelihood.

numpy only, so it imports fast and can be read in one sitting. Conventions used
throughout, following the book (Chapter 6 and Chapter 2):

- Logs are natural (unit: nat) unless a function takes ``unit="bits"``.
- The class axis is the last one by default: logits and probabilities are ``[..., K]``.
- ``0 * ln 0 = 0``; a loss or divergence is ``inf`` where the reference puts mass
  and the prediction puts exactly zero (the support condition fails).
- Bad input raises ``ValueError`` or ``TypeError`` naming the argument, what was
  wrong and what was expected. Nothing returns a silent ``nan``.
"""

from __future__ import annotations

import math
from numbers import Integral, Number

import numpy as np

__all__ = [
    "UNITS",
    "REDUCTIONS",
    "softmax",
    "log_softmax",
    "logsumexp",
    "nll_from_logits",
    "nll_from_probs",
    "neg_log_prob",
    "cross_entropy",
    "reduce_losses",
    "softmax_cross_entropy_grad",
    "entropy",
    "cross_entropy_dist",
    "kl_divergence",
    "nats_to_bits",
    "bits_to_nats",
    "perplexity",
    "perplexity_from_probs",
    "bayes_posterior",
    "conditional_from_joint",
    "expectation",
    "variance",
    "empirical_distribution",
    "bernoulli_likelihood",
    "bernoulli_nll",
    "bernoulli_mle",
    "sigmoid",
    "bce_with_logits",
    "weighted_bce_optimum",
    "gaussian_nll",
    "sequence_log_prob",
]

UNITS = ("nats", "bits")
REDUCTIONS = ("mean", "sum", "none", "document_mean")
PROB_ATOL = 1e-6  # tolerance for "sums to 1": float32 softmax rows are off by ~1e-7


# ---------------------------------------------------------------- validation


def _as_float_array(x, name: str, check_nan: bool = True) -> np.ndarray:
    """Return x as a float array (float32 kept, everything else float64); reject non-numbers, and nan unless told not to.

    check_nan=False is for callers that check each chunk themselves (see _lse_rows):
    a whole-array np.isnan costs a pass over the data and a boolean array as large.
    """
    if isinstance(x, (str, bytes)) or x is None:
        raise TypeError(f"{name} must be an array of numbers, got {type(x).__name__}")
    arr = _as_array(x, name, "numbers")
    if arr.dtype == bool or not (np.issubdtype(arr.dtype, np.number)):
        raise TypeError(f"{name} must hold real numbers, got {_held(x, arr, name)}")
    if np.issubdtype(arr.dtype, np.complexfloating):
        raise TypeError(f"{name} must hold real numbers, got complex dtype {arr.dtype}")
    if arr.dtype != np.float32:
        arr = arr.astype(np.float64, copy=False)  # no copy of float64 input: nothing here writes into it
    if check_nan:
        _check_no_nan(arr, name)
    return arr


def _held(x, arr: np.ndarray, name: str) -> str:
    """What x holds instead of real numbers, in a student's words: 'a dict', 'booleans (True/False)', "strings such
    as '0.5'", 'None at index (1,)'; numpy's dtype only when none of these says it."""
    if isinstance(x, (dict, set, frozenset)):
        return f"a {type(x).__name__}"
    if arr.dtype == bool:
        return f"booleans (True/False); for 0/1 values pass np.asarray({name}, dtype=float)"
    if arr.dtype.kind == "U":
        return f"strings such as {str(arr.flat[0])!r}" if arr.size else "strings"
    if arr.dtype.kind == "O":
        for index in np.ndindex(arr.shape):
            value = arr[index]
            where = f"at index {tuple(int(i) for i in index)}"
            if value is None:
                return f"None {where}"
            if isinstance(value, bool) or not isinstance(value, Number):
                return f"a {type(value).__name__}, {_short(value)}, {where}"
            if not isinstance(value, (Integral, float, np.floating)):  # Fraction, Decimal: not numpy's numbers
                return f"a {type(value).__name__}, {_short(value)}, {where}; pass float values"
            if isinstance(value, Integral) and not -2**63 <= value < 2**64:
                return f"an int beyond 64 bits, {_short(value)}, {where}; pass float values"
        return "Python objects (an empty array of dtype object)" if not arr.size else f"dtype {arr.dtype}"
    if arr.dtype.kind == "S":
        return f"bytes such as {bytes(arr.flat[0])!r}" if arr.size else "bytes"
    return f"dtype {arr.dtype}"


def _short(value) -> str:
    """repr(value), cut to 40 characters."""
    text = repr(value)
    return text if len(text) <= 40 else text[:39] + "…"


def _as_array(x, name: str, what: str) -> np.ndarray:
    """np.asarray(x), with errors that name the argument: ragged lists, and torch tensors numpy cannot read."""
    try:
        return np.asarray(x)
    except ValueError as exc:  # ragged nested lists
        raise ValueError(f"{name} must be a rectangular array of {what}: {exc}") from None
    except (RuntimeError, TypeError) as exc:  # a tensor that requires grad, or holds bfloat16
        if hasattr(x, "detach"):
            raise TypeError(f"{name} is a torch tensor numpy cannot read ({exc}); the numpy reference path takes "
                            f"arrays: pass {name}.detach().double().numpy()") from None
        raise


def _check_no_nan(arr: np.ndarray, name: str) -> None:
    """Reject nan anywhere in arr, naming the first index."""
    if np.isnan(arr).any():
        raise ValueError(f"{name} contains nan at index {_first_index(np.isnan(arr))}; expected real numbers")


def _first_index(flags: np.ndarray) -> tuple[int, ...]:
    """Index of the first True in flags, as plain ints (prints as (3, 1), not (np.int64(3), ...))."""
    return tuple(int(i) for i in np.argwhere(flags)[0])


def _check_nonempty(arr: np.ndarray, name: str, min_ndim: int = 0) -> None:
    """Reject empty arrays and arrays with fewer than min_ndim dimensions."""
    if arr.ndim < min_ndim:
        raise ValueError(f"{name} must have at least {min_ndim} dimension(s), got shape {arr.shape}")
    if arr.size == 0:
        raise ValueError(f"{name} is empty (shape {arr.shape}); expected at least one value")


def _check_finite(arr: np.ndarray, name: str) -> None:
    """Reject +-inf where only finite values make sense (e.g. logits)."""
    if not np.isfinite(arr).all():
        bad = _first_index(~np.isfinite(arr))
        raise ValueError(f"{name} must be finite, got {arr[bad]} at index {bad}")


def _norm_axis(axis, ndim: int, name: str = "axis", has_unit: bool = False) -> int:
    """Return a non-negative axis index, rejecting axes outside the array (has_unit: the caller takes unit=, which
    a unit given in axis's place is pointed to)."""
    if not isinstance(axis, Integral) or isinstance(axis, bool):
        hint = f"; unit is a keyword argument: unit={axis!r}" if has_unit and isinstance(axis, str) and axis in UNITS else ""
        raise TypeError(f"{name} must be an int, got {axis!r}{hint}")
    if not -ndim <= axis < ndim:
        raise ValueError(f"{name}={axis} is out of range for an array with {ndim} dimension(s)")
    return int(axis) % ndim


def _check_distribution_values(p: np.ndarray, name: str) -> None:
    """Reject probabilities that are negative or above 1 (by more than float32 rounding), naming the index."""
    if (p < 0).any():
        idx = _first_index(p < 0)
        raise ValueError(f"{name} must be non-negative probabilities, got {p[idx]} at index {idx}")
    if (p > 1 + PROB_ATOL).any():
        idx = _first_index(p > 1 + PROB_ATOL)
        raise ValueError(f"{name} must be probabilities in [0, 1], got {p[idx]} at index {idx}")


def _check_distribution(p: np.ndarray, name: str, axis: int = -1) -> None:
    """Reject probabilities that are negative, above 1, or do not sum to 1 along axis."""
    _check_distribution_values(p, name)
    sums = p.sum(axis=axis, dtype=np.float64)
    bad = np.abs(sums - 1.0) > PROB_ATOL * max(1.0, math.sqrt(p.shape[axis]))  # float32 rounding grows ~ sqrt(K)
    if np.any(bad):
        if p.ndim == 1:
            raise ValueError(f"{name} must sum to 1; its {p.shape[0]} values sum to {float(sums):.6f}")
        where = _first_index(bad)
        ax = axis % p.ndim
        slot = [str(i) for i in where]
        slot.insert(ax, ":")
        raise ValueError(f"{name} must sum to 1 along axis {ax}; {name.split()[0]}[{', '.join(slot)}] sums to "
                         f"{float(sums[where]):.6f}")


def _check_probabilities(p: np.ndarray, name: str) -> None:
    """Reject values outside [0, 1] (no sum condition: these are separate events)."""
    if ((p < 0) | (p > 1)).any():
        idx = _first_index((p < 0) | (p > 1))
        raise ValueError(f"{name} must be probabilities in [0, 1], got {p[idx]} at index {idx}")


def _as_int_targets(targets, name: str = "targets") -> np.ndarray:
    """Return integer class indices as int64; reject floats with fractions, bools and nan."""
    arr = _as_array(targets, name, "integer class indices")
    if arr.dtype == bool:
        raise TypeError(f"{name} must be integer class indices, got booleans")
    if arr.dtype.kind not in "iuf":
        raise TypeError(f"{name} must be integer class indices, got {_held(targets, arr, name)}")
    if arr.dtype.kind == "f" and (not np.isfinite(arr).all() or not np.all(arr == np.round(arr))):
        raise TypeError(f"{name} must be integer class indices, got non-integer values {arr.ravel()[:5]}")
    too_large = np.abs(arr) > 2**62 if arr.dtype.kind != "u" else arr > 2**62  # would wrap around in int64
    if too_large.any():
        raise ValueError(f"{name} must be class indices, got {arr[too_large].ravel()[0].item()!r}, "
                         "far outside any class range")
    return arr.astype(np.int64)


def _check_target_range(targets: np.ndarray, num_classes: int, name: str, skip=None) -> None:
    """Reject class indices outside [0, K), ignoring entries where skip is True."""
    bad = (targets < 0) | (targets >= num_classes)
    if skip is not None:
        bad &= ~skip
    if bad.any():
        idx = _first_index(np.atleast_1d(bad)) if targets.ndim else ()
        value = int(targets[idx])
        hint = ("; -100 is PyTorch's ignore_index: leave those targets out (pp.cross_entropy takes ignore_index=-100 "
                "or a mask)" if value == -100 else "")
        where = f" at index {idx}" if targets.ndim else ""
        raise ValueError(f"{name} must lie in [0, {num_classes - 1}] (K={num_classes} classes), got {value}{where}{hint}")


def _check_weights(w: np.ndarray, name: str) -> None:
    """Reject weights that are infinite or negative (a weight of 0 is allowed: it drops its term)."""
    _check_finite(w, name)
    if (w < 0).any():
        idx = _first_index(w < 0)
        raise ValueError(f"{name} must be non-negative, got {w[idx]} at index {idx}")


def _check_unit(unit: str) -> None:
    """Reject units other than nats and bits."""
    if unit not in UNITS:
        raise ValueError(f"unit must be one of {UNITS}, got {unit!r}")


def _check_mask(mask, shape: tuple, name: str = "mask") -> np.ndarray:
    """Return a boolean mask of the given shape (True = scored); reject other values."""
    arr = _as_array(mask, name, "booleans or 0/1")
    if arr.shape != shape:
        raise ValueError(f"{name} must have shape {shape} (one entry per target), got {arr.shape}")
    if arr.dtype != bool:
        if not np.issubdtype(arr.dtype, np.number):
            raise ValueError(f"{name} must hold booleans or 0/1 (1 = scored), got {_held(mask, arr, name)}")
        if not np.isin(arr, (0, 1)).all():
            raise ValueError(f"{name} must hold booleans or 0/1 (1 = scored), got {np.unique(arr)[:5]}")
        arr = arr.astype(bool)
    return arr


# ---------------------------------------------------------------- softmax family


# Rows are processed in chunks of about this many bytes (with a scratch buffer as large):
# small enough to stay in cache between the passes over a chunk, so that only the first
# pass reads the logits from main memory; large enough that numpy's per-call cost is
# paid about once per 200,000 logits. Measured on 2-core EPYC (Zen 3) machines, 256 KiB
# to 4 MiB with bench/reference_ce.py: 1 MiB was among the fastest.
CHUNK_BYTES = 1024 * 1024
# The unshifted sum exp(z) is used only when it is at least this large: then the row
# maximum is above ln(1e-3 / K), and the terms lost to underflow (z below ~-87 in
# float32) are negligible against it.
_UNSHIFTED_MIN_SUM = 1e-3


def _lse_rows(z2: np.ndarray, full: np.ndarray, name: str = "logits", chunk_rows: int | None = None) -> np.ndarray:
    """ln sum_j exp(z_ij) per row of z2 [N, K] -> [N] float64 (see _lse_parts)."""
    shift, rest = _lse_parts(z2, full, name, chunk_rows)
    return shift + rest


def _lse_parts(z2: np.ndarray, full: np.ndarray, name: str = "logits", chunk_rows: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(shift, rest) per row of z2 [N, K], both [N] float64, with ln sum_j exp(z_ij) = shift + rest; in row chunks.

    shift is 0 where the unshifted sum was safe and the row maximum m elsewhere, so a
    caller can subtract a logit of similar size from it before adding rest (at |m| ~
    1e38, m + rest would round rest away).

    Per chunk (extra memory chunk_rows x K, independent of N), two passes:
    1. the row sums of z as one BLAS matrix-vector product: it brings the chunk into
       cache at memory speed, and a nan or +-inf makes its row's sum non-finite;
    2. exp(z) into the buffer and its row sums (numpy's pairwise summation: error
       O(eps log K) relative, so float32 input keeps float32 accuracy; BLAS sums of
       the exp terms were faster but up to 13 eps off, and biased).
    Where a row's sum of exp(z) is finite and not tiny, ln(sum) is the answer: without
    the shift nothing overflowed and nothing that matters underflowed. The other rows
    (a logit above ~88 in float32, or all of them far below 0) are redone in the
    stable form m + ln sum exp(z - m), m the row maximum. A nan or +-inf sends the
    whole array (full) through the usual checks, so the error message is the same as
    for the unchunked path.
    """
    n, k = z2.shape
    rows = min(chunk_rows or max(1, CHUNK_BYTES // (k * z2.itemsize)), n)
    buf = np.empty((rows, k), dtype=z2.dtype)
    ones = np.ones(k, dtype=z2.dtype)
    z_sums, exp_sums = np.empty(n, dtype=z2.dtype), np.empty(n, dtype=z2.dtype)
    with np.errstate(over="ignore", under="ignore", invalid="ignore", divide="ignore"):  # all handled below
        for start in range(0, n, rows):  # three numpy calls per chunk: the loop's cost is in the passes
            chunk = z2[start:start + rows]
            np.matmul(chunk, ones, out=z_sums[start:start + len(chunk)])
            np.add.reduce(np.exp(chunk, out=buf[: len(chunk)]), axis=1, out=exp_sums[start:start + len(chunk)])
        _check_rows_with_non_finite_sums(z2, np.flatnonzero(~np.isfinite(z_sums)), full, name)
        shift, rest = np.zeros(n), np.log(exp_sums, dtype=np.float64)
        unsafe = np.flatnonzero(~((exp_sums >= _UNSHIFTED_MIN_SUM) & (exp_sums < np.inf)))
        for start in range(0, len(unsafe), rows):
            idx = unsafe[start:start + rows]
            shift[idx], rest[idx] = _shifted_lse(z2[idx], full, name)
    return shift, rest


def _check_rows_with_non_finite_sums(z2: np.ndarray, rows: np.ndarray, full: np.ndarray, name: str) -> None:
    """Raise for a nan or -inf among these rows of z2 [N, K]; a +inf, or a finite sum that overflowed, is left to _shifted_lse."""
    for i in rows:
        if not np.isfinite(z2[i].min()):  # min propagates nan
            _raise_non_finite(full, name)


def _shifted_lse(chunk: np.ndarray, full: np.ndarray, name: str) -> tuple[np.ndarray, np.ndarray]:
    """(m, ln sum_j exp(z_ij - m)), m the row maximum, for a copied chunk [R, K] (overwritten) -> two [R] float64."""
    m = chunk.max(axis=1)
    if not np.isfinite(m).all():  # +inf (a nan elsewhere in the array is still named first)
        _raise_non_finite(full, name)
    with np.errstate(over="ignore"):  # z - m below -1.8e308 is -inf, whose exp is the 0 it should be
        np.subtract(chunk, m[:, None], out=chunk)
    return m.astype(np.float64), np.log(np.add.reduce(np.exp(chunk, out=chunk), axis=1), dtype=np.float64)


def _raise_non_finite(full: np.ndarray, name: str) -> None:
    """Run the whole-array checks, nan first then +-inf, as the unchunked path would."""
    _check_no_nan(full, name)
    _check_finite(full, name)


def _rows_view(z: np.ndarray) -> np.ndarray:
    """z [..., K] as rows [N, K]: a view for C-contiguous input (a copy otherwise)."""
    return z.reshape(-1, z.shape[-1])


def logsumexp(logits, axis: int = -1) -> np.ndarray:
    """ln sum_j exp(z_j) along axis: [..., K] -> [...] (logits' dtype); m + ln sum exp(z - m) wherever exp(z) could overflow."""
    z = _as_float_array(logits, "logits", check_nan=False)
    _check_nonempty(z, "logits", min_ndim=1)
    ax = _norm_axis(axis, z.ndim)
    if ax == z.ndim - 1:  # the class axis last (the usual layout): chunked rows, nothing of size N x K allocated
        out = _lse_rows(_rows_view(z), z).astype(z.dtype).reshape(z.shape[:-1])
        return out[()]
    _check_no_nan(z, "logits")
    _check_finite(z, "logits")
    m = z.max(axis=ax, keepdims=True)
    return np.squeeze(m, axis=ax) + np.log(np.exp(z - m).sum(axis=ax))


def log_softmax(logits, axis: int = -1) -> np.ndarray:
    """ln softmax(z) along axis: [..., K] -> [..., K], in nats; never takes log of a rounded zero."""
    z = _as_float_array(logits, "logits")
    _check_nonempty(z, "logits", min_ndim=1)
    ax = _norm_axis(axis, z.ndim)
    with np.errstate(over="ignore"):  # a log-probability below -1.8e308 is -inf, as PyTorch gives
        out = z - np.expand_dims(logsumexp(z, axis=ax), ax)
    # ln q <= 0 exactly; the unshifted float32 sum can round lse a few eps below the row maximum
    return np.minimum(out, 0.0, out=out)


def softmax(logits, axis: int = -1) -> np.ndarray:
    """exp(z_k - m) / sum_j exp(z_j - m) along axis: [..., K] -> [..., K]; each row sums to 1."""
    z = _as_float_array(logits, "logits")
    _check_nonempty(z, "logits", min_ndim=1)
    _check_finite(z, "logits")
    ax = _norm_axis(axis, z.ndim)
    with np.errstate(over="ignore"):  # z - m below -1.8e308 is -inf, whose exp is the 0 it should be
        w = np.exp(z - z.max(axis=ax, keepdims=True))
    return w / w.sum(axis=ax, keepdims=True)


# ---------------------------------------------------------------- losses of a target


def nll_from_logits(logits, target) -> np.ndarray:
    """m - z_y + ln sum_j exp(z_j - m): logits [..., K], target int [...] -> loss [...] in nats."""
    z = _as_float_array(logits, "logits", check_nan=False)  # nan and inf are checked chunk by chunk in _lse_rows
    _check_nonempty(z, "logits", min_ndim=1)
    y = _as_int_targets(target, "target")
    if y.shape != z.shape[:-1]:
        raise ValueError(f"target must have shape {z.shape[:-1]} (logits without the class axis), got {y.shape}")
    _check_target_range(y, z.shape[-1], "target")
    return _nll_rows(z, y)[()]


def _nll_rows(z: np.ndarray, y: np.ndarray) -> np.ndarray:
    """lse(z) - z_y for validated logits [..., K] and in-range int targets [...] -> [...] in z's dtype.

    The target logit is an index lookup (no one-hot, no log-softmax array); the loss
    is (shift - z_y) + rest in float64 (see _lse_parts), rounded once to z's dtype.
    It is never below 0: lse(z) >= max z >= z_y, so a negative value (a confident
    float32 row, whose unshifted exp sum is a few eps off) is rounding, and 0 is nearer.
    """
    z2 = _rows_view(z)
    rows = np.arange(z2.shape[0])
    z_y = z2[rows, y.reshape(-1)].astype(np.float64)
    shift, rest = _lse_parts(z2, z)
    with np.errstate(over="ignore"):  # a loss above 1.8e308 is inf, as PyTorch gives
        return np.maximum((shift - z_y) + rest, 0.0).astype(z.dtype).reshape(y.shape)


def nll_from_probs(probs, target) -> np.ndarray:
    """-ln p_y: probs [..., K], target int [...] -> loss [...] in nats; inf where p_y is exactly 0."""
    p = _as_float_array(probs, "probs")
    _check_nonempty(p, "probs", min_ndim=1)
    _check_distribution(p, "probs")
    y = _as_int_targets(target, "target")
    if y.shape != p.shape[:-1]:
        raise ValueError(f"target must have shape {p.shape[:-1]} (probs without the class axis), got {y.shape}")
    _check_target_range(y, p.shape[-1], "target")
    p_y = np.take_along_axis(p, y[..., None], axis=-1)[..., 0]
    with np.errstate(divide="ignore"):  # a row summing to 1 within rounding may hold a p_y just above 1: loss 0, not < 0
        return np.maximum(0.0 - np.log(p_y), 0.0)  # 0.0 - x: p_y = 1 gives 0.0, not -0.0


def neg_log_prob(p, unit: str = "nats"):
    """-log p elementwise for target probabilities p [...] in [0, 1] -> [...] in nats (or bits); inf where p is exactly 0."""
    _check_unit(unit)
    arr = _as_float_array(p, "p")
    _check_nonempty(arr, "p")
    _check_probabilities(arr, "p")
    with np.errstate(divide="ignore"):
        out = (0.0 - np.log(arr)) / _log_in(unit)  # 0.0 - x: p = 1 gives 0.0, not -0.0
    return out if out.ndim else float(out)


def reduce_losses(losses, mask=None, reduction: str = "mean", weights=None) -> np.ndarray | float:
    """Reduce per-target losses [...] (nats) over scored targets: mean, sum, none, or document_mean over [B, T].

    mean: sum of (weighted) scored losses / sum of their weights (the number of scored
    targets when unweighted); weights [...] (losses' shape) are finite and non-negative.
    document_mean: each document's (row's) mean over its scored targets, then the plain
    mean over documents. none: losses with unscored
    positions set to 0. Raises ValueError when nothing is scored.
    """
    if reduction not in REDUCTIONS:
        raise ValueError(f"reduction must be one of {REDUCTIONS}, got {reduction!r}")
    loss = _as_float_array(losses, "losses")
    _check_nonempty(loss, "losses")
    if np.isneginf(loss).any():
        raise ValueError(f"losses must not be -inf (got -inf at index {_first_index(np.atleast_1d(np.isneginf(loss)))}); "
                         "a loss is a negative log-probability: were log-probabilities passed instead?")
    if isinstance(mask, str):  # reduce_losses(losses, "sum"): the reduction given where the mask goes
        raise TypeError(f"mask must be booleans or 0/1, got the string {mask!r}; did you mean reduction={mask!r}?")
    scored = np.ones(loss.shape, bool) if mask is None else _check_mask(mask, loss.shape)
    w = np.ones(loss.shape) if weights is None else _as_float_array(weights, "weights")
    if w.shape != loss.shape:
        raise ValueError(f"weights must have shape {loss.shape}, got {w.shape}")
    _check_weights(w, "weights")
    counted = scored & (w != 0)  # a weight of 0 drops its loss, even an infinite one (0 * inf = 0)
    contrib = np.where(counted, w * np.where(counted, loss, 0.0), 0.0)
    if reduction == "none":
        return contrib
    if not scored.any():  # PyTorch returns nan (mean) or 0 (sum) here; an empty batch is a data bug worth a message
        raise ValueError(f"no target is scored (the mask excludes every position); a {reduction} over zero targets is undefined")
    if reduction == "sum":
        return float(contrib.sum())
    if reduction == "mean":
        denom = float(np.where(scored, w, 0.0).sum())
        if denom == 0:
            raise ValueError("the weights of the scored targets sum to 0; a weighted mean is undefined")
        return float(contrib.sum()) / denom
    # document_mean
    if loss.ndim != 2:
        raise ValueError(f"document_mean needs losses of shape [B, T] (one row per document), got {loss.shape}")
    if weights is not None:
        raise ValueError("document_mean does not take class weights; use reduction='mean' with weights")
    counts = scored.sum(axis=1)
    if (counts == 0).any():
        empty = np.flatnonzero(counts == 0).tolist()
        raise ValueError(f"documents {empty} have no scored target; a document mean needs N_i > 0 for every document")
    return float(np.mean(contrib.sum(axis=1) / counts))


def cross_entropy(logits, targets, *, mask=None, ignore_index=None, class_weights=None, reduction: str = "mean"):
    """Cross-entropy in nats of logits [..., K] against int targets [...] or soft targets [..., K].

    The class axis is the LAST one: PyTorch's F.cross_entropy takes [B, K, T] (classes at dim 1), this takes
    [B, T, K]; with K == T a tensor in PyTorch's layout would pass unnoticed and give another number.

    Integer targets score one class per position (the index lookup -log softmax(z)_y,
    no one-hot array); soft targets (floating point, logits' shape) are a distribution per row.
    reduction as in reduce_losses: mean or sum -> float, none -> [...] per position.
    mask (True = scored) and ignore_index drop positions; class_weights [K] weight each integer target by
    its class, and the mean then divides by the summed weights (PyTorch's rule).
    """
    z = _as_float_array(logits, "logits", check_nan=False)  # integer targets: nan and inf checked per chunk
    _check_nonempty(z, "logits", min_ndim=1)
    num_classes = z.shape[-1]
    t = _as_array(targets, "targets", "class indices or soft targets")
    soft = t.shape == z.shape and np.issubdtype(t.dtype, np.floating)
    if soft:
        _check_no_nan(z, "logits")
        _check_finite(z, "logits")
        log_q = log_softmax(z, axis=-1)
        ref = _as_float_array(t, "targets")
        _check_distribution(ref, "targets (soft)")
        if ignore_index is not None or class_weights is not None:
            raise ValueError("ignore_index and class_weights apply to integer targets only, got soft targets")
        # 0 ln 0 = 0: a class the target gives no mass never multiplies its log (-inf there would warn, then nan)
        per_pos = -np.sum(ref * np.where(ref > 0, log_q, 0.0), axis=-1)
        weights = None
    else:
        y = _as_int_targets(t, "targets")
        if y.shape != z.shape[:-1]:
            soft_hint = " (soft targets must be floating point: these are integers)" if y.shape == z.shape else ""
            raise ValueError(
                f"targets must have shape {z.shape[:-1]} (int class indices) or {z.shape} (soft targets), "
                f"got {y.shape}{soft_hint}; the class axis of logits is the last one (PyTorch's is dim 1)"
            )
        if ignore_index is not None and (isinstance(ignore_index, bool) or not (
                isinstance(ignore_index, Integral) or isinstance(ignore_index, float) and ignore_index.is_integer())):
            raise TypeError(f"ignore_index must be an integer class index (PyTorch's default is -100), got {ignore_index!r}")
        ignored = np.zeros(y.shape, bool) if ignore_index is None else (y == int(ignore_index))
        if ignored.all() and reduction in REDUCTIONS and reduction != "none":  # reduce_losses would blame a mask
            raise ValueError(f"every target equals ignore_index={int(ignore_index)}, so no target is scored; a "
                             f"{reduction} over zero targets is undefined")
        mask = ~ignored if mask is None else (_check_mask(mask, y.shape) & ~ignored)
        _check_target_range(y, num_classes, "targets", skip=~mask)  # a masked target may be padding, e.g. -100
        safe_y = np.where(mask, y, 0)
        per_pos = _nll_rows(z, safe_y)  # -log softmax(z)_y, chunked: no [..., K] array is allocated
        weights = None
        if class_weights is not None:
            cw = _as_float_array(class_weights, "class_weights")
            if cw.shape != (num_classes,):
                raise ValueError(f"class_weights must have shape ({num_classes},), one per class, got {cw.shape}")
            _check_weights(cw, "class_weights")
            weights = cw[safe_y]
    return reduce_losses(per_pos, mask=mask, reduction=reduction, weights=weights)


def softmax_cross_entropy_grad(logits, target) -> np.ndarray:
    """d loss / d logits = softmax(z) - onehot(y): logits [..., K], target int [...] -> [..., K] (per position)."""
    z = _as_float_array(logits, "logits")
    _check_nonempty(z, "logits", min_ndim=1)
    t = _as_array(target, "target", "integer class indices")
    if t.shape == z.shape and t.shape != z.shape[:-1] and np.issubdtype(t.dtype, np.floating):
        raise ValueError(f"target must be integer class indices of shape {z.shape[:-1]}; soft targets {t.shape} are "
                         "not supported here (their gradient is softmax(z) - target)")
    y = _as_int_targets(t, "target")
    if y.shape != z.shape[:-1]:
        raise ValueError(f"target must have shape {z.shape[:-1]} (logits without the class axis), got {y.shape}")
    _check_target_range(y, z.shape[-1], "target")
    grad = softmax(z, axis=-1)
    np.put_along_axis(grad, y[..., None], np.take_along_axis(grad, y[..., None], axis=-1) - 1.0, axis=-1)
    return grad


# ---------------------------------------------------------------- distributions


def _log_in(unit: str) -> float:
    """Divisor turning nats into the requested unit."""
    _check_unit(unit)
    return 1.0 if unit == "nats" else math.log(2.0)


def entropy(p, axis: int = -1, unit: str = "nats") -> np.ndarray:
    """H(p) = -sum_k p_k ln p_k along axis: [..., K] -> [...]; 0 ln 0 = 0."""
    p = _as_float_array(p, "p")
    _check_nonempty(p, "p", min_ndim=1)
    ax = _norm_axis(axis, p.ndim, has_unit=True)
    _check_distribution(p, "p", axis=ax)
    terms = np.where(p > 0, p * np.log(np.where(p > 0, p, 1.0)), 0.0)
    # 0.0 - x, not -x: a certain outcome prints 0, not -0; p may exceed 1 by PROB_ATOL, which would give -5e-7
    return np.maximum(0.0 - terms.sum(axis=ax), 0.0) / _log_in(unit)


def _distribution_pair(p, q, axis: int) -> tuple[np.ndarray, np.ndarray, int]:
    """Validate a reference p and a prediction q [..., K] of one shape, each a distribution along axis; return (p, q, axis)."""
    p = _as_float_array(p, "p")
    q = _as_float_array(q, "q")
    _check_nonempty(p, "p", min_ndim=1)
    if p.shape != q.shape:
        raise ValueError(f"p and q must have the same shape, got {p.shape} and {q.shape}")
    ax = _norm_axis(axis, p.ndim, has_unit=True)
    _check_distribution(p, "p", axis=ax)
    _check_distribution(q, "q", axis=ax)
    return p, q, ax


def cross_entropy_dist(p, q, axis: int = -1, unit: str = "nats") -> np.ndarray:
    """H(p, q) = -sum_k p_k ln q_k, p the reference, q the prediction: [..., K] -> [...]; inf off q's support."""
    p, q, ax = _distribution_pair(p, q, axis)
    pos = p > 0
    with np.errstate(divide="ignore"):
        terms = np.where(pos, -p * np.log(np.where(pos, q, 1.0)), 0.0)  # q = 0 under p > 0 gives +inf
    return np.maximum(terms.sum(axis=ax), 0.0) / _log_in(unit)  # >= 0, as in entropy


def kl_divergence(p, q, axis: int = -1, unit: str = "nats") -> np.ndarray:
    """KL(p || q) = sum_k p_k ln(p_k / q_k), weights from p: [..., K] -> [...]; 0 where p_k = 0, inf where q_k = 0 < p_k."""
    p, q, ax = _distribution_pair(p, q, axis)
    pos = p > 0
    with np.errstate(divide="ignore"):
        terms = np.where(pos, p * (np.log(np.where(pos, p, 1.0)) - np.log(np.where(pos, q, 1.0))), 0.0)
    # rounding can leave -1e-17 for p == q; KL is non-negative by Gibbs' inequality
    return np.maximum(terms.sum(axis=ax), 0.0) / _log_in(unit)


# ---------------------------------------------------------------- units and perplexity


def nats_to_bits(value):
    """Convert an information amount from nats to bits (divide by ln 2): [...] -> [...]."""
    v = _as_float_array(value, "value")
    _check_nonempty(v, "value")
    return v / math.log(2.0) if v.ndim else float(v) / math.log(2.0)


def bits_to_nats(value):
    """Convert an information amount from bits to nats (multiply by ln 2): [...] -> [...]."""
    v = _as_float_array(value, "value")
    _check_nonempty(v, "value")
    return v * math.log(2.0) if v.ndim else float(v) * math.log(2.0)


def perplexity(mean_loss, unit: str = "nats") -> float:
    """PPL = e^L for a mean loss in nats, 2^L for a mean loss in bits; the base must match the unit."""
    _check_unit(unit)
    loss = _as_float_array(mean_loss, "mean_loss")
    if loss.ndim != 0:
        raise ValueError(f"mean_loss must be a single number (an already averaged loss), got shape {loss.shape}")
    if loss < 0:
        raise ValueError(f"mean_loss must be >= 0 (a negative log-probability of events), got {float(loss)}")
    with np.errstate(over="ignore"):  # a summed loss passed by mistake overflows to inf, not a warning on stderr
        return float(np.exp(np.float64(loss))) if unit == "nats" else float(np.exp2(np.float64(loss)))


def perplexity_from_probs(target_probs, mask=None) -> float:
    """Geometric mean of 1/p over scored target probabilities [...]: exp(-(1/M) sum ln p); inf if some p is 0.

    Every entry is the probability the model gave one target (e.g. [B, T]), not a distribution over the
    vocabulary: pick the targets' entries first (probs[..., y]).
    """
    p = _as_float_array(target_probs, "target_probs")
    _check_nonempty(p, "target_probs")
    _check_probabilities(p, "target_probs")
    with np.errstate(divide="ignore"):
        losses = -np.log(p)
    return float(np.exp(reduce_losses(losses, mask=mask, reduction="mean")))


# ---------------------------------------------------------------- probability basics


def bayes_posterior(prior, likelihood) -> np.ndarray:
    """P(h | e) = P(e | h) P(h) / sum_h' P(e | h') P(h'): prior [H] (sums to 1), likelihood [H] -> posterior [H]."""
    prior = _as_float_array(prior, "prior")
    lik = _as_float_array(likelihood, "likelihood")
    _check_nonempty(prior, "prior", min_ndim=1)
    if prior.ndim != 1 or lik.shape != prior.shape:
        raise ValueError(f"prior and likelihood must both have shape [H], got {prior.shape} and {lik.shape}")
    _check_distribution(prior, "prior")
    _check_probabilities(lik, "likelihood")
    joint = prior * lik
    evidence = joint.sum()
    if ((joint == 0) & (prior > 0) & (lik > 0)).any() or 0 < evidence < np.finfo(joint.dtype).tiny:
        # a product underflowed (1e-170 * 1e-170, 0.5 * 5e-324): in logs, scaled by the largest, nothing does
        with np.errstate(divide="ignore"):
            log_joint = np.log(prior) + np.log(lik)
        weights = np.exp(log_joint - log_joint.max())
        return weights / weights.sum()
    if evidence == 0:
        raise ValueError("the evidence has probability 0 under every hypothesis; P(h | e) is undefined")
    return joint / evidence


def conditional_from_joint(joint, given_axis: int = 0) -> np.ndarray:
    """p(other | given) from a joint table [X, Y] -> [X, Y]: each slice at a fixed value of given_axis, renormalised.

    given_axis=0 gives p(y | x): every row sums to 1; given_axis=1 gives p(x | y): every column sums to 1.
    """
    j = _as_float_array(joint, "joint")
    if j.ndim != 2:
        raise ValueError(f"joint must be a 2-D table [X, Y], got shape {j.shape}")
    _check_nonempty(j, "joint")
    ax = _norm_axis(given_axis, 2, "given_axis")
    _check_distribution_values(j, "joint")  # first: its message gives the cell's (row, column)
    _check_distribution(j.ravel(), "joint (all cells)")
    marginal = j.sum(axis=1 - ax, keepdims=True)
    if (marginal == 0).any():
        zero = np.flatnonzero(marginal.ravel() == 0).tolist()
        raise ValueError(f"conditioning values {zero} have probability 0; p(. | given) is undefined there")
    return j / marginal


def _seen_values(values, probs) -> tuple[np.ndarray, np.ndarray]:
    """The values [M] and probabilities [M] of a PMF's outcomes of positive probability, validated (0 * inf = 0:
    a value of probability 0 adds nothing, even an infinite one)."""
    x = _as_float_array(values, "values")
    p = _as_float_array(probs, "probs")
    _check_nonempty(p, "probs", min_ndim=1)
    if p.ndim != 1 or x.shape != p.shape:
        raise ValueError(f"values and probs must both have shape [N], got {x.shape} and {p.shape}")
    _check_distribution(p, "probs")
    seen = p > 0
    return x[seen], p[seen]


def _mean(x: np.ndarray, p: np.ndarray) -> float:
    """sum p x over outcomes of positive probability; ValueError where it is inf - inf."""
    if np.isposinf(x).any() and np.isneginf(x).any():
        raise ValueError("values hold both +inf and -inf with positive probability; E[X] = inf - inf is undefined")
    return float(np.sum(p * x))


def expectation(values, probs) -> float:
    """E_p[X] = sum_x p(x) x: values [N], probs [N] (a PMF)."""
    return _mean(*_seen_values(values, probs))


def variance(values, probs) -> float:
    """Var(X) = E[(X - mu)^2]: values [N], probs [N] (a PMF); in squared units of X; needs a finite mean."""
    x, p = _seen_values(values, probs)
    mu = _mean(x, p)
    if not math.isfinite(mu):
        raise ValueError(f"E[X] = {mu}: a value with positive probability is infinite, so Var(X) is undefined")
    with np.errstate(over="ignore"):  # a variance above 1.8e308 is inf in float64
        return float(np.sum(p * (x - mu) ** 2))


def empirical_distribution(samples, support) -> np.ndarray:
    """p_hat(x) = (1/n) #{i: X_i = x} for each x in support [S] -> [S]; unseen values get exactly 0."""
    for name, given in (("samples", samples), ("support", support)):
        if given is None or isinstance(given, Number) or getattr(given, "ndim", 1) == 0 \
                or not hasattr(given, "__iter__"):  # a number, or a 0-d array or tensor
            raise TypeError(f"{name} must be a sequence of values (numbers or strings), got {type(given).__name__}")
    if isinstance(support, (set, frozenset)):  # its order changes from run to run: so would the result's
        raise TypeError("support must be ordered (a list, tuple, range or array), got a set; e.g. sorted(support)")
    if hasattr(support, "tolist"):  # a numpy array or torch tensor: its numbers (tensors hash by identity)
        support = support.tolist()
    float32 = str(getattr(samples, "dtype", "")) in ("torch.float32", "float32")
    if hasattr(samples, "tolist") and not isinstance(samples, np.ndarray):  # a torch tensor
        samples = samples.tolist()
    support = list(support)  # a list, a range, dict keys, a Counter's keys
    if isinstance(samples, (list, tuple, np.ndarray)):
        samples = np.asarray(samples).ravel().tolist()  # nested lists and arrays: every element is a sample
    else:
        samples = list(samples)  # a string's characters, a generator, dict keys
    try:
        set(support), set(samples)
    except TypeError:
        raise TypeError("samples and support must hold hashable values (numbers or strings), got a list or array "
                        "inside them") from None
    if not samples:
        raise ValueError("samples is empty; an empirical distribution needs at least one observation")
    if len(set(support)) != len(support):
        raise ValueError("support must list each value once")
    index = {v: i for i, v in enumerate(support)}
    unknown = [s for s in samples if s not in index]
    if unknown:
        hint = "" if not float32 else (" (samples were a float32 tensor, whose values are float32 roundings: 0.1 "
                                       "reads as 0.10000000149011612; count integer ids, or use float64)")
        raise ValueError(f"samples contain values outside support: {unknown[:5]}{hint}")
    counts = np.bincount([index[s] for s in samples], minlength=len(support))
    return counts / len(samples)


# ---------------------------------------------------------------- Bernoulli, sigmoid, BCE


def _check_counts(k, n) -> tuple[int, int]:
    """Validate k successes out of n trials."""
    counts = []
    for name, v in (("k", k), ("n", n)):
        if hasattr(v, "item") and getattr(v, "ndim", None) == 0:  # a 0-d numpy array or torch tensor: y.sum()
            v = v.item()
        if isinstance(v, float) and v.is_integer():  # a count from a float 0/1 array: y.sum() -> 3.0
            v = int(v)
        if isinstance(v, bool) or not isinstance(v, Integral):
            what = "the number of ones (successes), e.g. int(y.sum())" if name == "k" else "the number of trials"
            raise TypeError(f"{name} must be an integer count, {what}; got {v!r}")
        counts.append(v)
    k, n = counts
    if n <= 0:
        raise ValueError(f"n must be a positive number of trials, got {n}")
    if not 0 <= k <= n:
        raise ValueError(f"k must satisfy 0 <= k <= n={n}, got {k}")
    return int(k), int(n)


def _check_theta(theta) -> np.ndarray:
    """Validate a Bernoulli parameter (or an array of them) in [0, 1]."""
    th = _as_float_array(theta, "theta")
    _check_nonempty(th, "theta")
    _check_probabilities(th, "theta")
    return th


def bernoulli_likelihood(theta, k: int, n: int):
    """Lik(theta) = theta^k (1 - theta)^(n - k) for an ordered record with k ones in n trials (0^0 = 1).

    theta: a number or an array [...] of candidate values -> a float or an array [...].
    """
    k, n = _check_counts(k, n)
    th = _check_theta(theta)
    out = np.power(th, k) * np.power(1.0 - th, n - k)
    return out if out.ndim else float(out)


def bernoulli_nll(theta, k: int, n: int):
    """J(theta) = -k ln theta - (n - k) ln(1 - theta) in nats (0 ln 0 = 0; inf at an impossible endpoint).

    theta: a number or an array [...] of candidate values -> a float or an array [...].
    """
    k, n = _check_counts(k, n)
    th = _check_theta(theta)
    with np.errstate(divide="ignore"):  # ln 0 = -inf is the impossible endpoint; a zero count skips its term
        a = -k * np.log(th) if k > 0 else np.zeros_like(th)
        b = -(n - k) * np.log1p(-th) if n - k > 0 else np.zeros_like(th)
    out = a + b
    return out if out.ndim else float(out)


def bernoulli_mle(k: int, n: int) -> float:
    """theta_hat = k / n on the closed interval [0, 1]; k = 0 and k = n give the endpoints 0 and 1."""
    k, n = _check_counts(k, n)
    return k / n


def sigmoid(z):
    """sigma(z) = 1 / (1 + e^-z) elementwise: logits [...] -> probabilities [...], without overflow for large |z|."""
    x = _as_float_array(z, "z")
    _check_nonempty(x, "z")
    out = np.where(x >= 0, 1.0 / (1.0 + np.exp(-np.abs(x))), np.exp(-np.abs(x)) / (1.0 + np.exp(-np.abs(x))))
    return out.astype(x.dtype) if out.ndim else float(out)


def bce_with_logits(z, y, pos_weight=None, reduction: str = "none"):
    """Binary cross-entropy from logits in nats: max(z,0) - y z + ln(1 + e^-|z|), positives weighted by pos_weight.

    z and y broadcast together (a mean or sum refuses shapes like [N, 1] and [N], which make a loss per pair);
    y in [0, 1] (a soft label is allowed); pos_weight broadcasts to their shape. With weight w
    the loss is w y softplus(-z) + (1 - y) softplus(z). reduction: none, mean or sum.
    """
    x = _as_float_array(z, "z")
    t = _as_float_array(y, "y")
    _check_nonempty(x, "z")
    _check_nonempty(t, "y")
    _check_finite(x, "z")  # at z = +-inf the stable form is inf - inf
    _check_probabilities(t, "y")
    try:
        shape = np.broadcast_shapes(x.shape, t.shape)
    except ValueError:
        raise ValueError(f"z and y must have the same shape (or one broadcast to the other's), got {x.shape} and "
                         f"{t.shape}") from None
    if reduction not in ("none", "mean", "sum"):
        raise ValueError(f"reduction must be 'none', 'mean' or 'sum', got {reduction!r}")
    if reduction != "none" and shape not in (x.shape, t.shape):
        # [N, 1] against [N]: a loss for every (z, y) pair, which a mean or sum would hide in one number
        raise ValueError(f"z {x.shape} and y {t.shape} broadcast to {shape}, a loss for every pair of them, "
                         f"before the {reduction}: give them the same shape (e.g. z[:, 0] or y[:, None]), or "
                         "reduction='none' to keep the pairs")
    x, t = np.broadcast_arrays(x, t)
    softplus_neg = np.maximum(-x, 0) + np.log1p(np.exp(-np.abs(x)))  # ln(1 + e^-z)
    if pos_weight is None:
        loss = np.maximum(x, 0) - t * x + np.log1p(np.exp(-np.abs(x)))
    else:
        w = _as_float_array(pos_weight, "pos_weight")
        _check_nonempty(w, "pos_weight")
        _check_finite(w, "pos_weight")
        if (w <= 0).any():
            raise ValueError(f"pos_weight must be positive, got {w}")
        try:
            grown = np.broadcast_shapes(w.shape, x.shape) != x.shape
        except ValueError:
            grown = True
        if grown:  # PyTorch refuses it too: the weights would add losses, not weigh them
            raise ValueError(f"pos_weight must broadcast to the shape of z and y {x.shape}, got shape {w.shape}")
        loss = w * t * softplus_neg + (1 - t) * (softplus_neg + x)
    if reduction == "none":
        return loss if loss.ndim else float(loss)
    return float(loss.mean()) if reduction == "mean" else float(loss.sum())


def weighted_bce_optimum(p, w):
    """q* = w p / (w p + 1 - p): the output minimising E[weighted BCE] when P(y=1|x) = p and positives weigh w.

    p in [0, 1] and w > 0 (finite) are numbers or arrays that broadcast -> a float or their broadcast shape.
    """
    pr = _as_float_array(p, "p")
    _check_nonempty(pr, "p")
    _check_probabilities(pr, "p")
    wt = _as_float_array(w, "w")
    _check_nonempty(wt, "w")
    _check_finite(wt, "w")
    if (wt <= 0).any():
        raise ValueError(f"w must be a positive weight, got {wt}")
    try:
        np.broadcast_shapes(pr.shape, wt.shape)
    except ValueError:
        raise ValueError(f"p and w must broadcast together, got shapes {pr.shape} and {wt.shape}") from None
    out = wt * pr / (wt * pr + (1.0 - pr))  # not w p + 1 - p: for w = 1e-17, p = 1 that rounds to 0
    return out if out.ndim else float(out)


def gaussian_nll(y, mean, sigma):
    """-ln N(y; mean, sigma^2) = ln(2 pi sigma^2)/2 + (y - mean)^2 / (2 sigma^2), in nats per observation.

    y, mean and sigma (> 0) are finite and broadcast together; computed as ln sigma + ln(2 pi)/2
    + ((y - mean) / sigma)^2 / 2, so that sigma^2 cannot overflow or underflow (sigma = 1e-170).
    """
    yy = _as_float_array(y, "y")
    mu = _as_float_array(mean, "mean")
    s = _as_float_array(sigma, "sigma")
    for arr, name in ((yy, "y"), (mu, "mean"), (s, "sigma")):
        _check_nonempty(arr, name)
        _check_finite(arr, name)
    if (s <= 0).any():
        raise ValueError(f"sigma must be a positive standard deviation, got {s}")
    try:
        yy, mu, s = np.broadcast_arrays(yy, mu, s)
    except ValueError:
        raise ValueError(f"y, mean and sigma must broadcast, got {yy.shape}, {mu.shape}, {s.shape}") from None
    with np.errstate(over="ignore"):  # a residual beyond 1e154 sigmas: the loss is above 1.8e308, inf (no warning)
        r = (yy - mu) / s
        out = np.log(s) + 0.5 * np.log(2 * np.pi) + 0.5 * r * r
    return out if out.ndim else float(out)


def sequence_log_prob(cond_probs) -> float:
    """ln p(x_1..x_T) = sum_t ln p(x_t | x_<t) from the T conditional probabilities [T]; -inf if one is 0."""
    p = _as_float_array(cond_probs, "cond_probs")
    _check_nonempty(p, "cond_probs", min_ndim=1)
    if p.ndim != 1:
        raise ValueError(f"cond_probs must be one probability per position, shape [T], got {p.shape}")
    _check_probabilities(p, "cond_probs")
    with np.errstate(divide="ignore"):
        return float(np.sum(np.log(p)))
