"""Support for the browser test: a student tree, a JupyterLab server, and what a notebook expects.

The student tree is the student zip unpacked, as written by ``python -m autograder release``:
``part-ii/*.ipynb`` (nbgrader's release) with ``part-ii/code/part-ii`` and
``part-ii/data/part-ii`` beside them, where the notebooks' setup cell finds the course code. The server runs on a free loopback port
with a token and temporary Jupyter config/data/runtime folders; stopping it also ends
every kernel it (or nbgrader's Validate) started, whatever state the test left it in.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

import nbformat

REPO = Path(__file__).resolve().parent.parent
SOURCE = REPO / "notebooks" / "part-ii"
ASSIGNMENT = "part-ii"
VENV_BIN = Path(sys.executable).parent

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]

# JupyterLab user settings for a quiet, fully rendered notebook: no news/update toasts,
# and every cell kept in the DOM (the default windowing renders only visible cells).
LAB_SETTINGS = {
    "@jupyterlab/apputils-extension/notification.jupyterlab-settings": {"fetchNews": "false", "checkForUpdates": False},
    "@jupyterlab/notebook-extension/tracker.jupyterlab-settings": {"windowingMode": "contentVisibility"},
}

SOLUTION_ERRORS = {"NotImplementedError"}
TEST_ERRORS = {"NotImplementedError", "AssertionError", "NameError"}
DEMO_ERRORS = {"NotImplementedError", "NameError"}
DATA_SUFFIXES = (".json", ".csv", ".txt", ".npz", ".npy", ".png", ".jpg", ".svg", ".py")


def venv_env(**extra: str) -> dict[str, str]:
    """Return os.environ with the venv's bin first on PATH (nbgrader calls alembic from PATH)."""
    env = dict(os.environ)
    env["PATH"] = f"{VENV_BIN}{os.pathsep}{env.get('PATH', '')}"
    env.update(extra)
    return env


def source_notebooks() -> list[Path]:
    """Return the instructor source notebooks of the assignment, sorted by name."""
    return sorted(SOURCE.glob("*.ipynb"))


def build_student_tree(build: Path, student: Path) -> Path:
    """Release part-ii with the course CLI into build; unpack the student zip into student; return its part-ii/."""
    cmd = [sys.executable, "-m", "autograder", "release", "--build", str(build)]
    done = subprocess.run(cmd, cwd=REPO, env=venv_env(), capture_output=True, text=True, timeout=900)
    if done.returncode != 0:
        raise RuntimeError(f"python -m autograder release failed (exit {done.returncode}):\n{done.stdout[-2000:]}{done.stderr[-4000:]}")
    bundle = build / "course" / "student" / f"{ASSIGNMENT}.zip"
    if not bundle.is_file():
        raise RuntimeError(f"the release wrote no student zip at {bundle}:\n{done.stdout[-2000:]}")
    with zipfile.ZipFile(bundle) as zf:
        zf.extractall(student)
    return student / ASSIGNMENT


