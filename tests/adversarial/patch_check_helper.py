"""Replace the check helper with no-ops, with one exercise wrong.

Every check after the patch reports nothing, so those test cells fail (the ones before it,
run with the real helper, still pass).
"""

PATCH = '''
import checks
def _ok(*args, **kwargs):
    return ""
checks.check_close = checks.check_equal = checks.check_true = checks.check_raises = _ok
check_close = check_equal = check_true = check_raises = _ok
'''

WRONG = {"ex_perplexity_from_loss": "def perplexity_from_loss(mean_loss, unit):\n    return 1.0\n\nex3_ppl = 1.0\nex3_wrong = 1.0\n"}
INJECT = [("after", "ex_masked_mean_loss", PATCH)]
