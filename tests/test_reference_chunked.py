"""The chunked cross-entropy path of the reference module: same numbers as unchunked, PyTorch float64, bad input.

probability_practice computes ln-sum-exp and the integer-target losses row chunk by
row chunk with one preallocated buffer (see _lse_rows). These tests force small
chunks so that every size here leaves a remainder chunk, and compare against an
unchunked numpy formula written out below and against PyTorch in float64.
"""

from __future__ import annotations

import math
import tracemalloc

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import probability_practice as pp

pytestmark = pytest.mark.filterwarnings("error::RuntimeWarning")
EPS32 = float(np.finfo(np.float32).eps)
# (rows, classes, rows per chunk): no row count is a multiple of its chunk
ODD_SIZES = [(1, 7, 4), (7, 3, 2), (37, 1001, 4), (5, 50257, 2), (129, 13, 16)]


def logits(n: int, k: int, dtype, seed: int = 0, scale: float = 4.0) -> np.ndarray:
    """Random logits [n, k] with a spread like a trained model's, plus an offset so the shift matters."""
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((n, k)) * scale + 20.0).astype(dtype)


def unchunked_lse(z: np.ndarray) -> np.ndarray:
    """The textbook formula over the whole array at once, in z's dtype: m + ln sum exp(z - m)."""
    m = z.max(axis=-1, keepdims=True)
    return (m + np.log(np.exp(z - m).sum(axis=-1, keepdims=True)))[..., 0]


