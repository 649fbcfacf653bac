"""The data file: schema, every case reproduced by the numpy reference and by PyTorch, the book's printed text.

Expected values come from the symbolic strings in data/part-ii/arithmetic.json (evaluated
exactly by sympy); the reference path and PyTorch (float64) are two independent ways of
computing them, each compared unrounded.
"""

from __future__ import annotations

import json
import math
import re
from decimal import ROUND_HALF_UP, Decimal

import numpy as np
import pytest
import sympy
import torch
import torch.nn.functional as F

import arithmetic_data
import probability_practice as pp
from arithmetic_data import DATA_PATH, SCHEMA_PATH, DataFileError, load_cases

pytestmark = pytest.mark.filterwarnings("error::RuntimeWarning")  # numpy warnings would reach a notebook's stderr
CASES = load_cases()
LN2 = math.log(2.0)


def T(x):
    """A float64 tensor from a number or an array."""
    return torch.as_tensor(np.asarray(x, dtype=np.float64), dtype=torch.float64)


def _bits(unit_options: dict) -> float:
    """Divisor for the case's unit option (1 for nats, ln 2 for bits)."""
    return LN2 if unit_options.get("unit") == "bits" else 1.0


# ------------------------------------------------------------------ the two paths

REFERENCE = {
    "softmax": lambda i, o: pp.softmax(i["logits"]),
    "nll_from_logits": lambda i, o: pp.nll_from_logits(i["logits"], i["target"]),
    "nll_from_probs": lambda i, o: pp.nll_from_probs(i["probs"], i["target"]),
    "neg_log_prob": lambda i, o: pp.neg_log_prob(i["p"], unit=o.get("unit", "nats")),
    "sum_nll": lambda i, o: -pp.sequence_log_prob(i["p"]),
    "mean_nll": lambda i, o: pp.reduce_losses(pp.neg_log_prob(i["p"]), mask=i.get("mask"), reduction="mean"),
    "sequence_prob": lambda i, o: math.exp(pp.sequence_log_prob(i["p"])),
    "cross_entropy": lambda i, o: pp.cross_entropy(
        i["logits"], i["targets"], mask=i.get("mask"), ignore_index=o.get("ignore_index"),
        class_weights=i.get("class_weights"), reduction=o["reduction"]),
    "reduce_losses": lambda i, o: pp.reduce_losses(
        i["losses"], mask=i.get("mask"), reduction=o["reduction"], weights=i.get("weights")),
    "softmax_cross_entropy_grad": lambda i, o: pp.softmax_cross_entropy_grad(i["logits"], i["target"]),
    "entropy": lambda i, o: pp.entropy(i["p"], unit=o.get("unit", "nats")),
    "cross_entropy_dist": lambda i, o: pp.cross_entropy_dist(i["p"], i["q"], unit=o.get("unit", "nats")),
    "kl_divergence": lambda i, o: pp.kl_divergence(i["p"], i["q"], unit=o.get("unit", "nats")),
    "nats_to_bits": lambda i, o: pp.nats_to_bits(i["value"]),
    "bits_to_nats": lambda i, o: pp.bits_to_nats(i["value"]),
    "perplexity": lambda i, o: pp.perplexity(i["mean_loss"], unit=o["unit"]),
    "perplexity_from_probs": lambda i, o: pp.perplexity_from_probs(i["p"], mask=i.get("mask")),
    "bayes_posterior": lambda i, o: pp.bayes_posterior(i["prior"], i["likelihood"]),
    "expectation": lambda i, o: pp.expectation(i["values"], i["probs"]),
    "bernoulli_likelihood": lambda i, o: pp.bernoulli_likelihood(i["theta"], i["k"], i["n"]),
    "bernoulli_nll": lambda i, o: pp.bernoulli_nll(i["theta"], i["k"], i["n"]),
    "bernoulli_mle": lambda i, o: pp.bernoulli_mle(i["k"], i["n"]),
    "sigmoid": lambda i, o: pp.sigmoid(i["z"]),
    "bce_with_logits": lambda i, o: pp.bce_with_logits(i["z"], i["y"], pos_weight=i.get("pos_weight")),
    "weighted_bce_optimum": lambda i, o: pp.weighted_bce_optimum(i["p"], i["w"]),
    "one_minus_p": lambda i, o: 1.0 - np.asarray(i["p"], dtype=np.float64),
}


