"""What a notebook cell is to nbgrader, how an autograded test cell went, and which exercise heading a
cell is under - shared by feedback and check.

A test cell is a graded code cell that is not a solution; its hidden block lies between
``### BEGIN HIDDEN TESTS`` and ``### END HIDDEN TESTS``. The outcome message of a test cell
never quotes hidden test code: a failure inside the hidden block is reported as "a hidden
check failed", with the check's own AssertionError message (checks.py words those so they
reveal no expected value) and nothing else.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

BEGIN_HIDDEN, END_HIDDEN = "BEGIN HIDDEN TESTS", "END HIDDEN TESTS"
# A Python warning on stderr must not zero a test cell (nbgrader scores any stderr as failure):
# grading removes such outputs with nbgrader's IgnorePattern, and check does the same. It searches: "\w*Warning: "
# matched the same outputs and rescanned every run of letters from each of its starts (an hour on 1 MiB of "a")
WARNING_PATTERN = r"Warning: "
KERNEL_DIED = "KernelDied"  # the grader's error on a cell that stopped the kernel (it ran again without that cell)
TOO_MANY_PROCESSES = "TooManyProcesses"  # ... on a cell whose processes the grader stopped with the kernel (fork bomb)
NOT_RUN = "NotRun"  # ... on a cell not run because the kernel stopped too many times
KERNEL_STOPS = (KERNEL_DIED, TOO_MANY_PROCESSES)  # the cells that stopped the kernel
NO_KERNEL = "no kernel could start"  # begins the error of a notebook none of whose kernels started
LOST_CELLS = "the notebook lacks "  # begins the error of a notebook that lacks answer cells of the release
NOTEBOOK_TIMEOUT = "NotebookTimeout"  # ... on a cell not run because the notebook used up its time budget
BUDGET_SPENT = "the notebook used up its time budget"  # begins the error of a cell the budget stopped (check reads it)
BUDGET_NOT_RUN = f"not run: {BUDGET_SPENT}"  # what a cell the budget left unrun (or its test) says
TIMED_OUT = frozenset({"KeyboardInterrupt", "CellTimeoutError"})  # the error names of a cell stopped at the time limit
HIDDEN_NOTE = "# (hidden tests run here when your notebook is graded; they are not shown)"
ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
CELL_LINE = re.compile(r"(?:Cell In\s*\[\d*\]|<ipython-input-[^>]*>|File <[^>]*>), line (\d+)")
HEADING_OPENING = re.compile(r" {0,3}(#{1,6})\s+")  # an ATX heading line starts so
FENCE = re.compile(r"^ {0,3}(```|~~~)")
BACKTICKS = re.compile(r"`+")
HEADING_CHARS = 200  # longest heading text read (a student's own heading can be any length)


def code_spans(text: str) -> list[tuple[int, int, int, int]]:
    """(start, end, content start, content end) of each code span of a line of markdown: a run of n backticks up to
    the next run of exactly n (a run with no such partner is plain text), found in linear time. Patterns that
    backtrack took cubic time on a student's heading of thousands of backticks, and held up the class's feedback."""
    runs = [m.span() for m in BACKTICKS.finditer(text)]
    by_length: dict[int, list[int]] = {}
    for index, (start, end) in enumerate(runs):
        by_length.setdefault(end - start, []).append(index)
    seen = dict.fromkeys(by_length, 0)  # per length: how many of its runs lie behind the scan
    spans, index = [], 0
    while index < len(runs):
        start, end = runs[index]
        length = end - start
        same = by_length[length]
        while seen[length] < len(same) and same[seen[length]] <= index:
            seen[length] += 1
        if seen[length] < len(same):
            partner = same[seen[length]]
            spans.append((start, runs[partner][1], end, runs[partner][0]))
            index = partner + 1
        else:
            index += 1
    return spans


def plain_heading(text: str) -> str:
    """A heading's markdown as it reads: code spans kept verbatim without their backticks, ** and __ emphasis dropped;
    at most HEADING_CHARS characters."""
    def prose(part: str) -> str:
        return part.replace("**", "").replace("__", "").replace("`", "")

    parts, pos = [], 0
    for start, end, inner_start, inner_end in code_spans(text):
        parts += [prose(text[pos:start]), text[inner_start:inner_end].strip()]
        pos = end
    parts.append(prose(text[pos:]))
    plain = re.sub(r"\s+", " ", "".join(parts)).strip()
    return plain if len(plain) <= HEADING_CHARS else plain[:HEADING_CHARS - 1] + "…"


def atx_heading(line: str) -> tuple[int, str] | None:
    """(level 1-6, markdown text) of an ATX heading line, its closing #s (after a space) dropped; None for another
    line. A scan, not one pattern: a pattern for the closing #s backtracked on a line of thousands of ' #'."""
    opening = HEADING_OPENING.match(line)
    if opening is None:
        return None
    text = line[opening.end():].rstrip()
    unclosed = text.rstrip("#")
    if unclosed != text and unclosed and unclosed[-1].isspace():
        text = unclosed.rstrip()
    return len(opening.group(1)), text


