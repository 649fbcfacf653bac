"""Not an attack: an honest student who solves every exercise in PyTorch and returns tensors.

The notebooks import torch and teach its API, so a correct answer written with tensors (0-d
float64 tensors for scalars, tensors for arrays) must score what the numpy answer scores. The
student's kernel sends tensors to the grader as plain numbers (checks.to_plain), and the hidden
tests call numpy on the returned values (np.shape, np.asarray(...).sum, np.isfinite); until the
course fixed it, np.sum(tensor, axis=-1) in test_stable_softmax raised TypeError and cost 3 points.
ex6_same_failure stays a Python bool: the visible test asks for one.
"""

WRONG = {
    "ex_stable_softmax": (
        "def stable_softmax(logits):\n"
        "    z = torch.as_tensor(logits, dtype=torch.float64)\n"
        "    weights = torch.exp(z - z.max(dim=-1, keepdim=True).values)\n"
        "    return weights / weights.sum(dim=-1, keepdim=True)\n\n\n"
        "versions_logits = np.array([0.0, np.log(3.0)])\n"
        "ex1_probs = stable_softmax(versions_logits)\n"
        "ex1_loss = -torch.log(ex1_probs[1])\n"
        "ex1_loss_shifted = -torch.log(stable_softmax(versions_logits - 50.0)[1])\n"),
    "ex_masked_mean_loss": (
        "def masked_mean_loss(target_probs, mask):\n"
        "    p = torch.as_tensor(target_probs, dtype=torch.float64)\n"
        "    scored = torch.as_tensor(mask, dtype=torch.bool)\n"
        "    if not scored.any():\n"
        "        raise ValueError('mask scores no target')\n"
        "    return -torch.log(p[scored]).mean()\n\n\n"
        "ex2_probs = np.array([[1 / 2, 1 / 2, 1 / 4, 0.0]])\n"
        "ex2_mask = np.array([[True, True, True, False]])\n"
        "ex2_loss = masked_mean_loss(ex2_probs, ex2_mask)\n"
        "ex2_ppl = torch.exp(ex2_loss)\n"
        "ex2_loss_div4 = -torch.log(torch.from_numpy(ex2_probs)[torch.from_numpy(ex2_mask)]).sum() / 4\n"),
    "ex_perplexity_from_loss": (
        "def perplexity_from_loss(mean_loss, unit):\n"
        "    loss = torch.as_tensor(mean_loss, dtype=torch.float64)\n"
        "    if unit == 'nats':\n"
        "        return torch.exp(loss)\n"
        "    if unit == 'bits':\n"
        "        return torch.exp2(loss)\n"
        "    raise ValueError(f'unknown unit {unit!r}')\n\n\n"
        "ex3_ppl = perplexity_from_loss(1.5, 'bits')\n"
        "ex3_wrong = torch.exp(torch.tensor(1.5, dtype=torch.float64))\n"),
    "ex_kl_with_support": (
        "def kl_with_support(q, p):\n"
        "    q = torch.as_tensor(q, dtype=torch.float64)\n"
        "    p = torch.as_tensor(p, dtype=torch.float64)\n"
        "    on = q > 0\n"
        "    if (p[on] == 0).any():\n"
        "        return torch.tensor(float('inf'), dtype=torch.float64)\n"
        "    return (q[on] * torch.log(q[on] / p[on])).sum()\n\n\n"
        "ex4_forward = kl_with_support([1.0, 0.0], [0.5, 0.5])\n"
        "ex4_reverse = kl_with_support([0.5, 0.5], [1.0, 0.0])\n"),
    "ex_target_loss_from_logits": (
        "def target_loss_from_logits(logits, targets):\n"
        "    z = torch.as_tensor(logits, dtype=torch.float64)\n"
        "    y = torch.as_tensor(targets, dtype=torch.int64)\n"
        "    m = z.max(dim=-1, keepdim=True).values\n"
        "    z_y = z.gather(-1, y.unsqueeze(-1)).squeeze(-1)\n"
        "    return m.squeeze(-1) - z_y + torch.log(torch.exp(z - m).sum(dim=-1))\n\n\n"
        "ex6_loss = target_loss_from_logits(np.array([0.0, -1000.0]), np.array(1))\n"
        "ex6_same_failure = False\n"
        "ex6_fix_underflow = 'a'\n"
        "ex6_fix_exact_zero = 'b'\n"),
}
