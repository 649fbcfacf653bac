"""Run a function on crafted student text in a child process, with a minute to spare.

Patterns that backtrack took minutes to hours on inputs a student can hand in (a red-team review and an audit of
every pattern applied to student text); the fixed code takes milliseconds. The minute is a watchdog, not a timing:
a benchmark measures speed, this only keeps a hang from passing.
"""

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def run_on(call: str, text: str, setup: str = "", seconds: int = 60) -> str:
    """What `call` (an expression using `text`, the crafted input read from stdin) evaluates to, as repr, computed
    in a child Python at the repository root; subprocess.TimeoutExpired after `seconds`."""
    code = f"import sys\n{setup}\ntext = sys.stdin.read()\nsys.stdout.write(repr({call}))"
    done = subprocess.run([sys.executable, "-c", code], input=text, capture_output=True, text=True, timeout=seconds,
                          cwd=REPO)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout
