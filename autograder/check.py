"""For students: ``python -m autograder check NOTEBOOK`` runs a notebook and prints a table per exercise.

The notebook runs from top to bottom in a fresh kernel, in its own folder (so the setup
cell finds code/part-ii beside it, as in the student zip); a notebook outside any course
folder runs with this repository's code/part-ii, as grading runs it with the course's, and
a note says so. Each graded cell gets a row:
autograded test cells say passed or failed and the points at stake; free-text answers
say they are graded by the instructor. Hidden tests are not in a student's notebook, so
passing here means the visible checks pass, not yet the final score; a test cell whose visible
checks look only at the answer's form (marked in its metadata, see notebooks/README.md) says so. A test cell (or other
read-only cell) whose contents differ from the release (nbgrader's checksum) is flagged:
grading puts the released cell back, so what the edited cell did here does not count. A test cell
turned into a Markdown or raw cell fails: it did not run here, and grading turns it back and runs it. A
released test cell missing from the notebook is named too, and gets a failed row that keeps its points in the
total: grading puts it back and scores it, which this check cannot do. Pasted copies of a graded cell are named, and the last counts, as in
grading; copies that differ from it fail.
The notebook is also checked against the course's notebooks as grading will see it: a file
whose graded cells belong to no notebook of this course is refused, and a file named after no
notebook (collect files it by its exercises only from a student's folder), or after another
notebook than the one its exercises belong to (grading takes it as the notebook it holds, so the
notebook it is named after counts as not handed in), fails with what to rename it to.
A cell that runs past the time limit (grading's default cell timeout unless --timeout says
otherwise) is interrupted, as grading interrupts it, and named; once the notebook has run for
grading's notebook budget (--notebook-timeout) the cells after are not run, as when graded. The notebook runs under grading's
executor (without its sandbox): a cell that ends the kernel (exit(), os._exit(), running out of
memory) fails and is named, and the rest run in a new kernel after the cells before it, as when graded.
A cell outside the tests that raised an error no row names (a demo cell whose input the answer fails on,
while the tests after it pass) gets a note; it does not change the exit code, as it costs no points itself.
A test cell moved below a later exercise's test cell that grading runs with reference versions of earlier answers
fails, as it does when graded.
Exit code 0 when every visible test passes, 1 when one fails, a test cell was edited, retyped or
deleted, a graded cell has a different copy, a cell ran out of time or ended the kernel, or the file name is
wrong as above (an edited read-only cell that is not a test is only listed), 2 when the notebook cannot be read, is not a notebook of
this course, or is too large for collect to take (over its file or its notebook-without-outputs
limit). A notebook over LARGE_NOTEBOOK_BYTES gets a note to clear its saved outputs before handing in.
"""

from __future__ import annotations

import contextlib
import hashlib
import math
import os
import re
from pathlib import Path

from .cells import (BUDGET_SPENT, NO_KERNEL, NOT_RUN, NOTEBOOK_TIMEOUT, TIMED_OUT, WARNING_PATTERN, WROTE_TO_STDERR,
                    cell_points, checks_format_only, cut_at_time_limit, error_named, first_line, grade_ids, graded_cells_of,
                    heading_after, is_edited, is_retyped_test, is_test_cell, moved_test_message, moved_tests, nbgrader_meta,
                    numbered_cell, outcome_message, stands_in, stopped_by_budget, stopped_kernel, test_headings)
from .collect import (MAX_NOTEBOOK_BYTES, MAX_READ_BYTES, NotANotebook, clear_outputs, match_notebook, mib,
                      notebook_of, read_notebook)
from .course import (ASSIGNMENT, BUNDLE_CONTENT, COURSE_FILES_LIST, DEFAULT_CELL_TIMEOUT, DEFAULT_NOTEBOOK_TIMEOUT, REPO,
                     AutograderError, listed, load_config, points_text)


# a notebook this large has outputs saved that a hand-in does not need (the course's run notebooks take under 0.1 MiB)
LARGE_NOTEBOOK_BYTES = 10 * 1024 * 1024
CLEAR_OUTPUTS = "in JupyterLab, Edit › Clear Outputs of All Cells, then save"


def notebooks_in(folder: Path) -> list[str]:
    """The names of the notebooks (.ipynb files) in folder, sorted; [] when there are none or it cannot be read."""
    try:
        return sorted(p.name for p in folder.iterdir() if p.suffix.lower() == ".ipynb" and p.is_file())
    except OSError:
        return []


def read_for_check(path: Path):
    """The notebook at path, or an AutograderError saying why it cannot be checked (also when collect would not take it)."""
    path = Path(path)
    if path.is_dir():
        if names := notebooks_in(path):
            raise AutograderError(f"{path} is a folder; check takes one notebook file (.ipynb) at a time, e.g. "
                                  f"python -m autograder check {path / names[0]} (the notebooks there: "
                                  f"{listed(names, 7)})")
        raise AutograderError(f"{path} is a folder, with no notebook in it; check takes one notebook file (.ipynb) "
                              "at a time: give the path of yours")
    if not path.exists():
        where = "" if path.is_absolute() else f" (a relative path starts in the folder you run this in, {Path.cwd()})"
        if names := notebooks_in(path.parent):  # a typo in the name: say what is there
            raise AutograderError(f"{path} does not exist{where}; the notebooks in {path.parent}: {listed(names, 7)}")
        lab = REPO / "build" / "lab" / ASSIGNMENT
        if not lab.is_dir():  # nothing unpacked yet: an example path would not exist either
            raise AutograderError(f"{path} does not exist{where}, and no student notebooks are unpacked yet: run "
                                  "`make lab` first, which unpacks them into build/lab/part-ii/, or give the path of "
                                  "your own copy")
        example = f"e.g. {lab / path.name}" if (lab / path.name).is_file() else f"e.g. one in {lab}"
        raise AutograderError(f"{path} does not exist{where}; give the notebook's path, {example}")
    if not path.is_file():
        raise AutograderError(f"{path} is not a file; expected a Jupyter notebook (.ipynb)")
    if path.suffix.lower() != ".ipynb":  # as collect accepts 02-shapes-and-loss.IPYNB
        raise AutograderError(f"{path} is not a .ipynb file; expected a Jupyter notebook")
    size = path.stat().st_size
    if size > MAX_READ_BYTES:
        raise AutograderError(f"{path} is {mib(size)}: a hand-in over {mib(MAX_READ_BYTES)} is not accepted, so it would "
                              f"not be graded. Clear its saved outputs ({CLEAR_OUTPUTS}) or make pictures pasted into "
                              "its text cells smaller, and check it again")
    try:
        nb, _ = read_notebook(path.read_bytes())
    except NotANotebook as exc:
        raise AutograderError(f"{path} cannot be checked: {exc}") from None
    if size > MAX_NOTEBOOK_BYTES and (left := bytes_without_outputs(nb)) > MAX_NOTEBOOK_BYTES:
        raise AutograderError(f"{path} is {mib(size)}, and {mib(left)} without its outputs: a notebook over "
                              f"{mib(MAX_NOTEBOOK_BYTES)} even without outputs is not accepted, so it would not be graded. "
                              "Make pictures pasted into its text cells smaller, and check it again")
    return nb


def bytes_without_outputs(nb) -> int:
    """Size in bytes of nb saved with every code cell's outputs removed (nb itself unchanged)."""
    import nbformat

    return clear_outputs(nbformat.from_dict(nb))  # from_dict copies the cells


def size_note(path: Path, nb) -> str | None:
    """A note for a notebook over LARGE_NOTEBOOK_BYTES on what makes it large: saved outputs (clear them before handing
    it in) or pictures pasted into its text cells (make them smaller)."""
    size = path.stat().st_size
    if size <= LARGE_NOTEBOOK_BYTES:
        return None
    left = bytes_without_outputs(nb)
    upload = "a large upload may be slow or refused by your course's site"
    if left > size / 2:
        return (f"note: {path.name} is {mib(size)}, {mib(left)} of it in its text and code cells (pictures pasted into "
                f"text cells?): {upload}. Make the pictures smaller before you hand it in.")
    accepted = (f"over {mib(MAX_NOTEBOOK_BYTES)}, it is accepted with its outputs removed; "
                if size > MAX_NOTEBOOK_BYTES else "")
    return (f"note: {path.name} is {mib(size)}, {mib(left)} without its saved outputs. Grading runs every cell again "
            f"and does not use them; {accepted}{upload}. Clear them before you hand it in ({CLEAR_OUTPUTS}).")


def course_notebooks() -> dict:
    """{notebook: the notebook read} of this course's source notebooks."""
    import nbformat

    folder = Path(load_config().CourseDirectory.source_directory) / ASSIGNMENT
    return {p.stem: nbformat.read(p, as_version=4) for p in sorted(folder.glob("*.ipynb"))}


def course_cells(notebooks: dict) -> dict[str, dict[str, bool]]:
    """{notebook: {grade id: whether it is a test cell}} for the graded cells of the course's notebooks (course_notebooks())."""
    return {name: graded_cells_of(nb) for name, nb in notebooks.items()}


def graded_ids(nb) -> set[str]:
    """Grade ids of the notebook's graded cells."""
    return {m["grade_id"] for c in nb.cells if (m := nbgrader_meta(c)).get("grade") and "grade_id" in m}


def course_grade_ids(notebooks: dict) -> dict[str, set[str]]:
    """{notebook: the grade ids of its cells} of the course's notebooks (course_notebooks()): see cells.grade_ids."""
    return {name: grade_ids(nb) for name, nb in notebooks.items()}


