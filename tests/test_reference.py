"""The numpy reference path: properties (hypothesis), PyTorch float64 agreement, bad input, float edges.

Expected numbers come from PyTorch (float64), from exact identities, or from
data/part-ii/arithmetic.json, never from probability_practice itself.
"""

from __future__ import annotations

import math
import re
from fractions import Fraction
import warnings

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import probability_practice as pp
from arithmetic_data import load_cases

pytestmark = pytest.mark.filterwarnings("error::RuntimeWarning")  # numpy warnings would reach a notebook's stderr
CASES = load_cases()
PROPERTY = settings(max_examples=50, deadline=None, derandomize=True, database=None,
                    suppress_health_check=[HealthCheck.too_slow])
RTOL, ATOL = 1e-10, 1e-12


def T(x, dtype=torch.float64):
    """A tensor from a numpy array (float64 unless told)."""
    return torch.as_tensor(np.asarray(x), dtype=dtype)


def close(actual, expected, rtol=RTOL, atol=ATOL, what=""):
    """Assert two arrays agree elementwise (infinities must match), with a message saying by how much."""
    a = np.asarray(actual.detach().numpy() if isinstance(actual, torch.Tensor) else actual, dtype=np.float64)
    e = np.asarray(expected.detach().numpy() if isinstance(expected, torch.Tensor) else expected, dtype=np.float64)
    assert a.shape == e.shape, f"{what}: shape {a.shape} vs expected {e.shape}"
    assert not np.isnan(a).any(), f"{what}: nan in {a}"
    with np.errstate(invalid="ignore"):
        diff = np.where(a == e, 0.0, np.abs(a - e))
    ok = np.isclose(a, e, rtol=rtol, atol=atol)
    assert ok.all(), f"{what}: max abs difference {np.nanmax(diff):.3g} (got {a.ravel()[:4]}, expected {e.ravel()[:4]})"


# ------------------------------------------------------------------ strategies

SHAPE_BTK = st.tuples(st.integers(1, 3), st.integers(1, 4), st.integers(2, 6))
FINITE = st.floats(-30, 30, allow_nan=False, allow_infinity=False)


@st.composite
def logits_btk(draw, shape=SHAPE_BTK):
    """Random logits [B, T, K]."""
    return draw(hnp.arrays(np.float64, draw(shape), elements=FINITE))


@st.composite
def distributions(draw, k=None, rows=None, zeros=True):
    """Random probability rows [R, K] (some exact zeros if allowed); each row sums to 1."""
    k = k or draw(st.integers(2, 6))
    rows = rows or draw(st.integers(1, 4))
    weight = st.floats(0.01, 10) | st.just(0.0) if zeros else st.floats(0.01, 10)
    w = draw(hnp.arrays(np.float64, (rows, k), elements=weight))
    w[:, 0] += (w.sum(axis=1) == 0)  # every row needs some mass
    return w / w.sum(axis=1, keepdims=True)


@st.composite
def logits_and_targets(draw, ignore=False):
    """Logits [B, T, K] and int targets [B, T] in [0, K); with ignore, some targets are -100 (never all)."""
    z = draw(logits_btk())
    b, t, k = z.shape
    y = draw(hnp.arrays(np.int64, (b, t), elements=st.integers(0, k - 1)))
    if ignore:
        drop = draw(hnp.arrays(bool, (b, t)))
        drop.flat[draw(st.integers(0, b * t - 1))] = False
        y = np.where(drop, -100, y)
    return z, y


# ------------------------------------------------------------------ softmax family


@PROPERTY
@given(z=logits_btk(), c=st.floats(-1000, 1000))
def test_softmax_is_shift_invariant(z, c):
    close(pp.softmax(z + c), pp.softmax(z), rtol=1e-9, atol=0, what="softmax(z + c) vs softmax(z)")
    close(pp.log_softmax(z + c), pp.log_softmax(z), rtol=1e-9, atol=1e-9, what="log_softmax(z + c)")


@PROPERTY
@given(z=logits_btk())
def test_softmax_rows_sum_to_one_on_btk(z):
    p = pp.softmax(z)
    assert p.shape == z.shape and (p > 0).all()
    close(p.sum(axis=-1), np.ones(z.shape[:-1]), what="row sums of softmax over [B, T, K]")
    close(p, F.softmax(T(z), dim=-1), what="softmax vs F.softmax")
    close(pp.log_softmax(z), F.log_softmax(T(z), dim=-1), what="log_softmax vs F.log_softmax")
    close(pp.logsumexp(z), torch.logsumexp(T(z), dim=-1), what="logsumexp vs torch.logsumexp")


def test_softmax_normalises_each_row_independently():
    """Changing one position's logits changes no other position's distribution."""
    z = np.random.default_rng(0).normal(size=(2, 3, 4))
    z2 = z.copy()
    z2[1, 2] += [5.0, -3.0, 0.0, 1.0]
    p, p2 = pp.softmax(z), pp.softmax(z2)
    assert np.array_equal(p[0], p2[0]) and np.array_equal(p[1, :2], p2[1, :2])
    assert not np.allclose(p[1, 2], p2[1, 2])
    close(pp.softmax(z, axis=0), F.softmax(T(z), dim=0), atol=0, what="softmax along axis 0")


@PROPERTY
@given(z=logits_btk())
def test_loss_gradient_is_q_minus_y(z):
    b, t, k = z.shape
    y = np.arange(b * t).reshape(b, t) % k
    zt = T(z).requires_grad_(True)
    F.cross_entropy(zt.reshape(-1, k), torch.as_tensor(y).reshape(-1), reduction="sum").backward()
    close(pp.softmax_cross_entropy_grad(z, y), zt.grad, what="softmax(z) - onehot(y) vs autograd")


# ------------------------------------------------------------------ losses vs PyTorch


@PROPERTY
@given(data=logits_and_targets())
def test_nll_from_logits_matches_torch_cross_entropy(data):
    z, y = data
    k = z.shape[-1]
    expected = F.cross_entropy(T(z).reshape(-1, k), torch.as_tensor(y).reshape(-1), reduction="none").reshape(y.shape)
    close(pp.nll_from_logits(z, y), expected, what="nll_from_logits vs F.cross_entropy(reduction='none')")
    close(pp.nll_from_probs(pp.softmax(z), y), expected, rtol=1e-9, what="nll_from_probs(softmax) vs F.cross_entropy")


@PROPERTY
@given(data=logits_and_targets(), reduction=st.sampled_from(["mean", "sum", "none"]))
def test_cross_entropy_index_targets_match_torch(data, reduction):
    z, y = data
    got = pp.cross_entropy(z, y, reduction=reduction)
    expected = F.cross_entropy(T(z).movedim(-1, 1), torch.as_tensor(y), reduction=reduction)
    close(got, expected, what=f"cross_entropy index targets, reduction={reduction} ([B,K,T] for PyTorch)")


@PROPERTY
@given(data=logits_and_targets(ignore=True), reduction=st.sampled_from(["mean", "sum"]))
def test_cross_entropy_ignore_index_matches_torch(data, reduction):
    z, y = data
    got = pp.cross_entropy(z, y, ignore_index=-100, reduction=reduction)
    expected = F.cross_entropy(T(z).movedim(-1, 1), torch.as_tensor(y), ignore_index=-100, reduction=reduction)
    close(got, expected, what=f"cross_entropy with ignore_index, reduction={reduction}")
    # a mask expresses the same thing: mask 0 where the target is ignored
    masked = pp.cross_entropy(z, np.where(y < 0, 0, y), mask=y >= 0, reduction=reduction)
    close(masked, expected, what="mask instead of ignore_index")


@PROPERTY
@given(data=logits_and_targets(ignore=True), w=st.lists(st.floats(0.1, 5), min_size=6, max_size=6))
def test_cross_entropy_class_weights_match_torch(data, w):
    z, y = data
    k = z.shape[-1]
    weights = np.asarray(w[:k])
    got = pp.cross_entropy(z, y, ignore_index=-100, class_weights=weights, reduction="mean")
    expected = F.cross_entropy(T(z).movedim(-1, 1), torch.as_tensor(y), weight=T(weights), ignore_index=-100)
    close(got, expected, what="weighted cross_entropy mean")


