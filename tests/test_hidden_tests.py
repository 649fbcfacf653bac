"""A hidden test rejects the shortcut its exercise's text rules out, and grades an exercise on its own.

Each case replaces model solutions of a source notebook with answers a student could write: right in
every number the visible tests look at, but taking a road the exercise forbids (a library softmax,
PyTorch's log-space helpers, no F.cross_entropy where the exercise asks for it) or missing a case the
exercise names (evidence 0 with a likelihood that is not 0); or plainly wrong in an exercise whose function
a later exercise may call (4.1 and 4.2 from 4.3 and 4.4, 5.1 from 5.2, 6.1 from 6.2), where grading puts a
reference in its place so that one mistake costs one exercise's points. The notebook then runs, hidden tests
included, as `check` runs a student's notebook; exactly the named test cells must fail, each with the
check that caught it. One kernel per notebook.
"""

from pathlib import Path

import nbformat
import pytest

from autograder.cells import nbgrader_meta
from autograder.check import exercise_rows, run_notebook

REPO = Path(__file__).resolve().parent.parent
NOTEBOOKS = REPO / "notebooks" / "part-ii"

# torch.special.softmax is not torch.softmax: the 2.1 guard once missed it
SPECIAL_SOFTMAX = '''\
def stable_softmax(logits):
    z = torch.as_tensor(np.asarray(logits, dtype=np.float64))
    return torch.special.softmax(z, dim=-1).numpy()


versions_logits = np.array([0.0, np.log(3.0)])
ex1_probs = stable_softmax(versions_logits)
ex1_loss = -np.log(ex1_probs[1])
ex1_loss_shifted = -np.log(stable_softmax(versions_logits - 50.0)[1])
'''

# the stable form left to a tensor method: finite, exact, and not what exercise 2.6 asks to write
TENSOR_LOGSUMEXP = '''\
def target_loss_from_logits(logits, targets):
    z = torch.as_tensor(np.asarray(logits, dtype=np.float64))
    y = torch.as_tensor(np.asarray(targets, dtype=np.int64))
    z_y = z.gather(-1, y[..., None])[..., 0]
    return (z.logsumexp(dim=-1) - z_y).numpy()


ex6_loss = float(target_loss_from_logits(np.array([0.0, -1000.0]), np.array(1)))
ex6_same_failure = False
ex6_fix_underflow = "a"
ex6_fix_exact_zero = "b"
'''

# raises only when every likelihood is 0: prior [1, 0] with likelihood [0, 0.5] divides 0 by 0
ALL_ZERO_LIKELIHOOD_ONLY = '''\
def posterior(prior, likelihood):
    prior = np.asarray(prior, dtype=np.float64)
    likelihood = np.asarray(likelihood, dtype=np.float64)
    if np.all(likelihood == 0):
        raise ValueError("the observation is impossible under every hypothesis")
    joint = prior * likelihood
    return joint / joint.sum()


ex2_verifier = posterior([0.2, 0.8], [0.9, 0.1])[0]
ex2_spam = posterior([0.01, 0.99], [0.9, 0.1])[0]
ex2_rejected = posterior([0.2, 0.8], [0.1, 0.9])[0]
'''

# the right token mean, differentiable, written by hand: exercise 5.5 is about handing [B, T, V] to F.cross_entropy
HAND_WRITTEN_CE = '''\
def sequence_cross_entropy(logits, targets, ignore_index=-100):
    keep = targets != ignore_index
    if not keep.any():
        raise ValueError("every target equals ignore_index")
    log_probs = logits - logits.exp().sum(dim=-1, keepdim=True).log()
    picked = log_probs.gather(-1, targets.masked_fill(~keep, 0).unsqueeze(-1)).squeeze(-1)
    return -picked[keep].mean()
'''

# right for a scalar weight only: `w <= 0` on an array raises numpy's own ValueError (found by a student's walkthrough)
SCALAR_WEIGHT_ONLY = '''\
def calibrate_weighted_output(q, w):
    if w <= 0:
        raise ValueError(f"w must be positive, got {w}")
    q = np.asarray(q, dtype=float)
    return q / (q + w * (1.0 - q))
'''