def numbered_headings(markdown: str):
    """(line index, level 1-6, text) of a markdown cell's headings (outside code fences), in order, as plain_heading
    reads them."""
    fenced = False
    for number, line in enumerate(markdown.splitlines()):
        if FENCE.match(line):
            fenced = not fenced
        elif not fenced and (found := atx_heading(line)) and (text := plain_heading(found[1])):
            yield number, found[0], text


def leveled_headings(markdown: str):
    """(level 1-6, text) of a markdown cell's headings (outside code fences), in order, as plain_heading reads them."""
    for _, level, text in numbered_headings(markdown):
        yield level, text


def headings(markdown: str):
    """The texts of a markdown cell's headings (outside code fences), in order, as plain_heading reads them."""
    for _, text in leveled_headings(markdown):
        yield text


def last_heading(markdown: str) -> str | None:
    """The text of the last heading of a markdown cell (outside code fences), as plain_heading reads it."""
    found = None
    for found in headings(markdown):
        pass
    return found


def heading_after(cell, heading: str | None) -> str | None:
    """The exercise heading in force after cell: its last heading when it is a markdown cell the student does not
    answer (no grade, solution or task mark), else heading. What check's table and the feedback contents label by."""
    meta = nbgrader_meta(cell)
    if cell.cell_type == "markdown" and not (meta.get("grade") or meta.get("solution") or meta.get("task")):
        return last_heading(cell.source) or heading
    return heading


def hidden_line_numbers(source: str) -> set[int]:
    """1-based line numbers of a cell source that lie in a hidden-tests block (markers included)."""
    hidden, inside = set(), False
    for number, line in enumerate(source.split("\n"), start=1):
        if BEGIN_HIDDEN in line:
            inside = True
        if inside:
            hidden.add(number)
        if END_HIDDEN in line:
            inside = False
    return hidden


def stands_in(source: str) -> bool:
    """A test cell whose hidden part puts reference versions in place of earlier exercises' functions
    (checks.standing_in), so that a wrong earlier answer costs one exercise only."""
    lines = source.split("\n")
    return any("standing_in(" in lines[number - 1] for number in hidden_line_numbers(source))


def moved_tests(order: list[str], stand_ins: set[str], present: list[str]) -> dict[str, str]:
    """{grade id: the test cell with stand-ins it now comes after} for each test cell that present (the notebook's
    test cells, top to bottom) puts after a test cell of stand_ins that comes after it in order (the release's).
    Below such a cell its test could call a reference the stand-in cell let out, not the student's own answer (a
    red-team review lifted one from the stand-in's closure), so grading cannot judge it there."""
    rank = {grade_id: index for index, grade_id in enumerate(order)}
    moved, latest = {}, None
    for grade_id in present:
        if grade_id not in rank:
            continue
        if latest is not None and rank[grade_id] < rank[latest]:
            moved[grade_id] = latest
        if grade_id in stand_ins and (latest is None or rank[grade_id] > rank[latest]):
            latest = grade_id
    return moved


MOVED_TESTS_KEY = "part_ii_moved_tests"  # notebook metadata: the grader's moved_tests, from sanitizing to judging
MOVED_TEST = ("this test cell now comes after the test cell {later}, which grading runs with reference versions of "
              "earlier exercises' functions, so your own answer cannot be tested here: put the test cells back in the "
              "released order, this one first")
MOVED_HEADING_CHARS = 40  # of the heading naming that cell: the message stays within a verdict's 300 characters


