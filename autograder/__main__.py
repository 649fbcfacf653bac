"""``python -m autograder``: the grading harness's command line (see autograder/cli.py)."""

import sys

from .cli import main

sys.exit(main())