# the right number as a Python float, where the exercise asks for the 0-d tensor F.kl_div gives
KL_AS_FLOAT = '''\
def batch_kl(p, q):
    return F.kl_div(torch.log(q), p, reduction="batchmean").item()
'''

# wrong answers to exercises whose functions later exercises may call: the later ones must still pass
NAIVE_ENTROPY = '''\
def entropy_nats(p):
    p = np.asarray(p, dtype=np.float64)
    return -np.sum(p * np.log(p), axis=-1)  # nan where p has a zero
'''

REVERSED_KL = '''\
def kl_nats(p, q):
    p, q = np.asarray(p, dtype=np.float64), np.asarray(q, dtype=np.float64)
    return np.sum(q * np.log(q / p), axis=-1)  # KL(q || p): weights from the wrong argument
'''

SLOT_MEAN = '''\
def masked_token_mean(losses, mask):
    losses, mask = np.asarray(losses, dtype=np.float64), np.asarray(mask, dtype=bool)
    if not mask.any():
        raise ValueError("no target is scored")
    return float(np.where(mask, losses, 0.0).sum() / mask.size)  # divides by every slot, scored or not
'''

TABLE_NORMALISED = '''\
def bigram_mle(ids, K):
    ids = np.asarray(ids)
    C = np.zeros((K, K))
    np.add.at(C, (ids[:-1], ids[1:]), 1)
    return C / C.sum()  # normalised over the whole table, not row by row
'''

# right answers to the later exercises that reach the earlier function another way than the model solution: with
# a wrong 4.2 and 6.1 in the same notebook, they must pass on the stand-ins
GAP_FROM_KL = '''\
def entropy_gap(p):
    p = np.asarray(p, dtype=np.float64)
    return kl_nats(p, np.full(p.shape, 1.0 / p.shape[-1]))  # the text: the gap is KL(p || uniform)
'''

UNSIGNED_IDS = '''\
def add_k_probs(ids, K, k):
    if k < 0:
        raise ValueError(f"k must be a non-negative pseudo-count, got {k}")
    ids = np.asarray(ids)
    if ids.ndim != 1 or len(ids) < 2 or (ids < 0).any() or (ids >= K).any():
        raise ValueError(f"ids must be a sequence [n], n >= 2, of values in [0, {K - 1}]")
    ids = ids.astype(np.uint32)  # checked non-negative above
    if k == 0:
        return bigram_mle(ids, K)
    C = np.zeros((K, K))
    np.add.at(C, (ids[:-1], ids[1:]), 1)
    return (C + k) / (C.sum(axis=1, keepdims=True) + K * k)
'''

# 4.1 and 4.2 left unanswered, their test cells moved below 4.3's, where stand-ins for both ran; a 4.3 that keeps the
# stand-in it was lent, and a 4.1 that calls what 4.3 kept
KEEPS_THE_STAND_IN = '''\
def decompose_cross_entropy(p, q):
    global _kept
    _kept = entropy_nats
    p, q = np.asarray(p, dtype=float), np.asarray(q, dtype=float)
    pos = p > 0
    with np.errstate(divide="ignore"):
        h_pq = -np.sum(np.where(pos, p * np.log(np.where(pos, q, 1.0)), 0.0), axis=-1)
    return entropy_nats(p), kl_nats(p, q), h_pq
'''

CALLS_WHAT_4_3_KEPT = '''\
def entropy_nats(p):
    return _kept(p)
'''

UNANSWERED = '''\
def kl_nats(p, q):
    raise NotImplementedError()
'''

# honest answers the exercise text allows: the required library call made through a name of the student's own
KL_DIV_AS_DEFAULT = '''\
def batch_kl(p, q, divergence=F.kl_div):
    return divergence(torch.log(q), p, reduction="batchmean")
'''