def free_port() -> int:
    """Return a loopback TCP port that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@dataclass
class LabServer:
    """A JupyterLab server on 127.0.0.1 serving root, with its own token and Jupyter folders under state."""

    root: Path
    state: Path
    port: int = 0
    token: str = field(default_factory=lambda: secrets.token_hex(16))
    proc: subprocess.Popen | None = None
    log_path: Path | None = None

    @property
    def base(self) -> str:
        """The server's base URL (no trailing slash)."""
        return f"http://127.0.0.1:{self.port}"

    def url(self, path: str) -> str:
        """The URL of a JupyterLab route, carrying the token (the browser then keeps a cookie)."""
        sep = "&" if "?" in path else "?"
        return f"{self.base}/{path.lstrip('/')}{sep}token={self.token}"

    def _write_settings(self) -> Path:
        """Write the quiet-lab user settings; return the settings folder."""
        settings = self.state / "lab-settings"
        for rel, values in LAB_SETTINGS.items():
            path = settings / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(values), encoding="utf-8")
        return settings

    def launch(self) -> "LabServer":
        """Start the server process (root must exist); wait_ready() waits for it."""
        for folder in ("config", "data", "runtime", "ipython", "workspaces"):
            (self.state / folder).mkdir(parents=True, exist_ok=True)
        settings = self._write_settings()
        env = venv_env(
            JUPYTER_CONFIG_DIR=str(self.state / "config"),
            JUPYTER_DATA_DIR=str(self.state / "data"),
            JUPYTER_RUNTIME_DIR=str(self.state / "runtime"),
            IPYTHONDIR=str(self.state / "ipython"),
            JUPYTER_PLATFORM_DIRS="1",
        )
        # the notebooks must find the course code from where they are served, not from a hint
        env.pop("PART_II_ROOT", None)
        env.pop("PART_II_BUILD", None)
        env.pop("MPLBACKEND", None)
        self.port = self.port or free_port()
        self.log_path = self.state / "jupyterlab.log"
        cmd = [
            sys.executable, "-m", "jupyterlab", "--no-browser",
            "--ServerApp.ip=127.0.0.1", f"--ServerApp.port={self.port}", "--ServerApp.port_retries=0",
            f"--IdentityProvider.token={self.token}", f"--ServerApp.root_dir={self.root}",
            f"--LabApp.user_settings_dir={settings}", f"--LabApp.workspaces_dir={self.state / 'workspaces'}",
            "--ServerApp.terminals_enabled=False",
            # window.jupyterapp: the test resumes Run All and closes notebooks through JupyterLab's own commands
            "--LabApp.expose_app_in_browser=True",
        ]
        if os.geteuid() == 0:  # CI and the course machines run as root
            cmd.append("--ServerApp.allow_root=True")
        log = open(self.log_path, "w", encoding="utf-8")  # noqa: SIM115 - closed by the child's exit
        self.proc = subprocess.Popen(cmd, cwd=self.root, env=env, stdout=log, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL, start_new_session=True)
        log.close()
        return self

    def wait_ready(self, timeout: float = 120.0) -> "LabServer":
        """Wait until the REST API answers; raise with the log if the server dies or stays silent."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"JupyterLab exited with {self.proc.returncode}:\n{self.log_tail()}")
            if self._status_ok():
                return self
            time.sleep(0.2)
        raise RuntimeError(f"JupyterLab did not answer on {self.base} within {timeout:.0f} s:\n{self.log_tail()}")

    def _status_ok(self) -> bool:
        """True when GET /api/status answers 200."""
        try:
            with urllib.request.urlopen(self.url("api/status"), timeout=2) as resp:
                return resp.status == 200
        except (urllib.error.URLError, OSError):
            return False

    def log_tail(self, chars: int = 4000) -> str:
        """The last characters of the server log."""
        if self.log_path is None or not self.log_path.exists():
            return "(no log)"
        return self.log_path.read_text(encoding="utf-8", errors="replace")[-chars:]

    def _our_kernel_pids(self) -> list[int]:
        """PIDs of kernels whose connection file lies in this server's runtime folder."""
        marker = str(self.state / "runtime").encode()
        pids = []
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                if marker in (entry / "cmdline").read_bytes():
                    pids.append(int(entry.name))
            except OSError:
                continue
        return pids

    def stop(self) -> None:
        """Shut the server down (kernels included); escalate to signals on its process group and kernels."""
        if self.proc is None:
            return
        if self.proc.poll() is None:
            try:
                req = urllib.request.Request(self.url("api/shutdown"), method="POST", data=b"")
                urllib.request.urlopen(req, timeout=5).close()
            except (urllib.error.URLError, OSError):
                pass
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                for sig, wait in ((signal.SIGTERM, 10), (signal.SIGKILL, 5)):
                    try:
                        os.killpg(self.proc.pid, sig)
                    except ProcessLookupError:
                        break
                    try:
                        self.proc.wait(timeout=wait)
                        break
                    except subprocess.TimeoutExpired:
                        continue
        # kernels run in sessions of their own; end any that outlived the server
        for pid in self._our_kernel_pids():
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