def _torch_targets(i: dict, key: str = "p") -> torch.Tensor:
    """Class-0 targets for a column of target probabilities, -100 (ignored) where the mask is 0."""
    n = len(np.atleast_1d(i[key]))
    targets = torch.zeros(n, dtype=torch.long)
    if "mask" in i:
        targets[~torch.as_tensor(i["mask"])] = -100
    return targets


def _torch_target_logprobs(p) -> torch.Tensor:
    """Target probabilities [M] as log-probabilities [M, 1]: one 'class' per row for F.nll_loss."""
    return torch.log(T(p)).reshape(-1, 1)


def _torch_cross_entropy(i: dict, o: dict) -> torch.Tensor:
    """F.cross_entropy with the class axis moved to dim 1, mask folded into ignore_index."""
    logits = T(i["logits"])
    targets = torch.as_tensor(i["targets"], dtype=torch.long)
    ignore = o.get("ignore_index", -100)
    if "mask" in i:
        targets = torch.where(torch.as_tensor(i["mask"]), targets, torch.full_like(targets, ignore))
    if logits.ndim > 2:
        logits = logits.movedim(-1, 1)
    weight = T(i["class_weights"]) if "class_weights" in i else None
    return F.cross_entropy(logits, targets, weight=weight, ignore_index=ignore, reduction=o["reduction"])


def _torch_reduce(i: dict, o: dict) -> torch.Tensor:
    """Token mean, sum or per-document mean of masked losses [B, T]."""
    losses = T(i["losses"])
    mask = T(i["mask"]) if "mask" in i else torch.ones_like(losses)
    if o["reduction"] == "sum":
        return (losses * mask).sum()
    if o["reduction"] == "mean":
        return (losses * mask).sum() / mask.sum()
    return ((losses * mask).sum(dim=1) / mask.sum(dim=1)).mean()


def _torch_grad(i: dict, o: dict) -> torch.Tensor:
    """d/dz of the summed cross-entropy, by autograd."""
    z = T(i["logits"]).requires_grad_(True)
    target = torch.as_tensor(i["target"], dtype=torch.long)
    k = z.shape[-1]
    F.cross_entropy(z.reshape(-1, k), target.reshape(-1), reduction="sum").backward()
    return z.grad


def _record(k: int, n: int) -> torch.Tensor:
    """An ordered 0/1 record with k ones in n trials."""
    return torch.tensor([1.0] * k + [0.0] * (n - k), dtype=torch.float64)


def _torch_weighted_optimum(i: dict, o: dict) -> torch.Tensor:
    """Minimise the expected weighted BCE over the logit by Newton steps with autograd; return sigmoid(z*)."""
    p, w = T(i["p"]), T(i["w"])
    z = torch.zeros((), dtype=torch.float64, requires_grad=True)
    for _ in range(50):
        loss = F.binary_cross_entropy_with_logits(z, p, pos_weight=w)
        (g,) = torch.autograd.grad(loss, z, create_graph=True)
        (h,) = torch.autograd.grad(g, z)
        with torch.no_grad():
            z -= g / h
    return torch.sigmoid(z.detach())


