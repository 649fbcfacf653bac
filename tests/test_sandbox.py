"""The grading sandbox with a real kernel: what a submission's code can and cannot do.

Two notebooks run in bubblewrap through GradingExecute (nbgrader's Execute underneath):
one probes isolation with default limits, one with small limits probes the limits. Each
probe cell prints one line; the tests read those lines. Both run twice: with a sandbox
of the kernel's own, and with the kernel forked from a submission's fork server (as the
grading worker runs them).
"""

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook
from traitlets.config import Config

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from autograder.course import sqlite_url  # noqa: E402
from autograder.sandbox import (GradingExecute, SandboxedKernelManager, SandboxLimits, bwrap_available,  # noqa: E402
                                SANDBOX_UIDS, close_fork_servers, configure_sandbox, sandbox_uid)
from adversarial_catalogue import listening_socket  # noqa: E402
from kernel_outputs import cell_texts  # noqa: E402

READABLE = [REPO / "code" / "part-ii", REPO / "data" / "part-ii"]
MODES = ["own sandbox", "fork server"]


def run_sandboxed(cells: list[str], scratch: Path, limits: SandboxLimits, config: Config | None = None,
                  timeout: int = 60, markdown_after: bool = False, fork_server: bool = False) -> list[str]:
    """Execute code cells in one sandboxed kernel (each followed by a markdown cell if markdown_after);
    return each cell's text output (errors as 'ERROR name', '' for markdown)."""
    return cell_texts(execute_sandboxed(cells, scratch, limits, config, timeout, markdown_after, fork_server))


def execute_sandboxed(cells: list[str], scratch: Path, limits: SandboxLimits, config: Config | None = None,
                      timeout: int = 60, markdown_after: bool = False, fork_server: bool = False):
    """The executed notebook of run_sandboxed.

    fork_server: fork the kernel from a fork server for scratch (the notebook's folder is
    scratch/nb0, as in a grading job), and end the server afterwards as the worker does.
    """
    config = config or Config()
    folder = scratch
    if fork_server:
        folder = scratch / "nb0"
        folder.mkdir(exist_ok=True)
    configure_sandbox(config, folder, READABLE, limits, fork_server=scratch if fork_server else None)
    nb = new_notebook(cells=[new for c in cells
                             for new in ([new_code_cell(c), new_markdown_cell("prose")] if markdown_after else [new_code_cell(c)])])
    nb.metadata.kernelspec = {"name": "python3", "display_name": "Python 3", "language": "python"}
    executor = GradingExecute(config=config, timeout=timeout)
    try:
        executor.preprocess(nb, {"metadata": {"path": str(folder)}})
    finally:
        close_fork_servers()
    return nb


PROBES = {
    "whoami": "import os, sys; print(os.getuid(), os.getcwd() == os.environ['HOME'])",
    "ordinary": (
        "import json, numpy as np, torch\n"
        "root = os.environ['PART_II_ROOT']\n"
        "cases = json.load(open(os.path.join(root, 'data', 'part-ii', 'arithmetic.json')))\n"
        "sys.path.insert(0, os.path.join(root, 'code', 'part-ii'))\n"
        "import probability_practice as pp, checks\n"
        "print('ok', len(cases) > 0, float(torch.softmax(torch.zeros(2, dtype=torch.float64), 0)[0]))"
    ),
    "network": (
        "import socket\n"
        "def attempt(host, port):\n"
        "    s = socket.socket(); s.settimeout(3)\n"
        "    try:\n"
        "        s.connect((host, port)); return 'connected'\n"
        "    except OSError as e:\n"
        "        return type(e).__name__\n"
        "print(attempt('127.0.0.1', {listen_port}), attempt('1.1.1.1', 80))"
    ),
    "read_source": "import glob; print(len(glob.glob({src!r})), os.path.exists({nb!r}))",
    "read_gradebook": "print(os.path.exists({db!r}), os.path.exists({course!r}))",
    "write_outside": (
        "res = []\n"
        "for p in ({outside!r}, {repo_file!r}, '/etc/sandbox-probe', {home!r}):\n"
        "    try:\n"
        "        open(p, 'w').write('x'); res.append('wrote')\n"
        "    except OSError as e:\n"
        "        res.append(type(e).__name__)\n"
        "print(*res)"
    ),
    "write_scratch": "open('here.txt', 'w').write('fine'); print(open('here.txt').read())",
    "env": "print(sorted(k for k in os.environ if 'DB' in k or 'TOKEN' in k or k == 'JPY_PARENT_PID'))",
    "processes": "print(len([p for p in os.listdir('/proc') if p.isdigit()]) < 10)",
    # the paths among the sentinels whose file can be read or whose folder can be listed
    "sentinels": (
        "import json, os\n"
        "def _seen(path):\n"
        "    for look in (lambda: open(path, 'rb').read(1), lambda: os.listdir(os.path.dirname(path))):\n"
        "        try:\n"
        "            look(); return True\n"
        "        except OSError:\n"
        "            pass\n"
        "    return False\n"
        "print(json.dumps([p for p in {sentinels!r} if _seen(p)]))"
    ),
    "listing": "import json, os; print(json.dumps({{p: sorted(os.listdir(p)) for p in ('/', '/etc', {repo_parent!r}, {repo!r})}}))",
    # memory no limit would count (found by a red-team review): a memfd, SysV shared memory and message queues, a
    # user namespace of its own (root in it mounts a tmpfs of any size), a file in /dev (bwrap's tmpfs); each as the
    # errno it failed with, or what it got
    "uncounted_memory": (
        "import ctypes, errno, os, subprocess\n"
        "libc = ctypes.CDLL(None, use_errno=True)\n"
        "def _call(name, *args):\n"
        "    ok = getattr(libc, name)(*args) != -1\n"
        "    return 'allowed' if ok else errno.errorcode[ctypes.get_errno()]\n"
        "def _open(path):\n"
        "    try:\n"
        "        open(path, 'w').write('x'); return 'wrote'\n"
        "    except OSError as e:\n"
        "        return errno.errorcode[e.errno]\n"
        "try:\n"
        "    os.memfd_create('probe'); memfd = 'allowed'\n"
        "except OSError as e:\n"
        "    memfd = errno.errorcode[e.errno]\n"
        "userns = subprocess.run(['unshare', '--user', '--map-root-user', 'true'], capture_output=True).returncode\n"
        "# clone(CLONE_NEWUSER | SIGCHLD) without CLONE_VM: a fork, whose child leaves at once\n"
        "pid = libc.syscall({{'x86_64': 56, 'aarch64': 220}}[os.uname().machine], 0x10000000 | 17, 0, 0, 0, 0)\n"
        "if pid == 0:\n"
        "    os._exit(0)\n"
        "cloned = errno.errorcode[ctypes.get_errno()] if pid == -1 else os.waitpid(pid, 0) and 'allowed'\n"
        "import socket\n"
        "a, b = socket.socketpair()\n"
        "try:\n"
        "    a.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 2**26); sndbuf = 'allowed'\n"
        "except OSError as e:\n"
        "    sndbuf = errno.errorcode[e.errno]\n"
        "print(memfd, _call('shmget', 0, 2**20, 0o1600), _call('msgget', 0, 0o1600), _call('unshare', 0x10000000),\n"
        "      cloned, 'unshare-rc', userns, _open('/dev/shm/probe'), _open('/dev/probe'),\n"
        "      'memfd_secret', _call('syscall', 447, 0), 'semget', _call('semget', 0, 32000, 0o1600),\n"
        "      'add_key', _call('syscall', {{'x86_64': 248, 'aarch64': 217}}[os.uname().machine], b'user', b'probe', b'x', 1,\n"
        "                       -4), 'io_uring', _call('syscall', 425, 8, None),\n"
        "      'SO_SNDBUF', sndbuf, a.getsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF) < 2**20)"
    ),
    # what the filter must leave working: threads (glibc tries clone3 first), processes, torch's threads, /dev/null;
    # and the open-file limit, which the kernel cannot raise
    "still_works": (
        "import os, resource, threading, torch\n"
        "from concurrent.futures import ThreadPoolExecutor\n"
        "squares = list(ThreadPoolExecutor(4).map(lambda x: x * x, range(4)))\n"
        "pid = os.fork()\n"
        "if pid == 0:\n"
        "    os._exit(7)\n"
        "child = os.waitpid(pid, 0)[1] >> 8\n"
        "torch.set_num_threads(2)\n"
        "total = torch.ones(512, 512, dtype=torch.float64).matmul(torch.ones(512, 1, dtype=torch.float64)).sum().item()\n"
        "open('/dev/null', 'w').write('x')\n"
        "soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)\n"
        "try:\n"
        "    resource.setrlimit(resource.RLIMIT_NOFILE, (hard + 1, hard + 1)); raised = 'raised'\n"
        "except (ValueError, OSError) as e:\n"
        "    raised = type(e).__name__\n"
        "print(squares, child, total, soft, hard, raised)"
    ),
    # the CPU time left to the kernel, and whether it can raise its own limit
    "cpu_limit": (
        "import resource\n"
        "soft, hard = resource.getrlimit(resource.RLIMIT_CPU)\n"
        "used = sum(resource.getrusage(resource.RUSAGE_SELF)[:2])\n"
        "try:\n"
        "    resource.setrlimit(resource.RLIMIT_CPU, (hard + 60, hard + 60)); raised = 'raised'\n"
        "except (ValueError, OSError) as e:\n"
        "    raised = type(e).__name__\n"
        "print(soft == hard, round(soft - used, 1), round(used, 1), raised)"
    ),
}


