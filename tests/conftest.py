"""Shared test setup: the course's code folder is importable as plain modules."""

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
CODE = REPO / "code" / "part-ii"
if str(CODE) not in sys.path:
    sys.path.insert(0, str(CODE))
