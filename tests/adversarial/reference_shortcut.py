"""Solve five exercises by calling the reference module the instructions forbid.

Each shortcut gives the right numbers (pp is the course's own reference path), so the value
checks cannot tell; the hidden tests' guard (checks.forbidden_calls) notes the call, and
those five test cells score 0 with a verdict naming what the exercise must do without.
"""

INJECT = [
    ("after", "ex_stable_softmax",
     "def stable_softmax(logits):\n    return pp.softmax(np.asarray(logits, dtype=np.float64))\n"),
    ("after", "ex_masked_mean_loss",
     "def masked_mean_loss(target_probs, mask):\n"
     "    mask = np.asarray(mask, dtype=bool)\n"
     "    losses = -np.log(np.where(mask, np.asarray(target_probs, dtype=np.float64), 1.0))\n"
     "    return float(pp.reduce_losses(losses, mask=mask))\n"),
    ("after", "ex_perplexity_from_loss",
     "def perplexity_from_loss(mean_loss, unit):\n    return pp.perplexity(mean_loss, unit)\n"),
    ("after", "ex_kl_with_support",
     "def kl_with_support(q, p):\n    return float(pp.kl_divergence(np.asarray(q, dtype=np.float64), np.asarray(p, dtype=np.float64)))\n"),
    ("after", "ex_target_loss_from_logits",
     "def target_loss_from_logits(logits, targets):\n    return pp.nll_from_logits(logits, targets)\n"),
]