def matched_notebook(path: Path, nb, notebook_ids: dict[str, set[str]]) -> str:
    """The course notebook collect files this notebook as (notebook_ids: course_grade_ids(...)): by its name, else by
    the cells it holds most of; AutograderError when it holds none of that notebook's cells."""
    ids = grade_ids(nb)
    hit = match_notebook(path.stem, list(notebook_ids))
    best = notebook_of(ids, notebook_ids, hit[0] if hit else None)
    if best is None or not ids & notebook_ids[best]:
        listed = ", ".join(sorted(ids)[:3]) + (", …" if len(ids) > 3 else "")
        raise AutograderError(f"{path} is not a notebook of this course: none of its cells ({listed}) is in "
                              f"{ASSIGNMENT}'s notebooks ({', '.join(notebook_ids)})")
    return best


def deleted_cells(nb, released: dict[str, bool]) -> tuple[list[str], list[str]]:
    """Grade ids of the released (test cells, graded answer cells) missing from nb, in release order. Grading puts
    test cells back; an answer written in a cell of the student's own instead of the answer cell is never graded."""
    present = graded_ids(nb)
    missing = [(grade_id, test) for grade_id, test in released.items() if grade_id not in present]
    return [g for g, test in missing if test], [g for g, test in missing if not test]


def missing_code_answers(nb, source) -> list[str]:
    """Grade ids of the released code answer cells (solution cells nothing grades directly: the tests after them do)
    missing from nb, in release order."""
    present = grade_ids(nb)
    return [meta["grade_id"] for cell in source.cells if cell.cell_type == "code"
            and (meta := nbgrader_meta(cell)).get("solution") and not meta.get("grade")
            and "grade_id" in meta and meta["grade_id"] not in present]


def cell_places(source, grade_ids: list[str]) -> list[str]:
    """Where each graded cell is, as a student can find it ('the test cell of 练习 2.6 … (its first line)'), from the
    course's notebook source (grade ids mean nothing to students)."""
    heading, places = "(before the first exercise)", {}
    for cell in source.cells:
        meta = nbgrader_meta(cell)
        heading = heading_after(cell, heading)
        if meta.get("grade_id") in grade_ids:
            code = cell.cell_type == "code"
            kind = "test cell" if is_test_cell(cell) else "answer cell" if code else "written-answer cell"
            shown = f" ({first_line(cell.source)})" if code else ""
            places[meta["grade_id"]] = f"the {kind} of {heading}{shown}"
    return [places.get(g, g) for g in grade_ids]


def released_digests(root: Path) -> dict[str, str] | None:
    """{path inside the course folder: sha256} of the course files as released, from the course-files.sha256 the
    release wrote into the student zip; None without a readable one (a copy of the repository, a zip of an older
    release, or a list an editor emptied)."""
    listing = root / COURSE_FILES_LIST
    if not listing.is_file():
        return None
    digests = {}
    for line in listing.read_text(encoding="utf-8-sig", errors="replace").splitlines():  # -sig: an editor's BOM
        digest, sep, rel = line.partition("  ")
        if sep and re.fullmatch(r"[0-9a-f]{64}", digest):
            digests[rel] = digest
    return digests or None


def course_files(root: Path) -> list[tuple[str, Path]]:
    """(path inside the course folder, file) of every course file (code/part-ii, data/part-ii: the folders release
    ships) under root."""
    return [(p.relative_to(root).as_posix(), p) for top in BUNDLE_CONTENT
            for p in sorted((root / top / ASSIGNMENT).rglob("*")) if p.is_file() and "__pycache__" not in p.parts]


def course_file_drift(folder: Path) -> tuple[list[str], list[str], bool]:
    """(the course files the student changed or deleted, those as their release shipped them but unlike this
    repository's, whether their release's course-files.sha256 was there to tell the two apart) of the course folder
    above folder. Grading uses the course's own copies, so an edited tolerance in checks.py makes a failing answer
    pass here only; a zip of another release than this repository's is no edit. A file the same as this
    repository's is never an edit, and without the list every file unlike this repository's counts as one."""
    root = course_folder_of(folder)
    if root is None or root.resolve() == REPO.resolve():
        return [], [], False
    digests = released_digests(root)
    changed, other_release = [], []
    present = dict(course_files(root))
    for rel, path in present.items():
        data, ours = path.read_bytes(), REPO / rel
        if ours.is_file() and data == ours.read_bytes():
            continue
        if digests is None or rel not in digests:
            if ours.is_file():  # nothing says what was released: this repository's copy is the reference
                changed.append(rel)
        elif hashlib.sha256(data).hexdigest() != digests[rel]:
            changed.append(rel)
        elif ours.is_file():
            other_release.append(rel)
    changed += [f"{rel} (missing)" for rel in sorted(digests or {}) if rel not in present]
    return changed, other_release, digests is not None