@pytest.fixture(scope="module")
def sentinels():
    """Secret files, world-readable, where no deny-list would think of looking: fresh folders under /opt,
    /var/lib and / (a former term's build, a second checkout) and beside the repository a plain copy
    of an instructor notebook (another clone of this repository, as /work/main was); removed afterwards."""
    folders, files = [], []
    try:
        for parent in ("/opt", "/var/lib", "/", str(REPO.parent)):
            try:
                folder = Path(tempfile.mkdtemp(prefix="part-ii-sentinel-", dir=parent))
            except OSError:
                continue  # not writable for this user: the other places still count
            folders.append(folder)
            folder.chmod(0o755)  # mkdtemp's 0700 would keep the sandbox user out even without a sandbox
            if parent == str(REPO.parent):
                secret = folder / "02-shapes-and-loss.ipynb"
                shutil.copyfile(REPO / "notebooks" / "part-ii" / secret.name, secret)
            else:
                secret = folder / "secret.txt"
                secret.write_text("secret")
            secret.chmod(0o644)
            files.append(secret)
        assert files, "no place outside the repository was writable for a sentinel"
        yield files
    finally:
        for folder in folders:
            shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture(scope="module", params=MODES)
def isolation(tmp_path_factory, request, sentinels):
    """Run the isolation probes once in a sandboxed kernel with default limits (in each mode)."""
    if not bwrap_available():
        pytest.fail("bubblewrap is not usable here; `make sysdeps` installs it")
    base = tmp_path_factory.mktemp("sandbox")
    scratch = base / "scratch"
    scratch.mkdir()
    course = base / "course"
    (course / "submitted" / "other-student").mkdir(parents=True)
    (course / "gradebook.db").write_text("secret")
    config = Config()
    config.CourseDirectory.root = str(course)
    config.CourseDirectory.db_url = f"sqlite:///{course / 'gradebook.db'}"
    fields = {
        "src": str(REPO / "notebooks" / "part-ii" / "*.ipynb"),
        "nb": str(REPO / "notebooks" / "README.md"),
        "db": str(course / "gradebook.db"),
        "course": str(course / "submitted" / "other-student"),
        "outside": str(base / "outside.txt"),
        "repo_file": str(REPO / "code" / "part-ii" / "probe.txt"),
        "home": "/root/probe.txt",
        "sentinels": [str(p) for p in sentinels],
        "repo_parent": str(REPO.parent),
        "repo": str(REPO),
    }
    names = list(PROBES)
    # a port that accepts connections on this machine's loopback: refused inside means the network is not shared
    with listening_socket() as port:
        fields["listen_port"] = port
        texts = run_sandboxed([PROBES[n].format(**fields) for n in names], scratch, SandboxLimits(), config,
                              fork_server=request.param == "fork server")
    return dict(zip(names, texts)), base


def test_an_ordinary_cell_imports_numpy_torch_and_reads_the_course_data(isolation):
    """numpy, torch, the reference module, checks.py and arithmetic.json all work inside."""
    outputs, _ = isolation
    assert outputs["ordinary"] == "ok True 0.5"


def test_the_kernel_runs_unprivileged_in_its_private_folder(isolation):
    """As root the grader starts the kernel under a user id of its own (one per sandbox: the kernel's
    folder, or the fork server's); the working folder is HOME."""
    outputs, base = isolation
    uid, cwd_is_home = outputs["whoami"].split()
    assert cwd_is_home == "True"
    assert int(uid) == (sandbox_uid(str((base / "scratch").resolve())) if os.geteuid() == 0 else os.geteuid())
    assert int(uid) != 0


def test_memory_that_no_limit_counts_cannot_be_taken(isolation):
    """RLIMIT_AS counts mapped memory only. A red-team review held 5 GiB of SysV shared memory (detached: no process
    owns it for the OOM killer to end) and memfd files from a notebook that still scored full marks, and, as root's
    kernel, mounted a 960 MiB tmpfs in a user namespace of its own; a second review held 768 MiB with memfd_secret,
    512 MiB of kernel memory in semaphore sets and 750 MiB in socket buffers raised to 8 MiB, and left keys behind.
    The seccomp filter refuses all of these (and io_uring), and /dev (a writable tmpfs for a kernel in a user
    namespace) is read-only."""
    outputs, _ = isolation
    assert outputs["uncounted_memory"] == ("EPERM EPERM EPERM EPERM EPERM unshare-rc 1 EROFS EROFS memfd_secret EPERM "
                                           "semget EPERM add_key EPERM io_uring EPERM SO_SNDBUF EPERM True")


def test_the_seccomp_filter_leaves_threads_processes_and_torch_working(isolation):
    """clone3 answers ENOSYS, so glibc makes threads with clone: a thread pool, a fork and torch's two threads run;
    a kernel may open MAX_OPEN_FILES files and cannot raise that."""
    from autograder.sandbox import MAX_OPEN_FILES

    outputs, _ = isolation
    assert outputs["still_works"] == f"[0, 1, 4, 9] 7 {512.0 * 512} {MAX_OPEN_FILES} {MAX_OPEN_FILES} ValueError"


def test_the_seccomp_filter_is_handed_to_bwrap_through_a_pipe_closed_afterwards():
    """with_seccomp_fd replaces the placeholder with a pipe that holds the whole program (it fits the pipe's buffer, so
    writing it never blocks) and closes the pipe on leaving; a command without the placeholder is left alone."""
    from autograder.sandbox import SECCOMP_FD, seccomp_program, with_seccomp_fd

    program = seccomp_program()
    assert 0 < len(program) < 65536 and len(program) % 8 == 0  # struct sock_filter entries of 8 bytes each
    with with_seccomp_fd(["bwrap", "--seccomp", SECCOMP_FD, "--", "true"]) as (cmd, fds):
        (fd,) = fds
        pipe = os.fstat(fd).st_ino
        assert cmd == ["bwrap", "--seccomp", str(fd), "--", "true"]
        assert os.read(fd, 65536) == program and os.read(fd, 1) == b""  # all of it, then end of file
    try:  # closed: the number is free, or (another thread of the test process) names something else by now
        assert os.fstat(fd).st_ino != pipe
    except OSError:
        pass
    with with_seccomp_fd(["true"]) as (cmd, fds):
        assert (cmd, fds) == (["true"], ())


def test_each_sandbox_gets_an_unprivileged_user_id_of_its_own():
    """The ids a root grader gives kernels lie above every system and login user (nobody is 65534); the submissions
    of a class graded side by side get different ones (the per-user process limit is then per sandbox); a fork
    server and the kernels it forks, keyed by the same folder, agree on theirs."""
    first, count = SANDBOX_UIDS
    assert first > 65534 and first + count <= 2**31 - 1
    folders = [f"/tmp/part-ii-grade-student{i:02d}-k3j9x2/fork-server" for i in range(40)]
    uids = [sandbox_uid(folder) for folder in folders]
    assert all(first <= uid < first + count for uid in uids), uids
    assert len(set(uids)) == len(folders), "two submissions share a sandbox user id"
    assert [sandbox_uid(folder) for folder in folders] == uids


@pytest.fixture
def sandbox_probe_reset():
    """sandbox_problem()'s cached answer forgotten before and after a test that fakes the host."""
    import autograder.sandbox as sandbox

    sandbox.sandbox_problem.cache_clear()
    yield sandbox
    sandbox.sandbox_problem.cache_clear()


@pytest.mark.parametrize("missing, words, remedy", [
    ("bwrap", "bwrap (bubblewrap) is not installed", "apt-get install bubblewrap"),
    ("prlimit", "prlimit (util-linux) is not installed", "apt-get install util-linux"),
])
def test_without_a_sandbox_tool_the_refusal_names_the_tool_and_its_package(monkeypatch, sandbox_probe_reset, missing,
                                                                          words, remedy):
    """grade refuses, and the demo says why it grades without a sandbox, naming the tool that is missing (prlimit
    was reported as bubblewrap), with the package that brings it."""
    from autograder.demo import choose_sandbox
    from autograder.course import AutograderError
    from autograder.grade import sandbox_mode

    real_which = shutil.which
    monkeypatch.setattr(shutil, "which", lambda tool, *a, **k: None if tool == missing else real_which(tool, *a, **k))
    assert sandbox_probe_reset.sandbox_problem() == words
    assert not bwrap_available()
    with pytest.raises(AutograderError) as refused:
        sandbox_mode(no_sandbox=False)
    assert words in str(refused.value) and remedy in str(refused.value) and "--no-sandbox" in str(refused.value)
    assert choose_sandbox(no_sandbox=False) == (True, f"without a sandbox: {words}")


def test_without_libseccomp_the_refusal_names_it_and_its_package(monkeypatch, sandbox_probe_reset):
    """pyseccomp raises RuntimeError at import when the system has no libseccomp: grading refuses, naming the
    package, before any bwrap runs."""
    from autograder.course import AutograderError
    from autograder.grade import sandbox_mode

    def no_library():
        raise RuntimeError("Unable to find libseccomp")

    monkeypatch.setattr(sandbox_probe_reset, "seccomp_program", no_library)
    monkeypatch.setattr(sandbox_probe_reset.subprocess, "run", lambda *a, **k: pytest.fail("bwrap ran"))
    problem = sandbox_probe_reset.sandbox_problem()
    assert problem == "libseccomp (libseccomp2) is not usable: Unable to find libseccomp"
    with pytest.raises(AutograderError) as refused:
        sandbox_mode(no_sandbox=False)
    assert "apt-get install libseccomp2" in str(refused.value)


@pytest.mark.parametrize("euid, remedy", [
    (0, "Grade where bubblewrap may create namespaces (a container may need --privileged"),
    (1000, "Grade as root or where unprivileged user namespaces are allowed (a container may need --privileged"),
])
def test_when_bubblewrap_cannot_make_namespaces_its_own_words_are_given(monkeypatch, sandbox_probe_reset, euid, remedy):
    """A host (a container) where bwrap exists but fails: the refusal quotes bwrap's last line, not "not available",
    and says where grading works; as root, not "grade as root" (found by review)."""
    from autograder.course import AutograderError
    from autograder.grade import sandbox_mode

    said = "bwrap: No permissions to create a new namespace, likely because the kernel does not allow it"
    monkeypatch.setattr(sandbox_probe_reset.subprocess, "run",
                        lambda *a, **k: subprocess.CompletedProcess(a, 1, stdout="", stderr=said + "\n"))
    monkeypatch.setattr(sandbox_probe_reset.os, "geteuid", lambda: euid)
    problem = sandbox_probe_reset.sandbox_problem()
    assert problem == f"bubblewrap (bwrap) cannot create the sandbox's namespaces here ({said})"
    with pytest.raises(AutograderError) as refused:
        sandbox_mode(no_sandbox=False)
    assert f"{problem}, so student code cannot be sandboxed; refusing to grade. {remedy}" in str(refused.value)
    assert (euid == 0) == ("Grade as root" not in str(refused.value)), refused.value


def test_a_bubblewrap_trial_run_that_hangs_is_named_in_one_short_line(monkeypatch, sandbox_probe_reset):
    """A trial run that timed out was reported with the whole bwrap command line (542 characters) and the advice for
    namespaces (found by review)."""
    def hangs(cmd, **kwargs):
        raise subprocess.TimeoutExpired(cmd, kwargs.get("timeout"))

    monkeypatch.setattr(sandbox_probe_reset.subprocess, "run", hangs)
    problem = sandbox_probe_reset.sandbox_problem()
    assert problem == f"bubblewrap (bwrap) did not finish a trial run within {sandbox_probe_reset.PROBE_SECONDS} s"
    assert sandbox_probe_reset.sandbox_remedy(problem) == "Check that `bwrap --version` runs here, then try again"


def test_the_cpu_limit_counts_from_after_the_start_up(isolation):
    """The kernel has its whole CPU limit for the notebook: the preload's imports (seconds of CPU in a
    sandbox of its own) are not taken from it; the kernel cannot raise the limit."""
    outputs, _ = isolation
    same, left, used, raised = outputs["cpu_limit"].split()
    assert same == "True"
    assert SandboxLimits().cpu_seconds - 2 < float(left) <= SandboxLimits().cpu_seconds + 1, outputs["cpu_limit"]
    assert raised == "ValueError"


def test_no_network_not_even_loopback(isolation):
    """A socket to a port listening on this machine's 127.0.0.1 is refused (the sandbox has a loopback of its own)
    and the outside world is unreachable."""
    outputs, _ = isolation
    loopback, outside = outputs["network"].split()
    assert loopback == "ConnectionRefusedError"
    assert outside != "connected"


def test_instructor_sources_and_gradebook_are_invisible(isolation):
    """The source notebooks, the gradebook and other submissions do not exist for the kernel."""
    outputs, base = isolation
    assert outputs["read_source"] == "0 False"
    assert outputs["read_gradebook"] == "False False"
    assert (base / "course" / "gradebook.db").read_text() == "secret"


def test_files_outside_the_allowed_paths_are_absent(isolation, sentinels):
    """Nothing of the host exists unless it was bound: not a second copy of the course beside the
    repository, not a folder under /opt, /var/lib or /; their files cannot be read, their folders not listed."""
    outputs, _ = isolation
    assert json.loads(outputs["sentinels"]) == []
    assert all(p.read_bytes() for p in sentinels)  # they were there, readable, all along


