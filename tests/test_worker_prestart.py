"""The grading worker starts the next notebook's kernel ahead of time and preloads heavy modules.

One tiny synthetic job (three notebooks, no nbgrader cells) is graded once by
``autograder.worker.run_job`` in this process, in the sandbox when bubblewrap works here.
Probe cells print facts about their kernel process; the tests read them from the
autograded notebooks. Kernel start times are wall-clock seconds computed inside the kernel
from /proc (valid inside the sandbox's PID namespace, where pids are not).
"""

from __future__ import annotations

import ast
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_notebook
from traitlets import TraitError
from traitlets.config import Config

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from autograder import sandbox, worker  # noqa: E402
from kernel_outputs import cell_texts  # noqa: E402
from processes import process_gone  # noqa: E402
from autograder.course import ASSIGNMENT, load_config  # noqa: E402
from autograder.sandbox import (GradingExecute, SandboxLimits, bwrap_available, configure_sandbox,  # noqa: E402
                                discard_prestarted, prestarted_kernels)

READABLE = [REPO / "code" / "part-ii", REPO / "data" / "part-ii"]
STUDENT = "s001"
KERNELSPEC = {"name": "python3", "display_name": "Python 3", "language": "python"}

# the user namespace as the student sees it: run before any cell defines a name
NAMES = "print('NAMES', sorted(k for k in globals() if not k.startswith('_')))"
# wall-clock start of this kernel process, whether this process ran a probe before, the preload
PROBE = (
    "import os, sys, time\n"
    "_ticks = int(open('/proc/self/stat').read().rsplit(')', 1)[1].split()[19])\n"
    "_uptime = float(open('/proc/uptime').read().split()[0])\n"
    "print('KERNEL', time.time() - _uptime + _ticks / os.sysconf('SC_CLK_TCK'), os.getpid(),\n"
    "      hasattr(sys, '_probed_by_test'), all(m in sys.modules for m in ('numpy', 'torch', 'matplotlib.pyplot')),\n"
    "      os.getppid())\n"
    "sys._probed_by_test = True"
)
# after a pause, the pids of this kernel's siblings (same parent): the next notebook's kernel, if pre-started
SLEEP_THEN_SIBLINGS = (
    "time.sleep(3)\n"
    "def _parent(pid):\n"
    "    try:\n"
    "        return int(open(f'/proc/{pid}/stat').read().rsplit(')', 1)[1].split()[1])\n"
    "    except (OSError, ValueError, IndexError):  # it ended meanwhile\n"
    "        return None\n"
    "print('SIBLINGS', *sorted(int(p) for p in os.listdir('/proc') if p.isdigit() and int(p) != os.getpid()\n"
    "                         and _parent(p) == os.getppid()))"
)


def sandbox_works() -> bool:
    """Test the sandboxed path when bubblewrap can run here (as tests/test_grading.py decides)."""
    return bwrap_available()


def notebook(cells: list[str]):
    """A python3 notebook of code cells."""
    nb = new_notebook(cells=[new_code_cell(c) for c in cells])
    nb.metadata.kernelspec = dict(KERNELSPEC)
    return nb


JOB_NOTEBOOKS = {
    # preloaded modules are imported, yet no name is bound; the first kernel sleeps so the
    # second notebook's kernel must have started well before it ends
    "nb-a": notebook([NAMES, PROBE, "torch.zeros(1)", "np.zeros(1)", SLEEP_THEN_SIBLINGS]),
    # the kernel (an adopted, pre-started one) dies; a fresh one replays x = 41 and goes on
    "nb-b": notebook([NAMES, PROBE, "x = 41", "os._exit(1)", "print('AFTER', x + 1)", PROBE]),
    "nb-c": None,  # not a notebook: nbgrader fails before executing, its pre-started kernel is unused
}