def naming_problem(path: Path, best: str, course: dict[str, dict[str, bool]]) -> str | None:
    """What is wrong with the name of this file, holding the exercises of notebook best (None when it is named so)."""
    hit = match_notebook(path.stem, list(course))
    if hit is None:
        return (f"✘ {path.name} is not the name of a notebook of this course: save this notebook as {best}.ipynb "
                "(the notebook its exercises belong to). Handed in under this name, it is graded only when it sits "
                "in a folder named with your student id")
    if hit[0] != best:
        return (f"✘ this file is named {hit[0]}.ipynb but holds the exercises of {best}: grading takes it as {best}, "
                f"and {hit[0]} counts as not handed in. Save it as {best}.ipynb")
    return None


def run_notebook(nb, folder: Path, timeout: float, drop_warnings: bool = True,
                 notebook_timeout: float = DEFAULT_NOTEBOOK_TIMEOUT):
    """Execute every cell in a fresh python3 kernel started in folder, as grading executes it; errors are recorded.

    The executor is grading's (BudgetedExecute, without the sandbox): the same preloaded modules,
    output cap, cell time limit and notebook time budget (the cells after it is spent are marked not
    run), and the same recovery when a cell stops the kernel (exit(),
    os._exit(), running out of memory): that cell fails (KernelDied), a new kernel re-runs the
    cells before it, and the rest run. Warnings on stderr are then removed as grading removes
    them (nbgrader's IgnorePattern with the grader's pattern), so a cell that only warned passes
    here as it does when graded; drop_warnings=False keeps them (for a test that forbids them).
    """
    import tempfile

    from nbgrader.preprocessors import IgnorePattern
    from traitlets.config import Config

    from .worker import BudgetedExecute

    with tempfile.TemporaryDirectory(prefix="autograder-check-") as sockets:
        config = Config()
        config.KernelManager.transport = "ipc"  # local unix sockets: no open TCP port, no warning
        config.KernelManager.ip = str(Path(sockets) / "kernel")
        executor = BudgetedExecute(config=config, timeout=math.ceil(timeout), kernel_name="python3",
                                   interrupt_on_timeout=True, notebook_timeout=notebook_timeout)
        try:
            executor.preprocess(nb, {"metadata": {"path": str(folder)}})
        except RuntimeError as exc:
            if NO_KERNEL not in str(exc):
                raise
            raise AutograderError(f"{exc}; on a busy machine, run the check again; if ipykernel is missing, run the "
                                  "check with this repository's .venv (make venv installs requirements.txt)") from exc
    if drop_warnings:
        IgnorePattern(pattern=WARNING_PATTERN, enabled=True).preprocess(nb, {})
    return nb


def kernel_death(nb) -> str | None:
    """'cell N (first line)' of the first cell that stopped the kernel, or None."""
    return next((numbered_cell(cell, number) for number, cell in enumerate(nb.cells, 1) if stopped_kernel(cell)), None)




NUMBERED_CELL = re.compile(r"\bcell \d+ \(")
NUMBERING_NOTE = "cell numbers count every cell from the top of the notebook, text cells included"


def budget_spent(nb) -> tuple[str | None, str | None]:
    """('cell N (first line)' of the cell the notebook's time budget stopped, of the first cell it left unrun); None
    for either that is not there."""
    cells = list(enumerate(nb.cells, 1))
    stopped = next((numbered_cell(cell, n) for n, cell in cells if stopped_by_budget(cell)), None)
    unrun = next((numbered_cell(cell, n) for n, cell in cells if raised(cell, NOTEBOOK_TIMEOUT)), None)
    return stopped, unrun


def timed_out_cells(nb) -> list[str]:
    """'cell N (first line)' for each code cell other than a test cell that was interrupted at its own time limit."""
    return [numbered_cell(cell, number) for number, cell in enumerate(nb.cells, 1) if cut_at_time_limit(cell)]


def cell_error(cell, number: int) -> str | None:
    """'cell N (first line), <error name>: <first line of its message>' for a code cell that raised, else None (by
    number, not grade id: JupyterLab shows students no grade ids)."""
    errors = [o for o in cell.get("outputs", []) if o.output_type == "error"]
    if cell.cell_type != "code" or not errors:
        return None
    name = numbered_cell(cell, number)
    ename = errors[0].get("ename", "Error")
    if ename in TIMED_OUT:
        return f"{name}, which did not finish within the time limit"
    from .trusted_checks import syntax_error

    # IPython names a cell's code after a hash ('invalid syntax (1321635150.py, line 2)'): the cell's own line instead
    evalue = syntax_error(cell.source, ename) or (str(errors[0].get("evalue", "")).strip().splitlines() or [""])[0]
    evalue = evalue[:160]
    return f"{name}, {ename}: {evalue}" if evalue else f"{name}, {ename}"


def stderr_excerpt(cell) -> str:
    """The first line a cell wrote to stderr, for the student whose own code wrote it (this runs in their notebook)."""
    text = "".join(o.get("text", "") for o in cell.outputs if o.output_type == "stream" and o.name == "stderr")
    first = first_line(text)
    where = " (logging and print(..., file=sys.stderr) write there; warnings do not count)"
    return f" Its first line: {first[:120]}{'…' if len(first) > 120 else ''}{where}" if first else where


