"""``python -m autograder``: the grading harness's command line (see autograder/cli.py)."""

import os
import sys

try:
    from .cli import main, settle_after_interrupt

    code = main()
    if code == 130:  # an impatient second Ctrl-C must not break the kernels' clean-up at exit (test_grading)
        settle_after_interrupt()
    sys.stdout.flush()  # here, where a closed pipe can still be handled, not at exit
except BrokenPipeError:
    # the reader stopped early (`collect PATH | head`): the command's work is done; no traceback for that
    os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # nothing more to flush at exit
    code = 1
except KeyboardInterrupt:  # Ctrl-C while Python was still importing, before main() could catch it
    print("python -m autograder: interrupted", file=sys.stderr)
    code = 130
sys.exit(code)