def test_headings(nb) -> dict[str, str]:
    """{grade id of each test cell: the exercise heading it comes under (heading_after)}; of a pasted copy, the last
    one's, as grading keeps the last copy."""
    found, heading = {}, None
    for cell in nb.cells:
        heading = heading_after(cell, heading)
        if is_test_cell(cell) and heading:
            found[nbgrader_meta(cell).get("grade_id", "")] = heading
    return found


def moved_test_message(later: str, headings: dict[str, str]) -> str:
    """MOVED_TEST for the test cell `later`, named with the heading it comes under (a grade id alone is not shown
    in Jupyter)."""
    under = headings.get(later)
    if under and len(under) > MOVED_HEADING_CHARS:
        under = under[:MOVED_HEADING_CHARS - 1] + "…"
    return MOVED_TEST.format(later=f"{later} (under “{under}”)" if under else later)


def visible_source(source: str) -> str:
    """The cell source as the student's copy has it, one note line in place of the last hidden block (the hidden
    checks); an earlier block (stand-ins for earlier exercises' functions, run before the visible checks) leaves no
    line, so the visible lines keep the numbers they have in the student's copy."""
    hidden = hidden_line_numbers(source)
    last_block = max((number for number in hidden if number - 1 not in hidden), default=None)
    lines = []
    for number, line in enumerate(source.split("\n"), start=1):
        if number not in hidden:
            lines.append(line)
        elif number == last_block:
            indent = line[: len(line) - len(line.lstrip())]
            lines.append(indent + HIDDEN_NOTE)
    return "\n".join(lines)


def visible_line(source: str, line: int) -> int:
    """The number a line of a test cell's source has in the student's copy, where the hidden blocks are left out."""
    hidden = hidden_line_numbers(source)
    return line - sum(1 for number in hidden if number < line)


def failing_line(error) -> int | None:
    """The line of the test cell where the error was raised (outermost cell frame), if the traceback says."""
    for entry in error.get("traceback", []):
        m = CELL_LINE.search(ANSI.sub("", entry))
        if m:
            return int(m.group(1))
    return None


def asks_kernel_to_exit(execute_reply) -> bool:
    """True when a cell's execute_reply says it called IPython's exit() or quit() (not exit(keep_kernel=True)): the
    kernel then stops a moment later, while a later cell runs or after it."""
    payload = (execute_reply or {}).get("content", {}).get("payload", [])
    return any(isinstance(p, dict) and p.get("source") == "ask_exit" and not p.get("keepkernel") for p in payload)


WROTE_TO_STDERR = "✘ Failed: the cell wrote to standard error, which grading scores as a failure."
TEST_TIMED_OUT = ("✘ Failed: the cell did not finish within the time limit and was interrupted: what its checks call "
                  "(your answer, or something it uses) takes too long or never ends; make it finish sooner.")
TEST_BUDGET_SPENT = ("✘ Failed: the notebook used up its time budget while this cell ran, so it was stopped: this cell "
                     "and the ones before it took too long together; make the slow ones finish sooner.")


def outcome_message(cell) -> str:
    """One line saying how a test cell went, never quoting hidden test code or inputs."""
    errors = [o for o in cell.outputs if o.output_type == "error"]
    if errors:
        error = errors[0]
        ename, evalue = error.get("ename", "Error"), str(error.get("evalue", "")).strip()
        line = failing_line(error)
        if line is not None and line in hidden_line_numbers(cell.source):
            if ename == "AssertionError" and evalue:
                return f"✘ A hidden check failed: {evalue}"
            return f"✘ A hidden check failed ({ename} raised while it ran)."
        if stopped_by_budget(cell):
            return TEST_BUDGET_SPENT  # not necessarily this cell's doing: the cells before it spent the budget too
        if ename in ("KeyboardInterrupt", "CellTimeoutError"):
            return TEST_TIMED_OUT
        where = f" (line {visible_line(cell.source, line)} of the visible checks)" if line is not None else ""
        if ename == "AssertionError" and evalue:  # a check's own message says what differed
            return f"✘ Failed{where}: {evalue}"
        return f"✘ Failed{where}: {ename}: {evalue}" if evalue else f"✘ Failed{where}: {ename}"
    if any(o.output_type == "stream" and o.name == "stderr" for o in cell.outputs):
        return WROTE_TO_STDERR
    return "✔ Passed: every check in this cell succeeded."


