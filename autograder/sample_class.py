"""A sample class made from the assignment itself, for the demo and the tests.

Built from whatever notebooks part-ii has: the release notebooks (what students get) and
the source notebooks (the model solutions), matched cell by cell through nbgrader grade ids.

    perfect        every solution filled in from the source notebooks
    blank          the release, untouched
    partial        perfect, except one exercise left as the release stub
    broken         perfect, except one notebook is a truncated (invalid JSON) file
    edited-tests   as partial, with that exercise's test cell replaced by `pass`, and
                   another (solved) exercise's test cell deleted: both are restored by nbgrader
    infinite-loop  perfect, plus a new cell `while True: pass` after one solution cell
"""

from __future__ import annotations

import copy
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

import nbformat

from .cells import Exercise, cell_points, exercises, is_test_cell, nbgrader_meta
from .course import Course

MARKERS = ("### BEGIN SOLUTION", "### END SOLUTION")
LMS_DATE = (2026, 3, 1, 10, 0, 0)
LOOP = "while True:  # sample class: a cell that never ends\n    pass\n"
EDITED_TEST = '"""The student replaced this test"""\npass\n'


@dataclass
class SampleStudent:
    """One sample submission: notebook file name -> bytes, and what it demonstrates."""

    student: str
    description: str
    files: dict[str, bytes] = field(default_factory=dict)
    expected_auto: float = 0.0  # autograded points it should get (test-cell points from the metadata)


def strip_markers(source: str) -> str:
    """A model solution without nbgrader's BEGIN/END SOLUTION lines."""
    return "\n".join(line for line in source.split("\n") if line.strip() not in MARKERS)


def solved(release: nbformat.NotebookNode, source: nbformat.NotebookNode) -> nbformat.NotebookNode:
    """The release notebook with every solution cell replaced by the source's model solution."""
    answers = {nbgrader_meta(c)["grade_id"]: c.source for c in source.cells if nbgrader_meta(c).get("solution")}
    nb = copy.deepcopy(release)
    for cell in nb.cells:
        grade_id = nbgrader_meta(cell).get("grade_id")
        if nbgrader_meta(cell).get("solution") and grade_id in answers:
            cell.source = strip_markers(answers[grade_id])
    return nb


def _cell(nb: nbformat.NotebookNode, grade_id: str):
    """The cell with this grade id."""
    return next(c for c in nb.cells if nbgrader_meta(c).get("grade_id") == grade_id)


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


def test_points(nb: nbformat.NotebookNode) -> dict[str, float]:
    """grade id -> points of every autograded test cell of a notebook."""
    return {nbgrader_meta(c)["grade_id"]: cell_points(c) for c in nb.cells if is_test_cell(c)}


def _student(a: "Assignment", student: str, description: str, nbs: dict[str, nbformat.NotebookNode],
             failing: set[tuple[str, str]], broken: dict[str, bytes] | None = None) -> SampleStudent:
    """A SampleStudent whose expected auto score is every test point of its valid notebooks minus `failing`."""
    files = {f"{n}.ipynb": _dump(nb) for n, nb in nbs.items()}
    files.update(broken or {})
    expected = sum(p for n in nbs for t, p in test_points(a.source[n]).items() if (n, t) not in failing)
    return SampleStudent(student, description, files, expected)


def build_sample_class(course: Course, trimmed: bool = False) -> list[SampleStudent]:
    """The six sample submissions of the module docstring.

    trimmed: perfect and blank hand in every notebook, the others only the notebooks their
    case needs (the rest count as missing), which makes the class cheaper to grade.
    """
    a = Assignment.read(course)
    perfect = a.solved()
    partial_ex = a.partial_exercise()
    loop_ex = a.exercises()[0]
    others = [ex for ex in a.exercises() if ex != partial_ex]
    same_nb = [ex for ex in others if ex.notebook == partial_ex.notebook]
    deleted_ex = (same_nb or others or [None])[-1]
    failing = {(partial_ex.notebook, t) for t in partial_ex.test_ids}

    def keep(nbs: dict, names: set[str]) -> dict:
        return {n: nb for n, nb in nbs.items() if not trimmed or n in names}

    partial = copy.deepcopy(perfect)
    _cell(partial[partial_ex.notebook], partial_ex.solution_id).source = \
        _cell(a.release[partial_ex.notebook], partial_ex.solution_id).source

    edited = copy.deepcopy(partial)
    for test_id in partial_ex.test_ids:
        _cell(edited[partial_ex.notebook], test_id).source = EDITED_TEST
    deleted = deleted_ex.test_ids[0] if deleted_ex else None
    if deleted_ex:
        nb = edited[deleted_ex.notebook]
        nb.cells = [c for c in nb.cells if nbgrader_meta(c).get("grade_id") != deleted]
    edited_nbs = {partial_ex.notebook} | ({deleted_ex.notebook} if deleted_ex else set())

    looping = copy.deepcopy(perfect)
    cells = looping[loop_ex.notebook].cells
    at = cells.index(_cell(looping[loop_ex.notebook], loop_ex.solution_id))
    cells.insert(at + 1, nbformat.v4.new_code_cell(LOOP))

    first = sorted(perfect)[0]
    text = _dump(perfect[first]).decode("utf-8")
    broken_file = {f"{first}.ipynb": text[: len(text) // 2].encode("utf-8")}  # cut mid-JSON, on a character boundary
    broken_rest = {n: nb for n, nb in keep(perfect, {partial_ex.notebook}).items() if n != first}

    return [
        _student(a, "perfect", "every exercise solved", perfect, set()),
        _student(a, "blank", "the release handed in unchanged", a.release,
                 {(n, t) for n in a.release for t in test_points(a.source[n])}),
        _student(a, "partial", f"all solved but {partial_ex.notebook}:{partial_ex.solution_id}",
                 keep(partial, {partial_ex.notebook}), failing),
        _student(a, "broken", f"{first}.ipynb truncated (invalid JSON), the rest solved", broken_rest, set(), broken_file),
        _student(a, "edited-tests", f"as partial, its test replaced by `pass`; test {deleted} deleted",
                 keep(edited, edited_nbs), failing),
        _student(a, "infinite-loop", f"all solved, plus a `while True: pass` cell after {loop_ex.notebook}:{loop_ex.solution_id}",
                 keep(looping, {loop_ex.notebook}), set()),
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
