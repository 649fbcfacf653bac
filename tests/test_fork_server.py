"""Kernels forked from a submission's fork server (autograder/fork_server.py), in the real sandbox.

One submission folder, several notebooks graded one after the other through GradingExecute
with ``configure_sandbox(..., fork_server=folder)``, as the grading worker runs them. Probe
cells print facts about their kernel; the tests read them. What the sandbox itself enforces
(isolation, limits) is tested in both modes by tests/test_sandbox.py.
"""

import os
import shutil
import sys
import tempfile
from pathlib import Path

import pytest
from nbformat.v4 import new_code_cell, new_notebook
from traitlets.config import Config

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from autograder import sandbox  # noqa: E402
from autograder.sandbox import (GradingExecute, SandboxLimits, bwrap_available, close_fork_servers,  # noqa: E402
                                configure_sandbox, discard_prestarted, sandbox_uid)
from kernel_outputs import cell_texts  # noqa: E402

READABLE = [REPO / "code" / "part-ii", REPO / "data" / "part-ii"]
KERNELSPEC = {"name": "python3", "display_name": "Python 3", "language": "python"}

# the kernel as it starts: user namespace, preloaded modules, identity, parent, folder
FIRST = ("print('NAMES', sorted(k for k in globals() if not k.startswith('_')))\n"
         "import os, sys\n"
         "print('KERNEL', os.getpid(), os.getppid(), os.getuid(), 'torch' in sys.modules, os.getcwd() == os.environ['HOME'])")
LEAVE_STATE = "import sys\nsecret = 41\nsys._left_by_an_earlier_notebook = True"
SEES_STATE = "import sys\nprint('STATE', 'secret' in globals(), hasattr(sys, '_left_by_an_earlier_notebook'))"
# reading the server's memory, environment or open files: the server is not dumpable
SPY_ON_SERVER = (
    "res = []\n"
    "for name in ('mem', 'environ', 'fd'):\n"
    "    try:\n"
    "        p = f'/proc/{os.getppid()}/{name}'\n"
    "        os.listdir(p) if name == 'fd' else open(p, 'rb').read(1)\n"
    "        res.append('read')\n"
    "    except OSError as e:\n"
    "        res.append(type(e).__name__)\n"
    "print('SPY', *res)"
)
# a daemon that outlives its kernel unless the grader kills it: double fork, new session
DAEMON = ("import os, time\nif os.fork() == 0:\n    os.setsid()\n    if os.fork() == 0:\n        time.sleep(600)\n"
          "    os._exit(0)\nos.wait()\nprint('DAEMON started')")
# processes in the sandbox besides PID 1, the server (the parent) and this kernel
OTHERS = ("live = [p for p in os.listdir('/proc') if p.isdigit() and int(p) not in (1, os.getpid(), os.getppid())\n"
          "        and open(f'/proc/{p}/stat').read().rsplit(')', 1)[1].split()[0] != 'Z']\nprint('OTHERS', len(live))")
# the sandbox ends with its first process, the server: the kernel dies within the sleep
KILL_SERVER = "import os, signal, time\nos.kill(os.getppid(), signal.SIGKILL)\ntime.sleep(10)"


@pytest.fixture
def submission():
    """A submission's folder (short path: unix sockets), as grade.prepare_job makes it; removed afterwards."""
    if not bwrap_available():
        pytest.fail("bubblewrap is not usable here; `make sysdeps` installs it")
    folder = Path(tempfile.mkdtemp(prefix="forksrv-"))
    folder.chmod(0o711)
    yield folder
    close_fork_servers()
    shutil.rmtree(folder, ignore_errors=True)


def grade_notebook(folder: Path, index: int, cells: list[str], config: Config | None = None, timeout: int = 30):
    """Execute one notebook (scratch folder/nb<index>) with a kernel forked from the folder's server; the notebook."""
    scratch = folder / f"nb{index}"
    scratch.mkdir(mode=0o755, exist_ok=True)
    config = config or Config()
    configure_sandbox(config, scratch, READABLE, SandboxLimits(), fork_server=folder)
    config.GradingExecute.scratch = str(scratch)
    nb = new_notebook(cells=[new_code_cell(c) for c in cells], metadata={"kernelspec": dict(KERNELSPEC)})
    GradingExecute(config=config, timeout=timeout).preprocess(nb, {"metadata": {"path": str(scratch)}})
    return nb


