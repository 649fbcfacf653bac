"""Solve five exercises with the reference module the instructions forbid, in five ways.

Each shortcut gives the right numbers (pp is the course's own reference path), so the value
checks cannot tell. One calls pp by attribute, which the spies of the hidden tests' guard
(checks.forbidden_calls) see; the other four hold a reference taken before the test cell runs,
which the spies on pp's attributes never see: an alias imported under another name, the reference
function bound to the exercise's own name, a default argument, and a closure. The guard puts spies
in those places too. The five test cells score 0 with a verdict naming what the exercise must do
without.
"""

INJECT = [
    ("after", "ex_stable_softmax",
     "def stable_softmax(logits):\n    return pp.softmax(np.asarray(logits, dtype=np.float64))\n"),
    ("after", "ex_masked_mean_loss",
     "def _with_reduce():\n"
     "    reduce = pp.reduce_losses\n\n"
     "    def masked_mean_loss(target_probs, mask):\n"
     "        mask = np.asarray(mask, dtype=bool)\n"
     "        losses = -np.log(np.where(mask, np.asarray(target_probs, dtype=np.float64), 1.0))\n"
     "        return float(reduce(losses, mask=mask))\n"
     "    return masked_mean_loss\n\n\n"
     "masked_mean_loss = _with_reduce()\n"),
    ("after", "ex_perplexity_from_loss",
     "perplexity_from_loss = pp.perplexity\n"),
    ("after", "ex_kl_with_support",
     "from probability_practice import kl_divergence as kl\n\n\n"
     "def kl_with_support(q, p):\n    return float(kl(np.asarray(q, dtype=np.float64), np.asarray(p, dtype=np.float64)))\n"),
    ("after", "ex_target_loss_from_logits",
     "def target_loss_from_logits(logits, targets, nll=pp.nll_from_logits):\n    return nll(logits, targets)\n"),
]
