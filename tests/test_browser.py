"""The student's view in a real browser: JupyterLab opens, renders and runs every release notebook.

``python -m autograder release`` builds the student zip in a temporary build folder; JupyterLab
serves the unpacked zip on a free loopback port with a token; headless Chromium (Debian's
/usr/bin/chromium, driven by Playwright) opens each notebook as a student would. For every
notebook: the kernel starts without a "Select Kernel" dialog, the math is typeset, every
image and referenced file loads, "Run All" (resumed after each expected failure) runs every
cell with only the exercise stubs and their tests failing, and nbgrader's Validate button
reports exactly the graded cells as failing (test cells, and free-text answers not given yet). A screenshot of the first screen and
of the verdict goes to <build>/screenshots. One source notebook is opened in the
instructor's view to check nbgrader's Create Assignment sidebar.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import time
from pathlib import Path
from urllib.parse import quote

import pytest
from playwright import sync_api as playwright_api

import browser_support as bs

NOTEBOOKS = [p.name for p in bs.source_notebooks()]
SCREENSHOTS = Path(os.environ.get("PART_II_BUILD") or bs.REPO / "build") / "screenshots"
VIEWPORT = {"width": 1366, "height": 900}
OPEN_TIMEOUT_MS = 60_000
RUN_TIMEOUT_MS = 180_000
VALIDATE_TIMEOUT_MS = 240_000
INSTRUCTOR_DIR = "instructor"
# waits evaluate their condition on a timer, not on every animation frame (Playwright's default)
POLL_MS = 50


def test_assignment_has_notebooks():
    """The browser test is only as good as its notebook list: there must be source notebooks."""
    assert NOTEBOOKS, f"no source notebooks in {bs.SOURCE}"


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    """JupyterLab serving the unpacked student zip (``python -m autograder release`` into a temporary
    build folder); the server boots while the release is built; stopped whatever the outcome."""
    build = tmp_path_factory.mktemp("browser-build")
    student = build / "unzipped"
    student.mkdir()
    server = bs.LabServer(root=student, state=tmp_path_factory.mktemp("jupyter-state"))
    try:
        server.launch()
        bundle = bs.build_student_tree(build, student)
        released = sorted(p.name for p in bundle.glob("*.ipynb"))
        assert released == NOTEBOOKS, f"the student zip holds {released}, the source {NOTEBOOKS}"
        server.wait_ready()
        yield server
    finally:
        server.stop()
    assert server.proc.poll() is not None, "the JupyterLab server is still running after stop()"


@pytest.fixture(scope="module")
def browser():
    """Headless Debian Chromium under Playwright (Playwright never downloads a browser here)."""
    assert Path(bs.CHROMIUM).is_file(), f"{bs.CHROMIUM} is missing: install Debian's chromium (make sysdeps)"
    with playwright_api.sync_playwright() as pw:
        chromium = pw.chromium.launch(executable_path=bs.CHROMIUM, headless=True, args=bs.CHROMIUM_ARGS)
        try:
            yield chromium
        finally:
            chromium.close()


@pytest.fixture(scope="module")
def page(browser):
    """One browser tab for the module: JupyterLab loads once, notebooks are opened from its file browser."""
    context = browser.new_context(viewport=VIEWPORT)
    context.set_default_timeout(OPEN_TIMEOUT_MS)
    pg = context.new_page()
    try:
        yield pg
    finally:
        context.close()


def wait_js(pg, expression: str, arg=None, timeout: float = OPEN_TIMEOUT_MS):
    """Wait until the JS function expression(arg) returns a truthy value; return it as a Python value."""
    return pg.wait_for_function(expression, arg=arg, timeout=timeout, polling=POLL_MS).json_value()


def screenshot(pg, name: str) -> Path:
    """Save a screenshot of the current screen under the build folder's screenshots/."""
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    path = SCREENSHOTS / name
    pg.screenshot(path=str(path))
    return path


@contextlib.contextmanager
def screenshot_on_failure(pg, name: str):
    """On any failure inside the block, save what the browser showed, then re-raise."""
    try:
        yield
    except BaseException:
        with contextlib.suppress(Exception):
            screenshot(pg, name)
        raise