# --- what a release notebook should do --------------------------------------------------


def nbgrader_meta(cell) -> dict:
    """The cell's nbgrader metadata (empty dict when none)."""
    return cell.get("metadata", {}).get("nbgrader", {}) or {}


def cell_role(cell) -> str:
    """Classify a cell: 'solution', 'test', 'manual', 'readonly' or 'plain'."""
    meta = nbgrader_meta(cell)
    if cell.cell_type == "code" and meta.get("solution") and not meta.get("grade"):
        return "solution"
    if cell.cell_type == "code" and meta.get("grade") and not meta.get("solution"):
        return "test"
    if meta.get("grade") and meta.get("solution"):
        return "manual"
    if meta.get("locked"):
        return "readonly"
    return "plain"


EXERCISE_HEADING = re.compile(r"^#{1,6}\s*练习", re.M)
SECTION_HEADING = re.compile(r"^#{1,3}\s", re.M)


def exercise_cells(nb) -> set[int]:
    """Indices of cells inside an exercise: from a '练习' heading up to the next heading that is not one."""
    inside, found = False, set()
    for i, cell in enumerate(nb.cells):
        if cell.cell_type == "markdown":
            if EXERCISE_HEADING.search(cell.source):
                inside = True
            elif SECTION_HEADING.search(cell.source) and cell_role(cell) == "plain":
                inside = False
        if inside or cell_role(cell) in ("solution", "test", "manual"):
            found.add(i)
    return found


def error_names(cell) -> list[str]:
    """The exception names of the cell's error outputs, in order."""
    return [out.get("ename", "") for out in cell.get("outputs", []) if out.get("output_type") == "error"]


def stderr_text(cell) -> str:
    """Everything the cell wrote to stderr."""
    return "".join(out.get("text", "") for out in cell.get("outputs", [])
                   if out.get("output_type") == "stream" and out.get("name") == "stderr")


def execution_problems(nb) -> list[str]:
    """What is wrong with an executed release notebook: unrun cells, unexpected or missing failures."""
    problems = []
    exercise = exercise_cells(nb)
    for i, cell in enumerate(nb.cells):
        if cell.cell_type != "code":
            continue
        role, names, where = cell_role(cell), error_names(cell), f"cell {i}"
        head = cell.source.strip().splitlines()[0][:70] if cell.source.strip() else "(empty)"
        where = f"cell {i} ({role}: {head!r})"
        if cell.get("execution_count") is None:
            problems.append(f"{where} was never executed")
            continue
        if role == "solution":
            # a stub inside a function body raises only when called; a top-level stub raises here
            if names and not set(names) <= SOLUTION_ERRORS:
                problems.append(f"{where}: expected NotImplementedError from the stub, got {names}")
        elif role == "test":
            if not names or not set(names) <= TEST_ERRORS:
                problems.append(f"{where}: expected one of {sorted(TEST_ERRORS)} on the unsolved release, got {names or 'no error'}")
        elif names and not (i in exercise and set(names) <= DEMO_ERRORS):
            problems.append(f"{where}: unexpected {names} outside the exercise stubs")
        if role != "test" and stderr_text(cell).strip() and i not in exercise:
            problems.append(f"{where} wrote to stderr: {stderr_text(cell).strip()[:200]!r}")
    return problems


LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
HTML_SRC = re.compile(r"""<(?:img|a)\b[^>]*?(?:src|href)\s*=\s*["']([^"']+)["']""", re.I)
_FILE = r"([\w./-]+(?:%s))" % "|".join(re.escape(s) for s in DATA_SUFFIXES)
STRING = re.compile(r"""["']%s["']""" % _FILE)  # a file name in a code cell's string literal
CODE_SPAN = re.compile(r"`%s`" % _FILE)  # a file path named in markdown prose