def test_the_root_shows_only_what_a_kernel_needs(isolation):
    """/ holds the system trees, /etc, /dev, /proc, /tmp and the parents of the interpreter and the course
    files; /etc three entries; the repository only the course files and the venv; its folder nothing else."""
    outputs, base = isolation
    listing = json.loads(outputs["listing"])
    system = {"usr", "bin", "sbin", "lib", "lib32", "lib64", "libx32", "etc", "dev", "proc", "tmp"}
    parents = {Path(p).resolve().parts[1] for p in (REPO, sys.prefix, sys.base_prefix, base)}
    assert {"usr", "etc", "dev", "proc", "tmp"} <= set(listing["/"]) <= system | parents, listing["/"]
    assert set(listing["/etc"]) <= {"ld.so.cache", "localtime", "fonts"}, listing["/etc"]
    # beside the repository only the way to other bound paths: a clone in /tmp shares its parent with the scratch
    bound = [Path(p).resolve() for p in (sys.prefix, sys.base_prefix, base)]
    beside = {p.relative_to(REPO.parent).parts[0] for p in bound if p.is_relative_to(REPO.parent)}
    assert set(listing[str(REPO.parent)]) == {REPO.name} | beside, listing[str(REPO.parent)]
    venv = Path(sys.prefix).resolve()
    inside = {venv.relative_to(REPO).parts[0]} if venv.is_relative_to(REPO) else set()
    assert set(listing[str(REPO)]) == {"code", "data"} | inside


def test_nothing_outside_scratch_is_writable(isolation):
    """Writes outside the scratch folder fail (or land in a private tmpfs) and never reach the host."""
    outputs, base = isolation
    results = outputs["write_outside"].split()
    # the repository file, /etc and the home folder: each write raised an OSError (read-only, or no such folder for
    # a grader who is not root: /root is not there at all)
    assert len(results) == 4 and "wrote" not in results[1:], results
    assert not (base / "outside.txt").exists() and not Path("/etc/sandbox-probe").exists()
    assert not (REPO / "code" / "part-ii" / "probe.txt").exists()
    assert outputs["write_scratch"] == "fine"


def test_the_environment_is_cleared_and_processes_are_private(isolation):
    """No grader variables (database URL, tokens, parent pid) and only the sandbox's own processes."""
    outputs, _ = isolation
    assert outputs["env"] == "[]"
    assert outputs["processes"] == "True"


LIMITS = SandboxLimits(cpu_seconds=6, memory_bytes=3 * 2**30, max_processes=64,
                       file_size_bytes=2**20, output_bytes=200_000, disk_bytes=8 * 2**20)

LIMIT_PROBES = [
    # 0: memory bomb: 4 GiB of address space, untouched (it would succeed without the limit)
    "import numpy as np\ntry:\n    x = np.empty(2**29)\n    print('allocated')\nexcept MemoryError:\n    print('MemoryError')",
    # 1: fork bomb: children sleep; forking must fail long before 10000
    ("import os, time\nkids = 0\ntry:\n    for _ in range(10000):\n        pid = os.fork()\n        if pid == 0:\n"
     "            time.sleep(60); os._exit(0)\n        kids += 1\nexcept OSError as e:\n    print('stopped', kids < 64, type(e).__name__)\n"
     "import signal\nfor pid in [p for p in os.listdir('/proc') if p.isdigit() and int(p) > os.getpid()]:\n"
     "    os.kill(int(pid), signal.SIGKILL)\n    os.waitpid(int(pid), 0)"),
    # 2: a file larger than the limit
    "try:\n    open('big.bin', 'wb').write(b'x' * 2 * 2**20)\n    print('wrote')\nexcept OSError as e:\n    print('file', e.errno)",
    # 3: filling the private disk with many small files
    ("import errno\nn = 0\ntry:\n    for n in range(100):\n        open(f'f{n}.bin', 'wb').write(b'x' * 500_000)\n    print('filled')\n"
     "except OSError as e:\n    print('disk', e.errno == errno.ENOSPC, n < 20)"),
    # 4: huge output
    "for _ in range(2000):\n    print('y' * 1000)",
    # 5: CPU loop: killed by the CPU limit long before the 60 s cell timeout
    "while True:\n    pass",
    # 6: the kernel was restarted and earlier state replayed
    "print('alive', kids < 64)",
]


@pytest.fixture(scope="module", params=MODES)
def limited(tmp_path_factory, request):
    """Run the limit probes once with small limits (in each mode)."""
    scratch = tmp_path_factory.mktemp("limited")
    return run_sandboxed(LIMIT_PROBES, scratch, LIMITS, timeout=60, fork_server=request.param == "fork server"), scratch


def test_memory_bomb_raises_memory_error(limited):
    """An allocation beyond the address-space limit fails inside the kernel."""
    assert limited[0][0] == "MemoryError"


def test_fork_bomb_is_contained(limited):
    """Forking stops at the process limit; the kernel survives."""
    assert limited[0][1] == "stopped True BlockingIOError"


def test_file_size_and_disk_are_capped(limited):
    """A file over the size limit fails with EFBIG; the private folder fills up with ENOSPC."""
    assert limited[0][2] == "file 27"
    assert limited[0][3] == "disk True True"


def test_output_is_capped_by_the_grader(limited):
    """2 MB of printing keeps at most the cell's output budget and says it was truncated."""
    assert LIMITS.output_bytes // 2 < len(limited[0][4]) <= LIMITS.output_bytes + 100
    assert limited[0][4].startswith("y" * 1000)
    assert limited[0][4].endswith("[output truncated: a cell may print 200000 bytes, a notebook 1600000]")


def test_cpu_loop_is_killed_and_grading_goes_on(limited):
    """The CPU limit kills the looping kernel; a fresh kernel replays earlier cells and runs the rest."""
    assert limited[0][5] == "ERROR KernelDied"
    assert limited[0][6] == "alive True"


@pytest.mark.parametrize("mode", MODES)
def test_a_cell_timeout_interrupts_the_kernel_without_killing_it(tmp_path, mode):
    """A loop cut by the cell timeout is interrupted in the same kernel process (no restart, no replay), and its
    output is the grader's CellTimeoutError alone: the interrupt's KeyboardInterrupt is not the student's."""
    tmp_path.chmod(0o755)
    start_time = "print(open('/proc/self/stat').read().rsplit(')', 1)[1].split()[19])"  # field 22: process start
    texts = run_sandboxed([start_time, "while True:\n    pass", start_time], tmp_path, SandboxLimits(), timeout=5,
                          fork_server=mode == "fork server")
    assert texts[1] == "ERROR CellTimeoutError"  # the grader's interrupt is not shown as the student's Ctrl-C
    assert texts[0] and texts[2] == texts[0]


FORK_AND_LOOP = ("import os\nfor _ in range(3):\n    if os.fork() == 0:\n        while True:\n            pass\n"
                 "while True:\n    pass")
LIVE_OTHERS = ("import os\nlive = [p for p in os.listdir('/proc') if p.isdigit()\n"
               "        and int(p) not in (1, os.getpid(), os.getppid())\n"
               "        and open(f'/proc/{p}/stat').read().rsplit(')', 1)[1].split()[0] != 'Z']\nprint('others', len(live))")


FORK_AND_FAIL = "import os\nfor _ in range(2):\n    if os.fork() == 0:\n        while True:\n            pass\nraise ValueError('done forking')"
# the spinning process is an orphan (its parent exited): the namespace's PID 1 adopted it, it is not below the kernel
ORPHAN_AND_FAIL = ("import os\nif os.fork() == 0:\n    if os.fork() == 0:\n        while True:\n            pass\n"
                   "    os._exit(0)\nos.wait()\nraise ValueError('done forking')")


@pytest.mark.parametrize("mode", MODES)
def test_a_failed_or_timed_out_cell_leaves_no_forked_process_running(tmp_path, mode):
    """The interrupt or the error stops the cell in the kernel; the processes it forked are killed, not left spinning,
    also those orphaned in its sandbox."""
    tmp_path.chmod(0o755)
    texts = run_sandboxed([FORK_AND_LOOP, LIVE_OTHERS, FORK_AND_FAIL, LIVE_OTHERS, ORPHAN_AND_FAIL, LIVE_OTHERS],
                          tmp_path, SandboxLimits(), timeout=5, markdown_after=True, fork_server=mode == "fork server")
    assert texts == ["ERROR CellTimeoutError", "", "others 0", "", "ERROR ValueError", "",
                     "others 0", "", "ERROR ValueError", "", "others 0", ""]



