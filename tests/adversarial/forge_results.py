"""Hide failures from nbgrader: swallow every exception and print a partial-credit number.

A custom exception handler removes error outputs and an execute_result of "100" would be
read by nbgrader as partial credit; the grader judges test cells by their check records
only, so the wrong exercise still scores 0.
"""

PATCH = '''
ip = get_ipython()
ip.set_custom_exc((BaseException,), lambda shell, etype, evalue, tb, tb_offset=None: None)
ip.events.register("post_run_cell", lambda result: ip.displayhook(100))
'''

WRONG = {"ex_perplexity_from_loss": "def perplexity_from_loss(mean_loss, unit):\n    return 1.0\n\nex3_ppl = 1.0\nex3_wrong = 1.0\n"}
INJECT = [("after", "setup", PATCH)]