def referenced_files(nb) -> list[tuple[int, str]]:
    """(cell index, path) for every local file a cell links, embeds, names in a code span or a string literal."""
    refs = []
    for i, cell in enumerate(nb.cells):
        if cell.cell_type == "markdown":
            targets = LINK.findall(cell.source) + HTML_SRC.findall(cell.source) + CODE_SPAN.findall(cell.source)
        elif cell.cell_type == "code":
            targets = STRING.findall(cell.source)
        else:
            continue
        for target in targets:
            if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.I) or target.startswith("#"):
                continue  # external URL, data: URI or in-page anchor
            refs.append((i, target.split("#")[0]))
    return refs


def resolve_reference(target: str, notebook: Path, student: Path) -> Path | None:
    """Where a referenced path lands: beside the notebook, in the bundle's data/code folder, or under the root."""
    bases = (notebook.parent, notebook.parent / "data" / ASSIGNMENT, notebook.parent / "code" / ASSIGNMENT, student)
    for base in bases:
        path = (base / target).resolve()
        if path.is_file() and path.is_relative_to(student.resolve()):
            return path
    return None


def read_notebook(path: Path):
    """Read a notebook as nbformat v4."""
    return nbformat.read(path, as_version=4)


# --- driving JupyterLab ---------------------------------------------------------------------

PANEL = "#jp-main-dock-panel .jp-NotebookPanel:not(.lm-mod-hidden)"
DIALOG = ".jp-Dialog"

# Resolves to 'dialog' when any dialog is up, 'idle' once the status bar shows the named kernel idle
# (the toolbar's execution indicator reads 'idle' before any kernel is connected).
JS_KERNEL_STATE = """
([panelSel, kernel]) => {
  if (document.querySelector('.jp-Dialog')) return 'dialog';
  const panel = document.querySelector(panelSel);
  const ind = panel && panel.querySelector('.jp-Notebook-ExecutionIndicator');
  const bar = [...document.querySelectorAll('.jp-StatusBar-TextItem')].map(e => e.textContent.trim());
  if (ind && ind.dataset.status === 'idle' && bar.includes(kernel + ' | Idle')) return 'idle';
  return false;
}
"""

# True once the shown notebook has at least n cells in the DOM.
JS_CELL_COUNT_AT_LEAST = """
([panelSel, n]) => document.querySelectorAll(panelSel + ' .jp-Notebook .jp-Cell').length >= n
"""

# True once a dialog is on screen with its content filled in.
JS_DIALOG_SHOWN = """
() => {
  const dialog = document.querySelector('.jp-Dialog');
  if (!dialog || dialog.getClientRects().length === 0) return false;
  return !dialog.querySelector('.jp-Dialog-content') || dialog.textContent.trim().length > 0;
}
"""

# 'dialog' while a dialog is up, 'closed' once no notebook panel is shown.
JS_CLOSED_OR_DIALOG = """
(panelSel) => document.querySelector('.jp-Dialog') ? 'dialog' : (document.querySelector(panelSel) ? false : 'closed')
"""

# Per cell (DOM order): kind and the input prompt text ('[ ]:', '[*]:', '[3]:').
JS_PROMPTS = """
(panelSel) => [...document.querySelectorAll(panelSel + ' .jp-Notebook .jp-Cell')].map(c => {
  const p = c.querySelector('.jp-InputArea-prompt');
  return p ? p.textContent.trim() : '';
})
"""

# True once the run started at `start` is over: kernel idle, nothing queued, start cell numbered anew.
JS_RUN_DONE = """
([panelSel, start, before]) => {
  const panel = document.querySelector(panelSel);
  if (!panel) return false;
  const ind = panel.querySelector('.jp-Notebook-ExecutionIndicator');
  if (!ind || ind.dataset.status !== 'idle') return false;
  const prompts = [...panel.querySelectorAll('.jp-Notebook .jp-Cell .jp-InputArea-prompt')];
  if (prompts.some(p => p.textContent.includes('*'))) return false;
  const cell = panel.querySelectorAll('.jp-Notebook .jp-Cell')[start];
  const text = cell.querySelector('.jp-InputArea-prompt').textContent.trim();
  return /\\[\\d+\\]/.test(text) && text !== before;
}
"""