@pytest.mark.parametrize("mode", MODES)
def test_a_venv_reached_through_a_symlink_runs_kernels(tmp_path, mode, monkeypatch):
    """.venv may be a symlink to the real folder: the sandbox binds the real one, and runs the kernel through it
    (through the symlink, which the sandbox does not show, every kernel failed to start)."""
    link = tmp_path / "v"
    link.symlink_to(Path(sys.prefix).resolve(), target_is_directory=True)
    monkeypatch.setattr(sys, "prefix", str(link))
    monkeypatch.setattr(sys, "executable", str(link / "bin" / "python"))
    tmp_path.chmod(0o755)
    texts = run_sandboxed(["import sys\nprint(6 * 7, sys.prefix)"], tmp_path, SandboxLimits(),
                          fork_server=mode == "fork server")
    assert texts == [f"42 {Path(sys.prefix).resolve()}"], texts


@pytest.mark.parametrize("mode", MODES)
def test_a_course_under_home_stays_invisible_and_its_kernels_run(tmp_path, mode):
    """A course (or the repository) under /home, as for an instructor who is not root: the sandbox
    must still start, with the course invisible."""
    tmp_path.chmod(0o755)
    parent = Path("/home") if os.access("/home", os.W_OK) else Path.home()
    course = Path(tempfile.mkdtemp(prefix="part-ii-test-course-", dir=parent))
    try:
        course.chmod(0o755)  # readable to the sandbox user but for the sandbox
        (course / "gradebook.db").write_text("secret")
        config = Config()
        config.CourseDirectory.root = str(course)
        config.CourseDirectory.db_url = f"sqlite:///{course / 'gradebook.db'}"
        texts = run_sandboxed([f"import os; print(os.path.exists({str(course)!r}), 6 * 7)"], tmp_path,
                              SandboxLimits(), config, fork_server=mode == "fork server")
        assert texts == ["False 42"]
    finally:
        shutil.rmtree(course, ignore_errors=True)

def test_no_sandbox_process_outlives_grading(limited):
    """After the run, no process of that sandbox (kernel or forked children) is left."""
    _, scratch = limited
    for _ in range(30):  # the kernel's namespace is torn down asynchronously after shutdown
        left = subprocess.run(["pgrep", "-f", str(scratch)], capture_output=True, text=True)
        if left.returncode == 1:
            break
        time.sleep(0.5)
    assert left.returncode == 1, left.stdout


def test_bad_arguments_are_rejected_with_clear_errors(tmp_path):
    """configure_sandbox and SandboxLimits name what was wrong."""
    with pytest.raises(ValueError, match="cpu_seconds must be a positive integer"):
        SandboxLimits(cpu_seconds=0)
    with pytest.raises(ValueError, match="scratch must be an existing folder"):
        configure_sandbox(Config(), tmp_path / "missing", READABLE, SandboxLimits())
    deep = tmp_path / ("d" * 90)
    deep.mkdir()
    with pytest.raises(ValueError, match="scratch path too long for unix sockets"):
        configure_sandbox(Config(), deep, READABLE, SandboxLimits())
    with pytest.raises(ValueError, match="readable paths must exist"):
        configure_sandbox(Config(), tmp_path, [tmp_path / "nope"], SandboxLimits())
    with pytest.raises(TypeError, match="limits must be a SandboxLimits"):
        configure_sandbox(Config(), tmp_path, READABLE, {"cpu_seconds": 1})
    with pytest.raises(ValueError, match="scratch is not set"):
        SandboxedKernelManager()
    from traitlets import TraitError

    with pytest.raises(TraitError, match="max_cell_processes.*should not be less than 0.*-1"):
        GradingExecute(max_cell_processes=-1)


@pytest.fixture()
def short_tmp():
    """A fresh folder with a short path: a scratch folder's unix sockets limit its length, and pytest's
    tmp_path grows with the number of earlier runs (pytest-107/...) and the test's name."""
    folder = Path(tempfile.mkdtemp(prefix="bound-"))
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def test_a_bound_tree_holding_the_course_or_the_repository_is_refused(short_tmp, monkeypatch):
    """The allow-list is only as good as what it binds: a readable folder (or scratch folder) that
    holds the course, its gradebook, the repository or the expected values' cache would show them all,
    so configure_sandbox says no."""
    tmp_path = short_tmp
    course, scratch = tmp_path / "course", tmp_path / "scratch"
    course.mkdir()
    scratch.mkdir()
    config = Config()
    config.CourseDirectory.root = str(course)
    with pytest.raises(ValueError, match=f"would show the course or the repository.*{re.escape(f'{tmp_path} holds {course}')}"):
        configure_sandbox(config, scratch, [tmp_path], SandboxLimits())
    with pytest.raises(ValueError, match=re.escape(f"{REPO} holds {REPO}")):
        configure_sandbox(Config(), scratch, [REPO], SandboxLimits())
    monkeypatch.setenv("PART_II_CACHE", str(tmp_path / "cache"))  # expected values of the hidden tests
    with pytest.raises(ValueError, match=re.escape(f"{tmp_path} holds {tmp_path / 'cache'}")):
        configure_sandbox(Config(), scratch, [tmp_path], SandboxLimits())
    monkeypatch.delenv("PART_II_CACHE")
    (scratch / "nb0").mkdir()
    with pytest.raises(ValueError, match=re.escape(f"{tmp_path} holds {course}")):  # a fork server's folder is bound read-write
        configure_sandbox(config, scratch / "nb0", READABLE, SandboxLimits(), fork_server=tmp_path)
    configure_sandbox(config, scratch, READABLE, SandboxLimits())  # beside the course: fine
    gradebooks = tmp_path / "g?b %41"  # a URL escapes these: read plainly, the folder was "g", nothing to refuse
    config.CourseDirectory.db_url = sqlite_url(gradebooks / "gradebook.db")
    with pytest.raises(ValueError, match=re.escape(f"{tmp_path} holds {gradebooks}")):
        configure_sandbox(config, scratch, [tmp_path], SandboxLimits())


def test_configure_sandbox_swaps_in_grading_execute():
    """The autograde preprocessor list runs GradingExecute, sandboxed, in place of Execute."""
    from nbgrader.preprocessors import Execute

    config = Config()
    configure_sandbox(config, REPO / "code", READABLE, SandboxLimits())
    steps = config.Autograde.autograde_preprocessors
    assert GradingExecute in steps and Execute not in steps
    assert config.GradingExecute.sandboxed is True
    assert json.loads(json.dumps(config.SandboxedKernelManager.setenv))["PART_II_ROOT"] == str(REPO)


# pause after an error reply is sent, before the kernel marks its queue aborting, as a busy machine does
SLOW_ABORT = ("(lambda k: setattr(k, '_abort_queues', lambda *a, _abort=k._abort_queues, **kw: "
              "(__import__('time').sleep(1.0), _abort(*a, **kw))[1]))(get_ipython().kernel)")