TORCH = {
    "softmax": lambda i, o: F.softmax(T(i["logits"]), dim=-1),
    "nll_from_logits": lambda i, o: F.cross_entropy(
        T(i["logits"]).reshape(-1, np.shape(i["logits"])[-1]),
        torch.as_tensor(i["target"], dtype=torch.long).reshape(-1), reduction="none").reshape(np.shape(i["target"])),
    "nll_from_probs": lambda i, o: F.nll_loss(
        torch.log(T(i["probs"])).reshape(-1, np.shape(i["probs"])[-1]),
        torch.as_tensor(i["target"], dtype=torch.long).reshape(-1), reduction="none").reshape(np.shape(i["target"])),
    "neg_log_prob": lambda i, o: -torch.log(T(i["p"])) / _bits(o),
    "sum_nll": lambda i, o: F.nll_loss(_torch_target_logprobs(i["p"]), _torch_targets(i), reduction="sum"),
    "mean_nll": lambda i, o: F.nll_loss(_torch_target_logprobs(i["p"]), _torch_targets(i), reduction="mean"),
    "sequence_prob": lambda i, o: torch.prod(T(i["p"])),
    "cross_entropy": _torch_cross_entropy,
    "reduce_losses": _torch_reduce,
    "softmax_cross_entropy_grad": _torch_grad,
    "entropy": lambda i, o: torch.distributions.Categorical(probs=T(i["p"])).entropy() / _bits(o),
    # xlogy(0, 0) = 0 is the 0 ln 0 = 0 convention; F.cross_entropy would give 0 * -inf = nan there
    "cross_entropy_dist": lambda i, o: -torch.special.xlogy(T(i["p"]), T(i["q"])).sum(-1) / _bits(o),
    # F.kl_div(input = log q, target = p) computes KL(p || q): the prediction goes first, in log space
    "kl_divergence": lambda i, o: F.kl_div(torch.log(T(i["q"])), T(i["p"]), reduction="sum") / _bits(o),
    "nats_to_bits": lambda i, o: T(i["value"]) / LN2,
    "bits_to_nats": lambda i, o: T(i["value"]) * LN2,
    "perplexity": lambda i, o: torch.exp2(T(i["mean_loss"])) if o["unit"] == "bits" else torch.exp(T(i["mean_loss"])),
    "perplexity_from_probs": lambda i, o: torch.exp(
        F.nll_loss(_torch_target_logprobs(i["p"]), _torch_targets(i), reduction="mean")),
    "bayes_posterior": lambda i, o: (T(i["prior"]) * T(i["likelihood"])) / (T(i["prior"]) * T(i["likelihood"])).sum(),
    "expectation": lambda i, o: torch.dot(T(i["probs"]), T(i["values"])),
    "bernoulli_likelihood": lambda i, o: torch.distributions.Bernoulli(probs=T(i["theta"]))
    .log_prob(_record(i["k"], i["n"])).sum().exp(),
    "bernoulli_nll": lambda i, o: -torch.distributions.Bernoulli(probs=T(i["theta"]))
    .log_prob(_record(i["k"], i["n"])).sum(),
    "bernoulli_mle": lambda i, o: _record(i["k"], i["n"]).mean(),
    "sigmoid": lambda i, o: torch.sigmoid(T(i["z"])),
    "bce_with_logits": lambda i, o: F.binary_cross_entropy_with_logits(
        T(i["z"]), T(i["y"]), pos_weight=T(i["pos_weight"]) if "pos_weight" in i else None, reduction="none"),
    "weighted_bce_optimum": _torch_weighted_optimum,
    "one_minus_p": lambda i, o: 1.0 - T(i["p"]),
}


def assert_matches_expected(case, got, path: str) -> None:
    """Compare a computed value with the case's exact value, unrounded: same shape, same infinities, rtol."""
    if isinstance(got, torch.Tensor):
        assert got.dtype == torch.float64, f"{case.id} [{path}]: PyTorch computed in {got.dtype}, expected float64"
        got = got.detach().numpy()
    got = np.asarray(got, dtype=np.float64)
    exp = np.asarray(case.expected, dtype=np.float64)
    assert got.shape == exp.shape, f"{case.id} [{path}]: shape {got.shape}, expected {exp.shape}"
    assert not np.isnan(got).any(), f"{case.id} [{path}]: got nan in {got}"
    inf = np.isinf(exp)
    assert np.array_equal(np.isinf(got), inf) and np.array_equal(got[inf], exp[inf]), (
        f"{case.id} [{path}]: infinities differ: got {got}, expected {case.symbolic}")
    finite = ~inf
    err = np.abs(got[finite] - exp[finite])
    bound = case.rtol * np.abs(exp[finite])
    assert np.all(err <= bound), (
        f"{case.id} [{path}]: got {got.tolist()}, expected {case.symbolic} = {exp.tolist()}; "
        f"max abs error {err.max():.3g} exceeds rtol {case.rtol:g}")


