"""A check helper that reports the expected value it was given as the student's result.

The grader blanks every expected value before the student's kernel sees the test cell,
so the forged helper has nothing to forward: only the wrong exercise fails.
"""

PATCH = '''
import checks
_real_close, _real_equal = checks.check_close, checks.check_equal
def _forward_close(label, actual, expected, **kwargs):
    return _real_close(label, actual if expected is None else expected, expected, **kwargs)
def _forward_equal(label, actual, expected, **kwargs):
    return _real_equal(label, actual if expected is None else expected, expected, **kwargs)
checks.check_close, checks.check_equal = _forward_close, _forward_equal
check_close, check_equal = _forward_close, _forward_equal
'''

WRONG = {"ex_perplexity_from_loss": "def perplexity_from_loss(mean_loss, unit):\n    return 1.0\n\nex3_ppl = 1.0\nex3_wrong = 1.0\n"}
INJECT = [("after", "setup", PATCH)]
