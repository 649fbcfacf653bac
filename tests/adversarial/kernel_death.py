"""Stop the kernel mid-notebook: sys.exit(), os._exit(), a segfault and IPython's exit(), each in its own cell.

sys.exit() is caught by IPython; os._exit() and the segfault kill the kernel, which the
grader restarts (replaying the earlier cells), so every solved exercise still scores.
exit() stops the kernel a moment after its cell replies: the grader fails that cell and
restarts too, rather than blame whichever later cell is running when the kernel dies.
"""

INJECT = [
    ("after", "setup", "import sys\nsys.exit(3)"),
    ("after", "ex_stable_softmax", "import os\nos._exit(1)"),
    ("after", "ex_masked_mean_loss", "import ctypes\nctypes.string_at(0)"),
    ("after", "ex_perplexity_from_loss", "print('leaving')\nexit()"),
]