CASE_IDS = sorted(CASES)


def test_every_quantity_has_both_paths():
    """The schema's closed list of quantities maps one-to-one onto the two computation paths."""
    schema = json.loads(SCHEMA_PATH.read_text(encoding="utf-8"))
    quantities = set(schema["$defs"]["case"]["properties"]["quantity"]["enum"])
    assert quantities == set(REFERENCE), f"no reference mapping for {quantities ^ set(REFERENCE)}"
    assert quantities == set(TORCH), f"no PyTorch mapping for {quantities ^ set(TORCH)}"


@pytest.mark.parametrize("case_id", CASE_IDS)
def test_case_reproduced_by_reference(case_id):
    case = CASES[case_id]
    assert_matches_expected(case, REFERENCE[case.quantity](case.inputs, case.options), "reference")


@pytest.mark.parametrize("case_id", CASE_IDS)
def test_case_reproduced_by_pytorch(case_id):
    case = CASES[case_id]
    assert_matches_expected(case, TORCH[case.quantity](case.inputs, case.options), "pytorch float64")


# ------------------------------------------------------------------ the book's printed text

_NUMBER = re.compile(r"^-?\d{1,3}(?:,\d{3})+(?:\.\d+)?$|^-?\d+(?:\.\d+)?$")
_PERCENT = re.compile(r"^(-?\d+(?:\.\d+)?)%$")
_SCIENTIFIC = re.compile(r"^(-?\d+(?:\.\d+)?)×10\^?(-?\d+)$")
_INFINITY = {"无穷大", "∞", "inf"}


def _rounded(value, decimals: int) -> Decimal:
    """Round an exact sympy value half-up to the given number of decimals (from 40 significant digits)."""
    return Decimal(str(sympy.N(value, 40))).quantize(Decimal(1).scaleb(-decimals), rounding=ROUND_HALF_UP)


def _symbolic_text(text: str):
    """Parse the book's symbolic spellings (ln2, √8, 1.5ln2, e^{1.5}, −log 0.70, 9 / 108) with sympy."""
    s = re.sub(r"e\^\{([^}]*)\}", r"exp(\1)", text)
    s = re.sub(r"√\s*(\d+)", r"sqrt(\1)", s)
    s = re.sub(r"(?:ln|log)\s*(\d+(?:\.\d+)?)", r"log(\1)", s)
    s = re.sub(r"(\d)\s*(log|sqrt|exp)", r"\1*\2", s)
    return sympy.sympify(s, rational=True)


def check_printed(text: str, value) -> str | None:
    """Return None when the printed text agrees with the exact value at its own precision, else a reason."""
    text = text.strip()
    if text in _INFINITY:
        return None if value == sympy.oo else f"the book prints infinity, the exact value is {value}"
    if value == sympy.oo:
        return f"the exact value is infinite, the book prints {text!r}"
    if _NUMBER.match(text):
        printed = Decimal(text.replace(",", ""))
        decimals = max(0, -printed.as_tuple().exponent)
        got = _rounded(value, decimals)
        return None if got == printed else f"{text!r} printed, exact value rounds to {got}"
    if m := _PERCENT.match(text):
        printed = Decimal(m.group(1))
        got = _rounded(value * 100, max(0, -printed.as_tuple().exponent))
        return None if got == printed else f"{text!r} printed, exact value is {got}%"
    if m := _SCIENTIFIC.match(text):
        mantissa, exponent = Decimal(m.group(1)), int(m.group(2))
        got = _rounded(value / sympy.Integer(10) ** exponent, max(0, -mantissa.as_tuple().exponent))
        return None if got == mantissa else f"{text!r} printed, exact value is {got}×10^{exponent}"
    try:
        printed = _symbolic_text(text)
    except (sympy.SympifyError, SyntaxError, TypeError):
        return f"cannot read the printed text {text!r}"
    diff = sympy.N(printed - value, 50)
    return None if abs(diff) < sympy.Float("1e-40") else f"{text!r} = {sympy.N(printed, 12)}, exact value {sympy.N(value, 12)}"