FORMAT_OK = ("✔ Form only: the visible checks look at the answer's form, not at whether it is right; the hidden "
             "tests decide that when your notebook is graded.")
EDITED = ("✘ This test cell was changed: grading uses the released cell, so this result does not count. "
          "Undo the change (copy the cell from a fresh copy of the notebook).")
RETYPED = ("✘ This test cell was turned into a {} cell, so it did not run here; grading turns it back into the "
           "released test and runs it. Make it a code cell again (select it, press Y) and run the check again.")


def unreported_errors(nb, rows) -> list[str]:
    """'cell N (first line), <error>: <message>' for each code cell other than a test cell that raised and that
    neither a row of the table (rows: exercise_rows) nor a note of its own (time limit, time budget, kernel stop) names:
    a demo cell that failed while the tests after it passed. NotImplementedError, and every error in an exercise
    whose answer cell still raises it, are left out: the exercise's rows say it is not answered yet."""
    said = " ".join(r[3] for r in rows)
    found, unanswered = [], False
    for number, cell in enumerate(nb.cells, start=1):
        if heading_after(cell, None) is not None:
            unanswered = False
        meta = nbgrader_meta(cell)
        if cell.cell_type == "code" and meta.get("solution") and not meta.get("grade"):
            # its rows say so, and the demo after it cannot run until it is answered
            unanswered = raised(cell, "NotImplementedError")
        if unanswered or cell.cell_type != "code" or is_test_cell(cell) or is_retyped_test(cell) or stopped_kernel(cell):
            continue
        if raised(cell, "NotImplementedError"):
            continue  # a demo calling a function still as released: the exercise's rows say it is not answered
        if any(o.get("output_type") == "error" and o.get("ename") in TIMED_OUT | {NOTEBOOK_TIMEOUT, NOT_RUN}
               for o in cell.get("outputs", [])):
            continue  # the notes on the time limit, the budget and the kernel's stops name these
        if (error := cell_error(cell, number)) and numbered_cell(cell, number) not in said:
            found.append(error)
    return found


def raised(cell, name: str) -> bool:
    """True when the code cell's run ended with the exception `name`."""
    return error_named(cell, name) is not None


def exercise_rows(nb, text_stub: str | None = None) -> list[tuple[str, str, float, str, bool | None]]:
    """(exercise heading, grade id, points, message, passed) per graded cell; passed is None for manual cells.

    A failed test cell's message also names the first cell that failed since the previous test
    cell, or else the first that failed since its exercise's answer cell or heading (a second test
    cell of an answer that failed half-way), or else the first that failed in the setup (every cell before the first
    graded or solution cell): its NameError is usually that cell's fault. An unfinished earlier exercise
    is not the setup, so it is named only under its own test cell. Where the release's
    `raise NotImplementedError()` is still what ran, the message says the exercise is not answered
    yet and names its answer cell, under every test cell of that answer's exercise; a free-text
    answer that still reads as released (text_stub) says so too.
    """
    rows, heading = [], "(before the first exercise)"
    setup_failure = since_last_test = section_failure = answer_cell = None
    unanswered, in_setup = False, True
    section = 0  # counts the exercise headings passed: two exercises may have the same heading, or none
    stub_section = None  # the section whose answer cell still raises NotImplementedError
    graded_at = last_graded_cells(nb)  # of pasted copies, the last is the one grading scores
    for number, cell in enumerate(nb.cells, start=1):
        meta = nbgrader_meta(cell)
        in_setup = in_setup and not (meta.get("grade") or meta.get("solution"))
        if in_setup and setup_failure is None:
            setup_failure = cell_error(cell, number)
        if heading_after(cell, None) is not None:
            section += 1
            section_failure = None
        heading = heading_after(cell, heading)  # as the feedback page's contents name it
        if cell.cell_type == "code" and meta.get("solution") and not meta.get("grade"):
            answer_cell = numbered_cell(cell, number)
            stub_section = section if raised(cell, "NotImplementedError") else None
            section_failure = None  # a new answer: an exercise without a heading of its own starts here
        test = is_test_cell(cell)
        if not test and since_last_test is None:
            since_last_test = cell_error(cell, number)
        if not test and section_failure is None:
            section_failure = cell_error(cell, number)
        unanswered = unanswered or (cell.cell_type == "code" and raised(cell, "NotImplementedError"))
        if not meta.get("grade"):
            continue
        if graded_at.get(meta.get("grade_id")) != number:  # an earlier copy: not scored, but it ran as a test does
            if test or is_retyped_test(cell):
                since_last_test, unanswered = None, False
            continue
        points = cell_points(cell)
        if is_retyped_test(cell):  # counted with the tests: grading runs it
            message = RETYPED.format(cell.cell_type.capitalize())
            rows.append((heading, meta.get("grade_id", "?"), points, message, False))
            since_last_test, unanswered = None, False
            continue
        if test:
            message = EDITED if is_edited(cell) else outcome_message(cell)
            if message == WROTE_TO_STDERR:
                message += stderr_excerpt(cell)
            earlier = since_last_test or section_failure or setup_failure
            if unrun := error_named(cell, NOTEBOOK_TIMEOUT):  # nothing earlier is to blame: said below the table
                message = f"✘ {unrun.evalue}"
            elif (unanswered or stub_section == section) and answer_cell and not message.startswith("✔") and message != EDITED:
                message = (f"✘ not answered yet: {answer_cell} still raises NotImplementedError; replace "
                           "`raise NotImplementedError()` there with your answer")
            elif earlier and not message.startswith("✔") and message != EDITED:
                message += f" [an earlier cell failed first: {earlier}; fix it and run again]"
            since_last_test, unanswered = None, False
            if message.startswith("✔") and checks_format_only(cell):
                message = FORMAT_OK
            rows.append((heading, meta.get("grade_id", "?"), points, message, message.startswith("✔")))
        else:
            blank = text_stub is not None and cell.source.strip() == text_stub.strip()
            rows.append((heading, meta.get("grade_id", "?"), points,
                         f"not answered yet: the cell still reads {text_stub.strip()!r}; write your answer there "
                         "(graded by your instructor)" if blank else "graded by your instructor", None))
    return rows