def make_job(base: Path, scratch_root: Path, notebooks: dict | None = None) -> Path:
    """A job folder as autograder.grade.prepare_job writes it, for a course with only these notebooks
    (name -> notebook, or None for a file that is not one; JOB_NOTEBOOKS by default)."""
    from nbgrader.api import Gradebook

    notebooks = JOB_NOTEBOOKS if notebooks is None else notebooks
    course_id = load_config().CourseDirectory.course_id
    job_dir = base / "job"
    submitted = job_dir / "course" / "submitted" / STUDENT / ASSIGNMENT
    submitted.mkdir(parents=True)
    for name, nb in notebooks.items():
        path = submitted / f"{name}.ipynb"
        path.write_text("this is not a notebook") if nb is None else nbformat.write(nb, path)
    db_url = f"sqlite:///{job_dir / 'gradebook.db'}"
    with Gradebook(db_url, course_id) as gb:
        gb.update_or_create_assignment(ASSIGNMENT)
        for name in notebooks:
            gb.update_or_create_notebook(name, ASSIGNMENT)
    (base / "real-course").mkdir()
    job = {
        "student": STUDENT, "notebooks": list(notebooks), "course_root": str(job_dir / "course"),
        "course_id": course_id, "db_url": db_url, "bundle_dir": str(REPO), "cell_timeout": 60,
        "notebook_timeout": 300, "sandbox": sandbox_works(), "limits": {}, "scratch_root": str(scratch_root),
        "real_course_root": str(base / "real-course"), "real_db_url": f"sqlite:///{base / 'real-course' / 'gradebook.db'}",
        "expected_records": None,
    }
    (job_dir / "job.json").write_text(json.dumps(job), encoding="utf-8")
    return job_dir


def end_worker(proc, scratch_root: Path) -> None:
    """After a test of a worker process: kill it if it still runs (the test failed or ran out of time), and remove its
    scratch folder."""
    if proc.is_alive():
        proc.kill()
        proc.join()
    shutil.rmtree(scratch_root, ignore_errors=True)


def kernel_line(text: str) -> tuple[float, int, bool, bool, int]:
    """(start time, pid, probed before, preloaded, parent pid) from a PROBE cell's output."""
    _, start, pid, seen, preloaded, ppid = text.split()
    return float(start), int(pid), seen == "True", preloaded == "True", int(ppid)


def sandbox_processes_left(folder: Path) -> str:
    """Command lines of processes naming the folder (bwrap binds the scratch folders), after a grace period."""
    for _ in range(30):  # a killed sandbox's namespace is torn down asynchronously
        left = subprocess.run(["pgrep", "-af", str(folder)], capture_output=True, text=True)
        if left.returncode == 1:
            return ""
        time.sleep(0.5)
    return left.stdout


SERVERS_SEEN: list[int] = []  # host pids of the fork servers alive after each prestart() of the job


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    """Grade the job once; record every kernel manager prestart() created and its process id."""
    base = tmp_path_factory.mktemp("prestart")
    scratch_root = Path(tempfile.mkdtemp(prefix="prestart-"))  # short: unix socket paths
    scratch_root.chmod(0o711)
    job_dir = make_job(base, scratch_root)
    launched = []  # (scratch, kernel manager, pid)
    original = GradingExecute.prestart

    def recording_prestart(self, kernel_name=""):
        original(self, kernel_name)
        km = prestarted_kernels()[os.path.realpath(self.scratch)]
        launched.append((self.scratch, km, km.provisioner.pid))
        SERVERS_SEEN.extend(server.process.pid for server in sandbox._FORK_SERVERS.values())

    saved_root = os.environ.get("PART_II_ROOT")
    GradingExecute.prestart = recording_prestart
    try:
        results = worker.run_job(job_dir)
    finally:
        GradingExecute.prestart = original
        if saved_root is None:
            os.environ.pop("PART_II_ROOT", None)
        else:
            os.environ["PART_II_ROOT"] = saved_root
    autograded = job_dir / "course" / "autograded" / STUDENT / ASSIGNMENT
    texts = {name: cell_texts(nbformat.read(autograded / f"{name}.ipynb", as_version=4))
             for name in ("nb-a", "nb-b")}
    yield results, texts, launched, scratch_root
    shutil.rmtree(scratch_root, ignore_errors=True)