def test_a_replayed_error_does_not_skip_the_next_replayed_cell(tmp_path):
    """After a kernel death the replay runs every earlier cell, also the one right after a cell that raised.

    With ipykernel's default stop_on_error, the request that follows an error reply can be
    answered "aborted" without running (a race the grader lost once under load: a later cell
    then missed a name). SLOW_ABORT widens that window so the race is lost every time.
    """
    nb = new_notebook(cells=[new_code_cell("raise SystemExit(3)"), new_code_cell("answer = 41"),
                             new_code_cell("import os\nos._exit(1)"), new_code_cell("print(answer + 1)")],
                      metadata={"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}})
    executor = GradingExecute(timeout=30, extra_arguments=[f"--IPKernelApp.exec_lines={SLOW_ABORT}"])
    nb, _ = executor.preprocess(nb, {"metadata": {"path": str(tmp_path)}})
    assert [o.get("text") for o in nb.cells[3].outputs] == ["42\n"], nb.cells[3].outputs


@pytest.mark.parametrize("mode", MODES)
def test_a_kernel_whose_cells_are_done_is_killed_not_asked_to_exit(tmp_path, mode, monkeypatch):
    """A graded kernel has nothing to save: asking it to shut down cost every notebook the 2.5 s jupyter_client
    waits before SIGTERM (ipykernel with torch loaded does not exit sooner). Also after a kernel death."""
    calls = []
    for name in ("_async_request_shutdown", "_async_kill_kernel"):
        original = getattr(SandboxedKernelManager, name)

        async def recorded(self, *args, _name=name, _original=original, **kwargs):
            calls.append(_name)
            return await _original(self, *args, **kwargs)

        monkeypatch.setattr(SandboxedKernelManager, name, recorded)
    tmp_path.chmod(0o755)
    texts = run_sandboxed(["print(6 * 7)", "import os\nos._exit(1)", "print('after')"], tmp_path, SandboxLimits(),
                          fork_server=mode == "fork server")
    assert texts[0] == "42" and texts[1].startswith("ERROR") and texts[2] == "after", texts
    assert "_async_request_shutdown" not in calls and calls.count("_async_kill_kernel") >= 1, calls


@pytest.mark.parametrize("mode", MODES)
def test_a_fork_bomb_is_stopped_with_its_kernel_long_before_the_cell_timeout_and_grading_goes_on(tmp_path, mode):
    """Past max_cell_processes below the kernel, the grader freezes and kills the lot; the kernel is restarted,
    the earlier cells replayed, and nothing of the bomb is left running beside the next cells."""
    tmp_path.chmod(0o755)
    bomb = "import os\nwhile True:\n    os.fork()"
    nb = execute_sandboxed(["x = 41", bomb, LIVE_OTHERS, "print(x + 1)"], tmp_path, SandboxLimits(), timeout=300,
                           fork_server=mode == "fork server")
    errors = [o for o in nb.cells[1].outputs if o.output_type == "error"]
    # stopped by the watch: with a 300 s cell timeout, a CellTimeoutError would mean it was not
    assert [e.ename for e in errors] == ["TooManyProcesses"] and "more than 64 processes" in errors[0].evalue, errors
    assert cell_texts(nb)[2:] == ["others 0", "42"]


# forks once and returns at once: the bomb runs on in the background
BACKGROUND_BOMB = ("import os\nif os.fork() == 0:\n    while True:\n        try:\n            os.fork()\n"
                   "        except OSError:\n            pass")
# its processes fork and exit: each new one is an orphan, adopted by the sandbox's PID 1, and none is below the kernel
ORPHAN_BOMB = ("import os, time\nif os.fork() == 0:\n    if os.fork() == 0:\n        while True:\n            try:\n"
               "                if os.fork() == 0 and os.fork() != 0:\n                    os._exit(0)\n"
               "            except OSError:\n                pass\n    os._exit(0)\nos.wait()\ntime.sleep(20)")


# as a busy machine may run BACKGROUND_BOMB: its first copy does nothing for two of the watch's intervals, then forks
DELAYED_BOMB = ("import os, time\nif os.fork() == 0:\n    time.sleep(0.6)\n    while True:\n        try:\n"
                "            os.fork()\n        except OSError:\n            pass")


# as copies of a kernel that preloaded torch may fork on a loaded machine: about 3 s to pass the limit, past the settle time
SLOW_BOMB = ("import os, time\nif os.fork() == 0:\n    while True:\n        time.sleep(0.05)\n        try:\n"
             "            if os.fork() == 0:\n                time.sleep(3600)\n        except OSError:\n            pass")


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("bomb", [BACKGROUND_BOMB, ORPHAN_BOMB, DELAYED_BOMB, SLOW_BOMB],
                         ids=["left running by a cell that returns", "of orphans", "whose first copy waits",
                              "that grows slowly"])
def test_a_fork_bomb_outside_the_cell_or_the_kernel_s_tree_is_stopped_and_blamed_on_its_cell(tmp_path, mode, bomb):
    """A bomb the cell leaves behind is found when the cell ends, one of orphans by counting the whole sandbox:
    its own cell gets the error, and the next cells run as if it had never been."""
    tmp_path.chmod(0o755)
    nb = execute_sandboxed(["x = 41", bomb, "import time\ntime.sleep(1)\nprint('slept')", LIVE_OTHERS, "print(x + 1)"],
                           tmp_path, SandboxLimits(), timeout=300, fork_server=mode == "fork server")
    errors = [o for o in nb.cells[1].outputs if o.output_type == "error"]
    assert [e.ename for e in errors] == ["TooManyProcesses"] and "more than 64 processes" in errors[0].evalue, errors
    assert cell_texts(nb)[2:] == ["slept", "others 0", "42"]


# each copy is made the child of its parent's parent (clone with CLONE_PARENT): with a fork server, of the server
CLONE_PARENT_BOMB = ("import ctypes\nlibc = ctypes.PyDLL(None)  # PyDLL: the GIL stays held across the call, as in a fork\n"
                     "while True:\n    libc.syscall({nr}, 0x8000 | 17, 0, 0, 0, 0)  # CLONE_PARENT | SIGCHLD")
SYS_CLONE = {"x86_64": 56, "aarch64": 220}


@pytest.mark.parametrize("mode", MODES)
def test_a_fork_bomb_whose_copies_are_siblings_of_the_kernel_is_stopped(tmp_path, mode):
    """Copies made with clone(CLONE_PARENT) are the fork server's children, not the kernel's: they are counted
    all the same (only the kernels the server forked are left out), and nothing of them runs on."""
    import platform

    if platform.machine() not in SYS_CLONE:
        pytest.skip(f"no clone syscall number for {platform.machine()} in this test")
    tmp_path.chmod(0o755)
    bomb = CLONE_PARENT_BOMB.format(nr=SYS_CLONE[platform.machine()])
    nb = execute_sandboxed(["x = 41", bomb, LIVE_OTHERS, "print(x + 1)"], tmp_path, SandboxLimits(), timeout=300,
                           fork_server=mode == "fork server")
    errors = [o for o in nb.cells[1].outputs if o.output_type == "error"]
    assert [e.ename for e in errors] == ["TooManyProcesses"] and "more than 64 processes" in errors[0].evalue, errors
    assert cell_texts(nb)[2:] == ["others 0", "42"]


@pytest.mark.parametrize("mode", MODES)
def test_processes_a_cell_leaves_running_without_growing_do_not_stop_it(tmp_path, mode):
    """A few workers left running (a pool) are not a fork bomb: the cells after them run in the same kernel."""
    tmp_path.chmod(0o755)
    workers = ("import os, time\npids = []\nfor _ in range(3):\n    pid = os.fork()\n    if pid == 0:\n"
               "        time.sleep(600)\n        os._exit(0)\n    pids.append(pid)")
    texts = run_sandboxed([workers, "print(len(pids))", LIVE_OTHERS], tmp_path, SandboxLimits(),
                          fork_server=mode == "fork server")
    assert texts == ["", "3", "others 3"], texts


# children that end at once and are never reaped: the kernel is left holding zombies
ZOMBIES = ("import os, time\nkernel_pid = os.getpid()\nfor _ in range(8):\n    if os.fork() == 0:\n        os._exit(0)\n"
           "time.sleep(1)\nprint('forked')")
COUNT_ZOMBIES = ("import os\nkids = [int(c) for t in os.listdir('/proc/self/task')\n"
                 "        for c in open(f'/proc/self/task/{t}/children').read().split()]\n"
                 "print('zombies', sum(open(f'/proc/{c}/stat').read().rsplit(')', 1)[1].split()[0] == 'Z' for c in kids))")


@pytest.mark.parametrize("mode", ["no sandbox", "fork server"])
def test_zombies_a_cell_left_do_not_count_as_a_fork_bomb(tmp_path, mode):
    """The process watch counts processes that run: ended children the kernel never reaped hold no CPU and fork
    nothing, so more of them than max_cell_processes neither stop the cell nor the cells after it."""
    tmp_path.chmod(0o755)
    cells = [ZOMBIES, COUNT_ZOMBIES, "print('same kernel', os.getpid() == kernel_pid)"]
    if mode == "fork server":
        config = Config()
        config.GradingExecute.max_cell_processes = 4
        nb = execute_sandboxed(cells, tmp_path, SandboxLimits(), config=config, timeout=60, fork_server=True)
    else:
        nb = new_notebook(cells=[new_code_cell(c) for c in cells],
                          metadata={"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}})
        nb, _ = GradingExecute(timeout=60, preload_modules=[], max_cell_processes=4).preprocess(
            nb, {"metadata": {"path": str(tmp_path)}})
    assert cell_texts(nb) == ["forked", "zombies 8", "same kernel True"], cell_texts(nb)


def test_a_display_update_cannot_rewrite_an_earlier_cell_or_grow_past_the_output_budget(tmp_path):
    """A later cell (a test cell, say) updating a display an earlier cell showed must not write into that cell: the
    feedback shows the earlier cell's outputs, and the budget counted them when they were shown. Nor do many
    outputs sharing one display id each take a large update; widget messages leave nothing in the notebook."""
    first = ("from IPython.display import display\n"
             "handle = display({'text/plain': 'shown first'}, raw=True, display_id=True)\n"
             "for _ in range(50):\n"
             "    display({'text/plain': 'x'}, raw=True, display_id='many')")
    later = ("handle.update({'text/plain': 'hidden input 123'}, raw=True)\n"
             "display({'text/plain': 'y' * 100_000}, raw=True, display_id='many', update=True)\n"
             "from comm import create_comm\n"
             "create_comm(target_name='jupyter.widget', data={'state': {'_model_module': 'x', '_model_name': 'y', "
             "'leak': 'hidden input 456'}})\n"
             "print('done')")
    nb = new_notebook(cells=[new_code_cell(first), new_code_cell(later)],
                      metadata={"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}})
    nb, _ = GradingExecute(timeout=60, preload_modules=[]).preprocess(nb, {"metadata": {"path": str(tmp_path)}})
    texts = [o.get("data", {}).get("text/plain") for o in nb.cells[0].outputs]
    assert texts == ["shown first"] + ["x"] * 50, texts[:3]
    assert [o.get("text") for o in nb.cells[1].outputs] == ["done\n"], nb.cells[1].outputs
    kept = json.dumps([nb.metadata] + [cell.outputs for cell in nb.cells])
    assert "hidden input" not in kept and len(kept) < 20_000, kept[:2000]


def test_a_kernel_s_language_info_does_not_reach_the_graded_notebook(tmp_path):
    """A kernel chooses the language_info it reports; its pygments_lexer names a CSS class of every cell of a page,
    so a kernel restarted with a startup file that changed it could carry text onto a feedback page (review)."""
    startup = ("from pathlib import Path\n"
               "folder = Path(get_ipython().profile_dir.startup_dir)\nfolder.mkdir(parents=True, exist_ok=True)\n"
               "(folder / '00-leak.py').write_text(\"get_ipython().kernel.language_info['pygments_lexer'] = 'LEAKED'\\n\")")
    nb = new_notebook(cells=[new_code_cell(startup), new_code_cell("import os\nos._exit(1)"), new_code_cell("print(1)")],
                      metadata={"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"},
                                "language_info": {"name": "python", "pygments_lexer": "ipython3"}})
    executor = GradingExecute(timeout=60, preload_modules=[], kernel_env={"IPYTHONDIR": str(tmp_path / "ipython")})
    nb, _ = executor.preprocess(nb, {"metadata": {"path": str(tmp_path)}})
    assert (tmp_path / "ipython" / "profile_default" / "startup" / "00-leak.py").is_file()  # the restart ran it
    assert [o.get("text") for o in nb.cells[2].outputs] == ["1\n"], nb.cells[2].outputs
    assert nb.metadata["language_info"] == {"name": "python", "pygments_lexer": "ipython3"}, nb.metadata["language_info"]


def test_an_ipywidgets_output_leaves_its_outputs_in_the_cell_that_printed_them(tmp_path):
    """`with out: print(...)` of an ipywidgets Output: the text stays in its cell (counted by the output budget), and
    the cell is not taken for a kernel death, as it was once widget state was no longer kept (review)."""
    cells = ["import ipywidgets as w\nfrom IPython.display import display\nout = w.Output()\ndisplay(out)",
             "with out:\n    print('inside the widget')\nprint('after')", "print('next cell')"]
    nb = new_notebook(cells=[new_code_cell(c) for c in cells],
                      metadata={"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}})
    nb, _ = GradingExecute(timeout=60, preload_modules=[]).preprocess(nb, {"metadata": {"path": str(tmp_path)}})
    assert [o.get("text") for o in nb.cells[1].outputs] == ["inside the widget\n", "after\n"], nb.cells[1].outputs
    assert [o.get("text") for o in nb.cells[2].outputs] == ["next cell\n"], nb.cells[2].outputs
    assert "widgets" not in nb.metadata


def test_a_cell_that_ends_its_kernel_only_on_replay_costs_no_other_cell(tmp_path):
    """After a kernel death, a replayed cell that ends the new kernel is skipped from then on: the kernel is
    restarted again, and the next cell runs in it instead of being failed for a death it did not cause."""
    first = "import os\nif os.path.exists('ran'):\n    os._exit(1)\nopen('ran', 'w').close()\nx = 41"
    nb = new_notebook(cells=[new_code_cell(first), new_code_cell("import os\nos._exit(1)"), new_code_cell("print('after')")],
                      metadata={"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}})
    nb, _ = GradingExecute(timeout=30, preload_modules=[]).preprocess(nb, {"metadata": {"path": str(tmp_path)}})
    assert [o.get("text") for o in nb.cells[2].outputs] == ["after\n"], nb.cells[2].outputs


def test_an_error_of_the_grader_s_own_fails_only_its_cell_and_its_traceback_reaches_the_log(tmp_path, caplog):
    """Whatever raises while a cell runs is reported as the kernel stopping; when it is not how a kernel's end shows (a
    bug of the grader's), the instructor finds its traceback in the grading log (reports/grade-logs/). A kernel's
    real end is noted in one line."""
    nb = new_notebook(cells=[new_code_cell("x = 1"), new_code_cell("x = 2"), new_code_cell("import os\nos._exit(1)"),
                             new_code_cell("print('x is', x)")],
                      metadata={"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}})
    nb.cells[1].metadata["nbgrader"] = {"grade_id": "ex_bumped", "solution": True, "grade": False}
    executor = GradingExecute(timeout=30, preload_modules=[])
    run_cell = executor.preprocess_cell

    def buggy(cell, resources, index):
        if index == 1:
            raise TypeError("a bug in the grader") from KeyError("its root cause")
        return run_cell(cell, resources, index)

    executor.preprocess_cell = buggy
    with caplog.at_level("INFO"):
        nb, _ = executor.preprocess(nb, {"metadata": {"path": str(tmp_path)}})
    assert cell_texts(nb) == ["", "ERROR KernelDied", "ERROR KernelDied", "x is 1"], cell_texts(nb)
    assert "(TypeError)" in nb.cells[1].outputs[-1].evalue
    bug = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"
           and r.getMessage().startswith("cell 2 (ex_bumped): unexpected TypeError")]
    assert len(bug) == 1 and "stopping: a bug in the grader\n" in bug[0] and ", in buggy\n" in bug[0], caplog.text
    assert "KeyError: 'its root cause'\n\nThe above exception was the direct cause" in bug[0], bug[0]  # the chain too
    death = [r for r in caplog.records if r.getMessage().startswith("cell 3: the kernel stopped while running it")]
    assert death and death[0].levelname == "INFO" and not death[0].exc_info, caplog.text


def test_an_unexpected_error_quoting_megabytes_is_logged_in_a_few_lines(tmp_path, caplog):
    """jupyter_client's "Invalid Signature: %r" quotes the frame a kernel forged: a red-team review's 16 MiB frame made
    a 67 MB grading log. The record keeps the message's start, clipped, and the frames of the traceback."""
    from autograder.sandbox import UNEXPECTED_ERROR_CHARS

    nb = new_notebook(cells=[new_code_cell("x = 1"), new_code_cell("x = 2")],
                      metadata={"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}})
    executor = GradingExecute(timeout=30, preload_modules=[])
    run_cell = executor.preprocess_cell
    forged = b"\x1b]0;title\x07" + b"\x00" * 2**20

    def forged_signature(cell, resources, index):
        if index == 1:
            raise ValueError("Invalid Signature: %r" % forged)
        return run_cell(cell, resources, index)

    executor.preprocess_cell = forged_signature
    with caplog.at_level("INFO"):
        executor.preprocess(nb, {"metadata": {"path": str(tmp_path)}})
    (record,) = [r for r in caplog.records if "unexpected ValueError" in r.getMessage()]
    message = record.getMessage()
    assert message.startswith("cell 2: unexpected ValueError while running it, failed as the kernel stopping: "
                              "Invalid Signature: b'\\x1b]0;title\\x07\\x00")
    assert len(message) < UNEXPECTED_ERROR_CHARS + 1_000 and "in forged_signature" in message, len(message)
    assert not record.exc_info  # logging would format the whole message again


@pytest.mark.parametrize("later", ["x += 1", "import time\ntime.sleep(1.5)\nx += 1"], ids=["quick", "slow"])
def test_a_cell_that_calls_exit_is_failed_and_the_cells_after_it_run_whatever_the_timing(tmp_path, later):
    """IPython's exit() stops the kernel a moment after the cell's reply: a quick next cell ran and the exit went
    unnoticed, a slow one was blamed for the death (KernelDied) in its place. Now the exit() cell fails, the kernel
    is restarted without it, and every later cell runs and keeps its result."""
    nb = new_notebook(cells=[new_code_cell("x = 1"), new_code_cell("print('bye')\nexit()"), new_code_cell(later),
                             new_code_cell("print('x is', x)"), new_code_cell("exit(keep_kernel=True)\nprint('kept')")],
                      metadata={"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}})
    nb, _ = GradingExecute(timeout=30, preload_modules=[]).preprocess(nb, {"metadata": {"path": str(tmp_path)}})
    errors = [[o.ename for o in c.outputs if o.output_type == "error"] for c in nb.cells]
    assert errors == [[], ["KernelDied"], [], [], []], errors
    assert "the cell called exit() or quit()" in nb.cells[1].outputs[-1].evalue
    assert cell_texts(nb) == ["", "bye\nERROR KernelDied", "", "x is 2", "kept"], cell_texts(nb)


def test_the_process_watch_counts_a_tree_and_freezes_and_kills_all_of_it(tmp_path):
    """count_descendants follows children of children and stops counting past the limit; freeze_and_kill ends them all."""
    import psutil

    from autograder.sandbox import count_descendants, freeze_and_kill

    ready = tmp_path / "ready"
    tree = ("import os, time\n"
            "for _ in range(3):\n"
            "    if os.fork() == 0:\n"
            "        for _ in range(2):\n"
            "            if os.fork() == 0:\n"
            "                time.sleep(600)\n"
            "        time.sleep(600)\n"
            f"open({str(ready)!r}, 'w').close()\n"
            "time.sleep(600)")
    root = subprocess.Popen([sys.executable, "-c", tree])
    try:
        for _ in range(200):
            if ready.exists() and count_descendants(root.pid, 100) == 9:
                break
            time.sleep(0.05)
        assert count_descendants(root.pid, 100) == 9  # 3 children, 2 grandchildren each... and theirs
        assert count_descendants(root.pid, 4) == 5
        child = psutil.Process(root.pid).children()[0].pid
        assert count_descendants(root.pid, 100, skip={child}) == 8  # skipped, but its children are counted
        below = psutil.Process(root.pid).children(recursive=True)
        assert freeze_and_kill(psutil.Process(root.pid)) == 10
        root.wait(timeout=10)
        assert not [p for p in below if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
    finally:
        root.kill()
        root.wait()


class _ScriptedKernel:
    """A kernel for ProcessWatch that is running, has no bwrap parent (no sandbox) and whose count is scripted."""

    pid = -1

    def is_running(self) -> bool:
        return True

    def parent(self):
        return None


@pytest.mark.parametrize("counts, stopped", [
    ([*range(1, 13), 30, 30, 70], 70),  # a bomb starved for one interval past the settle time is still caught
    ([*range(1, 13), 30, 30, 30, 70], 0),  # two counts in a row without growth: what the cell left stopped growing
    ([3] * 20 + [70], 0),  # a pool of workers that never grows is let be once the settle time is up
    ([1, 2, 4, 8, 70], 70),  # growing before the settle time is up
    ([1] * 20 + [70], 0),  # a bomb whose first copy is still asleep when the settle time is up: the next cell's
])
def test_after_its_cell_the_watch_counts_until_two_counts_in_a_row_find_no_growth(counts, stopped):
    """The count after a cell goes on past `settle` while what the cell left grows, and one count without growth
    (a bomb that got no CPU for an interval on a loaded machine) does not end it: the next cell would be blamed."""
    from autograder.sandbox import ProcessWatch

    watch = ProcessWatch(_ScriptedKernel(), limit=64, interval=0.01, settle=0.05)  # 12 counts outlast settle
    script = iter(counts)
    watch.count = lambda: next(script, counts[-1] if counts[-1] <= 64 else 0)
    watch._stop = lambda found: setattr(watch, "stopped_at", found)  # no kernel to kill here
    watch._after()
    assert watch.stopped_at == stopped


def test_the_cause_of_a_start_failure_is_the_last_line_of_the_newest_kernel_log(tmp_path):
    """last_log_line: the newest log's last non-blank line, one printable line, cut to the limit; '' without one."""
    from autograder.sandbox import last_log_line

    old, new, blank = tmp_path / "old.log", tmp_path / "new.log", tmp_path / "blank.log"
    old.write_text("Traceback (most recent call last):\nImportError: an older kernel's failure\n")
    new.write_text("  File \"x.py\", line 1\nImportError: libzmq.so: failed to map segment\n\n  \n")
    blank.write_text("\n \n")
    os.utime(old, ns=(1_000_000_000, 1_000_000_000))
    os.utime(new, ns=(2_000_000_000, 2_000_000_000))
    os.utime(blank, ns=(500_000_000, 500_000_000))
    assert last_log_line([old, new, blank]) == "ImportError: libzmq.so: failed to map segment"
    assert last_log_line([old]) == "ImportError: an older kernel's failure"
    assert last_log_line([tmp_path / "missing.log", blank]) == ""
    os.utime(blank, ns=(3_000_000_000, 3_000_000_000))  # the newest, but blank: the next newest has the line
    assert last_log_line([old, new, blank]) == "ImportError: libzmq.so: failed to map segment"
    escapes = tmp_path / "escapes.log"
    escapes.write_text("\x1b[2Jcleared\ttab\x07bell\n")  # a student's code may write here: no terminal control
    assert last_log_line([escapes]) == "?[2Jcleared?tab?bell"
    assert last_log_line([tmp_path / "missing.log"]) == ""
    long = tmp_path / "long.log"
    long.write_bytes(b"start\n" + b"x" * 5000 + b"\n")  # longer than the tail read: its end is still the line
    cut = last_log_line([long], limit=40)
    assert cut == "x" * 39 + "…" and len(cut) == 40
    broken = tmp_path / "broken.log"
    broken.write_bytes(b"OSError: \xff\xfe bad bytes\n")
    assert last_log_line([broken]) == "OSError: \ufffd\ufffd bad bytes"