def _printed_items(text: str) -> list[str]:
    """Split '[a, b, c]' into its items; normalise the Unicode minus sign."""
    text = text.replace("−", "-").strip()
    if text.startswith("[") and text.endswith("]"):
        return [item.strip() for item in text[1:-1].split(",")]
    return [text]


BOOK_CASES = [cid for cid in CASE_IDS if CASES[cid].book_text is not None]


@pytest.mark.parametrize("case_id", BOOK_CASES)
def test_book_text_agrees_with_exact_value(case_id):
    """Each printed number, read at the book's own precision, equals the exact value (every '≈' form too)."""
    case = CASES[case_id]
    exact = case.exact()
    if case.book_index is not None:
        exact = exact[case.book_index]
    items = _printed_items(case.book_text)
    values = exact if isinstance(exact, list) else [exact]
    assert len(items) == len(values), f"{case.id}: book shows {len(items)} value(s), expected has {len(values)}"
    for item, value in zip(items, values):
        for form in item.split("≈"):
            reason = check_printed(form, value)
            assert reason is None, f"{case.id}: {reason}"


@pytest.mark.parametrize(
    "text, value, ok",
    [
        ("0.693147", sympy.log(2), True),
        ("0.693148", sympy.log(2), False),
        ("0.6923", sympy.Rational(9, 13), True),
        ("8.33%", sympy.Rational(1, 12), True),
        ("8.34%", sympy.Rational(1, 12), False),
        ("1,000", 1000 + sympy.log(1 + sympy.exp(-1000)), True),
        ("7.9×10-31", sympy.Integer(2) ** -100, True),
        ("ln16", sympy.log(16), True),
        ("1.5ln2", sympy.Rational(3, 2) * sympy.log(2), True),
        ("√8", sympy.sqrt(8), True),
        ("√8", sympy.Integer(3), False),
        ("无穷大", sympy.oo, True),
        ("无穷大", sympy.log(2), False),
    ],
)
def test_printed_text_checker_can_fail(text, value, ok):
    """The book-text checker accepts the right value and rejects a wrong one (it is not vacuous)."""
    assert (check_printed(text, value) is None) == ok


# ------------------------------------------------------------------ schema and loader


def test_data_file_matches_schema():
    import jsonschema

    schema = json.loads(SCHEMA_PATH.read_text(encoding="utf-8"))
    jsonschema.Draft202012Validator.check_schema(schema)
    errors = list(jsonschema.Draft202012Validator(schema).iter_errors(json.loads(DATA_PATH.read_text(encoding="utf-8"))))
    assert not errors, "; ".join(f"{list(e.absolute_path)}: {e.message}" for e in errors[:5])


def test_case_ids_are_unique_and_sources_named():
    raw = json.loads(DATA_PATH.read_text(encoding="utf-8"))["cases"]
    ids = [c["id"] for c in raw]
    assert len(ids) == len(set(ids)) == len(CASES)
    prefix = {"000": "ch2-", "001": "ch6-", "002": "blog-", "004": "lesson-"}
    for c in raw:
        assert c["id"].startswith(prefix[c["source"]["seed"]]), f"{c['id']}: id prefix does not match seed {c['source']['seed']}"


def test_required_minimum_cases_present():
    """The cases the issue names explicitly are all in the file."""
    required = [
        "ch6-ex6.1-softmax", "ch6-ex6.2-softmax-shift-1000", "ch6-table6.1-mean-loss", "ch6-ex6.4-kl-forward",
        "ch6-ex6.4-kl-reverse", "ch6-sec6.4-mean-loss-bits", "ch6-sec6.4-perplexity-from-mean-loss",
        "ch6-sec6.6-old-document-loss", "ch6-ex6.8-1-nll-current", "ch6-ex6.8-2-mean-loss", "ch6-ex6.8-3-perplexity-bits",
        "ch6-ex6.8-4-kl-reverse", "ch6-ex6.8-6-stable-nll", "ch2-eq2.12-joint-correct-accepted", "ch2-eq2.15-bayes-verifier",
        "ch2-eq2.30-bernoulli-mle", "ch2-eq2.33-bce-z2-y0", "ch2-eq2.42-entropy", "ch2-eq2.45-kl-reverse",
        "ch2-sec2.4-event-probability", "ch2-sec2.9-token-average", "ch2-sec2.9-document-average", "blog-spam-posterior",
        "blog-likelihood-theta-two-thirds", "blog-softmax-2-1-0", "blog-stdlib-loss", "blog-entropy-skewed",
        "blog-three-position-mean", "lesson-neg-log-p-table", "lesson-sequence-prob", "lesson-half-pow-100",
        "lesson-train-loss-mean", "lesson-q-minus-y", "lesson-ppl-ln10",
    ]
    missing = [cid for cid in required if cid not in CASES]
    assert not missing, f"missing cases: {missing}"


