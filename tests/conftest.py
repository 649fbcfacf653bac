"""Shared test setup: the course's code folder is importable as plain modules, and builds that
several test files share (tests/shared_builds.py) get one folder per test run."""

import os
import shutil
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
CODE = REPO / "code" / "part-ii"
if str(CODE) not in sys.path:
    sys.path.insert(0, str(CODE))

import shared_builds  # noqa: E402 - after the path setup, like every test module's imports
from hypothesis.configuration import set_hypothesis_home_dir  # noqa: E402

# Hypothesis keeps its example database and constants cache in the build folder, with the rest of
# the generated state, not in .hypothesis/ beside the sources (wherever pytest was started from).
set_hypothesis_home_dir(REPO / "build" / "hypothesis")


def _is_controller(config) -> bool:
    """True in the pytest process that runs the session (not in an xdist worker)."""
    return not hasattr(config, "workerinput")


def pytest_configure(config):
    """The controller names the run before xdist starts its workers, which inherit the name."""
    if _is_controller(config):
        os.environ.pop(shared_builds.RUN_ENV, None)
        shared_builds.remove_stale_runs(keep=shared_builds.run_id())


def pytest_unconfigure(config):
    """The controller removes the run's shared builds once every worker is done."""
    if _is_controller(config) and shared_builds.RUN_ENV in os.environ:
        shutil.rmtree(shared_builds.SHARED / os.environ[shared_builds.RUN_ENV], ignore_errors=True)


# Files that take minutes go first, longest first, so pytest-xdist (--dist loadfile
# --no-loadscope-reorder) starts them at once on different workers: the browser on one, the graded
# class (built by test_adversarial's first test) on the other. The sandbox tests follow the browser
# while the class is still being graded, so test_grading finds it built; the files of a minute or
# less fill in behind. Left in collection order, test_sandbox (about 220 of 1,100 worker-seconds
# on a quiet machine) started last and ran alone for minutes: 636 s in all, against 502-523 s
# in this order (bench/README.md).
LONG_FIRST = ("tests/test_browser.py", "tests/test_adversarial.py", "tests/test_sandbox.py", "tests/test_grading.py",
              "tests/test_cli.py", "tests/test_postgres.py", "tests/test_fork_server.py", "tests/test_release.py")


def pytest_collection_modifyitems(session, config, items):
    """Run the long files first, each file's tests in their own order."""
    def rank(item) -> int:
        path = item.nodeid.split("::", 1)[0]
        return LONG_FIRST.index(path) if path in LONG_FIRST else len(LONG_FIRST)

    items.sort(key=rank)


@pytest.fixture(autouse=True)
def _no_shell_build(monkeypatch):
    """Suggested commands are compared as printed for a shell without $PART_II_BUILD (whatever the tester's shell has)."""
    import autograder.course

    monkeypatch.setattr(autograder.course, "SHELL_BUILD", None)


@pytest.fixture
def root_grader():
    """For tests of what only a grader running as root does (one fork server per submission, its kernels under a user
    of their own): fails at once, saying so, when the tests do not run as root (make test installs its packages as
    root; a skip would hide the check)."""
    if os.geteuid() != 0:
        pytest.fail("run the tests as root: only a root grader forks a submission's kernels from one server, under a "
                    "user of their own, which this test checks")