def checks_format_only(cell) -> bool:
    """A test cell whose visible checks look only at the answer's form (metadata part_ii.visible_checks = "format"):
    only its hidden tests say whether the answer is right (e.g. a multiple-choice answer)."""
    return cell.metadata.get("part_ii", {}).get("visible_checks") == "format"


def nbgrader_meta(cell) -> dict:
    """A cell's nbgrader metadata (empty dict for ordinary cells)."""
    return cell.metadata.get("nbgrader", {})


def cell_points(cell) -> float:
    """The points nbgrader's metadata gives a cell (0 when it gives none)."""
    return float(nbgrader_meta(cell).get("points") or 0)


def is_test_cell(cell) -> bool:
    """An autograded test cell: a graded code cell that is not a solution."""
    meta = nbgrader_meta(cell)
    return cell.cell_type == "code" and bool(meta.get("grade")) and not meta.get("solution")


def is_retyped_test(cell) -> bool:
    """A test cell a student turned into a Markdown or raw cell (a slip of the M key): it does not run in Jupyter, and
    grading (nbgrader's OverwriteCells) turns it back into the released code cell and runs it."""
    meta = nbgrader_meta(cell)
    return cell.cell_type != "code" and bool(meta.get("grade")) and not meta.get("solution") and not meta.get("task")


def is_hand_graded(cell) -> bool:
    """An answer graded by hand in formgrader: nbgrader's grade and solution marks together, or a task cell."""
    meta = nbgrader_meta(cell)
    return bool(meta.get("grade") and meta.get("solution")) or bool(meta.get("task"))


def graded_cells(folder) -> dict[str, dict[str, bool]]:
    """{notebook stem: {grade id: whether it is a test cell}} for the graded cells of folder's notebooks, in order."""
    import nbformat

    return {p.stem: graded_cells_of(nbformat.read(p, as_version=4)) for p in sorted(folder.glob("*.ipynb"))}


def graded_cells_of(nb) -> dict[str, bool]:
    """{grade id: whether it is a test cell} for the graded cells of one notebook, in order."""
    return {m["grade_id"]: is_test_cell(c) for c in nb.cells if (m := nbgrader_meta(c)).get("grade")}


def grade_ids(nb) -> set[str]:
    """Grade ids of all the notebook's cells that carry one (graded, answer and read-only cells): what collect tells a
    course's notebooks apart by."""
    return {g for c in nb.cells if (g := nbgrader_meta(c).get("grade_id")) is not None}


def is_edited(cell) -> bool:
    """A released read-only cell (a test cell or a locked cell) whose contents no longer match its nbgrader checksum.

    Trailing whitespace added or removed at the end of the cell (an editor's save) does not count.
    """
    from nbgrader.utils import compute_checksum, is_locked

    meta = nbgrader_meta(cell)
    if "checksum" not in meta or not is_locked(cell):
        return False
    source = cell.source
    try:
        for variant in (source, source.rstrip(), source.rstrip() + "\n"):
            cell.source = variant
            if compute_checksum(cell) == meta["checksum"]:
                return False
        return True
    except (KeyError, TypeError, ValueError):  # its grade id or points were removed or mangled
        return True
    finally:
        cell.source = source


LEFT_OUT_NAMES = ("__pycache__", ".ipynb_checkpoints", ".DS_Store")  # compiled files, editor and OS leftovers


def left_out(path) -> bool:
    """True for a course file that is no part of the student bundle: compiled, or an editor's or the OS's leftover
    (any part of its path)."""
    return any(part in LEFT_OUT_NAMES or part.endswith(".pyc") for part in path.parts)


KERNEL_WORDS = 300  # characters of an error that may quote the kernel, for the instructor's summary and notes


def clipped(text: str, limit: int = KERNEL_WORDS) -> str:
    """text as one printable line (each unprintable character, a line break or a terminal's escape among them, as
    '?': the text may be a kernel's, and the instructor reads it in a terminal), cut to limit characters with '…' at
    the end when longer."""
    text = text if len(text) <= limit else text[:limit - 1] + "…"
    return "".join(c if c.isprintable() else "?" for c in text)


def readable(text: str) -> str:
    """text with each unprintable character other than a line break or a tab as '?' (a carriage return and a
    terminal's escapes among them): the text may be a kernel's, and the instructor reads it in a terminal."""
    return "\n".join(line if line.isprintable() else "".join(c if c.isprintable() or c == "\t" else "?" for c in line)
                     for line in text.split("\n"))