def test_class_weighted_mean_divides_by_summed_weights():
    """PyTorch's weighted mean is sum(w_y l) / sum(w_y) over scored targets, not / (number of targets)."""
    z = np.array([[2.0, 0.0, -1.0], [0.5, 0.5, 0.0], [0.0, 3.0, 1.0], [1.0, 1.0, 1.0]])
    y = np.array([0, 2, 1, -100])
    w = np.array([1.0, 4.0, 0.5])
    losses = F.cross_entropy(T(z), torch.as_tensor(y), reduction="none", ignore_index=-100).numpy()
    scored = y >= 0
    w_y = w[np.where(scored, y, 0)] * scored
    by_weights = (w_y * losses).sum() / w_y.sum()
    by_count = (w_y * losses).sum() / scored.sum()
    torch_mean = F.cross_entropy(T(z), torch.as_tensor(y), weight=T(w), ignore_index=-100).item()
    assert math.isclose(torch_mean, by_weights, rel_tol=1e-12) and not math.isclose(torch_mean, by_count, rel_tol=1e-3)
    got = pp.cross_entropy(z, y, ignore_index=-100, class_weights=w)
    assert math.isclose(got, by_weights, rel_tol=1e-12), f"got {got}, expected sum(w l)/sum(w) = {by_weights}"


@PROPERTY
@given(z=logits_btk(), data=st.data())
def test_cross_entropy_soft_targets_match_torch(z, data):
    b, t, k = z.shape
    ref = data.draw(distributions(k=k, rows=b * t)).reshape(b, t, k)
    for reduction in ("mean", "sum", "none"):
        got = pp.cross_entropy(z, ref, reduction=reduction)
        expected = F.cross_entropy(T(z).movedim(-1, 1), T(ref).movedim(-1, 1), reduction=reduction)
        close(got, expected, what=f"soft-target cross_entropy, reduction={reduction}")


@PROPERTY
@given(data=logits_and_targets())
def test_one_hot_cross_entropy_equals_index_lookup(data):
    z, y = data
    k = z.shape[-1]
    one_hot = np.eye(k)[y]
    by_index = pp.cross_entropy(z, y, reduction="none")
    close(pp.cross_entropy(z, one_hot, reduction="none"), by_index, what="one-hot soft targets vs index targets")
    close(pp.cross_entropy_dist(one_hot, pp.softmax(z)), by_index, rtol=1e-9, what="H(onehot, q) vs -ln q_y")
    close(by_index, -np.take_along_axis(F.log_softmax(T(z), -1).numpy(), y[..., None], -1)[..., 0],
          what="index lookup of F.log_softmax")


@PROPERTY
@given(shape=SHAPE_BTK, seed=st.integers(0, 10_000))
def test_uniform_predictions_have_perplexity_k(shape, seed):
    b, t, k = shape
    y = np.random.default_rng(seed).integers(0, k, size=(b, t))
    mean_loss = pp.cross_entropy(np.zeros(shape), y)
    assert math.isclose(mean_loss, math.log(k), rel_tol=1e-12)
    assert math.isclose(pp.perplexity(mean_loss), k, rel_tol=1e-12)
    assert math.isclose(pp.perplexity_from_probs(np.full((b, t), 1.0 / k)), k, rel_tol=1e-12)
    assert math.isclose(pp.perplexity(pp.nats_to_bits(mean_loss), unit="bits"), k, rel_tol=1e-12)


# ------------------------------------------------------------------ entropy, cross-entropy, KL


@PROPERTY
@given(data=st.data())
def test_kl_is_non_negative_and_zero_on_itself(data):
    p = data.draw(distributions())
    q = data.draw(distributions(k=p.shape[1], rows=p.shape[0]))
    kl = pp.kl_divergence(p, q)
    assert (kl >= 0).all(), f"KL(p||q) negative: {kl}"
    assert (pp.kl_divergence(p, p) == 0).all()
    # inf exactly where p puts mass and q puts none
    off_support = ((p > 0) & (q == 0)).any(axis=1)
    assert np.array_equal(np.isinf(kl), off_support)


@PROPERTY
@given(data=st.data())
def test_cross_entropy_is_entropy_plus_kl(data):
    p = data.draw(distributions())
    q = data.draw(distributions(k=p.shape[1], rows=p.shape[0], zeros=False))
    close(pp.cross_entropy_dist(p, q), pp.entropy(p) + pp.kl_divergence(p, q), rtol=1e-10, atol=1e-12,
          what="H(p,q) vs H(p) + KL(p||q)")
    close(pp.entropy(p), -torch.special.xlogy(T(p), T(p)).sum(-1), what="entropy vs -xlogy(p, p)")
    close(pp.entropy(p, unit="bits"), pp.entropy(p) / math.log(2), what="entropy in bits")
    assert (pp.entropy(p) <= math.log(p.shape[1]) + 1e-12).all(), "H(p) exceeds ln K"


@PROPERTY
@given(data=st.data())
def test_kl_matches_torch_kl_div_batchmean(data):
    p = data.draw(distributions(zeros=False))
    q = data.draw(distributions(k=p.shape[1], rows=p.shape[0], zeros=False))
    b, k = p.shape
    # F.kl_div(input, target) = KL(target || exp(input)): the prediction goes first, as log-probabilities
    close(pp.kl_divergence(p, q).mean(), F.kl_div(T(np.log(q)), T(p), reduction="batchmean"), what="KL(p||q) batchmean")
    close(pp.kl_divergence(q, p).mean(), F.kl_div(T(np.log(p)), T(q), reduction="batchmean"), what="KL(q||p) swapped")
    # reduction='mean' divides by B*K, not by the batch size
    with pytest.warns(UserWarning, match="batchmean"):  # PyTorch itself warns that 'mean' is not the KL
        by_mean = F.kl_div(T(np.log(q)), T(p), reduction="mean")
    close(pp.kl_divergence(p, q).sum() / (b * k), by_mean, what="kl_div reduction='mean' divides by B*K")


def test_kl_direction_from_data():
    """Example 6.4: the two directions differ, and both agree with the exact values."""
    fwd, rev = CASES["ch6-ex6.4-kl-forward"], CASES["ch6-ex6.4-kl-reverse"]
    got_fwd = pp.kl_divergence(fwd.inputs["p"], fwd.inputs["q"])
    got_rev = pp.kl_divergence(fwd.inputs["q"], fwd.inputs["p"])
    assert math.isclose(got_fwd, fwd.expected, rel_tol=1e-12) and math.isclose(got_rev, rev.expected, rel_tol=1e-12)
    assert not math.isclose(got_fwd, got_rev, rel_tol=1e-3)


# ------------------------------------------------------------------ reductions


@PROPERTY
@given(losses=hnp.arrays(np.float64, st.tuples(st.integers(1, 4), st.integers(1, 6)), elements=st.floats(0, 20)),
       data=st.data())
def test_document_mean_vs_token_mean(losses, data):
    mask = data.draw(hnp.arrays(bool, losses.shape))
    mask[:, 0] = True  # every document has a scored target
    lt, mt = T(losses), T(mask.astype(float))
    n_i = mt.sum(dim=1)
    doc_means = (lt * mt).sum(dim=1) / n_i
    token = pp.reduce_losses(losses, mask=mask, reduction="mean")
    doc = pp.reduce_losses(losses, mask=mask, reduction="document_mean")
    close(token, (lt * mt).sum() / mt.sum(), what="token mean")
    close(doc, doc_means.mean(), what="document mean")
    close(token, (n_i * doc_means).sum() / n_i.sum(), what="token mean = N_i-weighted document means")
    close(pp.reduce_losses(losses, mask=mask, reduction="sum"), (lt * mt).sum(), what="sum")


def test_token_and_document_means_differ_on_the_book_example():
    token, doc = CASES["ch2-sec2.9-token-average"], CASES["ch2-sec2.9-document-average"]
    losses, mask = token.inputs["losses"], token.inputs["mask"]
    assert pp.reduce_losses(losses, mask=mask) == pytest.approx(token.expected, rel=1e-12)
    assert pp.reduce_losses(losses, mask=mask, reduction="document_mean") == pytest.approx(doc.expected, rel=1e-12)
    assert token.expected != doc.expected


def test_padding_is_not_counted():
    """Exercise 6.8-2: the mask gives ln(16)/3; counting the padding slot gives ln 2."""
    right, wrong = CASES["ch6-ex6.8-2-mean-loss"], CASES["ch6-ex6.8-2-padding-counted-loss"]
    p = right.inputs["p"]
    assert pp.reduce_losses(pp.neg_log_prob(p), mask=right.inputs["mask"]) == pytest.approx(right.expected, rel=1e-12)
    assert pp.reduce_losses(pp.neg_log_prob(p)) == pytest.approx(wrong.expected, rel=1e-12)


# ------------------------------------------------------------------ binary, Bernoulli, Gaussian


@PROPERTY
@given(z=hnp.arrays(np.float64, st.integers(1, 8), elements=st.floats(-200, 200)),
       data=st.data(), w=st.floats(0.1, 10))