CE_FROM_IMPORT = '''\
from torch.nn.functional import cross_entropy


def sequence_cross_entropy(logits, targets, ignore_index=-100):
    if not (targets != ignore_index).any():
        raise ValueError("every target equals ignore_index")
    return cross_entropy(logits.flatten(0, 1), targets.flatten(), ignore_index=ignore_index)
'''

# a list of the right numbers: every check passed, and the demo's .shape then raised (a student's walkthrough)
LIST_AFFINE = '''\
def affine(X, W, b):
    X, W, b = (np.asarray(a, dtype=np.float64) for a in (X, W, b))
    if W.ndim != 2 or X.shape[-1] != W.shape[0] or b.shape != (W.shape[1],):
        raise ValueError(f"shape mismatch: X {X.shape}, W {W.shape}, b {b.shape}")
    return (X @ W + b).tolist()
'''

# y = x; y += ...: right gradients, and the caller's x becomes y; the visible check then compared them with an
# expected value computed from the changed x (a student's walkthrough)
IN_PLACE_RESIDUAL = '''\
def residual_grad(x, W):
    W = np.asarray(W, dtype=np.float64)
    a = np.tanh(W @ x)
    y = x
    y += a
    return y.copy(), W.T @ ((1 - a**2) * y)
'''

# the paths swapped: their sum, the one visible check of the paths, stayed right (a student's walkthrough)
SWAPPED_RESIDUAL = '''\
def residual_grad(x, W):
    x, W = np.asarray(x, dtype=np.float64), np.asarray(W, dtype=np.float64)
    a = np.tanh(W @ x)
    y = x + a
    return W.T @ ((1 - a**2) * y), y
'''

# checks that every weight is <= 0, not any: an array with one negative weight passed (a student's walkthrough)
ALL_WEIGHTS_NEGATIVE = '''\
def calibrate_weighted_output(q, w):
    q, w = np.asarray(q, dtype=float), np.asarray(w, dtype=float)
    if np.all(w <= 0):
        raise ValueError(f"w must be positive, got {w}")
    return q / (q + w * (1.0 - q))
'''

# C from the second axis of a batch: right for [C] and [B, C], wrong for the [..., C] the text allows (a walkthrough)
SECOND_AXIS_GAP = '''\
def entropy_gap(p):
    p = np.asarray(p, dtype=float)
    C = p.shape[1] if p.ndim == 2 else p.shape[0]
    return np.log(C) - entropy_nats(p)
'''

# both in log space: nan wherever the target has a zero, which the text allows (a student's walkthrough)
LOG_TARGET_KL = '''\
def batch_kl(p, q):
    return F.kl_div(q.log(), p.log(), log_target=True, reduction="batchmean")
'''

# the library's own function, which the exercise forbids: its own test fails; the later exercises, whose stand-ins
# ran it to learn its return type inside their own forbidden_calls, failed too (a code review)
PP_ENTROPY = '''\
def entropy_nats(p):
    return pp.entropy(p)
'''

PP_TOKEN_MEAN = '''\
def masked_token_mean(losses, mask):
    return float(pp.reduce_losses(np.asarray(losses, dtype=np.float64), np.asarray(mask, dtype=bool)))
'''

# multiplies each table into the next one in place: the joint is right, the caller's tables are gone
IN_PLACE_TABLES = '''\
def joint_from_conditionals(tables):
    joint = tables[0]
    for table in tables[1:]:
        table *= joint[..., None]
        joint = table
    return joint


ex3_joint = joint_from_conditionals([p1.copy(), p2.copy(), p3.copy()])
ex3_bba = ex3_joint[1, 1, 0]
'''

# the marginals swapped: right on the symmetric worked example only (a student's walkthrough: 0 of 3 when graded)
SWAPPED_MARGINALS = '''\
def var_of_sum(joint, u_values, v_values):
    j = np.asarray(joint, dtype=np.float64)
    u, v = np.asarray(u_values, dtype=np.float64), np.asarray(v_values, dtype=np.float64)
    pu, pv = j.sum(axis=0), j.sum(axis=1)
    var_u = np.sum(pu * u**2) - np.sum(pu * u) ** 2
    var_v = np.sum(pv * v**2) - np.sum(pv * v) ** 2
    cov = np.sum(j * np.outer(u, v)) - np.sum(pu * u) * np.sum(pv * v)
    return float(var_u + var_v + 2 * cov)


ex4_var = var_of_sum(uv_joint, u_vals, v_vals)
ex4_naive = pp.variance(u_vals, uv_joint.sum(axis=1)) + pp.variance(v_vals, uv_joint.sum(axis=0))
'''