def test_the_job_grades_both_notebooks_and_reports_the_broken_one(graded):
    """nb-a and nb-b are graded; nb-c, not a notebook, is an error of its own."""
    results, _, _, _ = graded
    assert results["nb-a"]["status"] == "graded"
    assert results["nb-b"]["status"] == "graded"
    assert results["nb-c"]["status"] == "error"


def test_every_notebook_runs_in_a_fresh_kernel_process(root_grader, graded):
    """Different start times (and pids outside the sandbox); no kernel had run a probe before."""
    _, texts, _, _ = graded
    a = kernel_line(texts["nb-a"][1])
    b = kernel_line(texts["nb-b"][1])
    assert not a[2] and not b[2]
    assert a[0] != b[0]
    assert a[1] != b[1]  # in the sandbox: two processes in the job's one PID namespace


def test_the_jobs_kernels_are_forked_from_one_fork_server(root_grader, graded):
    """In the sandbox every kernel of the job, also the one that replaced a dead kernel, has the same
    parent: the job's fork server (not bwrap's PID 1, the parent of a kernel in a sandbox of its own)."""
    _, texts, _, _ = graded
    if not sandbox_works():
        pytest.fail("bubblewrap is not usable here; `make sysdeps` installs it")
    parents = {kernel_line(texts["nb-a"][1])[4], kernel_line(texts["nb-b"][1])[4], kernel_line(texts["nb-b"][5])[4]}
    assert len(parents) == 1 and parents != {1}, parents
    assert len(SERVERS_SEEN) == 3 and len(set(SERVERS_SEEN)) == 1, SERVERS_SEEN  # one server for the whole job


def test_the_next_kernel_starts_while_the_current_notebook_runs(root_grader, graded):
    """nb-b's first kernel process was running beside nb-a's while nb-a's last cell ran: it was pre-started
    (an ordering seen from inside, not a comparison of clocks)."""
    _, texts, launched, _ = graded
    siblings = texts["nb-a"][-1].split()
    assert siblings[0] == "SIBLINGS", texts["nb-a"][-1]
    assert kernel_line(texts["nb-b"][1])[1] in {int(p) for p in siblings[1:]}, (texts["nb-a"][-1], texts["nb-b"][1])
    assert [Path(s).name for s, _, _ in launched] == ["nb0", "nb1", "nb2"]


def test_preloaded_modules_are_imported_but_bind_no_name(graded):
    """numpy, torch and pyplot are in sys.modules before any import, yet `torch` and `np` are NameErrors
    and the namespace equals that of a kernel started without preload."""
    _, texts, _, _ = graded
    assert kernel_line(texts["nb-a"][1])[3] is True
    assert texts["nb-a"][2] == "ERROR NameError"
    assert texts["nb-a"][3] == "ERROR NameError"
    bare = run_cells([NAMES, PROBE], preload=[])
    assert kernel_line(bare[1])[3] is False  # the probe would see a preload
    assert texts["nb-a"][0] == texts["nb-b"][0] == bare[0]
    assert bare[0].startswith("NAMES [")


def test_kernel_death_in_an_adopted_kernel_restarts_and_replays(graded):
    """os._exit in the adopted kernel fails that cell; a new kernel replays x = 41 and runs the rest."""
    _, texts, _, _ = graded
    b = texts["nb-b"]
    assert b[3] == "ERROR KernelDied"
    assert b[4] == "AFTER 42"
    first, second = kernel_line(b[1]), kernel_line(b[5])
    assert second[0] > first[0]  # a later process
    assert second[2] is True  # the replay ran the earlier probe in it