def test_bce_with_logits_matches_torch(z, data, w):
    y = data.draw(hnp.arrays(np.float64, z.shape, elements=st.floats(0, 1)))
    close(pp.bce_with_logits(z, y), F.binary_cross_entropy_with_logits(T(z), T(y), reduction="none"),
          what="bce_with_logits vs PyTorch")
    close(pp.bce_with_logits(z, y, pos_weight=w),
          F.binary_cross_entropy_with_logits(T(z), T(y), pos_weight=T(w), reduction="none"),
          what="bce_with_logits with pos_weight vs PyTorch")
    close(pp.bce_with_logits(z, y, pos_weight=w, reduction="mean"),
          F.binary_cross_entropy_with_logits(T(z), T(y), pos_weight=T(w)), what="mean")
    # relative only: sigma(-200) = 1.4e-87, and an absolute tolerance would accept a clamped logit's 9.4e-14
    close(pp.sigmoid(z), torch.sigmoid(T(z)), atol=0, what="sigmoid")


@PROPERTY
@given(p=st.floats(0.01, 0.99), w=st.floats(0.1, 10))
def test_weighted_bce_optimum_is_stationary(p, w):
    """At q* = w p / (w p + 1 - p) the PyTorch expected weighted BCE has zero slope in the logit."""
    q = pp.weighted_bce_optimum(p, w)
    z = torch.tensor(math.log(q / (1 - q)), dtype=torch.float64, requires_grad=True)
    F.binary_cross_entropy_with_logits(z, T(p), pos_weight=T(w)).backward()
    assert abs(z.grad.item()) < 1e-12, f"gradient {z.grad.item()} at q*={q}"
    assert math.isclose(pp.weighted_bce_optimum(p, 1.0), p, rel_tol=1e-12)


@PROPERTY
@given(n=st.integers(1, 30), data=st.data(), theta=st.floats(0.001, 0.999))
def test_bernoulli_mle_minimises_nll(n, data, theta):
    k = data.draw(st.integers(0, n))
    mle = pp.bernoulli_mle(k, n)
    assert mle == float(Fraction(k, n))  # the correctly rounded k/n, from exact arithmetic
    assert pp.bernoulli_nll(mle, k, n) <= pp.bernoulli_nll(theta, k, n) + 1e-12
    record = torch.tensor([1.0] * k + [0.0] * (n - k), dtype=torch.float64)
    close(pp.bernoulli_nll(theta, k, n), -torch.distributions.Bernoulli(probs=T(theta)).log_prob(record).sum(),
          what="bernoulli_nll vs torch Bernoulli")
    exact = Fraction(theta) ** k * (1 - Fraction(theta)) ** (n - k)  # often below 1e-12: relative only
    close(pp.bernoulli_likelihood(theta, k, n), float(exact), rtol=1e-12, atol=0, what="Lik vs exact arithmetic")


def test_bernoulli_endpoints():
    """k = 0 and k = n: the optimum sits on the boundary with zero loss; the other endpoint is impossible."""
    assert pp.bernoulli_nll(0.0, 0, 10) == 0.0 and pp.bernoulli_nll(1.0, 10, 10) == 0.0
    assert pp.bernoulli_nll(0.0, 1, 10) == math.inf and pp.bernoulli_nll(1.0, 9, 10) == math.inf
    assert pp.bernoulli_likelihood(0.0, 0, 3) == 1.0


@PROPERTY
@given(y=st.floats(-10, 10), mean=st.floats(-10, 10), sigma=st.floats(0.1, 5))
def test_gaussian_nll_matches_torch(y, mean, sigma):
    expected = F.gaussian_nll_loss(T([mean]), T([y]), T([sigma**2]), full=True, reduction="none")
    close(pp.gaussian_nll(y, mean, sigma), expected[0], what="gaussian_nll vs F.gaussian_nll_loss(full=True)")


@PROPERTY
@given(p=hnp.arrays(np.float64, st.integers(1, 20), elements=st.floats(0.05, 1)))
def test_sequence_log_prob_is_sum_of_logs(p):
    close(pp.sequence_log_prob(p), torch.log(T(p)).sum(), what="chain rule in log space")
    close(pp.perplexity_from_probs(p), torch.prod(T(p)) ** (-1.0 / len(p)), rtol=1e-9, what="geometric mean PPL")


def test_probability_basics():
    post = pp.bayes_posterior([0.2, 0.8], [0.9, 0.1])
    assert post.sum() == pytest.approx(1.0, rel=1e-15)
    assert post[0] == pytest.approx(CASES["ch2-eq2.15-bayes-verifier"].expected[0], rel=1e-15)
    assert pp.variance([0, 1], [0.5, 0.5]) == pytest.approx(0.25, rel=1e-15)
    emp = pp.empirical_distribution(["a", "b", "a", "a"], ["a", "b", "c"])
    assert emp.tolist() == [0.75, 0.25, 0.0]
    cond = pp.conditional_from_joint([[0.1, 0.3], [0.2, 0.4]], given_axis=0)
    close(cond, [[0.25, 0.75], [1 / 3, 2 / 3]], what="p(y | x) rows")


# ------------------------------------------------------------------ float32 / float64 edges


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_stable_loss_survives_underflow(dtype):
    """logits [0, -1000], target 1: the stable form gives 1000; the naive -log(softmax) gives inf."""
    case = CASES["ch6-sec6.3-stable-nll-underflow"]
    z = np.asarray(case.inputs["logits"], dtype=dtype)
    loss = pp.nll_from_logits(z, case.inputs["target"])
    assert loss.dtype == dtype, f"computed in {loss.dtype}, expected {dtype}"
    assert float(loss) == pytest.approx(case.expected, rel=1e-7)
    probs = pp.softmax(z)
    assert probs[1] == 0.0, "softmax's second probability should underflow to exactly 0"
    with np.errstate(divide="ignore"):
        assert -np.log(probs[1]) == np.inf
    torch_dtype = torch.float32 if dtype == np.float32 else torch.float64
    zt = T(z, torch_dtype)[None]
    assert F.cross_entropy(zt, torch.tensor([1])).item() == pytest.approx(case.expected, rel=1e-7)
    assert (-torch.log(F.softmax(zt, dim=-1))[0, 1]).item() == math.inf


def test_exact_zero_is_not_underflow():
    """A counting model's exact zero gives inf however it is computed; underflow only hides a positive probability."""
    zero = CASES["ch6-ex6.8-6-counting-zero"]
    assert pp.nll_from_probs(zero.inputs["probs"], zero.inputs["target"]) == math.inf == zero.expected
    assert pp.kl_divergence([0.5, 0.5], zero.inputs["probs"]) == math.inf
    assert pp.cross_entropy_dist([0.0, 1.0], zero.inputs["probs"]) == math.inf
    # underflow: the probability is stored as 0, yet working from the logits the loss is finite
    z = np.array([0.0, -1000.0])
    assert pp.softmax(z)[1] == 0.0
    assert pp.nll_from_probs(pp.softmax(z), 1) == math.inf  # converting to probabilities first loses it
    assert np.isfinite(pp.nll_from_logits(z, 1)) and pp.nll_from_logits(z, 1) == pytest.approx(1000.0, rel=1e-12)


def test_float32_softmax_rows_are_accepted_as_distributions():
    z = np.random.default_rng(1).normal(size=(4, 50)).astype(np.float32)
    p = pp.softmax(z)
    assert p.dtype == np.float32
    loss = pp.nll_from_probs(p, np.zeros(4, dtype=np.int64))
    torch64 = F.cross_entropy(T(z.astype(np.float64)), torch.zeros(4, dtype=torch.long), reduction="none")
    close(loss, torch64, rtol=1e-5, what="float32 path vs PyTorch in float64")


