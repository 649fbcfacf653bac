"""A stand-in grading worker for test_grading: it arms die_with_parent() like a real worker, then works
for a while and records whether it lived on after the `grade` run that started it ended (importable by
multiprocessing's fork server, hence a module of its own)."""

import os
import time
from pathlib import Path


def main(marker: str, seconds: float) -> None:
    """Arm die_with_parent(), 'grade' for `seconds`, then write marker (a killed worker writes nothing)."""
    from autograder.worker import die_with_parent

    os.setsid()  # as child_main does
    die_with_parent()
    Path(marker + ".armed").write_text("armed", encoding="utf-8")  # the stand-in grade exits only now
    time.sleep(seconds)
    Path(marker).write_text("alive", encoding="utf-8")