# sets the zero entries to 1 in place to keep log() finite: right values, the caller's distributions changed
IN_PLACE_KL = '''\
def kl_with_support(q, p):
    q = np.asarray(q, dtype=np.float64)
    p = np.asarray(p, dtype=np.float64)
    on = q > 0
    if np.any(p[on] == 0):
        return np.inf
    q[~on] = 1.0
    p[~on] = 1.0
    return float(np.sum(np.where(on, q, 0.0) * np.log(q / p)))


ex4_forward = kl_with_support([1.0, 0.0], [0.5, 0.5])
ex4_reverse = kl_with_support([0.5, 0.5], [1.0, 0.0])
'''

# torch all the way, the later answer using a tensor method on what the earlier one returns: grading's stand-ins
# returned numpy, and .clamp / .clone raised there alone (a student's walkthrough: 0 of 2 twice, 10/10 in check)
TORCH_ENTROPY = '''\
def entropy_nats(p):
    return torch.special.entr(torch.as_tensor(p, dtype=torch.float64)).sum(dim=-1)
'''

TORCH_KL = '''\
def kl_nats(p, q):
    p, q = torch.as_tensor(p, dtype=torch.float64), torch.as_tensor(q, dtype=torch.float64)
    return (torch.special.xlogy(p, p) - torch.special.xlogy(p, q)).sum(dim=-1)
'''

CLAMPED_GAP = '''\
def entropy_gap(p):
    P = torch.as_tensor(p, dtype=torch.float64)
    return kl_nats(P, torch.full_like(P, 1.0 / P.shape[-1])).clamp(min=0.0)
'''

TORCH_BIGRAM = '''\
def bigram_mle(ids, K):
    t = torch.as_tensor(np.asarray(ids), dtype=torch.long)
    if t.ndim != 1 or len(t) < 2 or bool(((t < 0) | (t >= K)).any()):
        raise ValueError(f"ids must be a sequence [n], n >= 2, of values in [0, {K})")
    C = torch.bincount(t[:-1] * K + t[1:], minlength=K * K).reshape(K, K).to(torch.float64)
    N = C.sum(dim=1, keepdim=True)
    if bool((N == 0).any()):
        raise ValueError(f"symbols {torch.nonzero(N[:, 0] == 0).flatten().tolist()} never precede another symbol")
    return C / N
'''

CLONED_ADD_K = '''\
def add_k_probs(ids, K, k):
    if k < 0:
        raise ValueError(f"k must be >= 0, got {k}")
    if k == 0:
        return bigram_mle(ids, K).clone()
    t = torch.as_tensor(np.asarray(ids), dtype=torch.long)
    if t.ndim != 1 or len(t) < 2 or bool(((t < 0) | (t >= K)).any()):
        raise ValueError(f"ids must be a sequence [n], n >= 2, of values in [0, {K})")
    C = torch.bincount(t[:-1] * K + t[1:], minlength=K * K).reshape(K, K).to(torch.float64)
    return (C + k) / (C.sum(dim=1, keepdim=True) + K * k)
'''

HONEST = {
    "04-entropy-cross-entropy-kl": {"ex_torch_kl_div": KL_DIV_AS_DEFAULT, "ex_entropy": TORCH_ENTROPY,
                                    "ex_kl_direction": TORCH_KL, "ex_max_entropy": CLAMPED_GAP},
    "05-sequence-loss-and-perplexity": {"ex_sequence_cross_entropy": CE_FROM_IMPORT},
    "06-counting-language-model": {"ex_bigram_mle": TORCH_BIGRAM, "ex_add_k_probs": CLONED_ADD_K},
}

# notebook -> solution cell -> (answer, the test cell it must fail, words of its message); None: it must pass
CASES = {
    "00-vectors-shapes-and-gradients": {
        "ex_affine": (LIST_AFFINE, "test_affine", "affine returns an array, not a list"),
        "ex_residual_grad": (IN_PLACE_RESIDUAL, "test_residual_grad", "residual_grad leaves x unchanged"),
    },
    "02-shapes-and-loss": {
        "ex_stable_softmax": (SPECIAL_SOFTMAX, "test_stable_softmax", "it called torch.special.softmax"),
        "ex_target_loss_from_logits": (TENSOR_LOGSUMEXP, "test_target_loss_from_logits", "it called Tensor.logsumexp"),
        "ex_kl_with_support": (IN_PLACE_KL, "test_kl_with_support", "kl_with_support leaves its distributions unchanged"),
    },
    "01-probability-and-bayes": {
        "ex_posterior": (ALL_ZERO_LIKELIHOOD_ONLY, "test_posterior",
                         "evidence 0 although a likelihood is positive (prior [1, 0], likelihood [0, 0.5])"),
        "ex_joint_from_conditionals": (IN_PLACE_TABLES, "test_joint_from_conditionals",
                                       "joint_from_conditionals leaves its tables unchanged"),
        "ex_var_of_sum": (SWAPPED_MARGINALS, "test_var_of_sum", "ValueError: operands could not be broadcast"),
    },
    "05-sequence-loss-and-perplexity": {
        "ex_sequence_cross_entropy": (HAND_WRITTEN_CE, "test_sequence_cross_entropy",
                                      "sequence_cross_entropy calls F.cross_entropy"),
        "ex_masked_token_mean": (SLOT_MEAN, "test_masked_token_mean", "§2.9 token mean"),
    },
    "04-entropy-cross-entropy-kl": {
        "ex_entropy": (NAIVE_ENTROPY, "test_entropy", "H([1, 0]) with 0 ln 0 = 0"),
        "ex_kl_direction": (REVERSED_KL, "test_kl_direction", "KL(p||q) (2.44)"),
        "ex_max_entropy": (GAP_FROM_KL, None, None),
        "ex_torch_kl_div": (KL_AS_FLOAT, "test_torch_kl_div", "returns a 0-d tensor (not a Python float)"),
    },
    "03-maximum-likelihood": {
        "ex_weighted_calibration": (SCALAR_WEIGHT_ONLY, "test_weighted_calibration",
                                    "(line 5 of the visible checks): ValueError: The truth value of an array"),
    },
    "06-counting-language-model": {
        "ex_bigram_mle": (TABLE_NORMALISED, "test_bigram_mle", "ids 0 1 0 1 1"),
        "ex_add_k_probs": (UNSIGNED_IDS, None, None),
    },
}

# further wrong answers to exercises CASES has one for, each dict a run of its own
MORE_CASES = [{
    "00-vectors-shapes-and-gradients": {
        "ex_residual_grad": (SWAPPED_RESIDUAL, "test_residual_grad", "with W = 0 the layer path contributes 0"),
    },
    "03-maximum-likelihood": {
        "ex_weighted_calibration": (ALL_WEIGHTS_NEGATIVE, "test_weighted_calibration",
                                    "a weight array with one negative element"),
    },
    "04-entropy-cross-entropy-kl": {
        "ex_max_entropy": (SECOND_AXIS_GAP, "test_max_entropy", "one gap per position of a [2, 3, 4] batch"),
        "ex_torch_kl_div": (LOG_TARGET_KL, "test_torch_kl_div", "targets with zero entries"),
    },
}, {
    "04-entropy-cross-entropy-kl": {
        "ex_entropy": (PP_ENTROPY, "test_entropy", "entropy_nats works without calling pp.entropy"),
    },
    "05-sequence-loss-and-perplexity": {
        "ex_masked_token_mean": (PP_TOKEN_MEAN, "test_masked_token_mean", "works without calling"),
    },
}]
RUNS = [pytest.param(name, CASES[name], id=name) for name in sorted(CASES)] + \
    [pytest.param(name, cases[name], id=f"{name}-more{number}")
     for number, cases in enumerate(MORE_CASES, 1) for name in sorted(cases)]