def test_large_logits_do_not_overflow():
    z = np.array([[1000.0, 999.0, -1000.0]])
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no overflow warnings
        close(pp.softmax(z), F.softmax(T(z), -1), atol=0, what="softmax of large logits")
        close(pp.nll_from_logits(z, [1]), F.cross_entropy(T(z), torch.tensor([1]), reduction="none"), what="nll")
        close(pp.sigmoid(np.array([-1000.0, 1000.0])), [0.0, 1.0], what="sigmoid extremes")
        close(pp.bce_with_logits(np.array([-1000.0]), np.array([1.0])), [1000.0], what="bce at -1000")


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_confident_losses_are_never_negative_and_agree_with_torch(dtype):
    """lse(z) >= max z >= z_y, so no loss may round below 0 (perplexity() refuses a negative mean); float32 rows
    whose target logit leads by 16 or more used to give -3e-8 from the unshifted exp sum."""
    rng = np.random.default_rng(6)
    for margin in (8.0, 16.0, 20.0, 30.0, 40.0, 60.0, 80.0):
        z = rng.normal(size=(256, 50)).astype(dtype)
        y = rng.integers(0, 50, size=256)
        z[np.arange(256), y] += margin
        want = F.cross_entropy(T(z), torch.as_tensor(y), reduction="none")  # float64 from the same (rounded) logits
        got = pp.nll_from_logits(z, y)
        assert got.dtype == dtype and (got >= 0).all(), f"margin {margin}: min loss {got.min()}"
        close(got, want, rtol=1e-6, atol=1e-6 if dtype == np.float32 else 1e-13, what=f"nll, margin {margin}")
        assert pp.cross_entropy(z, y) >= 0 and (pp.cross_entropy(z, y, reduction="none") >= 0).all()
        soft = np.eye(50, dtype=dtype)[y]
        assert (pp.cross_entropy(z, soft, reduction="none") >= 0).all(), f"soft targets, margin {margin}"
    assert pp.perplexity(pp.cross_entropy(z, y)) >= 1.0


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_log_softmax_is_never_positive(dtype):
    """ln q <= 0 for every class: rows whose maximum is just above 0 and whose sum the float32 exp pass rounds down."""
    x = np.linspace(1e-4, 1e-2, 2000).astype(dtype)
    z = np.stack([x, np.full_like(x, -30.0)], axis=1)
    got = pp.log_softmax(z)
    assert got.dtype == dtype and (got <= 0).all(), f"max log-probability {got.max()}"
    close(got, F.log_softmax(T(z), -1), rtol=1e-6, atol=1e-6 if dtype == np.float32 else 1e-13, what="log_softmax")


@pytest.mark.parametrize("sigma, dtype", [(1e-170, np.float64), (1e160, np.float64), (1e-23, np.float32),
                                          (3e-23, np.float32), (1.0, np.float32)])
def test_gaussian_nll_of_extreme_sigmas_is_finite_and_exact(sigma, dtype):
    """-ln N(y; 0, sigma^2) at y = k sigma, where sigma**2 would overflow or underflow in floats."""
    import mpmath

    mpmath.mp.dps = 50
    s = dtype(sigma)
    for k in (0.0, 3.0):
        y = dtype(k) * s
        # -ln of the density itself, in 50-digit arithmetic (mpmath, sympy's), not the code's rewritten form
        sig, yy = mpmath.mpf(float(s)), mpmath.mpf(float(y))
        density = mpmath.exp(-yy**2 / (2 * sig**2)) / mpmath.sqrt(2 * mpmath.pi * sig**2)
        expected = float(-mpmath.log(density))
        got = pp.gaussian_nll(y, dtype(0.0), s)
        assert math.isclose(got, expected, rel_tol=1e-6 if dtype == np.float32 else 1e-13), (sigma, k, got, expected)


def test_a_unit_given_for_axis_is_pointed_to_only_where_there_is_a_unit():
    """softmax has no unit: its message must not advise unit='bits' (found by review of the diff)."""
    with pytest.raises(TypeError) as softmax:
        pp.softmax([1.0, 2.0], "bits")
    assert "unit" not in str(softmax.value) and "axis must be an int, got 'bits'" in str(softmax.value)


def test_a_gaussian_loss_beyond_the_largest_float_is_inf_without_a_warning():
    """y = 1 at sigma = 1e-170: the loss is 5e339, beyond float64; numpy's overflow warning reached stderr, where a
    notebook cell's output counts against it (found by review). This module turns RuntimeWarnings into errors."""
    assert pp.gaussian_nll(1.0, 0.0, 1e-170) == math.inf
    assert pp.gaussian_nll(np.array([1.0, 1e-170]), 0.0, 1e-170)[0] == math.inf


@pytest.mark.parametrize("prior, likelihood, expected", [
    ([0.5, 0.5], [5e-324, 5e-324], [Fraction(1, 2), Fraction(1, 2)]),
    ([1 - 1e-170, 1e-170], [1e-170, 1e-170], None),
    ([0.25, 0.75], [1e-200, 3e-200], None),
])
def test_a_posterior_whose_joint_underflows_is_still_given(prior, likelihood, expected):
    """prior x likelihood can underflow to 0 where the evidence is not 0 (found by review: "the evidence has
    probability 0" for likelihoods of 5e-324); the posterior is checked against exact rational arithmetic."""
    exact = [Fraction(p) * Fraction(lk) for p, lk in zip(prior, likelihood)]
    want = expected or [j / sum(exact) for j in exact]
    close(pp.bayes_posterior(prior, likelihood), [float(w) for w in want], rtol=1e-12, atol=0, what="posterior")


def test_a_target_probability_rounded_just_above_one_costs_nothing_not_less():
    """A row may sum to 1 within rounding with p_y = 1 + 5e-7; -ln p_y was then a negative loss (found by review).
    The loss of a certain target is 0, as -ln 1 is exactly."""
    loss = pp.nll_from_probs([[1 + 5e-7, 0.0], [0.25, 0.75]], [0, 1])
    assert loss[0] == 0.0 and not np.signbit(loss[0])
    assert loss[1] == -math.log(0.75)  # the rest unchanged


def test_empirical_distribution_takes_any_iterable_of_samples_and_support():
    """Counted by hand: "abcab" holds a twice, b twice, c once."""
    from collections import Counter

    want = [2 / 5, 2 / 5, 1 / 5]
    text = "abcab"
    for samples, support in [(list(text), Counter(text)), (text, Counter(text).keys()), ((c for c in text), "abc"),
                             (np.array(list(text)), ["a", "b", "c"])]:
        close(pp.empirical_distribution(samples, support), want, what=f"{type(samples).__name__}, {type(support).__name__}")
    close(pp.empirical_distribution([[0, 1], [1, 1]], range(2)), [0.25, 0.75], what="nested list of samples")


def test_an_integral_float_ignore_index_is_the_integer_pytorch_takes():
    y = torch.tensor([0, -100])
    want = F.cross_entropy(T(Z), y, ignore_index=-100)
    close(pp.cross_entropy(Z, y.numpy(), ignore_index=-100.0), want, what="ignore_index=-100.0")


def test_zero_probability_and_zero_weight_drop_even_an_infinite_term():
    """0 * inf = 0: a value of probability 0 adds nothing to E[X], a loss of weight 0 nothing to the mean."""
    assert pp.expectation([1.0, math.inf], [1.0, 0.0]) == 1.0
    assert pp.variance([1.0, 3.0, math.inf], [0.5, 0.5, 0.0]) == 1.0
    assert pp.expectation([1.0, math.inf], [0.5, 0.5]) == math.inf
    assert pp.reduce_losses([math.inf, 2.0], weights=[0.0, 1.0]) == 2.0
    assert pp.reduce_losses([math.inf, 2.0], weights=[0.0, 1.0], reduction="sum") == 2.0


# ------------------------------------------------------------------ bad input catalogue