def test_no_kernel_outlives_the_job(graded):
    """Every pre-started kernel (nb-c's was never used) is shut down; nothing of the sandboxes is left."""
    _, _, launched, scratch_root = graded
    assert len(launched) == 3
    assert prestarted_kernels() == {}
    assert all(process_gone(pid) for _, _, pid in launched), [(s, pid) for s, _, pid in launched]
    assert sandbox_processes_left(scratch_root) == ""


# --- the executor on its own ---------------------------------------------------------------------

def executor_config(scratch: Path) -> Config:
    """A config whose GradingExecute runs its kernel in scratch, in the sandbox when it works here."""
    config = Config()
    if sandbox_works():
        configure_sandbox(config, scratch, READABLE, SandboxLimits())
    config.GradingExecute.scratch = str(scratch)
    return config


def run_cells(cells: list[str], preload: list[str], prestart: bool = False, before=None) -> list[str]:
    """Execute code cells through GradingExecute (optionally adopting a pre-started kernel); text outputs."""
    scratch = Path(tempfile.mkdtemp(prefix="prestart-unit-"))
    scratch.chmod(0o755)
    try:
        config = executor_config(scratch)
        config.GradingExecute.preload_modules = preload
        if prestart:
            GradingExecute(config=config).prestart("python3")
        if before:
            before(scratch)
        nb = notebook(cells)
        GradingExecute(config=config, timeout=60).preprocess(nb, {"metadata": {"path": str(scratch)}})
        return cell_texts(nb)
    finally:
        discard_prestarted(str(scratch))
        shutil.rmtree(scratch, ignore_errors=True)


def test_a_dead_prestarted_kernel_is_replaced_by_a_fresh_one():
    """A pre-started kernel that died before its notebook runs is discarded; the notebook still runs."""
    killed = {}

    def kill(scratch):
        km = prestarted_kernels()[os.path.realpath(scratch)]
        km.provisioner.process.kill()
        km.provisioner.process.wait()
        killed["at"] = time.time()

    texts = run_cells([PROBE, "print(6 * 7)"], preload=[], prestart=True, before=kill)
    assert kernel_line(texts[0])[0] > killed["at"] - 0.5  # started after the kill (10 ms clock ticks)
    assert texts[1] == "42"
    assert prestarted_kernels() == {}


def test_discard_prestarted_shuts_the_kernel_down(tmp_path):
    """A pre-started kernel nobody adopts is killed by discard_prestarted and leaves the registry."""
    scratch = Path(tempfile.mkdtemp(prefix="prestart-unit-"))
    scratch.chmod(0o755)
    try:
        config = executor_config(scratch)
        GradingExecute(config=config).prestart()
        km = prestarted_kernels()[os.path.realpath(scratch)]
        pid = km.provisioner.pid
        assert not process_gone(pid)
        discard_prestarted(str(scratch))
        assert process_gone(pid)
        assert prestarted_kernels() == {}
        assert sandbox_processes_left(scratch) == ""
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def test_bad_preload_modules_and_missing_scratch_are_rejected():
    """preload_modules takes dotted module names only; prestart needs a scratch folder."""
    with pytest.raises(TraitError, match="preload_modules must be dotted module names"):
        GradingExecute(preload_modules=["numpy; import shutil"])
    with pytest.raises(ValueError, match="GradingExecute.scratch is not set"):
        GradingExecute().prestart("python3")


def imported_modules(source: str) -> set[str]:
    """Every module an import statement in source names, with its parent packages ('a.b' gives a and a.b)."""
    names = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found = [node.module]
        else:
            continue
        for name in found:
            parts = name.split(".")
            names.update(".".join(parts[:i]) for i in range(1, len(parts) + 1))
    return names