def server_of(folder: Path):
    """The ForkServer serving folder now (None when there is none)."""
    return sandbox._FORK_SERVERS.get(os.path.realpath(folder))


def grade(folder: Path, index: int, cells: list[str], config: Config | None = None, timeout: int = 30) -> list[str]:
    """grade_notebook's cells as text outputs (errors as 'ERROR name')."""
    return cell_texts(grade_notebook(folder, index, cells, config, timeout))


def kernel_facts(text: str) -> dict:
    """The FIRST probe's output as a dict."""
    names, kernel = text.splitlines()
    _, pid, ppid, uid, preloaded, cwd_is_home = kernel.split()
    return {"names": names, "pid": int(pid), "ppid": int(ppid), "uid": int(uid),
            "preloaded": preloaded == "True", "cwd_is_home": cwd_is_home == "True"}


def test_each_notebook_gets_a_fresh_process_forked_from_one_server(root_grader, submission):
    """Two notebooks: different processes with the same parent (the server, not PID 1), the sandbox's
    user, torch already imported, an empty namespace, and nothing left by the notebook before."""
    first = grade(submission, 0, [FIRST, LEAVE_STATE, SEES_STATE])
    server = server_of(submission)
    second = grade(submission, 1, [FIRST, SEES_STATE, SPY_ON_SERVER])
    assert server is not None and server_of(submission) is server and server.alive()
    a, b = kernel_facts(first[0]), kernel_facts(second[0])
    assert first[2] == "STATE True True"  # the probe itself works
    assert second[1] == "STATE False False"
    assert a["pid"] != b["pid"]
    assert a["ppid"] == b["ppid"] != 1
    assert a["preloaded"] and b["preloaded"]
    assert a["cwd_is_home"] and b["cwd_is_home"]
    assert a["names"] == b["names"] and "secret" not in a["names"]
    expected_uid = sandbox_uid(str(submission)) if os.geteuid() == 0 else os.geteuid()
    assert a["uid"] == b["uid"] == expected_uid != 0
    assert second[2] == "SPY PermissionError PermissionError PermissionError"  # the server is not dumpable
    assert len(sandbox._FORK_SERVERS) == 1


def test_what_a_kernel_leaves_running_is_killed_when_it_ends(root_grader, submission):
    """A daemon started by one notebook's kernel is gone when the next notebook's kernel looks."""
    first = grade(submission, 0, [FIRST, DAEMON, OTHERS])
    server = server_of(submission)
    second = grade(submission, 1, [FIRST, OTHERS])
    assert first[1] == "DAEMON started"
    assert first[2] == "OTHERS 1"  # the probe sees the daemon while its kernel runs
    assert second[1] == "OTHERS 0"
    assert server_of(submission) is server and server.alive()  # killed by kill_strays, not by a new sandbox


def test_a_kernel_that_kills_the_server_costs_only_a_new_server(root_grader, submission):
    """Killing the server takes the sandbox, so the kernel dies: the cell fails, a kernel forked from a
    new server replays the notebook, and the next notebook is graded as usual."""
    grade(submission, 0, [FIRST])
    killed = server_of(submission)
    first = grade(submission, 0, [FIRST, "x = 41", KILL_SERVER, "print('AFTER', x + 1)", FIRST])
    replacement = server_of(submission)
    second = grade(submission, 1, [FIRST, "print('fine')"])
    assert replacement is not killed and not killed.alive()
    assert server_of(submission) is replacement and replacement.alive()
    assert first[2] == "ERROR KernelDied"
    assert first[3] == "AFTER 42"
    before, after = kernel_facts(first[0]), kernel_facts(first[4])
    assert after["ppid"] != 1 and after["preloaded"]
    assert second[1] == "fine"
    assert kernel_facts(second[0])["ppid"] == after["ppid"]  # the new server serves the next notebook too
    assert before["uid"] == after["uid"]