def cut_middle(text: str, limit: int) -> str:
    """text when it has at most limit characters, else its first three quarters and last quarter of limit around a
    line saying how many characters were cut there."""
    if len(text) <= limit:
        return text
    head, tail = limit * 3 // 4, limit // 4
    return f"{text[:head]}\n[... {len(text) - head - tail} characters cut ...]\n{text[len(text) - tail:]}"


def first_line(text: str) -> str:
    """The first non-blank line of text, stripped ('' when there is none)."""
    return next((line.strip() for line in text.splitlines() if line.strip()), "")


def numbered_cell(cell, number: int) -> str:
    """'cell N (its first line)': N counts every cell from 1 at the top; JupyterLab shows no cell numbers, the line
    lets the student find it."""
    first = first_line(cell.source) or "empty"
    return f"cell {number} ({first[:60]}{'…' if len(first) > 60 else ''})"


def unrun_for_time(cell) -> bool:
    """A cell the notebook's time budget left unrun (the grader's NOTEBOOK_TIMEOUT error; a test cell's failure says
    BUDGET_NOT_RUN)."""
    return any(o.get("output_type") == "error" and (o.get("ename") == NOTEBOOK_TIMEOUT or
                                                    str(o.get("evalue", "")).startswith(BUDGET_NOT_RUN))
               for o in cell.get("outputs", []))


def not_run_for_time(nb) -> list[str]:
    """Grade ids of the test cells the notebook's time budget left unrun (they count as failed), in order."""
    return [nbgrader_meta(cell)["grade_id"] for cell in nb.cells if is_test_cell(cell) and unrun_for_time(cell)]


def error_named(cell, name: str):
    """The error output of the exception `name` the code cell's run ended with, or None."""
    return next((o for o in cell.get("outputs", []) if o.get("output_type") == "error" and o.get("ename") == name), None)


def stopped_by_budget(cell) -> bool:
    """A cell the notebook's time budget stopped while it ran (BudgetedExecute says so in its CellTimeoutError)."""
    error = error_named(cell, "CellTimeoutError")
    return error is not None and str(error.get("evalue", "")).startswith(BUDGET_SPENT)


def cut_at_time_limit(cell) -> bool:
    """A code cell other than a test cell that was interrupted at its own time limit, not by the notebook's budget
    (a test cell's failure says so itself; the budget's cell is the budget's note)."""
    return cell.cell_type == "code" and not is_test_cell(cell) and not stopped_by_budget(cell) and any(
        o.get("output_type") == "error" and o.get("ename") in TIMED_OUT for o in cell.get("outputs", []))


def stopped_for_time(nb):
    """The code cell that was running when the notebook's time budget ran out (stopped at its time limit right before
    the first cell left unrun), or None when the budget ran out between cells or was not spent."""
    ran = [c for c in nb.cells if c.cell_type == "code" and c.source.strip()]
    first = next((i for i, c in enumerate(ran) if unrun_for_time(c)), None)
    if not first:  # nothing left unrun, or the very first cell was (nothing ran before it)
        return None
    timed_out = any(o.get("output_type") == "error" and o.get("ename") in TIMED_OUT for o in ran[first - 1].get("outputs", []))
    return ran[first - 1] if timed_out else None


def stopped_kernel(cell) -> bool:
    """True for a cell the grader failed for stopping the kernel (KERNEL_STOPS)."""
    return any(o.get("output_type") == "error" and o.get("ename") in KERNEL_STOPS for o in cell.get("outputs", []))


@dataclass(frozen=True)
class Exercise:
    """A code solution cell and the test cells that grade it (up to the next solution cell)."""

    notebook: str
    solution_id: str
    test_ids: tuple[str, ...]


def exercises(nb, name: str) -> list[Exercise]:
    """The notebook's code exercises in order, each with the test cells that follow its solution."""
    found, current, tests = [], None, []
    for cell in nb.cells:
        m = nbgrader_meta(cell)
        if cell.cell_type == "code" and m.get("solution"):
            if current and tests:
                found.append(Exercise(name, current, tuple(tests)))
            current, tests = m["grade_id"], []
        elif current and is_test_cell(cell):
            tests.append(m["grade_id"])
    if current and tests:
        found.append(Exercise(name, current, tuple(tests)))
    return found