def close_notebook(pg) -> None:
    """Close the shown notebook (unsaved changes discarded); its kernel shuts down while the test goes on."""
    if pg.locator(bs.PANEL).count() == 0 or pg.locator(bs.DIALOG).count():
        return
    assert pg.evaluate(bs.JS_CLOSE_AND_SHUTDOWN), "no notebook panel to close"
    state = wait_js(pg, bs.JS_CLOSED_OR_DIALOG, bs.PANEL)
    assert state == "closed", f"closing the notebook showed a dialog: {pg.locator(bs.DIALOG).first.inner_text()!r}"


def open_sessions(pg, lab, timeout: float = 30.0) -> list[str]:
    """The notebook paths with a session on the server, once the kernels of closed notebooks have shut down."""
    deadline = time.monotonic() + timeout
    while True:
        paths = sorted(s["path"] for s in pg.request.get(lab.url("api/sessions")).json())
        if len(paths) <= 1 or time.monotonic() > deadline:
            return paths
        time.sleep(0.1)


def open_notebook(pg, lab, rel: str):
    """Open rel as a student would and wait for every cell and an idle kernel; fail on any dialog.

    The first notebook is opened by URL in a fresh workspace; the next ones by double-clicking them
    in the file browser (JupyterLab loads once), after closing the previous one.
    """
    nb = bs.read_notebook(lab.root / rel)
    folder, name = rel.rsplit("/", 1)
    in_app = getattr(pg, "lab_loaded", False) and pg.locator(bs.DIALOG).count() == 0
    if in_app:
        close_notebook(pg)
        pg.evaluate("(path) => window.jupyterapp.commands.execute('filebrowser:go-to-path', {path})", folder)
        item = pg.locator(".jp-DirListing-item").filter(has=pg.get_by_text(name, exact=True))
        with contextlib.suppress(playwright_api.TimeoutError):
            item.wait_for(state="visible", timeout=10_000)
        in_app = item.count() == 1 and item.is_visible()
    if in_app:
        item.dblclick()
    else:
        close_notebook(pg)
        pg.goto(lab.url(f"lab/tree/{quote(rel)}?reset"))
        pg.lab_loaded = True
    panel = pg.locator(bs.PANEL)
    wait_js(pg, bs.JS_CELL_COUNT_AT_LEAST, [bs.PANEL, len(nb.cells)])
    shown = pg.evaluate("() => window.jupyterapp.shell.currentWidget.context.path")
    assert shown == rel, f"opened {shown!r} instead of {rel!r}"
    kernel = nb.metadata.kernelspec.display_name
    state = wait_js(pg, bs.JS_KERNEL_STATE, [bs.PANEL, kernel])
    if state == "dialog":
        text = pg.locator(bs.DIALOG).first.inner_text()
        screenshot(pg, f"{Path(rel).stem}-dialog.png")
        pytest.fail(f"{rel}: a dialog blocks the notebook on opening: {text!r}")
    sessions = open_sessions(pg, lab)
    assert sessions == [rel], f"{rel}: the server still has sessions of closed notebooks: {sessions}"
    kernel_name = panel.locator(".jp-Toolbar .jp-KernelName, .jp-Toolbar-kernelName").first.inner_text().strip()
    assert kernel_name == kernel, f"{rel}: toolbar shows kernel {kernel_name!r}"
    assert panel.locator(".jp-Notebook .jp-Cell").count() == len(nb.cells), f"{rel}: cell count differs from the file"
    return nb, panel


def check_math(pg, rel: str, nb) -> None:
    """Every markdown cell with TeX shows typeset MathJax, no math error and no leftover TeX."""
    code_free = [re.sub(r"```.*?```|`[^`]*`", "", c.source, flags=re.S) for c in nb.cells]
    math_cells = [i for i, c in enumerate(nb.cells) if c.cell_type == "markdown" and "$" in code_free[i]]
    assert math_cells or not any("$" in s for s in code_free), f"{rel}: TeX outside markdown cells only?"
    if not math_cells:
        return
    wait_js(pg, bs.JS_MATH_READY, [bs.PANEL, math_cells])
    problems = pg.evaluate(bs.JS_MATH_PROBLEMS, [bs.PANEL, math_cells])
    assert not problems, f"{rel}: math does not render:\n" + "\n".join(problems)