def test_a_server_that_cannot_start_falls_back_to_a_sandbox_per_kernel(root_grader, submission, caplog):
    """A server whose imports fail does not stop grading: the kernel starts in a sandbox of its own."""
    config = Config()
    config.SandboxedKernelManager.fork_server_modules = ["no_such_module_for_the_fork_server"]
    texts = grade(submission, 0, [FIRST, "print('fine')"], config)
    facts = kernel_facts(texts[0])
    assert texts[1] == "fine"
    assert facts["ppid"] == 1  # below bwrap's PID 1: a sandbox of its own
    assert "no_such_module_for_the_fork_server" in (submission / "kernel.log").read_text()
    assert sandbox._FORK_SERVERS == {}


def test_a_prestarted_kernels_ipc_folder_is_locked_before_prestart_returns(root_grader, submission):
    """The kernel of the notebook being graded can reach the next notebook's folder (one sandbox): a forked,
    pre-started kernel's ipc folder is read-only for the sandbox user, and holds nothing but the connection
    file and the sockets, before the grader runs any more student code."""
    scratch = submission / "nb1"
    scratch.mkdir(mode=0o755)
    config = Config()
    configure_sandbox(config, scratch, READABLE, SandboxLimits(), fork_server=submission)
    config.GradingExecute.scratch = str(scratch)
    ipc = scratch / "ipc"
    (ipc / "planted").mkdir(parents=True)  # as a process of the sandbox could while the folder is open
    (ipc / "planted" / "big.bin").write_bytes(b"0" * 1000)
    GradingExecute(config=config).prestart("python3")
    try:
        assert ipc.stat().st_mode & 0o7777 == 0o755  # already when prestart() returns
        assert sorted(p.name for p in ipc.iterdir() if not p.name.startswith("kernel-")) == ["kernel.json"]
        assert len(list(ipc.glob("kernel-*"))) == 5  # locked after the kernel's five sockets were there
        # the notebook being graded cannot read the next kernel's key (a red-team review ran code in that kernel
        # with it): a forked kernel gets its connection from the server's request, and the file stays the grader's
        connection = ipc / "kernel.json"
        probe = (f"try:\n    open({str(connection)!r}).read()\n    print('KEY read')\n"
                 "except OSError as e:\n    print('KEY', type(e).__name__)")
        assert grade(submission, 0, [probe]) == ["KEY PermissionError"]
    finally:
        discard_prestarted(str(scratch))


def test_after_a_fallback_no_kernel_of_the_submission_can_read_the_fallen_back_kernel_s_key(root_grader, submission,
                                                                                            monkeypatch):
    """A spawn that failed on a ready server started that kernel in a sandbox of its own, with its connection file
    handed to the sandbox user; the next kernel then started a new server, whose sandbox binds that folder, and read
    the key (diff review). The submission's other kernels now get sandboxes of their own too."""
    from autograder import fork_server

    grade(submission, 0, [FIRST])  # the server is up and ready
    real_spawn, failed = fork_server.ForkServer.spawn, []

    def spawn_failing_once(self, *args, **kwargs):
        """The first spawn fails as a reply timeout would."""
        if not failed:
            failed.append(True)
            raise fork_server.ForkServerError("no reply from the fork server (test)")
        return real_spawn(self, *args, **kwargs)

    monkeypatch.setattr(fork_server.ForkServer, "spawn", spawn_failing_once)
    scratch = submission / "nb1"
    scratch.mkdir(mode=0o755)
    config = Config()
    configure_sandbox(config, scratch, READABLE, SandboxLimits(), fork_server=submission)
    config.GradingExecute.scratch = str(scratch)
    GradingExecute(config=config).prestart("python3")
    try:
        assert failed
        connection = scratch / "ipc" / "kernel.json"
        probe = (f"try:\n    open({str(connection)!r}).read()\n    print('KEY read')\n"
                 "except OSError as e:\n    print('KEY', type(e).__name__)")
        assert grade(submission, 0, [probe]) == ["KEY FileNotFoundError"]  # a sandbox of its own: no nb1 there
    finally:
        discard_prestarted(str(scratch))