nan = float("nan")
Z = np.array([[1.0, 2.0, 3.0], [0.0, 0.0, 0.0]])
Y = np.array([0, 2])
BAD_INPUTS = [
    # (id, call, error type, substrings the message must contain)
    ("softmax-string", lambda: pp.softmax("1, 2"), TypeError, ["logits", "array of numbers"]),
    ("softmax-nan", lambda: pp.softmax([1.0, nan]), ValueError, ["logits", "nan"]),
    ("softmax-empty", lambda: pp.softmax([]), ValueError, ["logits", "empty"]),
    ("softmax-scalar", lambda: pp.softmax(3.0), ValueError, ["logits", "dimension"]),
    ("softmax-inf", lambda: pp.softmax([1.0, math.inf]), ValueError, ["logits", "finite"]),
    ("softmax-bad-axis", lambda: pp.softmax(Z, axis=2), ValueError, ["axis", "out of range"]),
    ("softmax-ragged", lambda: pp.softmax([[1, 2], [3]]), ValueError, ["logits", "rectangular"]),
    ("softmax-complex", lambda: pp.softmax([1j, 2]), TypeError, ["logits", "real"]),
    # what is held instead of numbers, in a student's words, not numpy's dtype (found by review: "dtype object")
    ("softmax-dict", lambda: pp.softmax({"a": 1}), TypeError, ["logits", "got a dict"]),
    ("softmax-none-inside", lambda: pp.softmax([0.5, None]), TypeError, ["logits", "got None at index (1,)"]),
    ("softmax-numeric-strings", lambda: pp.softmax(["0.5", "0.5"]), TypeError, ["logits", "strings such as '0.5'"]),
    ("bce-bool-labels", lambda: pp.bce_with_logits([1.0, 2.0], np.array([True, False])), TypeError,
     ["y", "booleans", "np.asarray(y, dtype=float)"]),
    ("logsumexp-axis-float", lambda: pp.logsumexp(Z, axis=1.0), TypeError, ["axis", "int"]),
    ("probs-negative", lambda: pp.nll_from_probs([-0.1, 1.1], 0), ValueError, ["probs", "non-negative"]),
    ("probs-not-summing", lambda: pp.nll_from_probs([0.5, 0.4], 0), ValueError, ["probs", "sum to 1"]),
    ("probs-nan", lambda: pp.nll_from_probs([nan, 1.0], 0), ValueError, ["probs", "nan"]),
    ("target-shape", lambda: pp.nll_from_logits(Z, [0, 1, 2]), ValueError, ["target", "shape (2,)"]),
    ("target-fraction", lambda: pp.nll_from_logits(Z, [0.5, 1]), TypeError, ["target", "integer"]),
    ("target-bool", lambda: pp.nll_from_logits(Z, [True, False]), TypeError, ["target", "integer"]),
    ("target-string", lambda: pp.nll_from_logits(Z, ["a", "b"]), TypeError, ["target", "integer"]),
    ("target-too-large", lambda: pp.nll_from_logits(Z, [0, 3]), ValueError, ["target", "[0, 2]", "3"]),
    ("target-negative", lambda: pp.nll_from_logits(Z, [-1, 0]), ValueError, ["target", "[0, 2]"]),
    ("targets-out-of-range", lambda: pp.cross_entropy(Z, [0, 7]), ValueError, ["targets", "7"]),
    ("targets-shape", lambda: pp.cross_entropy(Z, [0]), ValueError, ["targets", "shape"]),
    ("soft-targets-not-summing", lambda: pp.cross_entropy(Z, np.full((2, 3), 0.5)), ValueError, ["targets", "sum to 1"]),
    ("soft-targets-with-weights", lambda: pp.cross_entropy(Z, np.full((2, 3), 1 / 3), class_weights=[1, 1, 1]),
     ValueError, ["class_weights", "integer targets"]),
    ("unknown-reduction", lambda: pp.cross_entropy(Z, Y, reduction="avg"), ValueError, ["reduction", "'avg'", "mean"]),
    ("all-masked", lambda: pp.cross_entropy(Z, Y, mask=[False, False]), ValueError, ["no target is scored"]),
    ("all-masked-sum", lambda: pp.cross_entropy(Z, Y, mask=[0, 0], reduction="sum"), ValueError, ["no target is scored"]),
    ("target-inf", lambda: pp.nll_from_logits(Z, [0.0, math.inf]), TypeError, ["target", "integer"]),
    ("all-ignored", lambda: pp.cross_entropy(Z, [-100, -100], ignore_index=-100), ValueError, ["no target is scored"]),
    ("mask-shape", lambda: pp.cross_entropy(Z, Y, mask=[1, 1, 1]), ValueError, ["mask", "shape"]),
    ("mask-values", lambda: pp.cross_entropy(Z, Y, mask=[2, 1]), ValueError, ["mask", "0/1"]),
    ("class-weights-shape", lambda: pp.cross_entropy(Z, Y, class_weights=[1, 2]), ValueError, ["class_weights", "(3,)"]),
    ("class-weights-negative", lambda: pp.cross_entropy(Z, Y, class_weights=[1, -2, 1]), ValueError,
     ["class_weights", "non-negative"]),
    ("empty-document", lambda: pp.reduce_losses([[1.0, 2.0], [3.0, 4.0]], mask=[[1, 1], [0, 0]],
                                                reduction="document_mean"), ValueError, ["documents [1]", "no scored"]),
    ("document-mean-1d", lambda: pp.reduce_losses([1.0, 2.0], reduction="document_mean"), ValueError, ["[B, T]"]),
    ("reduce-weights-shape", lambda: pp.reduce_losses([1.0, 2.0], weights=[1.0]), ValueError, ["weights", "shape"]),
    ("reduce-empty", lambda: pp.reduce_losses([]), ValueError, ["losses", "empty"]),
    ("unknown-unit-entropy", lambda: pp.entropy([0.5, 0.5], unit="dits"), ValueError, ["unit", "'dits'", "nats"]),
    ("unknown-unit-perplexity", lambda: pp.perplexity(1.0, unit="decibans"), ValueError, ["unit", "bits"]),
    ("unknown-unit-neg-log-prob", lambda: pp.neg_log_prob(0.5, unit="nat"), ValueError, ["unit", "'nat'"]),
    ("perplexity-negative", lambda: pp.perplexity(-0.1), ValueError, ["mean_loss", ">= 0"]),
    ("perplexity-array", lambda: pp.perplexity([1.0, 2.0]), ValueError, ["mean_loss", "single number"]),
    ("perplexity-from-probs-all-masked", lambda: pp.perplexity_from_probs([0.5, 0.5], mask=[0, 0]), ValueError,
     ["no target is scored"]),
    ("target-probs-above-one", lambda: pp.perplexity_from_probs([0.5, 1.5]), ValueError, ["target_probs", "[0, 1]"]),
    ("kl-shape-mismatch", lambda: pp.kl_divergence([0.5, 0.5], [0.2, 0.3, 0.5]), ValueError, ["p and q", "shape"]),
    ("kl-q-not-distribution", lambda: pp.kl_divergence([0.5, 0.5], [0.7, 0.7]), ValueError, ["q", "sum to 1"]),
    ("entropy-negative", lambda: pp.entropy([1.5, -0.5]), ValueError, ["p", "non-negative"]),
    ("cross-entropy-dist-nan", lambda: pp.cross_entropy_dist([0.5, 0.5], [nan, 0.5]), ValueError, ["q", "nan"]),
    ("neg-log-prob-above-one", lambda: pp.neg_log_prob(1.5), ValueError, ["p", "[0, 1]"]),
    ("prior-not-summing", lambda: pp.bayes_posterior([0.5, 0.6], [0.9, 0.1]), ValueError, ["prior", "sum to 1"]),
    ("likelihood-shape", lambda: pp.bayes_posterior([0.5, 0.5], [0.9]), ValueError, ["likelihood", "shape"]),
    ("impossible-evidence", lambda: pp.bayes_posterior([0.5, 0.5], [0.0, 0.0]), ValueError, ["evidence", "0"]),
    ("joint-1d", lambda: pp.conditional_from_joint([0.5, 0.5]), ValueError, ["joint", "2-D"]),
    ("expectation-shape", lambda: pp.expectation([1, 2, 3], [0.5, 0.5]), ValueError, ["values and probs", "shape"]),
    ("empirical-empty", lambda: pp.empirical_distribution([], ["a"]), ValueError, ["samples", "empty"]),
    ("empirical-unknown", lambda: pp.empirical_distribution(["z"], ["a"]), ValueError, ["support", "'z'"]),
    # arguments given where another goes: the message names the one meant (found by review)
    ("all-ignored", lambda: pp.cross_entropy([[0.0, 1.0]] * 2, [-100, -100], ignore_index=-100), ValueError,
     ["every target equals ignore_index=-100"]),
    ("entropy-unit-as-axis", lambda: pp.entropy([0.5, 0.5], "bits"), TypeError, ["axis", "unit='bits'"]),
    ("kl-unit-as-axis", lambda: pp.kl_divergence([0.5, 0.5], [0.5, 0.5], "bits"), TypeError, ["unit='bits'"]),
    ("all-ignored-bad-reduction", lambda: pp.cross_entropy([[0.0, 1.0]], [-100], ignore_index=-100, reduction="avg"),
     ValueError, ["reduction must be one of", "'avg'"]),
    ("empty-object-array", lambda: pp.entropy(np.array([], dtype=object)), TypeError, ["p", "Python objects"]),
    ("big-int-inside", lambda: pp.softmax([1, 2**70]), TypeError, ["logits", "int beyond 64 bits", "index (1,)"]),
    ("reduction-as-mask", lambda: pp.reduce_losses([1.0, 2.0], "sum"), TypeError, ["mask", "reduction='sum'"]),
    ("mle-k-as-record", lambda: pp.bernoulli_mle([1, 0, 1], 3), TypeError, ["k", "number of ones", "y.sum()"]),
    # a set's order changes with PYTHONHASHSEED, and the result's order with it (found by review)
    ("empirical-set-support", lambda: pp.empirical_distribution(["a"], {"a", "b"}), TypeError, ["support", "ordered",
                                                                                              "set"]),
    ("mle-k-above-n", lambda: pp.bernoulli_mle(3, 2), ValueError, ["k", "n=2"]),
    ("mle-k-float", lambda: pp.bernoulli_mle(1.5, 2), TypeError, ["k", "integer"]),
    ("mle-n-zero", lambda: pp.bernoulli_mle(0, 0), ValueError, ["n", "positive"]),
    ("theta-out-of-range", lambda: pp.bernoulli_nll(1.2, 1, 2), ValueError, ["theta", "[0, 1]"]),
    ("sigmoid-nan", lambda: pp.sigmoid(nan), ValueError, ["z", "nan"]),
    ("bce-label-out-of-range", lambda: pp.bce_with_logits([0.0], [2.0]), ValueError, ["y", "[0, 1]"]),
    ("bce-shapes", lambda: pp.bce_with_logits([0.0, 1.0], [1.0, 0.0, 1.0]), ValueError, ["z and y", "broadcast"]),
    ("bce-pos-weight", lambda: pp.bce_with_logits([0.0], [1.0], pos_weight=0.0), ValueError, ["pos_weight", "positive"]),
    ("bce-reduction", lambda: pp.bce_with_logits([0.0], [1.0], reduction="avg"), ValueError, ["reduction", "'avg'"]),
    ("optimum-weight", lambda: pp.weighted_bce_optimum(0.5, -1.0), ValueError, ["w", "positive"]),
    ("gaussian-sigma", lambda: pp.gaussian_nll(1.0, 0.0, 0.0), ValueError, ["sigma", "positive"]),
    ("gaussian-shapes", lambda: pp.gaussian_nll([1.0, 2.0], [0.0, 1.0, 2.0], 1.0), ValueError, ["broadcast"]),
    ("sequence-2d", lambda: pp.sequence_log_prob([[0.5, 0.5]]), ValueError, ["cond_probs", "[T]"]),
    ("sequence-empty", lambda: pp.sequence_log_prob([]), ValueError, ["cond_probs", "empty"]),
    ("nats-to-bits-empty", lambda: pp.nats_to_bits([]), ValueError, ["value", "empty"]),
    ("sigmoid-empty", lambda: pp.sigmoid([]), ValueError, ["z", "empty"]),
    ("bce-empty", lambda: pp.bce_with_logits([], []), ValueError, ["z", "empty"]),
    ("theta-empty", lambda: pp.bernoulli_likelihood([], 1, 2), ValueError, ["theta", "empty"]),
    ("nats-to-bits-none", lambda: pp.nats_to_bits(None), TypeError, ["value"]),
    ("grad-target-range", lambda: pp.softmax_cross_entropy_grad(Z, [0, 5]), ValueError, ["target", "5"]),
    ("bce-infinite-logit", lambda: pp.bce_with_logits([math.inf], [1.0]), ValueError, ["z", "finite", "inf"]),
    ("bce-pos-weight-inf", lambda: pp.bce_with_logits([0.0], [1.0], pos_weight=math.inf), ValueError, ["pos_weight", "finite"]),
    ("bce-pos-weight-shape", lambda: pp.bce_with_logits([0.0, 1.0], [1.0, 0.0], pos_weight=[1.0, 2.0, 3.0]), ValueError,
     ["pos_weight", "broadcast", "(2,)", "(3,)"]),
    ("optimum-weight-inf", lambda: pp.weighted_bce_optimum(0.5, math.inf), ValueError, ["w", "finite"]),
    ("optimum-shapes", lambda: pp.weighted_bce_optimum([0.2, 0.5], [1.0, 2.0, 3.0]), ValueError, ["p and w", "broadcast"]),
    ("optimum-empty", lambda: pp.weighted_bce_optimum([], 2.0), ValueError, ["p", "empty"]),
    ("gaussian-sigma-inf", lambda: pp.gaussian_nll(1.0, 0.0, math.inf), ValueError, ["sigma", "finite"]),
    ("gaussian-y-inf", lambda: pp.gaussian_nll(math.inf, math.inf, 1.0), ValueError, ["y", "finite"]),
    ("ignore-index-float", lambda: pp.cross_entropy(Z, Y, ignore_index=0.7), TypeError, ["ignore_index", "integer", "0.7"]),
    ("ignore-index-bool", lambda: pp.cross_entropy(Z, Y, ignore_index=True), TypeError, ["ignore_index", "integer"]),
    ("class-weights-inf", lambda: pp.cross_entropy(Z, Y, class_weights=[math.inf, 1, 1]), ValueError,
     ["class_weights", "finite"]),
    ("reduce-weights-negative", lambda: pp.reduce_losses([1.0, 2.0], weights=[2.0, -1.0]), ValueError,
     ["weights", "non-negative", "-1.0"]),
    ("reduce-weights-inf", lambda: pp.reduce_losses([1.0, 2.0], weights=[math.inf, 1.0]), ValueError, ["weights", "finite"]),
    ("targets-ragged", lambda: pp.cross_entropy(Z, [[0], [1, 2]]), ValueError, ["targets", "rectangular"]),
    ("target-ragged", lambda: pp.nll_from_logits(Z, [[0], [1, 2]]), ValueError, ["target", "rectangular"]),
    ("mask-with-none", lambda: pp.cross_entropy(Z, Y, mask=[True, None]), ValueError, ["mask", "booleans or 0/1"]),
    ("integer-one-hot-targets", lambda: pp.cross_entropy(Z, np.array([[1, 0, 0], [0, 0, 1]])), ValueError,
     ["targets", "soft targets must be floating point"]),
    ("expectation-inf-minus-inf", lambda: pp.expectation([-math.inf, math.inf], [0.5, 0.5]), ValueError,
     ["+inf and -inf", "undefined"]),
    ("variance-infinite-mean", lambda: pp.variance([1.0, math.inf], [0.5, 0.5]), ValueError, ["Var(X)", "undefined"]),
    ("target-beyond-int64", lambda: pp.nll_from_logits(Z, [0, 1e30]), ValueError, ["target", "1e+30", "class range"]),
    ("target-uint64", lambda: pp.nll_from_logits(Z, np.array([0, 2**63], dtype=np.uint64)), ValueError,
     ["target", str(2**63)]),
    ("tensor-requiring-grad", lambda: pp.softmax(torch.zeros(3, requires_grad=True)), TypeError,
     ["logits", "torch tensor", "logits.detach()"]),
    ("tensor-bfloat16", lambda: pp.cross_entropy(torch.zeros(2, 3, dtype=torch.bfloat16), Y), TypeError,
     ["logits", "BFloat16", "numpy()"]),
    ("targets-tensor-requiring-grad", lambda: pp.cross_entropy(Z, torch.zeros(2, requires_grad=True)), TypeError,
     ["targets", "torch tensor"]),
    ("empirical-support-none", lambda: pp.empirical_distribution([1], None), TypeError, ["support", "NoneType"]),
    ("empirical-samples-none", lambda: pp.empirical_distribution(None, [1]), TypeError, ["samples", "NoneType"]),
    ("empirical-unhashable", lambda: pp.empirical_distribution([1], [[1]]), TypeError, ["support", "hashable"]),
    # found by review (2026-12-03): silent wrong numbers, nan, or messages that did not say where
    ("bce-pairwise-broadcast-mean", lambda: pp.bce_with_logits(np.array([[2.0], [-1.0]]), np.array([1.0, 0.0]),
                                                              reduction="mean"), ValueError,
     ["z (2, 1)", "y (2,)", "(2, 2)", "every pair", "before the mean"]),
    ("bce-pos-weight-grows-the-loss", lambda: pp.bce_with_logits([2.0, -1.0], [1.0, 0.0], pos_weight=[[1.0], [2.0]]),
     ValueError, ["pos_weight", "(2,)", "(2, 1)"]),
    ("reduce-log-probs-minus-inf", lambda: pp.reduce_losses([np.inf, -np.inf]), ValueError,
     ["losses", "-inf", "(1,)", "log-probabilities"]),
    ("targets-torch-ignore-index", lambda: pp.cross_entropy(Z, [2, -100]), ValueError,
     ["targets", "-100 at index (1,)", "ignore_index=-100"]),
    ("empirical-0d-tensor", lambda: pp.empirical_distribution(torch.tensor(1), [1]), TypeError, ["samples", "Tensor"]),
    ("empirical-float32-tensor", lambda: pp.empirical_distribution(torch.tensor([0.5, 0.1]), [0.5, 0.1]), ValueError,
     ["outside support", "float32 tensor", "float64"]),
    ("joint-above-one", lambda: pp.conditional_from_joint([[1.1, 0.0], [0.0, 0.0]]), ValueError, ["1.1 at index (0, 0)"]),
    ("targets-out-of-range-where", lambda: pp.nll_from_logits(np.zeros((2, 2, 3)), [[0, 1], [3, 0]]), ValueError,
     ["target", "got 3 at index (1, 0)"]),
    ("targets-classes-at-dim-1", lambda: pp.cross_entropy(np.zeros((2, 3, 4)), np.zeros((2, 4), int)), ValueError,
     ["targets must have shape (2, 3)", "class axis", "last"]),
    ("grad-soft-targets", lambda: pp.softmax_cross_entropy_grad([[1.0, 2.0, 3.0]], [[0.0, 0.0, 1.0]]), ValueError,
     ["integer class indices", "soft targets", "not supported"]),
    ("counts-fractional", lambda: pp.bernoulli_mle(3.5, 10), TypeError, ["k", "integer count", "3.5"]),
    ("joint-cell-position", lambda: pp.conditional_from_joint([[0.1, 2.0], [0.3, 0.4]]), ValueError,
     ["joint", "2.0 at index (0, 1)"]),
]


