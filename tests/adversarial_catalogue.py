"""The adversarial catalogue (tests/adversarial/): manifest, entry files, and the submissions they make.

Each entry file turns the solved release notebook into one bad submission: INJECT (cells
inserted after the setup cell, after a solution cell by grade id, or at the end), WRONG
(solution cells replaced) or transform(nb) (file-level damage). Graded by the real pipeline
together with the sample class (tests/shared_builds.py); judged in tests/test_adversarial.py.
"""

import contextlib
import copy
import importlib.util
import json
import shutil
import tempfile
from pathlib import Path

import nbformat

REPO = Path(__file__).resolve().parent.parent
CATALOGUE = REPO / "tests" / "adversarial"
MANIFEST = json.loads((CATALOGUE / "manifest.json").read_text(encoding="utf-8"))
NOTEBOOK = MANIFEST["notebook"]
ENTRIES = {e["id"]: e for e in MANIFEST["entries"]}
GRADED = [i for i, e in ENTRIES.items() if e["outcome"] == "graded"]
REJECTED = [i for i, e in ENTRIES.items() if e["outcome"] == "rejected"]


def load_entry(entry: dict):
    """Import one catalogue file as a module."""
    spec = importlib.util.spec_from_file_location(f"adversarial_{entry['id'].replace('-', '_')}", CATALOGUE / entry["file"])
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def grade_id(cell) -> str:
    """A cell's nbgrader grade id ('' when it has none)."""
    return cell.get("metadata", {}).get("nbgrader", {}).get("grade_id", "")


def build_submission(entry: dict, solved: nbformat.NotebookNode, fields: dict) -> bytes:
    """The entry's notebook file: the solved notebook plus its injected cells, wrong solutions or transform."""
    module = load_entry(entry)
    nb = copy.deepcopy(solved)
    for gid, source in getattr(module, "WRONG", {}).items():
        next(c for c in nb.cells if grade_id(c) == gid).source = source
    for where, anchor, code in reversed(getattr(module, "INJECT", [])):
        code = code.format(**fields) if entry.get("format") else code
        cell = nbformat.v4.new_code_cell(code)
        if where == "end":
            nb.cells.append(cell)
            continue
        if anchor == "setup":  # the notebook's first code cell
            index = next(i for i, c in enumerate(nb.cells) if c.cell_type == "code")
        else:
            index = next(i for i, c in enumerate(nb.cells) if grade_id(c) == anchor)
        nb.cells.insert(index + 1, cell)
    if hasattr(module, "transform"):
        result = module.transform(nb)
        if isinstance(result, bytes):
            return result
        nb = result
    return nbformat.writes(nb).encode("utf-8")


@contextlib.contextmanager
def course_copy(course):
    """A plain, world-readable copy of the source notebook in a fresh clone-like folder beside the repository
    (as /work/main sat beside a grader's clone; in the temporary folder when that one is not writable),
    removed on exit; yields the copy's path."""
    try:
        clone = Path(tempfile.mkdtemp(prefix="part-ii-clone-", dir=REPO.parent))
    except OSError:
        clone = Path(tempfile.mkdtemp(prefix="part-ii-clone-"))
    try:
        clone.chmod(0o755)  # not mkdtemp's 0700: only the sandbox may keep the kernel out
        target = clone / "notebooks" / "part-ii" / f"{NOTEBOOK}.ipynb"
        target.parent.mkdir(mode=0o755, parents=True)
        shutil.copyfile(course.source_dir / target.name, target)
        target.chmod(0o644)
        yield target
    finally:
        shutil.rmtree(clone, ignore_errors=True)


@contextlib.contextmanager
def listening_socket():
    """A TCP socket listening on this machine's 127.0.0.1 for the block; yields its port, after checking that it
    accepts a connection here (a probe refused inside the sandbox then shows the sandbox's own network)."""
    import socket

    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(8)
        port = server.getsockname()[1]
        with socket.create_connection(("127.0.0.1", port), timeout=5):
            pass
        yield port


def catalogue_submissions(course, outside: Path, copy_of_course: Path, listen_port: int) -> dict[str, bytes]:
    """{entry id: notebook file bytes} for every entry, built from the course's solved release (listen_port: a port
    that accepts connections on the grading machine's loopback while the class is graded)."""
    from autograder.sample_class import Assignment

    solved = Assignment.read(course).solved()[NOTEBOOK]
    fields = {
        "outside": str(outside),
        "listen_port": int(listen_port),
        "source_notebook": str(course.source_dir / f"{NOTEBOOK}.ipynb"),
        "gradebook": str(course.root / "gradebook.db"),
        "source_glob": str(course.source_dir / "*.ipynb"),
        "course_copy": str(copy_of_course),
        # any clone beside the copy's: this repository's own and other people's too
        "clone_glob": str(copy_of_course.parents[3] / "*" / "notebooks" / "part-ii" / "*.ipynb"),
    }
    return {entry_id: build_submission(entry, solved, fields) for entry_id, entry in ENTRIES.items()}