MISSING_TEST = ("✘ missing from this notebook, so not run here: grading puts the released test cell back and "
                "scores it")


def with_deleted_tests(rows, source, deleted: list[str]) -> list:
    """rows (exercise_rows) with a failed row for each released test cell in deleted, under its exercise in release
    order (source: the course's notebook), so the table and its total still count the points grading scores."""
    order, missing = {}, {}
    heading = "(before the first exercise)"
    for cell in source.cells:
        heading = heading_after(cell, heading)
        if grade_id := nbgrader_meta(cell).get("grade_id"):
            order[grade_id] = len(order)
            if grade_id in deleted:
                missing[grade_id] = (heading, grade_id, cell_points(cell), MISSING_TEST, False)
    merged = list(rows)
    for grade_id, row in missing.items():
        after = [i for i, r in enumerate(merged) if order.get(r[1], -1) < order[grade_id]]
        merged.insert(after[-1] + 1 if after else 0, row)
    return merged


def graded_cells_by_id(nb) -> dict[str, list[tuple[int, object]]]:
    """{grade id: [(cell number, cell), ...] of the graded cells carrying it, top to bottom}: more than one when a student
    pasted a copy (it keeps the metadata)."""
    by_id: dict[str, list[tuple[int, object]]] = {}
    for number, cell in enumerate(nb.cells, start=1):
        if (meta := nbgrader_meta(cell)).get("grade") and meta.get("grade_id"):
            by_id.setdefault(meta["grade_id"], []).append((number, cell))
    return by_id


def last_graded_cells(nb) -> dict[str, int]:
    """{grade id: number of the last graded cell carrying it}: grading (nbgrader's DeduplicateIds) keeps the last cell
    of each grade id, the earlier copies becoming plain cells."""
    return {grade_id: cells[-1][0] for grade_id, cells in graded_cells_by_id(nb).items()}


def copied_graded_cells(nb) -> tuple[list[str], bool]:
    """('cell N (…) and cell M (…) carry answer_x' for each grade id that several graded cells carry, whether one of the
    earlier copies differs from the last, which grading scores (work in an earlier copy is not graded)."""
    lines, differs = [], False
    for grade_id, cells in graded_cells_by_id(nb).items():
        if len(cells) > 1:
            *earlier, (last, kept) = cells
            differs = differs or any(c.source != kept.source or c.cell_type != kept.cell_type for _, c in earlier)
            copies = ", ".join(numbered_cell(c, n) for n, c in earlier)
            lines.append(f"{copies} and {numbered_cell(kept, last)} carry {grade_id}, and grading scores only the last, "
                         f"cell {last}")
    return lines, differs


def edited_locked_cells(nb) -> list[str]:
    """'cell N (first line)' for each read-only cell that is not a test cell and was changed (grading restores it)."""
    return [numbered_cell(cell, number) for number, cell in enumerate(nb.cells, start=1)
            if not is_test_cell(cell) and not is_retyped_test(cell) and is_edited(cell)]


def moved_test_cells(nb, source) -> dict[str, str]:
    """{grade id: the later test cell with stand-ins it was moved below} of nb's test cells, against the course's
    notebook source (cells.moved_tests): grading fails them there, so the check does too."""
    order = [g for cell in source.cells if is_test_cell(cell) and (g := nbgrader_meta(cell).get("grade_id"))]
    stand_ins = {nbgrader_meta(cell).get("grade_id") for cell in source.cells if is_test_cell(cell)
                 and stands_in(cell.source)}
    held, last = set(order), last_graded_cells(nb)  # of pasted copies grading keeps the last (DeduplicateIds)
    present = [g for number, cell in enumerate(nb.cells, start=1)
               if (g := nbgrader_meta(cell).get("grade_id")) in held and last.get(g) == number]
    return moved_tests(order, stand_ins, present)


