"""A sample class made from the assignment itself, for the demo and the tests.

Built from whatever notebooks part-ii has: the release notebooks (what students get) and
the source notebooks (the model solutions), matched cell by cell through nbgrader grade ids.

    perfect        every solution filled in from the source notebooks
    blank          the release, untouched
    partial        perfect, except one exercise left as the release stub
    broken         perfect, except one notebook is a truncated (invalid JSON) file
    edited-tests   as partial, with that exercise's test cell replaced by `pass`, and
                   another (solved) exercise's test cell deleted: both are restored by nbgrader
    infinite-loop  perfect, plus `while True: pass` at the end of one solution cell
"""

from __future__ import annotations

import copy
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

import nbformat

from .course import Course

MARKERS = ("### BEGIN SOLUTION", "### END SOLUTION")
LMS_DATE = (2026, 3, 1, 10, 0, 0)
LOOP = "\n\nwhile True:  # sample class: a loop that never ends\n    pass\n"
EDITED_TEST = '"""The student replaced this test"""\npass\n'


@dataclass(frozen=True)
class Exercise:
    """A code solution cell and the test cells that grade it (up to the next solution cell)."""

    notebook: str
    solution_id: str
    test_ids: tuple[str, ...]


@dataclass
class SampleStudent:
    """One sample submission: notebook file name -> bytes, and what it demonstrates."""

    student: str
    description: str
    files: dict[str, bytes] = field(default_factory=dict)


def _meta(cell) -> dict:
    """A cell's nbgrader metadata (empty dict for ordinary cells)."""
    return cell.metadata.get("nbgrader", {})


def is_test_cell(cell) -> bool:
    """An autograded test cell: a graded code cell that is not a solution."""
    m = _meta(cell)
    return cell.cell_type == "code" and bool(m.get("grade")) and not m.get("solution")


def exercises(nb: nbformat.NotebookNode, name: str) -> list[Exercise]:
    """The notebook's code exercises in order, each with the test cells that follow its solution."""
    found, current, tests = [], None, []
    for cell in nb.cells:
        m = _meta(cell)
        if cell.cell_type == "code" and m.get("solution"):
            if current and tests:
                found.append(Exercise(name, current, tuple(tests)))
            current, tests = m["grade_id"], []
        elif current and is_test_cell(cell):
            tests.append(m["grade_id"])
    if current and tests:
        found.append(Exercise(name, current, tuple(tests)))
    return found


def strip_markers(source: str) -> str:
    """A model solution without nbgrader's BEGIN/END SOLUTION lines."""
    return "\n".join(line for line in source.split("\n") if line.strip() not in MARKERS)


def solved(release: nbformat.NotebookNode, source: nbformat.NotebookNode) -> nbformat.NotebookNode:
    """The release notebook with every solution cell replaced by the source's model solution."""
    answers = {_meta(c)["grade_id"]: c.source for c in source.cells if _meta(c).get("solution")}
    nb = copy.deepcopy(release)
    for cell in nb.cells:
        grade_id = _meta(cell).get("grade_id")
        if _meta(cell).get("solution") and grade_id in answers:
            cell.source = strip_markers(answers[grade_id])
    return nb


def _cell(nb: nbformat.NotebookNode, grade_id: str):
    """The cell with this grade id."""
    return next(c for c in nb.cells if _meta(c).get("grade_id") == grade_id)


def _dump(nb: nbformat.NotebookNode) -> bytes:
    """Notebook bytes as Jupyter writes them."""
    return (nbformat.writes(nb) + "\n").encode("utf-8")


@dataclass
class Assignment:
    """Release and source notebooks of the assignment, by notebook name."""

    release: dict[str, nbformat.NotebookNode]
    source: dict[str, nbformat.NotebookNode]

    @classmethod
    def read(cls, course: Course) -> "Assignment":
        """Read the released notebooks and their sources (release must have run)."""
        names = course.notebook_names()
        return cls({n: nbformat.read(course.release_dir / f"{n}.ipynb", as_version=4) for n in names},
                   {n: nbformat.read(course.source_dir / f"{n}.ipynb", as_version=4) for n in names})

    def solved(self) -> dict[str, nbformat.NotebookNode]:
        """Every notebook with every solution filled in."""
        return {n: solved(self.release[n], self.source[n]) for n in self.release}

    def exercises(self) -> list[Exercise]:
        """All code exercises, notebook by notebook."""
        return [ex for n in sorted(self.source) for ex in exercises(self.source[n], n)]

    def partial_exercise(self) -> Exercise:
        """The exercise the partial submission leaves unsolved: the last one (no later cell uses it)."""
        found = self.exercises()
        if not found:
            raise ValueError("the assignment has no code exercise with a test cell")
        return found[-1]


def build_sample_class(course: Course) -> list[SampleStudent]:
    """The six sample submissions of the module docstring."""
    a = Assignment.read(course)
    perfect = a.solved()
    partial_ex = a.partial_exercise()
    others = [ex for ex in a.exercises() if ex != partial_ex]
    loop_ex = a.exercises()[0]

    def files(nbs: dict[str, nbformat.NotebookNode]) -> dict[str, bytes]:
        return {f"{n}.ipynb": _dump(nb) for n, nb in nbs.items()}

    partial = copy.deepcopy(perfect)
    _cell(partial[partial_ex.notebook], partial_ex.solution_id).source = \
        _cell(a.release[partial_ex.notebook], partial_ex.solution_id).source

    edited = copy.deepcopy(partial)
    for test_id in partial_ex.test_ids:
        _cell(edited[partial_ex.notebook], test_id).source = EDITED_TEST
    deleted = others[-1].test_ids[0] if others else None
    if deleted:
        nb = edited[others[-1].notebook]
        nb.cells = [c for c in nb.cells if _meta(c).get("grade_id") != deleted]

    looping = copy.deepcopy(perfect)
    _cell(looping[loop_ex.notebook], loop_ex.solution_id).source += LOOP

    broken_files = files(perfect)
    first = sorted(broken_files)[0]
    text = broken_files[first].decode("utf-8")
    broken_files[first] = text[: len(text) // 2].encode("utf-8")  # cut mid-JSON, on a character boundary

    return [
        SampleStudent("perfect", "every exercise solved", files(perfect)),
        SampleStudent("blank", "the release handed in unchanged", files(a.release)),
        SampleStudent("partial", f"all solved but {partial_ex.notebook}:{partial_ex.solution_id}", files(partial)),
        SampleStudent("broken", f"{first} truncated (invalid JSON), the rest solved", broken_files),
        SampleStudent("edited-tests", f"as partial, its test replaced by `pass`; test {deleted} deleted", files(edited)),
        SampleStudent("infinite-loop", f"all solved, `while True: pass` after {loop_ex.notebook}:{loop_ex.solution_id}",
                      files(looping)),
    ]


def write_lms_zip(students: list[SampleStudent], path: Path) -> Path:
    """Write the class as an LMS download: one folder per student inside one top folder."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        for s in students:
            for name, data in sorted(s.files.items()):
                info = zipfile.ZipInfo(f"submissions/{s.student}/{name}", date_time=LMS_DATE)
                info.compress_type = zipfile.ZIP_DEFLATED
                zf.writestr(info, data)
    return path