def with_answers(name: str, answers: dict[str, str]):
    """The source notebook `name` with the solution cells of answers (grade id -> code) replaced."""
    nb = nbformat.read(NOTEBOOKS / f"{name}.ipynb", as_version=4)
    replaced = set()
    for cell in nb.cells:
        grade_id = nbgrader_meta(cell).get("grade_id")
        if grade_id in answers:
            cell.source = answers[grade_id]
            replaced.add(grade_id)
    assert replaced == set(answers), f"{name} has no solution cells {sorted(set(answers) - replaced)}"
    return nb


@pytest.mark.parametrize("name, cases", RUNS)
def test_exactly_the_test_cells_of_the_wrong_answers_fail_naming_the_check(name, cases, tmp_path, monkeypatch):
    monkeypatch.setenv("PART_II_ROOT", str(REPO))  # the kernel runs in tmp_path, away from code/part-ii
    nb = run_notebook(with_answers(name, {grade_id: code for grade_id, (code, _, _) in cases.items()}), tmp_path,
                      timeout=120)
    failed = {grade_id: message for _, grade_id, _, message, passed in exercise_rows(nb) if passed is False}
    # the shortcuts are right otherwise, and the exercises after a wrong one are graded with a reference in its place
    assert set(failed) == {test for _, test, _ in cases.values() if test}, failed
    for _, test, words in cases.values():
        if test:
            assert words in failed[test], failed[test]


@pytest.mark.parametrize("name", sorted(HONEST))
def test_right_answers_written_another_way_pass_every_check(name, tmp_path, monkeypatch):
    """calls_watched saw only calls through F.kl_div / F.cross_entropy themselves: `from torch.nn.functional import
    cross_entropy`, or kl_div as a default argument, failed the check that the exercise's call is made. And a later
    answer using tensor methods on an earlier all-torch answer's result failed under grading's stand-ins."""
    monkeypatch.setenv("PART_II_ROOT", str(REPO))
    nb = run_notebook(with_answers(name, HONEST[name]), tmp_path, timeout=120)
    failed = {grade_id: message for _, grade_id, _, message, passed in exercise_rows(nb) if passed is False}
    assert failed == {}, failed


def test_a_test_cell_moved_below_a_later_exercise_s_still_tests_the_student_s_own_function(tmp_path, monkeypatch):
    """The stand-ins for 4.1's and 4.2's functions live while 4.3's test cell runs, not after it (review: they stayed,
    so moving 4.1's and 4.2's test cells below 4.3's passed them without an answer). A stand-in 4.3's answer kept
    and 4.1's answer calls fails too."""
    monkeypatch.setenv("PART_II_ROOT", str(REPO))
    nb = with_answers("04-entropy-cross-entropy-kl", {"ex_entropy": CALLS_WHAT_4_3_KEPT, "ex_kl_direction": UNANSWERED,
                                                      "ex_decomposition": KEEPS_THE_STAND_IN})
    moved = [c for c in nb.cells if nbgrader_meta(c).get("grade_id") in ("test_entropy", "test_kl_direction")]
    nb.cells = [c for c in nb.cells if c not in moved]
    at = next(i for i, c in enumerate(nb.cells) if nbgrader_meta(c).get("grade_id") == "test_decomposition")
    nb.cells[at + 1:at + 1] = moved
    nb = run_notebook(nb, tmp_path, timeout=120)
    failed = {grade_id: message for _, grade_id, _, message, passed in exercise_rows(nb) if passed is False}
    assert set(failed) == {"test_entropy", "test_kl_direction"}, failed  # 4.3 and 4.4 still pass with the stand-ins
    assert "the grader's stand-in for entropy_nats works only in the test cell that put it there" in failed["test_entropy"]
    assert "NotImplementedError" in failed["test_kl_direction"], failed["test_kl_direction"]