@pytest.mark.parametrize("call, error, parts", [b[1:] for b in BAD_INPUTS], ids=[b[0] for b in BAD_INPUTS])
def test_bad_input_raises_clear_error(call, error, parts):
    with pytest.raises(error) as info:
        call()
    message = str(info.value)
    missing = [p for p in parts if p not in message]
    assert not missing, f"message {message!r} does not mention {missing}"


@pytest.mark.parametrize("call, message", [
    (lambda: pp.expectation([0, 1, 2], [0.5, 0.6, -0.1]), "got -0.1 at index (2,)"),
    (lambda: pp.nll_from_probs([[0.5, 0.5], [1.2, 0.0]], [0, 0]), "got 1.2 at index (1, 0)"),
    (lambda: pp.nll_from_probs([[0.5, 0.5], [0.5, 0.6]], [0, 0]), "along axis 1; probs[1, :] sums to 1.100000"),
    (lambda: pp.kl_divergence([[0.3, 0.5], [0.7, 0.6]], [[0.5, 0.5], [0.5, 0.5]], axis=0), "along axis 0; p[:, 1] sums to 1.100000"),
    (lambda: pp.entropy([0.5, 0.6]), "p must sum to 1; its 2 values sum to 1.100000"),
    (lambda: pp.neg_log_prob([[0.5, 1.5]]), "got 1.5 at index (0, 1)"),
], ids=["negative", "above-one", "row-sum", "column-sum", "vector-sum", "separate-events"])
def test_probability_errors_print_plain_indices(call, message):
    """Indices in probability errors read (2,), not (np.int64(2),): notebook 01 prints such a message."""
    with pytest.raises(ValueError) as info:
        call()
    assert message in str(info.value) and "np." not in str(info.value), str(info.value)