def check_images(pg, rel: str) -> None:
    """Every image shown in the notebook (markdown and outputs) has loaded with a real size."""
    wait_js(pg, bs.JS_IMAGES_SETTLED, bs.PANEL)
    broken = [(src, w) for src, complete, w in pg.evaluate(bs.JS_IMAGES, bs.PANEL) if not complete or w == 0]
    assert not broken, f"{rel}: images that did not load: {broken}"


def check_first_screen(pg, rel: str) -> None:
    """The first screen shows the whole title cell: a heading, and how to work the notebook."""
    first = pg.evaluate(bs.JS_FIRST_SCREEN, bs.PANEL)
    assert first is not None, f"{rel}: the first cell is not a rendered markdown title cell"
    assert first["h1"], f"{rel}: the title cell has no level-1 heading"
    assert first["bottom"] <= first["height"], (
        f"{rel}: the title cell does not fit the first screen ({first['bottom']:.0f} px of {first['height']} px)")
    assert "YOUR CODE HERE" in first["text"], f"{rel}: the title cell does not say where to write code (YOUR CODE HERE)"


def check_references(pg, lab, rel: str, nb) -> None:
    """Every local file a cell links, embeds or names exists in the student tree and the server serves it."""
    notebook = lab.root / rel
    missing, unserved = [], []
    for index, target in bs.referenced_files(nb):
        path = bs.resolve_reference(target, notebook, lab.root)
        if path is None:
            missing.append(f"cell {index}: {target}")
            continue
        served = path.relative_to(lab.root.resolve()).as_posix()
        status = pg.request.get(lab.url(f"files/{quote(served)}")).status
        if status != 200:
            unserved.append(f"cell {index}: {target} -> HTTP {status}")
    assert not missing, f"{rel}: referenced files missing from the student tree: {missing}"
    assert not unserved, f"{rel}: referenced files the server does not serve: {unserved}"


def run_every_cell(pg, rel: str, nb) -> int:
    """Run All (Run menu), then resume below each stop (an exercise stub raised) until every code cell ran; return runs."""
    code_cells = [i for i, c in enumerate(nb.cells) if c.cell_type == "code" and c.source.strip()]
    start, runs = code_cells[0], 0
    while True:
        before = pg.evaluate(bs.JS_PROMPTS, bs.PANEL)[start]
        runs += 1
        if runs == 1:
            bs.run_menu_command(pg, "runmenu:run-all")
            wait_run(pg, rel, runs, start, before, bs.JS_RUN_DONE, [bs.PANEL, start, before])
        else:
            resume_below(pg, rel, start, before, runs)
        prompts = pg.evaluate(bs.JS_PROMPTS, bs.PANEL)
        pending = [i for i in code_cells if i > start and not re.fullmatch(r"\[\d+\]:?", prompts[i])]
        if not pending:
            return runs
        assert runs <= len(code_cells), f"{rel}: Run All keeps stopping without progress"
        start = pending[0]


def resume_below(pg, rel: str, start: int, before: str, runs: int, attempts: int = 3) -> None:
    """Run the Run menu's "Run Selected Cell and All Below" from start, through JupyterLab's command registry.

    Issued the moment the previous run stopped at an error, the requests may reach ipykernel while
    it still aborts what was queued behind that error: the cells come back "aborted", unnumbered,
    nothing ran. A person clicks a second later; the test asks again (at most attempts times).
    """
    for attempt in range(1, attempts + 1):
        shown = pg.evaluate(bs.JS_RUN_ALL_BELOW, [start])
        assert shown == rel, f"resuming Run All in {shown!r}, not {rel!r}"
        wait_run(pg, rel, runs, start, before, bs.JS_RESUMED_RUN_OVER, bs.PANEL)
        if pg.evaluate(bs.JS_PROMPTS, bs.PANEL)[start] != before:
            return
        print(f"{rel}: run {runs} from cell {start} ran nothing (attempt {attempt}): {run_state(pg, start, before)}")
        pg.wait_for_timeout(1000)
    raise AssertionError(f"{rel}: run {runs} from cell {start} ran nothing in {attempts} attempts: "
                         f"{run_state(pg, start, before)}")