def test_loader_types():
    """Targets and counts stay integers, masks are booleans, everything else float64; 'oo' becomes inf."""
    assert isinstance(CASES["ch2-eq2.30-bernoulli-mle"].inputs["k"], int)
    assert CASES["ch6-ex6.3-nll-two-targets"].inputs["target"].dtype == np.int64
    assert CASES["ch6-ex6.8-2-mean-loss"].inputs["mask"].dtype == bool
    assert CASES["ch6-ex6.1-softmax"].inputs["logits"].dtype == np.float64
    assert CASES["ch6-ex6.8-4-kl-reverse"].expected == math.inf
    assert isinstance(CASES["ch6-table6.1-mean-loss"].expected, float)
    assert CASES["ch6-table6.1-mean-loss"].exact() == sympy.log(8) / 2
    with pytest.raises(AttributeError):
        CASES["ch6-table6.1-mean-loss"].id = "other"  # frozen


def test_missing_id_lists_close_ids():
    with pytest.raises(KeyError, match="ch6-ex6.1-softmax"):
        CASES["ch6-ex6.1-softmx"]


def _write_corrupted(tmp_path, mutate):
    """Copy the data file and schema into tmp_path, apply mutate(doc) to the data, return the path."""
    doc = json.loads(DATA_PATH.read_text(encoding="utf-8"))
    mutate(doc)
    path = tmp_path / "arithmetic.json"
    path.write_text(json.dumps(doc, ensure_ascii=False), encoding="utf-8")
    return path


def _set(case_id, key, value):
    """A mutation setting key of the named case to value."""
    def mutate(doc):
        next(c for c in doc["cases"] if c["id"] == case_id)[key] = value
    return mutate


