"""Copy the hidden tests' source and inputs into a later cell's output, to read them in the feedback.

A pre_run_cell hook keeps every cell's source, a wrapper keeps the inputs the hidden tests
pass; the last cell prints both. The grader blanks expected values and hides outputs of
cells after a test cell, so nothing hidden reaches the feedback. Every exercise is solved.
"""

HOOK = '''
_seen = []
get_ipython().events.register("pre_run_cell", lambda info: _seen.append(info.raw_cell))
'''

DUMP = '''
print("\\n".join(_seen))
'''

INJECT = [("after", "setup", HOOK), ("end", "", DUMP)]
