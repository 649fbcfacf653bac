"""What formgrader may do for this course: manual grading, yes; its Generate, Autograde and Generate Feedback, no.

Those buttons run nbgrader's converters with nbgrader's defaults: Generate would release the
marking notes and leave the student zip as it was; Autograde would run student code outside
the sandbox and without the trusted checks (and first delete the autograded copy it replaces);
Generate Feedback would write nbgrader's own pages, which show every hidden test, over the
ones `feedback` wrote. The formgrader config that `release` writes into the course folder
(never read by the CLI) gives each of those converters one of the exporters below. A
converter builds its exporter before it touches any file (Autograde would otherwise delete the
autograded copy first), and these refuse to be built, so formgrader shows the error with the
command to use instead.
"""

from __future__ import annotations

import shlex
import textwrap

from nbconvert.exporters import Exporter
from traitlets import Unicode

from .course import REPO, AutograderError


class UseTheCommandLine(Exporter):
    """A formgrader button this course runs from its command line instead: building it raises."""

    button = command = reason = ""
    build = Unicode("", help="the course's build folder, for the command in the message").tag(config=True)

    def __init__(self, **kwargs):
        super().__init__(**kwargs)  # reads `build` from the config
        message = refusal(self.button, self.reason, self.command, self.build)
        self.log.error(message)  # formgrader shows the log first, in full; the traceback's box does not wrap
        raise AutograderError(message)


def refusal(button: str, reason: str, command: str, build: str) -> str:
    """The refusal in short lines: which button, why, and the command to run instead."""
    where = f" --build {shlex.quote(build)}" if build else ""
    return (f"formgrader's {button} is turned off for this course:\n{textwrap.fill(reason, 70)}.\n"
            f"Instead, in {REPO} run:\n  .venv/bin/python -m autograder {command}{where}")


class NoGenerate(UseTheCommandLine):
    """Formgrader's Generate (nbgrader generate_assignment)."""

    button, command = "Generate", "release"
    reason = "it would release the marking notes to students and not rebuild the student zip"


class NoAutograde(UseTheCommandLine):
    """Formgrader's Autograde (nbgrader autograde)."""

    button, command = "Autograde", "grade"
    reason = "it would run student code outside the sandbox and without the trusted checks"


class NoGenerateFeedback(UseTheCommandLine):
    """Formgrader's Generate Feedback (nbgrader generate_feedback)."""

    button, command = "Generate Feedback", "feedback"
    reason = "nbgrader's own feedback pages show the hidden tests"


def formgrader_lines() -> str:
    """The lines of the course's formgrader config that turn those converters into refusals."""
    return ("import sys\n"
            f"sys.path.insert(0, {str(REPO)!r})  # formgrader's converters import the refusals below\n"
            "c.UseTheCommandLine.build = os.path.dirname(_here)\n"
            "c.GenerateAssignment.exporter_class = 'autograder.formgrader.NoGenerate'\n"
            "c.Autograde.exporter_class = 'autograder.formgrader.NoAutograde'\n"
            "c.GenerateFeedback.exporter_class = 'autograder.formgrader.NoGenerateFeedback'\n")