def test_kernels_preload_only_modules_the_course_imports():
    """A kernel (or fork server) imports before the first cell only what the notebooks or the course code
    they run import: a preloaded module nothing uses would cost every notebook its import time."""
    used = set()
    for path in sorted((REPO / "notebooks" / "part-ii").glob("*.ipynb")):
        for cell in nbformat.read(path, as_version=4).cells:
            if cell.cell_type == "code":
                code = "\n".join(l for l in cell.source.splitlines() if not l.lstrip().startswith(("%", "!")))
                used |= imported_modules(code)
    for path in sorted((REPO / "code" / "part-ii").glob("*.py")):
        used |= imported_modules(path.read_text(encoding="utf-8"))
    assert sandbox.PRELOAD_MODULES, "kernels preload nothing: every notebook would pay for import torch"
    unused = [m for m in sandbox.PRELOAD_MODULES if m not in used]
    assert not unused, f"preloaded but imported by no notebook and no course module: {unused}"


def test_a_warming_job_starts_its_sandbox_and_first_kernel_and_runs_no_cell_before_its_go(tmp_path):
    """A worker started as grade starts a warmed-up job (no go on its gate pipe yet) boots its sandbox, fork
    server and first kernel, then waits: no cell runs and no result is written until the go. It writes to its
    ahead pipe when its last WARM_AHEAD notebooks begin (here: after the first of three)."""
    from autograder.grade import worker_context

    assert worker.WARM_AHEAD == 2, "the expected moment of `ahead` below assumes two notebooks left"
    scratch_root = Path(tempfile.mkdtemp(prefix="prestart-gate-"))  # short: unix socket paths
    scratch_root.chmod(0o711)
    ran = "print('RAN', repr(time.time()))"
    job_dir = make_job(tmp_path, scratch_root, {"nb-a": notebook([PROBE, ran]), "nb-b": notebook([PROBE, ran]),
                                                "nb-c": notebook([PROBE, ran])})
    ctx = worker_context()
    gate_in, gate = ctx.Pipe(duplex=False)
    ahead, ahead_out = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=worker.child_main, args=(str(job_dir), gate_in, ahead_out))
    proc.start()
    gate_in.close()
    ahead_out.close()
    try:
        log = job_dir / "worker.log"
        deadline = time.monotonic() + 300
        while proc.is_alive() and "waiting for the grade run's go" not in (log.read_text() if log.exists() else ""):
            assert time.monotonic() < deadline, "the job did not warm up within 300 s"
            time.sleep(0.1)
        assert proc.is_alive(), f"the worker ended before its go:\n{log.read_text()[-3000:]}"
        time.sleep(1.5)
        autograded = job_dir / "course" / "autograded" / STUDENT / ASSIGNMENT
        assert proc.is_alive() and not (job_dir / "result.json").exists() and not autograded.exists()
        assert not ahead.poll(), "a job that has not begun grading says it is nearly done"
        opened = time.time()
        gate.send_bytes(b"go")
        told = None  # when `ahead` was first readable (polled every 10 ms)
        while proc.is_alive() and time.time() < opened + 300:
            if told is None and ahead.poll(0.01):
                told = time.time()
            proc.join(0 if told is None else 0.1)
        assert proc.exitcode == 0, log.read_text()[-3000:]
    finally:
        end_worker(proc, scratch_root)
    results = json.loads((job_dir / "result.json").read_text())["notebooks"]
    assert {nb: r["status"] for nb, r in results.items()} == dict.fromkeys(("nb-a", "nb-b", "nb-c"), "graded")
    texts = {nb: cell_texts(nbformat.read(autograded / f"{nb}.ipynb", as_version=4)) for nb in results}
    ran_at = {nb: float(t[1].split()[1]) for nb, t in texts.items()}
    first_kernel = kernel_line(texts["nb-a"][0])[0]
    assert first_kernel < opened - 1.0, (first_kernel, opened)  # it booted during the wait (10 ms clock ticks)
    assert all(t > opened for t in ran_at.values()), (opened, ran_at)
    assert kernel_line(texts["nb-b"][0])[0] > opened  # only the first kernel starts ahead of the go
    assert told is not None and ran_at["nb-a"] < told < ran_at["nb-c"], (told, ran_at)
    assert ahead.recv_bytes() == b"ahead"