def test_inputs_a_student_passes_as_pytorch_gives_them_get_pytorch_s_numbers():
    """Counts from y.sum() (a float or a 0-d tensor), samples as a tensor, a scalar label: accepted, same numbers."""
    y = torch.tensor([1.0, 0.0, 1.0, 1.0, 0.0, 1.0, 0.0, 1.0, 1.0, 0.0], dtype=torch.float64)
    assert pp.bernoulli_mle(y.sum(), len(y)) == float(Fraction(6, 10))
    assert pp.bernoulli_mle(float(y.sum()), len(y)) == float(Fraction(6, 10))
    assert pp.bernoulli_nll(0.5, np.int64(6), torch.tensor(10)) == pytest.approx(10 * math.log(2), rel=1e-15)
    samples = torch.tensor([1, 1, 0, 2, 1])
    expected = torch.bincount(samples, minlength=3).double() / len(samples)
    np.testing.assert_array_equal(pp.empirical_distribution(samples, [0, 1, 2]), expected.numpy())
    np.testing.assert_array_equal(pp.empirical_distribution(samples.tolist(), torch.arange(3)), expected.numpy())
    z = torch.tensor([2.0, -1.0, 0.5], dtype=torch.float64)
    torch_loss = F.binary_cross_entropy_with_logits(z, torch.ones(3, dtype=torch.float64), pos_weight=torch.tensor(2.0,
                                                    dtype=torch.float64), reduction="sum").item()
    assert pp.bce_with_logits(z.numpy(), 1.0, pos_weight=2.0, reduction="sum") == pytest.approx(torch_loss, rel=1e-12)


def test_scalar_results_do_not_overflow_round_or_go_negative_where_the_maths_does_not():
    """perplexity of a float32 loss in float64, and inf without a warning; the weighted optimum for a tiny weight;
    entropy and cross-entropy at p = 1 + 5e-7 (inside the sum tolerance) not negative."""
    import warnings

    assert pp.perplexity(np.float32(89.0)) == pytest.approx(math.exp(89.0), rel=1e-15)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert pp.perplexity(3000.0) == math.inf
    # q* = w p / (w p + 1 - p) at p = 1 is exactly 1 for every w > 0
    assert pp.weighted_bce_optimum(1.0, 1e-17) == 1.0
    assert pp.weighted_bce_optimum(0.5, 1e-17) == pytest.approx(float(Fraction(1, 10**17 + 1)), rel=1e-12)
    p = [1 + 5e-7, 0.0]
    assert pp.entropy(p) == 0.0 and pp.cross_entropy_dist(p, p) == 0.0


def test_extreme_finite_inputs_give_pytorch_s_numbers_without_a_warning():
    """Nothing may reach stderr (nbgrader fails a test cell that writes there): z - m below -1.8e308 is -inf,
    a loss or variance above 1.8e308 is inf, as in PyTorch; numpy used to warn about the overflow."""
    z = np.array([[1e308, -1e308, 0.0]])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        close(pp.softmax(z), F.softmax(T(z), -1), atol=0, what="softmax")
        close(pp.log_softmax(z), F.log_softmax(T(z), -1), what="log_softmax")
        assert pp.nll_from_logits(z, [1]) == F.cross_entropy(T(z), torch.tensor([1])).item() == math.inf
        assert pp.variance([1e200, -1e200], [0.5, 0.5]) == math.inf


def test_options_no_other_test_reaches_agree_with_pytorch_in_float64():
    """unit="bits", reduction="sum" with weights, soft targets with a mask, logsumexp on a non-last axis of
    large logits, variance of a non-uniform PMF, conditioning on columns: each against an independent path."""
    rng = np.random.default_rng(7)
    p, q = rng.dirichlet(np.ones(5), size=3), rng.dirichlet(np.ones(5), size=3)
    kl_torch = F.kl_div(T(q).log(), T(p), reduction="none").sum(-1) / math.log(2)
    close(pp.kl_divergence(p, q, unit="bits"), kl_torch, what="KL in bits")
    ce_torch = -(T(p) * T(q).log()).sum(-1) / math.log(2)
    close(pp.cross_entropy_dist(p, q, unit="bits"), ce_torch, what="cross-entropy in bits")
    close(pp.entropy(p, unit="bits"), torch.distributions.Categorical(probs=T(p)).entropy() / math.log(2),
          what="entropy in bits")

    z, y = rng.normal(size=6), rng.random(6)
    close(pp.bce_with_logits(z, y, reduction="sum"), F.binary_cross_entropy_with_logits(T(z), T(y), reduction="sum"),
          what="bce sum")
    close(pp.bce_with_logits(z, y, pos_weight=3.0, reduction="sum"),
          F.binary_cross_entropy_with_logits(T(z), T(y), pos_weight=T(3.0), reduction="sum"), what="weighted bce sum")

    logits, targets, w = rng.normal(size=(4, 3)), np.array([0, 2, 1, 2]), np.array([0.5, 2.0, 1.5])
    close(pp.cross_entropy(logits, targets, class_weights=w, reduction="sum"),
          F.cross_entropy(T(logits), torch.tensor(targets), weight=T(w), reduction="sum"), what="weighted CE sum")
    losses = rng.random(4)
    close(pp.reduce_losses(losses, weights=w[targets], reduction="sum"), (T(losses) * T(w[targets])).sum(),
          what="weighted reduce sum")

    soft = rng.dirichlet(np.ones(3), size=4)
    mask = np.array([True, False, True, True])
    per_row = F.cross_entropy(T(logits), T(soft), reduction="none")
    close(pp.cross_entropy(logits, soft, mask=mask), per_row[torch.tensor(mask)].mean(), what="soft targets, masked")

    big = np.array([[1000.0, -1000.0], [999.0, -1001.0], [0.0, -999.0]])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        close(pp.logsumexp(big, axis=0), torch.logsumexp(T(big), dim=0), what="logsumexp over axis 0")

    values, probs = [0, 1, 5], [Fraction(1, 2), Fraction(1, 3), Fraction(1, 6)]
    mean = sum(v * q for v, q in zip(values, probs))
    exact_var = sum(q * (v - mean) ** 2 for v, q in zip(values, probs))
    assert pp.variance(values, [float(q) for q in probs]) == pytest.approx(float(exact_var), rel=1e-14)

    joint = np.array([[0.1, 0.3], [0.2, 0.4]])
    close(pp.conditional_from_joint(joint, given_axis=1), T(joint) / T(joint).sum(dim=0, keepdim=True),
          what="p(x | y): columns")
    # a cell above 1 by float32 rounding is accepted, as in every distribution check (found by review)
    close(pp.conditional_from_joint([[1 + 4e-7, 0.0], [0.0, 1e-7]]), [[1.0, 0.0], [0.0, 1.0]], what="rounded joint")
    # a masked target is not checked as a class id: padding may hold PyTorch's -100 (the message suggests a mask)
    logits4 = rng.normal(size=(2, 3))
    close(pp.cross_entropy(logits4, [1, -100], mask=[True, False]),
          F.cross_entropy(T(logits4), torch.tensor([1, -100])), what="masked -100 target")