# True when every listed markdown cell holds typeset math.
JS_MATH_READY = """
([panelSel, indices]) => {
  const cells = document.querySelectorAll(panelSel + ' .jp-Notebook .jp-Cell');
  return indices.every(i => cells[i] && cells[i].querySelector('.jp-RenderedMarkdown mjx-container'));
}
"""

# Per listed markdown cell: MathJax errors, and TeX left as text outside math and code.
JS_MATH_PROBLEMS = """
([panelSel, indices]) => {
  const cells = document.querySelectorAll(panelSel + ' .jp-Notebook .jp-Cell');
  const problems = [];
  for (const i of indices) {
    const md = cells[i].querySelector('.jp-RenderedMarkdown');
    if (!md) { problems.push(`cell ${i}: not rendered`); continue; }
    for (const err of md.querySelectorAll('mjx-merror, .MathJax_Error, [data-mjx-error]')) {
      problems.push(`cell ${i}: math error ${JSON.stringify(err.getAttribute('data-mjx-error') || err.textContent)}`);
    }
    const copy = md.cloneNode(true);
    copy.querySelectorAll('mjx-container, code, pre, mjx-assistive-mml').forEach(n => n.remove());
    const left = copy.textContent.match(/\\$|\\\\[A-Za-z]+/g);
    if (left) problems.push(`cell ${i}: unrendered TeX left in the text: ${JSON.stringify(left.slice(0, 5))}`);
  }
  return problems;
}
"""

# Images in the notebook: [src, complete, naturalWidth] for each.
JS_IMAGES = """
(panelSel) => [...document.querySelectorAll(panelSel + ' .jp-Notebook img')]
  .map(img => [img.getAttribute('src').slice(0, 120), img.complete, img.naturalWidth])
"""

JS_IMAGES_SETTLED = """
(panelSel) => [...document.querySelectorAll(panelSel + ' .jp-Notebook img')].every(img => img.complete)
"""

# The validation dialog: title, verdict class, and (source, error) of each failed cell.
JS_VALIDATION = """
() => {
  const dialog = document.querySelector('.jp-Dialog');
  if (!dialog) return null;
  const title = (dialog.querySelector('.jp-Dialog-header') || {}).textContent || '';
  const body = dialog.querySelector('#validation-message');
  if (!body) return {title: title.trim(), verdict: 'error', text: dialog.textContent.trim(), failed: []};
  const verdict = ['validation-success', 'validation-failed', 'validation-changed',
                   'validation-type-changed', 'validation-passed'].find(c => body.classList.contains(c)) || 'error';
  const blocks = [...body.querySelectorAll(':scope > .jp-RenderedText pre')].map(p => p.innerText);
  const failed = [];
  for (let k = 0; k + 1 < blocks.length; k += 2) failed.push([blocks[k], blocks[k + 1]]);
  return {title: title.trim(), verdict, text: body.innerText.trim(), failed};
}
"""

# Create Assignment sidebar rows of the active notebook: [type, points, grade id, points editable, locked].
JS_CREATE_ASSIGNMENT = """
() => {
  const panel = [...document.querySelectorAll('.nbgrader-NotebookPanelWidget')]
    .find(p => !p.classList.contains('lm-mod-hidden'));
  if (!panel) return null;
  const total = panel.querySelector('.nbgrader-TotalPointsInput');
  const rows = [...panel.querySelectorAll('.nbgrader-CellWidget')].map(w => [
    w.querySelector('.nbgrader-CellType select').value,
    w.querySelector('.nbgrader-CellPoints input').value,
    w.querySelector('.nbgrader-CellId input').value,
    !w.querySelector('.nbgrader-CellPoints').classList.contains('nbgrader-mod-uneditable'),
    w.querySelector('.nbgrader-LockButton').classList.contains('nbgrader-mod-locked'),
  ]);
  return {total: total ? total.value : null, rows};
}
"""