def torch_nll(z: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Per-row cross-entropy by PyTorch in float64 (the independent path)."""
    zt = torch.as_tensor(z.astype(np.float64)).reshape(-1, z.shape[-1])
    out = F.cross_entropy(zt, torch.as_tensor(y).reshape(-1), reduction="none")
    return out.numpy().reshape(y.shape)


@pytest.mark.parametrize("n, k, rows", ODD_SIZES)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_chunked_lse_equals_unchunked(n, k, rows, dtype):
    z = logits(n, k, dtype)
    chunked = pp._lse_rows(z, z, chunk_rows=rows)
    one_chunk = pp._lse_rows(z, z, chunk_rows=n)
    tol = 4 * EPS32 if dtype == np.float32 else 1e-14
    np.testing.assert_allclose(chunked, one_chunk, rtol=tol, atol=0)
    np.testing.assert_allclose(chunked, unchunked_lse(z), rtol=tol, atol=0)
    expected = torch.logsumexp(torch.as_tensor(z.astype(np.float64)), dim=-1).numpy()
    np.testing.assert_allclose(chunked, expected, rtol=tol, atol=0)


@pytest.mark.parametrize("n, k, rows", ODD_SIZES)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_public_losses_with_small_chunks_match_torch_float64(monkeypatch, n, k, rows, dtype):
    z = logits(n, k, dtype, seed=n + k)
    y = np.random.default_rng(k).integers(0, k, n)
    monkeypatch.setattr(pp, "CHUNK_BYTES", rows * k * z.itemsize)
    expected = torch_nll(z, y)
    # float32 logits: the sum is float32 (pairwise, error ~ eps log K) and the loss is rounded to float32 once
    rtol, atol = (2e-6, 2e-6) if dtype == np.float32 else (1e-12, 1e-12)
    got = pp.nll_from_logits(z, y)
    assert got.dtype == dtype and got.shape == (n,)
    np.testing.assert_allclose(got, expected, rtol=rtol, atol=atol)
    assert pp.cross_entropy(z, y) == pytest.approx(expected.mean(), rel=rtol, abs=atol)
    assert pp.cross_entropy(z, y, reduction="sum") == pytest.approx(expected.sum(), rel=rtol, abs=atol * n)
    np.testing.assert_allclose(pp.logsumexp(z), unchunked_lse(z), rtol=4 * EPS32 if dtype == np.float32 else 1e-14)


def test_batch_time_classes_and_non_contiguous_input(monkeypatch):
    """[B, T, K] logits, and a transposed (non-contiguous) copy of them, give PyTorch's numbers."""
    monkeypatch.setattr(pp, "CHUNK_BYTES", 3 * 11 * 8)  # 3 rows per chunk, 2 x 5 = 10 rows
    z = logits(10, 11, np.float64, seed=3).reshape(2, 5, 11)
    y = np.random.default_rng(4).integers(0, 11, (2, 5))
    expected = torch_nll(z, y)
    np.testing.assert_allclose(pp.nll_from_logits(z, y), expected, rtol=1e-12)
    zt = np.ascontiguousarray(z.transpose(1, 0, 2)).transpose(1, 0, 2)  # same values, strided memory
    assert not zt.flags.c_contiguous
    np.testing.assert_allclose(pp.nll_from_logits(zt, y), expected, rtol=1e-12)
    y_ignored = np.where(y % 3 == 0, -100, y)
    keep = y_ignored != -100
    assert pp.cross_entropy(z, y_ignored, ignore_index=-100) == pytest.approx(expected[keep].mean(), rel=1e-12)


def test_one_row_gives_a_scalar_and_extreme_rows_stay_finite(monkeypatch):
    monkeypatch.setattr(pp, "CHUNK_BYTES", 8)
    assert pp.nll_from_logits(np.array([0.0, -1000.0]), 1) == pytest.approx(1000.0, rel=1e-12)
    z = np.array([[1000.0, 999.0, -1000.0], [-1000.0, -1001.0, -1002.0], [0.0, 0.0, 0.0]])
    np.testing.assert_allclose(pp.nll_from_logits(z, [1, 2, 0]), torch_nll(z, np.array([1, 2, 0])), rtol=1e-12)


def test_float32_rows_that_need_the_shift_share_a_chunk_with_rows_that_do_not(monkeypatch):
    """exp(z) overflows float32 above ~88.7 and is tiny when every logit is far below 0: those chunks take the shift."""
    monkeypatch.setattr(pp, "CHUNK_BYTES", 2 * 1001 * 4)
    z = logits(9, 1001, np.float32, seed=7)
    z[1] += 80.0   # max around 120: exp(z) = inf in float32
    z[4] -= 75.0   # max around -37: sum exp(z) ~ 1e-16, underflow would cost accuracy
    z[8] = 88.0    # a whole row at the edge of float32's exp
    y = np.random.default_rng(8).integers(0, 1001, 9)
    np.testing.assert_allclose(pp.nll_from_logits(z, y), torch_nll(z, y), rtol=2e-6, atol=2e-6)
    np.testing.assert_allclose(pp.logsumexp(z), unchunked_lse(z), rtol=4 * EPS32)


def test_finite_logits_whose_row_sum_overflows_are_accepted(monkeypatch):
    """The check pass sums each row of z; a sum past float32's range (3.4e38) is an overflow, not a non-finite logit."""
    monkeypatch.setattr(pp, "CHUNK_BYTES", 2 * 1001 * 4)
    z = logits(5, 1001, np.float32, seed=9)
    z[2] = np.float32(3e38)            # every logit finite, the row's sum is not
    z[2, ::2] = np.float32(2.9e38)     # and the row maximum is not the only value near it
    with np.errstate(over="ignore"):
        assert np.isfinite(z).all() and not np.isfinite(z[2].sum(dtype=np.float32))
    y = np.array([0, 1, 1, 2, 3])
    expected = torch_nll(z, y)
    np.testing.assert_allclose(pp.nll_from_logits(z, y), expected, rtol=2e-6, atol=2e-6)
    np.testing.assert_allclose(pp.logsumexp(z), unchunked_lse(z), rtol=4 * EPS32)


@pytest.mark.parametrize("where, value, words", [
    ((36, 1000), math.nan, ["nan", "(36, 1000)"]),   # in the remainder chunk
    ((9, 0), math.inf, ["finite", "(9, 0)"]),
    ((20, 500), -math.inf, ["finite", "(20, 500)"]),  # -inf leaves every row maximum finite
])
def test_non_finite_logit_in_a_later_chunk_is_named(monkeypatch, where, value, words):
    monkeypatch.setattr(pp, "CHUNK_BYTES", 4 * 1001 * 4)
    z = logits(37, 1001, np.float32)
    z[where] = value
    y = np.zeros(37, dtype=np.int64)
    for call in (lambda: pp.nll_from_logits(z, y), lambda: pp.cross_entropy(z, y), lambda: pp.logsumexp(z)):
        with pytest.raises(ValueError) as info:
            call()
        message = str(info.value)
        assert "logits" in message and all(w in message for w in words), message


def test_nan_is_reported_before_an_earlier_inf(monkeypatch):
    """As in the unchunked checks, nan is named first even when an inf sits in an earlier chunk."""
    monkeypatch.setattr(pp, "CHUNK_BYTES", 2 * 5 * 8)
    z = logits(9, 5, np.float64)
    z[0, 1], z[7, 2] = math.inf, math.nan
    with pytest.raises(ValueError, match=r"nan at index \(7, 2\)"):
        pp.nll_from_logits(z, np.zeros(9, dtype=np.int64))


def test_extra_memory_is_a_small_fraction_of_the_logits():
    """Default chunks at a vocabulary-sized K: peak allocation during the loss <= 10 % of the logits."""
    z = logits(64, 50257, np.float32, scale=2.0)
    y = np.random.default_rng(5).integers(0, 50257, 64)
    tracemalloc.start()
    try:
        pp.cross_entropy(z, y)
        pp.nll_from_logits(z, y)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak <= 0.10 * z.nbytes, f"peak extra memory {peak} bytes for {z.nbytes} bytes of logits"