def test_torch_all_masked_is_nan_which_we_refuse():
    """Why the reference raises: PyTorch silently returns nan for a mean over zero scored targets."""
    got = F.cross_entropy(T(Z), torch.tensor([-100, -100]), ignore_index=-100)
    assert math.isnan(got.item())
    with pytest.raises(ValueError, match="no target is scored"):
        pp.cross_entropy(Z, [-100, -100], ignore_index=-100)


def test_import_is_numpy_only():
    """The reference module imports no torch, sympy or scipy (fast to import, one path independent of the other)."""
    import subprocess
    import sys

    code = ("import sys; sys.path.insert(0, sys.argv[1]); import probability_practice; "
            "print(','.join(m for m in ('torch', 'sympy', 'scipy') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code, str(pp.__file__).rsplit("/", 1)[0]],
                         capture_output=True, text=True, check=True).stdout.strip()
    assert out == "", f"probability_practice imported {out}"


# --- gaps a mutation audit of probability_practice found: each test fails on a mutant the suite let through -------

Z3 = np.array([[1.0, 2.0, 3.0], [0.5, -1.0, 2.0], [3.0, 0.0, 0.0]])


def test_per_position_losses_are_zero_where_ignored_as_pytorch_gives_them():
    targets = np.array([0, -100, 2])
    expected = F.cross_entropy(T(Z3), T(targets, torch.long), ignore_index=-100, reduction="none")
    close(pp.cross_entropy(Z3, targets, ignore_index=-100, reduction="none"), expected, rtol=1e-12, atol=0)
    assert pp.reduce_losses(np.array([1.0, 2.0, 3.0]), mask=[1, 0, 1], reduction="none").tolist() == [1.0, 0.0, 3.0]


def test_any_ignore_index_and_a_mask_beside_it_are_both_honoured():
    targets = np.array([2, 0, 1])
    expected = F.cross_entropy(T(Z3), T(targets, torch.long), ignore_index=0).item()
    assert math.isclose(pp.cross_entropy(Z3, targets, ignore_index=0), expected, rel_tol=1e-12)
    targets = np.array([0, -100, 2])  # position 1 ignored, position 2 masked: only position 0 is scored
    expected = F.cross_entropy(T(Z3[:1]), T(targets[:1], torch.long)).item()
    assert math.isclose(pp.cross_entropy(Z3, targets, mask=[1, 1, 0], ignore_index=-100), expected, rel_tol=1e-12)


def test_an_axis_other_than_the_last_is_the_one_reduced():
    """Square inputs: reducing the wrong axis keeps every shape right."""
    z = np.arange(9.0).reshape(3, 3) * np.array([1.0, 2.0, -1.0])
    close(pp.log_softmax(z, axis=0), torch.log_softmax(T(z), dim=0), rtol=1e-12)
    p = np.array([[0.5, 0.1, 0.25], [0.5, 0.9, 0.75]])
    close(pp.entropy(p, axis=0), torch.special.entr(T(p)).sum(0), rtol=1e-12)


def test_values_far_from_zero_keep_their_digits():
    assert pp.variance([1e9, 1e9 + 1], [0.5, 0.5]) == 0.25  # E[(X-mu)^2], not E[X^2] - mu^2
    assert math.isclose(pp.sequence_log_prob(np.full(1000, 0.1)), 1000 * math.log(0.1), rel_tol=1e-12)  # no product
    close(pp.nats_to_bits(np.array([math.log(2), 2 * math.log(2)])), [1.0, 2.0], rtol=1e-15, atol=0)
    assert math.isclose(pp.bernoulli_nll(1e-20, 0, 1), 1e-20, rel_tol=1e-12)  # -log1p(-theta)
    assert math.isclose(pp.bce_with_logits(40.0, 1.0), math.log1p(math.exp(-40.0)), rel_tol=1e-12, abs_tol=0)
    p, q = torch.tensor([0.5, 0.5], dtype=torch.float64), torch.tensor([1.0, 1e-310], dtype=torch.float64)
    expected = (p * (p.log() - q.log())).sum().item()  # the ratio p/q overflows to inf; log p - log q does not
    assert math.isclose(pp.kl_divergence([0.5, 0.5], [1.0, 1e-310]), expected, rel_tol=1e-12)


def test_a_zero_probability_target_is_infinitely_surprising():
    """A soft target's class of no mass had its -inf log multiplied by 0: a RuntimeWarning, into a notebook's stderr."""
    assert pp.perplexity_from_probs([0.5, 0.0]) == math.inf
    assert pp.cross_entropy(np.array([[1e308, -1e308]]), np.array([[1.0, 0.0]])) == 0.0  # 0 * ln 0 = 0


@pytest.mark.parametrize("call, error, words", [
    (lambda: pp.neg_log_prob(-0.1), ValueError, "probabilities in [0, 1]"),
    (lambda: pp.sequence_log_prob([0.5, -0.5]), ValueError, "probabilities in [0, 1]"),
    (lambda: pp.bernoulli_nll(-0.1, 1, 2), ValueError, "probabilities in [0, 1]"),
    (lambda: pp.perplexity(float("nan")), ValueError, "nan"),
    (lambda: pp.entropy([0.5, 0.50001]), ValueError, "sum to 1"),
    (lambda: pp.entropy(np.r_[1e-4 + 5e-3, np.full(9999, 1e-4)]), ValueError, "sum to 1"),
    (lambda: pp.bayes_posterior([0.5, 0.5], [-0.1, 0.5]), ValueError, "likelihood"),
    (lambda: pp.bayes_posterior([0.5, 0.5], [1.5, 0.5]), ValueError, "likelihood"),
    (lambda: pp.reduce_losses(np.ones((2, 3)), mask=np.ones((3, 2), bool)), ValueError, "mask must have shape (2, 3)"),
    (lambda: pp.nll_from_logits(np.zeros((2, 3)), np.zeros((2, 1), int)), ValueError, "target must have shape"),
    (lambda: pp.cross_entropy(np.zeros((2, 3)), [0, 2], class_weights=np.ones((1, 3))), ValueError,
     "class_weights must have shape (3,)"),
    (lambda: pp.conditional_from_joint([[0.2, 0.2], [0.2, 0.2]]), ValueError, "sum to 1"),
    (lambda: pp.empirical_distribution([1, 2], [1, 1, 2]), ValueError, "once"),
    (lambda: pp.weighted_bce_optimum(0.5, 0.0), ValueError, "positive"),
    (lambda: pp.entropy([0.5, 0.5], unit="bytes"), ValueError, "unit must be one of"),
    (lambda: pp.softmax(np.zeros((2, 3)), axis=True), TypeError, "axis must be an int"),
], ids=["neg-log-prob", "sequence", "bernoulli", "perplexity-nan", "sum-1e-5", "sum-many", "likelihood-neg",
        "likelihood-big", "mask-shape", "target-shape", "class-weights-shape", "joint-sum", "support-twice",
        "weight-zero", "unit", "axis-bool"])
def test_more_bad_input_is_refused_with_a_message_saying_what_was_wrong(call, error, words):
    """The module's promise: nothing returns a silent nan or a number for input it cannot mean."""
    with pytest.raises(error, match=re.escape(words)):
        call()