# Select the cell at `start` in the shown notebook and start the Run menu's "Run Selected Cell and
# All Below" command without waiting for it; return the notebook's path (to check it is the right one).
JS_RUN_ALL_BELOW = """
([start]) => {
  const app = window.jupyterapp;
  const panel = app.shell.currentWidget;
  panel.content.activeCellIndex = start;
  window.partIIRunSettled = false;
  Promise.resolve(app.commands.execute('notebook:run-all-below'))
    .finally(() => { window.partIIRunSettled = true; });
  return panel.context.path;
}
"""

# True once the command JS_RUN_ALL_BELOW issued has settled and the kernel is idle with nothing queued
# (whether or not the start cell ran: the kernel may have answered its request "aborted").
JS_RESUMED_RUN_OVER = """
(panelSel) => {
  if (!window.partIIRunSettled) return false;
  const ind = document.querySelector(panelSel + ' .jp-Notebook-ExecutionIndicator');
  if (!ind || ind.dataset.status !== 'idle') return false;
  return ![...document.querySelectorAll(panelSel + ' .jp-Notebook .jp-Cell .jp-InputArea-prompt')]
    .some(p => p.textContent.includes('*'));
}
"""

# Close the shown notebook and shut its kernel down without waiting for the kernel to exit (the
# server ends it while the next notebook opens); unsaved changes are discarded. Returns the path.
JS_CLOSE_AND_SHUTDOWN = """
() => {
  const app = window.jupyterapp;
  const panel = app.shell.currentWidget;
  if (!panel || !panel.sessionContext) return null;
  const path = panel.context.path;
  // through the session manager: it outlives the panel disposed below
  const session = panel.sessionContext.session;
  if (session) app.serviceManager.sessions.shutdown(session.id).catch(() => {});
  panel.context.model.dirty = false;
  panel.dispose();
  return path;
}
"""


def run_menu_command(page, command: str, menu: str = "Run") -> None:
    """Click menu in the menu bar, then the item bound to command (e.g. runmenu:run-all)."""
    page.locator(".lm-MenuBar-item", has_text=menu).first.click()
    item = page.locator(f'.lm-Menu-item[data-command="{command}"]').first
    item.wait_for(state="visible")
    item.click()


def expected_sidebar_type(cell) -> str:
    """The type nbgrader's Create Assignment sidebar shows for a cell ('' for an ordinary cell)."""
    meta = nbgrader_meta(cell)
    solution, grade, task = bool(meta.get("solution")), bool(meta.get("grade")), bool(meta.get("task"))
    if not task and cell.cell_type != "code" and solution != grade:
        return ""  # nbgrader treats this metadata as invalid and clears it
    if task:
        return "task"
    if solution and grade:
        return "manual"
    if solution and cell.cell_type == "code":
        return "solution"
    if grade and cell.cell_type == "code":
        return "tests"
    if grade or meta.get("locked"):
        return "readonly"
    return ""


# True when the page's markdown font draws two different Chinese characters differently
# (without a CJK font both come out as the same empty box).
JS_DRAWS_CHINESE = """
() => {
  const md = document.querySelector('.jp-RenderedMarkdown') || document.body;
  const font = '32px ' + getComputedStyle(md).fontFamily;
  const draw = ch => {
    const c = document.createElement('canvas'); c.width = 48; c.height = 48;
    const ctx = c.getContext('2d'); ctx.font = font; ctx.fillText(ch, 4, 36);
    return c.toDataURL();
  };
  return draw('熵') !== draw('率');
}
"""

# The first cell as the first screen shows it: its h1, its bottom edge, the viewport height, its text.
JS_FIRST_SCREEN = """
(panelSel) => {
  const cell = document.querySelector(panelSel + ' .jp-Notebook .jp-Cell');
  const md = cell && cell.querySelector('.jp-RenderedMarkdown');
  if (!md) return null;
  const h1 = md.querySelector('h1');
  return {h1: h1 ? h1.textContent.replace('¶', '').trim() : null, bottom: cell.getBoundingClientRect().bottom,
          height: window.innerHeight, text: md.innerText};
}
"""