def wait_run(pg, rel: str, runs: int, start: int, before: str, condition: str, arg) -> None:
    """Wait until the JS condition(arg) says run number runs (from cell start) is over; fail saying what was seen."""
    try:
        wait_js(pg, condition, arg, timeout=RUN_TIMEOUT_MS)
    except playwright_api.TimeoutError:
        raise AssertionError(f"{rel}: run {runs} (from cell {start}) not over after {RUN_TIMEOUT_MS / 1000:g} s: "
                             f"{run_state(pg, start, before)}") from None


def run_state(pg, start: int, before: str) -> str:
    """What the run-done condition saw: the execution indicator, the start cell's prompt, the cells still queued."""
    prompts = pg.evaluate(bs.JS_PROMPTS, bs.PANEL)
    status = pg.evaluate("(sel) => { const i = document.querySelector(sel + ' .jp-Notebook-ExecutionIndicator');"
                         " return i ? i.dataset.status : 'no indicator'; }", bs.PANEL)
    queued = [i for i, text in enumerate(prompts) if "*" in text]
    return (f"indicator {status!r}; cell {start}'s prompt {prompts[start] if start < len(prompts) else None!r} "
            f"(was {before!r}); cells shown as queued [*]: {queued}; last prompts: {prompts[-6:]}")


def validate(pg, rel: str) -> dict:
    """Click nbgrader's Validate button; return the verdict dialog's content; screenshot and close it."""
    pg.locator(bs.PANEL).get_by_role("button", name="Validate").click()
    wait_js(pg, bs.JS_DIALOG_SHOWN, timeout=VALIDATE_TIMEOUT_MS)
    verdict = pg.evaluate(bs.JS_VALIDATION)
    screenshot(pg, f"{Path(rel).stem}-validate.png")
    pg.locator(f"{bs.DIALOG} .jp-mod-accept").first.click()
    pg.locator(bs.DIALOG).wait_for(state="detached")
    return verdict


def first_line(source: str) -> str:
    """The first non-empty line of a cell's source, stripped."""
    return next((line.strip() for line in source.splitlines() if line.strip()), "")


@pytest.mark.parametrize("name", NOTEBOOKS, ids=[Path(n).stem for n in NOTEBOOKS])
def test_student_notebook_in_jupyterlab(name, lab, page):
    """A student opens, reads, runs and validates the release notebook in JupyterLab."""
    with screenshot_on_failure(page, f"{Path(name).stem}-failure.png"):
        student_session(page, lab, name)


def student_session(page, lab, name: str) -> None:
    """What a student does with one release notebook, checked step by step."""
    rel = f"{bs.ASSIGNMENT}/{name}"
    stem = Path(name).stem
    nb, _panel = open_notebook(page, lab, rel)
    assert page.evaluate(bs.JS_DRAWS_CHINESE), "the browser has no CJK font: Chinese prose renders as boxes"
    check_math(page, rel, nb)
    check_images(page, rel)
    check_first_screen(page, rel)
    screenshot(page, f"{stem}.png")
    check_references(page, lab, rel, nb)

    run_every_cell(page, rel, nb)
    check_images(page, rel)  # the plots drawn by the run

    verdict = validate(page, rel)
    executed = bs.read_notebook(lab.root / rel)  # Validate saved what the browser ran
    problems = bs.execution_problems(executed)
    assert not problems, f"{rel}: running every cell in JupyterLab:\n" + "\n".join(problems)

    # unsolved, every graded cell fails: test cells with the stubs' errors, answers as not given
    graded = [(bs.cell_role(c), first_line(c.source)) for c in nb.cells
              if bs.cell_role(c) in ("test", "manual") and bs.nbgrader_meta(c).get("points")]
    assert verdict is not None, f"{rel}: Validate showed no dialog"
    if graded:
        assert verdict["verdict"] == "validation-failed", f"{rel}: Validate said {verdict}"
        failed = [first_line(src) for src, _err in verdict["failed"]]
        assert failed == [line for _role, line in graded], f"{rel}: Validate reported failing cells {failed}, expected {graded}"
        for (role, line), (_src, err) in zip(graded, verdict["failed"]):
            want = "|".join(bs.TEST_ERRORS) if role == "test" else "You did not provide a response"
            assert re.search(want, err), f"{rel}: unexpected validation error for {line!r}: {err[:300]}"
    else:
        assert verdict["verdict"] == "validation-success", f"{rel}: Validate said {verdict}"