@pytest.mark.parametrize(
    "mutate, message",
    [
        (_set("ch6-ex6.1-softmax", "quantity", "softmaxx"), "case 'ch6-ex6.1-softmax'"),
        (_set("ch6-ex6.1-softmax", "expected", 0.5), "case 'ch6-ex6.1-softmax'"),
        (_set("ch6-ex6.1-softmax", "inputs", {"p": [1]}), "'logits' is a required property"),
        (_set("ch6-ex6.1-softmax", "unit", "nat"), "'nat' is not one of"),
        (lambda doc: doc["cases"][0].pop("book_text"), "'book_text' is a required property"),
        (_set("ch6-table6.1-mean-loss", "expected", "log(8"), "case 'ch6-table6.1-mean-loss': cannot parse 'log(8'"),
        (_set("ch6-table6.1-mean-loss", "expected", "log(x)/2"), "without free symbols"),
        (_set("ch6-ex6.3-nll-two-targets", "inputs", {"probs": [[1]], "target": [0.5]}), "must hold integers"),
        (_set("ch6-ex6.3-nll-two-targets", "inputs", {"probs": [[1]], "target": [2**70]}), "below 2**53"),
        (_set("ch6-ex6.3-nll-two-targets", "inputs", {"probs": [[1]], "target": ["oo"]}), "must hold integers"),
        (_set("ch6-ex6.8-2-mean-loss", "inputs", {"p": ["1/2", "1/2", "1/4", 1], "mask": [1, 2, 1, 0]}), "0 or 1"),
        (lambda doc: doc["cases"].append(dict(doc["cases"][0])), "appears more than once"),
        (lambda doc: doc.pop("cases"), "'cases' is a required property"),
        (_set("ch6-table6.1-mean-loss", "expected", "10**400"), "too large for float64"),
        (_set("ch6-ex6.1-softmax", "expected", [["1/2"], ["1/4", "1/4"]]), "expected must be a rectangular nested list"),
        (_set("ch6-ex6.1-softmax", "inputs", {"logits": [[1, 2], [3]]}), "input 'logits' must be a rectangular"),
        (_set("ch6-ex6.1-softmax", "inputs", {"logits": [10**400, 1]}), "too large for float64"),
        (_set("ch6-ex6.1-softmax", "inputs", {"logits": [float("inf"), 1]}), "too large for float64; write \"oo\""),
        # found by review: a bare TypeError without the case, and a message of 401 digits
        (_set("ch6-table6.1-mean-loss", "expected", "foo(1)"),
         "case 'ch6-table6.1-mean-loss': foo(1) is not a number (an undefined function?)"),
        (_set("ch6-table6.1-mean-loss", "expected", "10**400"), "…(401 characters) is too large for float64"),
        (_set("ch6-table6.1-mean-loss", "expected", "10**5000"), "an integer of more than 4300 digits is too large"),
    ],
    ids=["unknown-quantity", "expected-not-symbolic", "wrong-input-name", "unknown-unit", "missing-book-text",
         "unparsable-expression", "free-symbol", "fractional-target", "huge-target", "infinite-target",
         "mask-of-2", "duplicate-id", "no-cases", "beyond-float64",
         "ragged-expected", "ragged-input", "json-integer-beyond-float64", "json-infinity", "undefined-function",
         "huge-value-shown-short", "beyond-str-digit-limit"],
)
def test_corrupted_file_is_rejected_with_clear_message(tmp_path, mutate, message):
    path = _write_corrupted(tmp_path, mutate)
    with pytest.raises(DataFileError) as info:
        load_cases(path)
    assert message in str(info.value), f"message {str(info.value)!r} does not mention {message!r}"
    assert isinstance(info.value, ValueError)


def test_unreadable_files_are_rejected(tmp_path):
    with pytest.raises(DataFileError, match="not found"):
        load_cases(tmp_path / "absent.json")
    bad = tmp_path / "bad.json"
    bad.write_text("{ not json", encoding="utf-8")
    with pytest.raises(DataFileError, match="not valid JSON"):
        load_cases(bad)
    with pytest.raises(DataFileError, match="cannot read the data file"):
        load_cases(tmp_path)  # a folder
    huge = tmp_path / "huge.json"
    huge.write_text('{"cases": [' + "9" * 5000 + "]}", encoding="utf-8")
    with pytest.raises(DataFileError, match="holds a number JSON cannot be read with here"):
        load_cases(huge)  # json.loads' bare ValueError before (found by review)
    for wrong in ["", 5]:  # '' read the current folder; 5 was pathlib's TypeError
        with pytest.raises(DataFileError, match=f"path must name the JSON data file \\(a str or Path\\), got {wrong!r}"):
            load_cases(wrong)
    latin = tmp_path / "latin1.json"
    latin.write_bytes(b'{"note": "\xe9t\xe9"}')
    with pytest.raises(DataFileError, match="not UTF-8 text"):
        load_cases(latin)


def test_loader_defaults_to_repository_file():
    assert arithmetic_data.DATA_PATH.is_file() and arithmetic_data.SCHEMA_PATH.is_file()
    assert set(load_cases(DATA_PATH)) == set(CASES)


def test_comparison_rejects_a_wrong_value():
    """assert_matches_expected is not vacuous: a value off by 1e-9 relative, a missing inf and a nan all fail."""
    case = CASES["ch6-table6.1-mean-loss"]
    for wrong in (case.expected * (1 + 1e-9), math.inf, math.nan, [case.expected]):
        with pytest.raises(AssertionError, match="ch6-table6.1-mean-loss"):
            assert_matches_expected(case, wrong, "meta")
    with pytest.raises(AssertionError, match="infinities differ"):
        assert_matches_expected(CASES["ch6-ex6.8-4-kl-reverse"], 1e308, "meta")