# an earlier notebook's kernel plants code in the next notebook's IPython profile (same tmpfs, same user): a start-up
# file and a config file, which IPython would run when that kernel starts, before the grader sends anything (the
# config sets code_to_run: exec_lines would lose to the harness's own on the command line)
PLANT = ("import os\n"
         "profile = os.path.join(os.path.dirname(os.environ['HOME']), 'nb1', '.ipython', 'profile_default')\n"
         "os.makedirs(os.path.join(profile, 'startup'), exist_ok=True)\n"
         "open(os.path.join(profile, 'startup', '00-planted.py'), 'w').write('import builtins\\nbuiltins.STARTUP = 1\\n')\n"
         "open(os.path.join(profile, 'ipython_kernel_config.py'), 'w').write(\n"
         "    'c.InteractiveShellApp.code_to_run = \"import builtins; builtins.CONFIG = 1\"\\n')\n"
         # a module in the next kernel's working folder: IPython imports storemagic by that name as it starts
         "open(os.path.join(os.path.dirname(profile), '..', 'storemagic.py'), 'w').write(\n"
         "    'import builtins\\nbuiltins.SHADOW = 1\\ndef load_ipython_extension(ip):\\n    pass\\n')\n"
         "print('PLANTED')")
PLANTED_RAN = ("import builtins\n"
               "print('RAN', hasattr(builtins, 'STARTUP'), hasattr(builtins, 'CONFIG'), hasattr(builtins, 'SHADOW'))")


def test_a_kernel_runs_no_profile_file_an_earlier_notebook_planted(root_grader, submission):
    """A red-team review planted a start-up file in the next notebook's IPYTHONDIR: the kernel ran it before grading
    (its forged replies put another notebook's hidden tests on the feedback page); a third round, a storemagic.py in
    its working folder. A forked kernel reads no config file, runs no start-up file of its profile, and imports
    nothing from its working folder."""
    assert grade(submission, 0, [PLANT]) == ["PLANTED"]
    assert grade(submission, 1, [PLANTED_RAN]) == ["RAN False False False"]


def test_a_closed_server_reports_the_cpu_time_of_its_kernels(root_grader, submission):
    """Closed, the server collects its kernels, exits, and reports their CPU seconds with its own (bubblewrap
    passes none on to the worker's RUSAGE_CHILDREN; the worker logs the figure)."""
    config = Config()
    config.SandboxedKernelManager.fork_server_modules = []  # the server's own CPU: ipykernel's imports only
    config.GradingExecute.preload_modules = []
    texts = grade(submission, 0, ["import time\nwhile time.process_time() < 2:\n    pass\nprint('burnt')"], config,
                  timeout=300)
    reported = close_fork_servers()
    assert texts == ["burnt"]
    assert 2 <= reported < 30


def test_figures_are_inline_images_in_forked_kernels(submission):
    """The server imports pyplot before any kernel exists: it must already use ipykernel's inline backend,
    or every figure of a graded notebook would be lost (Agg draws nothing into the notebook)."""
    nb = grade_notebook(submission, 0, ["import matplotlib.pyplot as plt\nplt.plot([0, 1], [1, 0])\nplt.show()",
                                        "import matplotlib\nprint(matplotlib.get_backend())"])
    assert any("image/png" in out.get("data", {}) for out in nb.cells[0].outputs), nb.cells[0].outputs
    assert nb.cells[1].outputs[0].text.strip() == "module://matplotlib_inline.backend_inline"


def test_without_root_every_kernel_gets_a_sandbox_of_its_own(tmp_path, monkeypatch):
    """As the grader's own user a kernel would own the submission folder the grader writes into: no fork server."""
    scratch = tmp_path / "nb0"
    scratch.mkdir()
    monkeypatch.setattr(sandbox, "_run_as_nobody", lambda: False)
    config = Config()
    configure_sandbox(config, scratch, READABLE, SandboxLimits(), fork_server=tmp_path)
    assert config.SandboxedKernelManager.fork_server == ""
    monkeypatch.setattr(sandbox, "_run_as_nobody", lambda: True)
    configure_sandbox(config, scratch, READABLE, SandboxLimits(), fork_server=tmp_path)
    assert config.SandboxedKernelManager.fork_server == str(tmp_path.resolve())


def test_bad_fork_server_folders_are_rejected(tmp_path):
    """The fork server's folder must hold the notebook's scratch folder."""
    scratch = tmp_path / "nb0"
    scratch.mkdir()
    with pytest.raises(ValueError, match="fork_server must be a folder above scratch"):
        configure_sandbox(Config(), scratch, READABLE, SandboxLimits(), fork_server=tmp_path / "elsewhere")
    with pytest.raises(ValueError, match="fork_server must be a folder above scratch"):
        configure_sandbox(Config(), scratch, READABLE, SandboxLimits(), fork_server=scratch)