def print_table(path: Path, rows) -> None:
    """The self-check table and a one-line verdict."""
    print(f"self-check of {path}")
    current, width = None, max([len(r[1]) for r in rows] + [32])  # one column, however long a grade id
    for heading, grade_id, points, message, _ in rows:
        if heading != current:
            print(f"\n{heading}")
            current = heading
        print(f"  {grade_id:<{width}} {points:>4g} pt  {message}")
    tests = [r for r in rows if r[4] is not None]
    passed = [r for r in tests if r[4]]
    at_stake = sum(r[2] for r in tests)
    form = [r for r in passed if r[3] == FORMAT_OK]
    print(f"\nvisible tests passed: {len(passed)} of {len(tests)} cells, "
          f"{sum(r[2] for r in passed):g} of {at_stake:g} autograded points")
    if form:
        one, worth = len(form) == 1, sum(r[2] for r in form)
        print(f"of these, {len(form)} {'cell' if one else 'cells'} worth {points_text(worth)} "
              f"{'checks' if one else 'check'} only the answer's form: whether it is right is decided when your "
              "notebook is graded")
    manual = sum(r[2] for r in rows if r[4] is None)
    if manual:
        print(f"free-text answers worth {manual:g} points are graded by your instructor")
    print("hidden tests run only when your notebook is graded, so the final score can be lower.")


def course_folder_of(folder: Path) -> Path | None:
    """The folder at or above folder that holds code/part-ii, where a notebook's setup cell finds the course code."""
    return next((p for p in (folder, *folder.parents) if (p / "code" / "part-ii").is_dir()), None)


@contextlib.contextmanager
def course_code_for(folder: Path):
    """PART_II_ROOT set to this repository for the block when a notebook in folder could not find the course code
    (not inside a course folder, no PART_II_ROOT): grading runs it with the course's code, so the check does too.
    Yields True when it did so."""
    if os.environ.get("PART_II_ROOT") or course_folder_of(folder) is not None:
        yield False
        return
    os.environ["PART_II_ROOT"] = str(REPO)
    try:
        yield True
    finally:
        os.environ.pop("PART_II_ROOT", None)