def instructor_notebook() -> Path:
    """The source notebook to open as an instructor: 02-shapes-and-loss if present, else the first with all cell kinds."""
    def kinds(path):
        return {bs.expected_sidebar_type(c) for c in bs.read_notebook(path).cells}

    candidates = sorted(bs.source_notebooks(), key=lambda p: (not p.name.startswith("02-"), p.name))
    for path in candidates:
        if {"solution", "tests", "manual"} <= kinds(path):
            return path
    pytest.fail(f"no source notebook in {bs.SOURCE} has solution, tests and manually graded cells")


def test_instructor_create_assignment_sidebar(lab, page):
    """The instructor's view: nbgrader's Create Assignment sidebar shows every cell's type, id and points."""
    with screenshot_on_failure(page, "instructor-failure.png"):
        instructor_session(page, lab)


def instructor_session(page, lab) -> None:
    """Open a source notebook, show the Create Assignment sidebar, compare it with the cells' metadata."""
    source = instructor_notebook()
    # a copy, beside the student tree's code/ and data/: the sidebar rewrites metadata in memory
    target = lab.root / INSTRUCTOR_DIR / bs.ASSIGNMENT / source.name
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy2(source, target)
    rel = target.relative_to(lab.root).as_posix()
    nb, _panel = open_notebook(page, lab, rel)

    page.locator('.lm-TabBar-tab[data-id="nbgrader-create_assignemnt"]').click()
    rows_ready = ("(n) => { const p = [...document.querySelectorAll('.nbgrader-NotebookPanelWidget')]"
                  ".find(p => !p.classList.contains('lm-mod-hidden'));"
                  " return p && p.querySelectorAll('.nbgrader-CellWidget').length === n; }")
    wait_js(page, rows_ready, len(nb.cells))
    sidebar = page.evaluate(bs.JS_CREATE_ASSIGNMENT)
    # select the first exercise cell so the sidebar (and the screenshot) scroll to the graded cells
    first = next(i for i, c in enumerate(nb.cells) if bs.expected_sidebar_type(c) == "solution")
    page.locator(bs.PANEL).locator(".jp-Notebook .jp-Cell").nth(first).locator(".jp-InputPrompt").click()
    active = page.locator(".nbgrader-CellWidget.nbgrader-mod-active")
    active.wait_for(state="attached")
    active.evaluate("w => w.scrollIntoView({block: 'start'})")
    screenshot(page, f"instructor-{source.stem}-create-assignment.png")

    expected, shown = [], []
    for i, cell in enumerate(nb.cells):
        kind = bs.expected_sidebar_type(cell)
        meta = bs.nbgrader_meta(cell)
        points = str(meta.get("points", 0) or 0) if kind in ("manual", "tests", "task") else "0"
        grade_id = meta.get("grade_id", "") if kind else ""
        expected.append((i, kind, _num(points), grade_id))
        typ, pts, gid, _editable, _locked = sidebar["rows"][i]
        shown.append((i, typ, _num(pts), gid))
    wrong = [(e, s) for e, s in zip(expected, shown) if e != s]
    assert not wrong, f"{rel}: sidebar rows differ from the metadata (expected, shown): {wrong[:8]}"
    kinds = {row[1] for row in shown}
    assert {"solution", "tests", "manual"} <= kinds, f"{rel}: sidebar shows only the types {sorted(kinds)}"
    total = sum(float(bs.nbgrader_meta(c).get("points", 0) or 0) for c in nb.cells
                if bs.expected_sidebar_type(c) in ("manual", "tests", "task"))
    assert _num(sidebar["total"]) == total, f"{rel}: sidebar total {sidebar['total']}, metadata total {total}"
    graded = [row for row, (_i, kind, _p, _g) in zip(sidebar["rows"], expected) if kind in ("manual", "tests")]
    assert all(row[3] for row in graded), f"{rel}: graded cells without a points field: {graded}"


def _num(value) -> float:
    """A points value as float ('' counts as 0)."""
    return float(value) if str(value).strip() else 0.0