class _Proc:
    """A stand-in for psutil.Process: pid, parent, children; `gone` raises like a process that just ended."""

    def __init__(self, pid, parent=None, children=(), gone=False):
        self.pid, self._parent, self._children, self.gone = pid, parent, list(children), gone

    def parent(self):
        return self._parent

    def is_running(self):
        return not self.gone

    def status(self):
        return "sleeping"

    def children(self, recursive=False):
        import psutil

        if self.gone:  # psutil.Process.children reads the process's own create time first
            raise psutil.NoSuchProcess(self.pid)
        return list(self._children)


def test_strays_are_killed_even_when_a_kernel_ends_while_they_are_listed(monkeypatch):
    """The kernel that just ended may be reaped while kill_strays walks the server's children: the daemon it
    left beside the server must still be killed (a NoSuchProcess used to abort the whole sweep). So must a copy
    that a kernel made the server's child (clone with CLONE_PARENT): only the kernels the server forked are spared."""
    from autograder import fork_server

    daemon, grandchild = _Proc(30), _Proc(31)
    daemon._children = [grandchild]
    init = _Proc(1)
    server = _Proc(2, parent=init)
    ended, kernel = _Proc(3, gone=True), _Proc(4, children=[_Proc(40)])  # the ended kernel, the next one
    server._children = [ended, kernel, _Proc(5, children=[_Proc(50)])]  # 5: a kernel's copy beside it
    init._children = [server, daemon]
    killed = []
    monkeypatch.setattr(fork_server, "kill_processes", lambda procs: killed.extend(p.pid for p in procs) or len(procs))
    fs = fork_server.ForkServer.__new__(fork_server.ForkServer)
    fs._kernels = [ended, kernel]
    monkeypatch.setattr(fs, "server_process", lambda: server, raising=False)
    fs.kill_strays()
    assert sorted(killed) == [5, 30, 31, 40, 50]


# a parent that forks three sleeping children, prints their pids and never reaps them, as a kernel never
# reaps what its cells forked
UNREAPED = ("import os, sys, time\n"
            "pids = [pid for pid in (os.fork() for _ in range(3)) if pid or time.sleep(600)]\n"
            "print(*pids, flush=True)\n"
            "time.sleep(600)")


def test_killed_processes_whose_parent_never_reaps_them_end_the_wait_as_zombies(monkeypatch):
    """kill_processes waits for its processes to end, and a zombie has: psutil.wait_procs waited until they were
    reaped, which a kernel never does, so every cell that left a child behind cost the whole wait (5 s).
    The wait runs on a fake clock that only its sleeps advance: it must end before its deadline, not at it;
    psutil.wait_procs, which has a clock of its own, must not be used."""
    import subprocess
    import types

    import psutil
    from autograder import fork_server
    from processes import process_gone

    parent = subprocess.Popen([sys.executable, "-c", UNREAPED], stdout=subprocess.PIPE, text=True)
    try:
        pids = [int(p) for p in parent.stdout.readline().split()]
        assert len(pids) == 3 and not any(map(process_gone, pids)), pids
        clock = [0.0]
        fake_time = types.SimpleNamespace(monotonic=lambda: clock[0],
                                          sleep=lambda seconds: clock.__setitem__(0, clock[0] + seconds))
        monkeypatch.setattr(fork_server, "time", fake_time)

        def wait_procs(*args, **kwargs):
            raise AssertionError("psutil.wait_procs waits (on its own clock) until a zombie is reaped")

        monkeypatch.setattr(psutil, "wait_procs", wait_procs)
        assert fork_server.kill_processes([psutil.Process(p) for p in pids], timeout=300) == 3
        waited = clock[0]
        assert all(map(process_gone, pids)), [Path(f"/proc/{p}/stat").read_text() for p in pids if not process_gone(p)]
        assert all(psutil.Process(p).status() == psutil.STATUS_ZOMBIE for p in pids)  # still unreaped: not gone
        assert waited < 300, "kill_processes waited its whole 300 s (fake clock) for zombies to disappear"
        assert parent.poll() is None  # only the listed processes were killed
    finally:
        parent.kill()
        parent.wait()