def check(path: Path, timeout: float = DEFAULT_CELL_TIMEOUT, notebook_timeout: float = DEFAULT_NOTEBOOK_TIMEOUT) -> int:
    """Run the notebook at path, print the table; 0 when every visible test passes, else 1."""
    nb = read_for_check(path)
    rows_before = exercise_rows(nb)
    if not rows_before and (name := Path(path).stem) in (sources := course_notebooks()) \
            and not exercise_rows(sources[name]):
        print(f"{path}: this notebook of the course has no graded exercises, so there is nothing to check")
        return 0
    if not rows_before:
        raise AutograderError(f"{path} has no graded cells: it is not a notebook of this course, or its cells lost the "
                              "metadata grading needs (answers pasted into a new notebook lose it). Paste your answers "
                              "into the cells of the released notebook instead, and check that one")
    sources = course_notebooks()  # read once: both views below come from them
    course = course_cells(sources)
    best = matched_notebook(Path(path), nb, course_grade_ids(sources))
    problem = naming_problem(Path(path), best, course)
    if problem:
        print(problem, flush=True)
    deleted, unanswerable = deleted_cells(nb, course[best])
    folder = Path(path).resolve().parent
    changed, other_release, listed = course_file_drift(folder)
    if note := size_note(Path(path), nb):
        print(note, flush=True)
    cells = sum(c.cell_type == "code" for c in nb.cells)
    print(f"running {Path(path).name} from the top in a fresh kernel ({cells} code cells, each interrupted after "
          f"{timeout:g} s, {notebook_timeout:g} s in all); the table follows when it is done",
          flush=True)  # a slow notebook must not look hung
    with course_code_for(folder) as borrowed:
        if borrowed:
            print(f"note: {folder} is not inside the course folder (no code/part-ii in it or above it), so the "
                  f"notebook's setup cell cannot find the course code there; this check runs it with {REPO}'s, as "
                  "grading runs it with the course's. To run it in Jupyter yourself, open it from the unpacked course "
                  "folder.", flush=True)
        run_notebook(nb, folder, timeout, notebook_timeout=notebook_timeout)
    rows = with_deleted_tests(exercise_rows(nb, load_config().ClearSolutions.text_stub), sources[best], deleted)
    if moved := moved_test_cells(nb, sources[best]):  # it ran your own answer here; grading cannot judge it there
        headings = test_headings(nb)
        rows = [(h, g, p, f"✘ {moved_test_message(moved[g], headings)}", False) if g in moved else (h, g, p, m, ok)
                for h, g, p, m, ok in rows]
    print_table(Path(path), rows)
    locked = edited_locked_cells(nb)
    if locked:
        print(f"read-only cells changed: {', '.join(locked)}; grading puts the released versions back, "
              "so undo those changes if your code relies on them.")
    copies, copies_differ = copied_graded_cells(nb)
    if copies_differ:
        print(f"✘ copies of graded cells that differ: {'; '.join(copies)}. The table counts the last of each too: move "
              "your answer into it and delete the copies above it (of a test cell, just delete them: grading runs the "
              "released test), then run the check again.")
    elif copies:
        print(f"note: copies of graded cells: {'; '.join(copies)}. They are the same, so the table counts the last of "
              "each, as grading does; delete the copies above it.")
    if deleted:
        print(f"✘ test cells missing from this notebook: {'; '.join(cell_places(sources[best], deleted))}. Grading "
              "puts the released cells back and scores them, so this check cannot say whether they pass. Copy them "
              "back from a fresh copy of the notebook (unzip the course zip again in another folder) and run the "
              "check again.")
    if (gone := missing_code_answers(nb, sources[best])) and any(r[4] is False for r in rows):
        print(f"✘ code answer cells missing from this notebook: {'; '.join(cell_places(sources[best], gone))}. Grading "
              "runs your notebook as it is, so the tests that use what such a cell defined fail, whatever cell the "
              "table blames first. Copy the cell back from a fresh copy of the notebook (unzip the course zip again "
              "in another folder), put your answer into it, and run the check again.")
    if unanswerable:
        print(f"✘ answer cells missing from this notebook: {'; '.join(cell_places(sources[best], unanswerable))}. "
              "Only the released answer cell is graded: an answer written in a cell of your own counts 0 points and "
              "grading does not put the cell back. Copy the cell back from a fresh copy of the notebook (unzip the "
              "course zip again in another folder), move your answer into it, and run the check again.")
    if changed:
        against = (f"they differ from the copies your course zip shipped, listed in its {COURSE_FILES_LIST}" if listed
                   else f"they differ from {REPO}'s")
        print(f"✘ course files changed in your copy: {', '.join(changed)} ({against}). Grading runs your notebook "
              "with the course's own copies, so results here may differ from the grade: put the released files back "
              "(unzip the course zip again) and run the check again." + ("" if listed else " (If your zip comes from "
              "another version of the course than this repository, check with a repository of that version.)"))
    if other_release:
        print(f"note: your copy of {', '.join(other_release)} is as your course zip shipped it, but differs from "
              f"{REPO}'s: the zip and this repository come from different versions of the course. The check ran with "
              "your copy, and grading uses the course's, so the two may differ; if the course was released again "
              "since you downloaded it, unzip the new zip in another folder and move your notebooks into it.")
    if slow := timed_out_cells(nb):
        print(f"✘ did not finish within {timeout:g} s and was interrupted: {', '.join(slow)}; grading interrupts a cell "
              f"after its cell timeout too ({DEFAULT_CELL_TIMEOUT:g} s unless your instructor set another), and the "
              "notebook has a time budget: make it finish sooner.")
    stopped, unrun = budget_spent(nb)
    if stopped or unrun:
        what = [f"{stopped} was stopped"] if stopped else []
        what += [f"the cells from {unrun} on were not run"] if unrun else []
        print(f"✘ {BUDGET_SPENT} of {notebook_timeout:g} s: {', and '.join(what)}; that counts "
              f"as failed. Grading gives a notebook a budget too ({DEFAULT_NOTEBOOK_TIMEOUT:g} s unless your instructor "
              "set another): make the slow cells finish sooner.")
    if died := kernel_death(nb):
        print(f"✘ {died} stopped the Python kernel. Grading, like this check, then starts a new kernel, re-runs the "
              "cells before it and goes on without it, so nothing that cell defines exists later: remove its exit(), "
              "quit() or os._exit() call, or make it use less memory, and run the check again.")
    if errors := unreported_errors(nb, rows):
        more = f"; and {len(errors) - 3} more" if len(errors) > 3 else ""
        print(f"note: {'a cell' if len(errors) == 1 else f'{len(errors)} cells'} outside the tests raised an error "
              f"that the table does not name: {'; '.join(errors[:3])}{more}. Grading goes on past such a cell, so it "
              "costs no points by itself, but what the cell defines or shows is missing, and an answer that fails on "
              "its input may fail the hidden tests too: read the error, fix it and run the check again.")
    if any(NUMBERED_CELL.search(r[3]) for r in rows) or locked or copies or slow or stopped or unrun or died or errors:
        print(f"({NUMBERING_NOTE})")
    if problem:
        print(problem)
    failed_run = slow or stopped or unrun or died
    ok = all(r[4] is not False for r in rows) and not (problem or deleted or unanswerable or changed or failed_run
                                                       or copies_differ)
    return 0 if ok else 1
