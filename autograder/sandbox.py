"""Run each submission's kernel inside bubblewrap, with resource limits and an output cap.

The grader talks to the kernel over ZeroMQ ``ipc`` (unix sockets) in a per-submission
scratch folder, because the kernel lives in its own network namespace where TCP from
outside cannot reach it. The kernel's root is an empty, read-only tmpfs that shows only
what was put there (an allow-list: nothing else of the host exists, so no list of what to
hide can be incomplete):

- the system's program and library trees read-only (``/usr``; ``/bin``, ``/lib``, ``/lib64``,
  ``/sbin`` as they are, symlinks into ``/usr`` on merged-/usr systems), and from ``/etc`` only
  ``ld.so.cache``, ``localtime`` and ``fonts`` (fontconfig, for matplotlib);
- the Python it runs, read-only: the venv, the base interpreter the venv's python links to
  (``sys.base_prefix``, e.g. under ``/root/.pyenv``) and their site-packages, at their real paths;
- the ``readable`` paths (code/part-ii, data/part-ii) read-only at their own paths, so
  ``PART_II_ROOT`` and the notebooks' setup cell work unchanged; their parent folders exist,
  empty otherwise (the repository holds just them and the venv);
- ``/proc`` of its own PID namespace, a minimal ``/dev``, ``<scratch>/ipc`` (connection file
  and sockets, writable while the kernel starts) and a size-capped private tmpfs as its
  working folder and ``HOME``, and another as ``/tmp``;
- no network (``--unshare-net``), its own PID/IPC/UTS namespaces, a cleared environment,
  and ``prlimit`` limits on CPU seconds, address space, processes, open files and file size;
- a seccomp filter (``seccomp_program``) that refuses what holds memory the address-space limit
  does not count: memfds, SysV IPC, keys, socket buffers above the default and new user
  namespaces (root in one mounts a tmpfs of any size), and interfaces no notebook needs;
  ``/dev`` is read-only, as in a user namespace the kernel would own bwrap's ``/dev`` tmpfs,
  which has no size limit.

When the grader runs as root the kernel runs as an unprivileged user id of its own
(``setpriv``; derived from the scratch path, 200000-999999, no passwd entry): root would keep
every capability inside bubblewrap (enough to reach the host's files again, e.g. through a device node of its disk), and RLIMIT_NPROC
counts all processes of the real user - with one id per sandbox, a fork bomb exhausts only
its own process budget, not that of kernels grading other submissions in parallel. As that
user the ipc folder is made
read-only for the kernel once its sockets exist, so it cannot fill the host disk.

Output is capped on the grader side (``GradingExecute``): beyond ``output_bytes`` per cell
(and eight times that per notebook) outputs are cut and a truncation notice is kept; a cell keeps
its first MAX_ERRORS_PER_CELL (3) error outputs, each cut and counted in the notebook's budget, and
check records are kept up to RECORD_BUDGET (64 MiB) per notebook. What a kernel sends is bounded too
(``GuardedKernelClient``): a frame over ``MAX_FRAME_BYTES`` (64 MiB), or more than the grading
worker's memory limit holds, cuts the kernel's connection, and the cell fails as if the kernel
had died (a message of millions of tiny frames makes ZeroMQ abort the worker instead: the
submission is reported out of memory). A kernel sends its stdout and stderr in messages of at
most ``STREAM_CHUNK_CHARS`` characters and at most ``stream_cap`` per cell, and a displayed value or
error message over ``MAX_FRAME_BYTES`` cut, with a note (``kernel_output_argument``), so an honest
print or value of any size is only truncated, at that cost to the grader. A cell that kills the
kernel (``os._exit``, a segfault, a memory or CPU limit), calls IPython's ``exit()`` (the kernel stops a moment
after the reply, so the grader does not wait to see which later cell it takes down) or
ignores the timeout interrupt is marked as failed,
the kernel is restarted, the earlier cells are replayed quietly, and grading goes on,
so the honest cells after it are still scored (at most ``max_kernel_restarts`` times per
notebook; then the remaining cells are marked failed). A kernel that fails to start is tried
twice more before the notebook counts as not gradable.

Start-up cost is paid once per submission and hidden: with ``fork_server`` (the grading
worker sets it to the submission's folder) one sandbox per submission runs a fork server
(``fork_server.py``) that has imported numpy, torch, matplotlib.pyplot and ipykernel, and
each notebook's kernel is a fresh process forked from it, in its own folder on the
sandbox's tmpfs; the submission's notebooks then share the sandbox's user id, PID
namespace, ``/tmp`` and disk cap, as they share one folder under plain nbgrader. What a
kernel leaves running is killed when it ends. ``GradingExecute.prestart()`` launches the
kernel a notebook will need (same manager class, configuration, working folder and
environment) while the grader is still busy with the previous notebook, and the executor
of that notebook adopts it instead of starting one. Kernels import ``preload_modules``
(numpy, torch, matplotlib.pyplot) while they boot, binding no name in the student's
namespace, so the import cost (nothing, when forked) lands in the kernel's start-up rather
than in the first cell's timeout.

A cell that forks without end is stopped by the grader (``ProcessWatch``): once more than
``max_cell_processes`` (64) live processes run in the kernel's sandbox beside the kernel (and a
fork server's own kernels; zombies, which a kernel never reaps, are not counted) - counted from
the namespace's PID 1, so a bomb of orphans counts too, while the cell runs and, while what it
left keeps growing, after it returned - the namespace's PID 1 is killed, which ends every
process in it at once (the next kernel gets a new sandbox), and the kernel is restarted as after
any death; without a sandbox the kernel's own tree is frozen (SIGSTOP) and killed, and orphans
escape. Residual: CPU time is limited per process, not per sandbox, so until then (the watch
polls four times a second), or in a bomb that stays under that count, the processes burn CPU
beside other submissions' kernels; cgroups would bound that, but need privileges the grader does
not assume. The same goes for kernel memory that no limit here counts and the seccomp filter does
not refuse, measured by a red-team review (2026-12-07, one cell, root grader): socket buffers at the
default size (750 MiB over 96 descriptors; up to MAX_OPEN_FILES in each of the sandbox's
processes, and more in flight as SCM_RIGHTS), empty files on a tmpfs (inodes, not blocks: 745 MiB
of slab for 600,000 files), POSIX file locks (185 MiB a process), epoll and inotify (about 1 GiB a
user id at the system's caps); it is freed when the sandbox ends, and a memory cgroup per sandbox
would bound all of it. What the allow-list shows is readable in full: all of ``/usr`` (nothing secret
belongs in ``/usr/local``), the venv and the base interpreter's prefix (``configure_sandbox``
refuses a bound tree that holds the repository or the course); ``/proc/self/mountinfo`` names
the host paths that are bound.

Public API: ``bwrap_available()``, ``sandbox_problem()``, ``sandbox_remedy()``, ``SandboxLimits``, ``configure_sandbox()``, ``GradingExecute``
(``prestart()``), ``discard_prestarted()``, ``prestarted_kernels()``, ``close_fork_servers()``.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import math
import os
import queue
import re
import shutil
import subprocess
import sys
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import zmq
from jupyter_client.asynchronous import AsyncKernelClient
from jupyter_client.kernelspec import NATIVE_KERNEL_NAME
from jupyter_client.manager import AsyncKernelManager
from jupyter_core.utils import ensure_async, run_sync
from nbclient.exceptions import CellTimeoutError, DeadKernelError
from nbformat.v4 import new_notebook, new_output
from nbgrader.preprocessors import Execute
from traitlets import Bool, Dict, Integer, List, TraitError, Unicode, default, validate
from traitlets.config import Config

from .cells import (KERNEL_DIED, KERNEL_WORDS, NO_KERNEL, NOT_RUN, TOO_MANY_PROCESSES, asks_kernel_to_exit, clipped,
                    cut_middle, nbgrader_meta)
from .course import sqlite_file
from .fork_server import ForkedKernel, ForkServer, ForkServerError, kill_processes

__all__ = ["bwrap_available", "sandbox_problem", "sandbox_remedy", "SandboxLimits", "configure_sandbox", "GradingExecute", "SandboxedKernelManager",
           "discard_prestarted", "prestarted_kernels", "close_fork_servers"]

REPO = Path(__file__).resolve().parent.parent
SANDBOX_UIDS = (200_000, 800_000)  # first id and count of the per-sandbox user ids (root grader)
# the system's program and library trees, shown as on the host (on merged-/usr systems all but
# /usr are symlinks into it); the kernel's root is otherwise empty: nothing else of the host exists
SYSTEM_TREES = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
# the only host configuration kernels read: the dynamic linker's cache, the time zone, and fontconfig's
# (matplotlib lists the system fonts with fc-list); no passwd: the sandbox user has no entry anyway
ETC_FILES = ("/etc/ld.so.cache", "/etc/localtime", "/etc/fonts")
# RLIMIT_NOFILE of a kernel (one holds about 60): the grader's limit, often 20,000 or more, would let a cell pin memory
# that no limit counts in the buffers of that many sockets and pipes (some 0.4 MiB a socket pair at the system's default)
MAX_OPEN_FILES = 256
SECCOMP_FD = "{seccomp-fd}"  # in a sandbox command, the descriptor bwrap reads seccomp_program() from (with_seccomp_fd)
CLONE_NEWUSER = 0x10000000  # <linux/sched.h>
# what the seccomp filter refuses outright (seccomp_program): memory no limit counts (the first five; a red-team review
# held 768 MiB with memfd_secret and 512 MiB of kernel memory in semaphore sets), keys (kept after the sandbox ends),
# then interfaces no notebook uses that are the usual way into the host's kernel
REFUSED_CALLS = ("memfd_create", "memfd_secret", "shmget", "msgget", "semget", "add_key", "request_key", "keyctl",
                 "io_uring_setup", "userfaultfd", "perf_event_open", "fanotify_init", "bpf")
SOL_SOCKET = 1  # <asm-generic/socket.h>: SO_SNDBUF, SO_RCVBUF, SO_SNDBUFFORCE, SO_RCVBUFFORCE
SOCKET_BUFFER_OPTIONS = (7, 8, 32, 33)
RECORD_MIMETYPE = "application/vnd.part-ii.check+json"  # checks.py's record outputs (trusted_checks)
NOTEBOOK_OUTPUT_FACTOR = 8  # a notebook keeps at most this many cells' worth of output
RECORD_BUDGET = 64 * 2**20  # bytes of check records kept per notebook
MAX_ERRORS_PER_CELL = 3  # errors a cell keeps: a kernel sends one per cell, more come from code sending them itself
ERROR_NAME_CHARS = 200  # an exception's name is short; a longer one is a flood
UNEXPECTED_ERROR_CHARS = 10_000  # of the traceback (with its causes) _log_stop logs for an error that is no kernel's end
# what a kernel may send the grader: a larger frame makes ZeroMQ cut the connection (GuardedKernelClient); a cell's
# outputs keep far less (output_bytes), a notebook's check records at most RECORD_BUDGET
MAX_FRAME_BYTES = RECORD_BUDGET
# a request to a kernel whose connection was cut fails after this: sent from outside nbclient's event loop (the
# executor's kernel_info after an interrupt, a replay), it would otherwise block for ever
SEND_TIMEOUT_MS = 10_000
CUT_GRACE = 0.5  # seconds a kernel whose connection dropped has to be seen ending (then it died, and was not cut)
IPC_SOCKETS = ("shell_port", "iopub_port", "stdin_port", "control_port", "hb_port")
KERNEL_INFO_WAIT = 1.0  # seconds a starting kernel has to answer kernel_info before it is asked again (jupyter_client's)
IOPUB_WAIT = 0.2  # seconds for that request's status on IOPub, before asking again (jupyter_client's IOPub check)
# how a kernel's end (or silence) shows while a cell runs; any other exception may be a bug of the grader's own
KERNEL_STOP_ERRORS = (DeadKernelError, CellTimeoutError, TimeoutError, OSError, ForkServerError, zmq.ZMQError,
                      MemoryError)
# what the part-ii notebooks import first: their setup cell (numpy, torch, pyplot), and
# load_cases() of code/part-ii/arithmetic_data.py (jsonschema, sympy: 0.6 s of every notebook).
# jsonschema is imported plainly here: cheap only while requirements.txt pins it below 4.25
# (later versions import rfc3987-syntax, 2.2 s; arithmetic_data guards its own import)
PRELOAD_MODULES = ["numpy", "torch", "matplotlib.pyplot", "jsonschema", "sympy"]
# CPU seconds an ipykernel of its own sandbox may spend starting (importing the preload: ~5 s)
# before its cpu_seconds start to count (format_kernel_cmd)
STARTUP_CPU_SECONDS = 60
INLINE_BACKEND = "module://matplotlib_inline.backend_inline"  # what ipykernel gives matplotlib
MODULE_NAME = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*")
# kernels started ahead of their notebook, by scratch folder (one worker process, one job at a time)
_PRESTARTED: dict[str, AsyncKernelManager] = {}
# fork servers by the real path of their submission's folder
_FORK_SERVERS: dict[str, ForkServer] = {}
_FAILED_FORK_SERVERS: set[str] = set()  # folders whose server could not start (until close_fork_servers())


def cut_error(content: dict) -> dict:
    """An error message's content (or output) cut in place to what grading keeps: name ERROR_NAME_CHARS, value 2,000
    characters, traceback 50 lines of 2,000; returned."""
    traceback = content.get("traceback")
    content["traceback"] = [str(line)[:2000] for line in traceback[:50]] if isinstance(traceback, list) else []
    content["ename"] = str(content.get("ename", ""))[:ERROR_NAME_CHARS]
    content["evalue"] = str(content.get("evalue", ""))[:2000]
    return content


@dataclass(frozen=True)
class SandboxLimits:
    """Per-kernel resource limits; every field is a positive integer (seconds or bytes)."""

    cpu_seconds: int = 300  # CPU time of each process (a kernel's after its start-up), beyond the cell timeout
    memory_bytes: int = 4 * 2**30  # address space; importing torch alone maps ~1.5 GiB
    max_processes: int = 256  # RLIMIT_NPROC: processes and threads of the kernel's user
    file_size_bytes: int = 64 * 2**20  # largest file the kernel may write
    output_bytes: int = 2 * 2**20  # text and display output kept per cell (8 times that per notebook)
    disk_bytes: int = 256 * 2**20  # size of the kernel's private working folder and /tmp

    def __post_init__(self):
        for name, value in asdict(self).items():
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                raise ValueError(f"SandboxLimits.{name} must be a positive integer, got {value!r}")


def _run_as_nobody() -> bool:
    """True when the grader is root, so the kernel must drop to an unprivileged user."""
    return os.geteuid() == 0


PROBE_SECONDS = 30  # a trial run of bwrap takes well under a second; a loaded machine may need more
NO_NAMESPACES = "cannot create the sandbox's namespaces here"


@functools.lru_cache(maxsize=1)
def seccomp_program() -> bytes:
    """The seccomp filter of every sandbox, as the BPF program bwrap's --seccomp loads (compiled by libseccomp).

    It allows every system call but those that hold memory no limit counts, which a cell could pile up
    until the host runs out (REFUSED_CALLS: pages that need not be mapped, so RLIMIT_AS misses them, such
    as a memfd or a detached SysV segment, which belongs to no process the OOM killer could end; SysV
    semaphore sets, 2 MiB of kernel memory each; keys, which outlive the sandbox), a few interfaces no
    notebook needs that are a kernel's usual attack surface, socket buffers raised above the system's
    default, and a new user namespace (clone or unshare with CLONE_NEWUSER; root in one mounts a tmpfs of
    any size, and a root grader's bwrap, unlike an unprivileged one, has no --disable-userns). clone3
    answers ENOSYS, as under Docker's and Flatpak's filters: its flags lie behind a pointer a filter
    cannot read, and glibc then falls back to clone. A system call of another ABI (i386, x32) ends the
    process.
    """
    import errno
    import platform
    import tempfile

    import pyseccomp as seccomp  # raises RuntimeError when the system has no libseccomp

    program = seccomp.SyscallFilter(seccomp.ALLOW)
    program.set_attr(seccomp.Attr.ACT_BADARCH, seccomp.KILL_PROCESS)
    for call in REFUSED_CALLS:
        program.add_rule(seccomp.ERRNO(errno.EPERM), call)
    # clone's flags are its first argument, but on s390 its second (the stack comes first there)
    flags = 1 if platform.machine().startswith("s390") else 0
    program.add_rule(seccomp.ERRNO(errno.EPERM), "clone", seccomp.Arg(flags, seccomp.MASKED_EQ, CLONE_NEWUSER,
                                                                      CLONE_NEWUSER))
    program.add_rule(seccomp.ERRNO(errno.EPERM), "unshare", seccomp.Arg(0, seccomp.MASKED_EQ, CLONE_NEWUSER,
                                                                        CLONE_NEWUSER))
    program.add_rule(seccomp.ERRNO(errno.ENOSYS), "clone3")
    for option in SOCKET_BUFFER_OPTIONS:  # setsockopt(fd, SOL_SOCKET, option, ...)
        program.add_rule(seccomp.ERRNO(errno.EPERM), "setsockopt", seccomp.Arg(1, seccomp.EQ, SOL_SOCKET),
                         seccomp.Arg(2, seccomp.EQ, option))
    with tempfile.TemporaryFile() as fh:
        program.export_bpf(fh)
        fh.seek(0)
        return fh.read()


@contextlib.contextmanager
def with_seccomp_fd(cmd: list[str]):
    """Yield (cmd with SECCOMP_FD replaced by a pipe's read end holding seccomp_program(), the fds to pass to Popen);
    cmd and () when it has no SECCOMP_FD. The pipe is closed on leaving: bwrap has read it by then."""
    if SECCOMP_FD not in cmd:
        yield cmd, ()
        return
    read, write = os.pipe()
    try:
        with os.fdopen(write, "wb") as fh:  # a few hundred bytes: far below a pipe's 64 KiB, so this never blocks
            fh.write(seccomp_program())
        yield [str(read) if arg == SECCOMP_FD else arg for arg in cmd], (read,)
    finally:
        os.close(read)


def _seccomp_problem() -> str | None:
    """Why the seccomp filter cannot be compiled here, or None."""
    try:
        seccomp_program()
    except ImportError as exc:
        return f"pyseccomp is not installed in this Python ({clipped(str(exc))})"
    except (RuntimeError, OSError, ValueError) as exc:  # ValueError: a libseccomp too old to know a call's name
        return f"libseccomp (libseccomp2) is not usable: {clipped(str(exc))}"
    return None


@functools.lru_cache(maxsize=1)
def sandbox_problem() -> str | None:
    """Why student code cannot be sandboxed here (what is missing or failing), or None when it can."""
    for tool, package in (("bwrap", "bubblewrap"), ("prlimit", "util-linux")):
        if shutil.which(tool) is None:
            return f"{tool} ({package}) is not installed"
    if _run_as_nobody() and shutil.which("setpriv") is None:
        return "setpriv (util-linux) is not installed, and the grader runs as root: kernels could not drop to an " \
               "unprivileged user"
    if problem := _seccomp_problem():
        return problem
    probe = ["bwrap", *_namespace_options(), "--unshare-net", "--unshare-pid", "--tmpfs", "/",
             *_host_view(list(SYSTEM_TREES)), "--dev", "/dev", "--proc", "/proc", "--die-with-parent",
             "--seccomp", SECCOMP_FD, *_drop_to_nobody(), "true"]
    try:
        with with_seccomp_fd(probe) as (probe, fds):
            done = subprocess.run(probe, capture_output=True, text=True, timeout=PROBE_SECONDS, pass_fds=fds)
    except subprocess.TimeoutExpired:
        return f"bubblewrap (bwrap) did not finish a trial run within {PROBE_SECONDS} s"
    except (OSError, subprocess.SubprocessError) as exc:
        return f"bubblewrap (bwrap) could not be run ({getattr(exc, 'strerror', None) or type(exc).__name__})"
    if done.returncode != 0:
        said = done.stderr.strip().splitlines()
        return (f"bubblewrap (bwrap) {NO_NAMESPACES}"
                + (f" ({said[-1][:300]})" if said else f" (exit code {done.returncode})"))
    return None


def sandbox_remedy(problem: str) -> str:
    """What to do about a sandbox_problem(), as a sentence: the package to install, or where bubblewrap works."""
    if "(bubblewrap) is not installed" in problem:
        return "Install it as root (`apt-get install bubblewrap`, or `make sysdeps-demo`)"
    if "(util-linux) is not installed" in problem:
        return "Install it as root (`apt-get install util-linux`)"
    if "(libseccomp2) is not usable" in problem:
        return "Install or upgrade it as root (`apt-get install libseccomp2`, or `make sysdeps-demo`)"
    if problem.startswith("pyseccomp is not installed"):
        return "Install the pinned requirements (`make venv`, or `pip install -r requirements.txt -c constraints.txt`)"
    if NO_NAMESPACES in problem:
        where = ("where bubblewrap may create namespaces" if os.geteuid() == 0 else
                 "as root or where unprivileged user namespaces are allowed")
        return f"Grade {where} (a container may need --privileged or a seccomp profile that permits them)"
    return "Check that `bwrap --version` runs here, then try again"


def bwrap_available() -> bool:
    """Return True when bubblewrap exists and can create the namespaces the sandbox needs."""
    return sandbox_problem() is None


def _namespace_options() -> list[str]:
    """bwrap options for users and capabilities: unprivileged userns, or root dropping to nobody."""
    if _run_as_nobody():
        # privileged bwrap keeps every capability unless told otherwise; keep only what
        # setpriv needs to become nobody (which then clears them all)
        return ["--cap-drop", "ALL", "--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID"]
    return ["--unshare-user", "--disable-userns"]


def _is_ipykernel(cmd: list[str]) -> bool:
    """True when cmd starts an ipykernel: some python -m ipykernel_launcher ..."""
    return len(cmd) > 3 and cmd[1:3] == ["-m", "ipykernel_launcher"]


def cpu_limit_argument(cpu_seconds: int) -> str:
    """The ipykernel option whose start-up line sets RLIMIT_CPU to the CPU time used so far plus cpu_seconds.

    Run after every other start-up line (the preload). Lowering a limit needs no privilege; the
    kernel cannot raise it again. It binds no name in the student's namespace.
    """
    code = ("if True: (lambda r, n: r.setrlimit(r.RLIMIT_CPU, (n, n)))(__import__('resource'), "
            f"int(sum(__import__('resource').getrusage(0)[:2])) + 1 + {int(cpu_seconds)})")
    return f"--IPKernelApp.exec_lines={code}"


# A kernel's stdout and stderr send what was written since their last flush (every 0.2 s) as one message, and the
# grader cuts a kernel whose message passes MAX_FRAME_BYTES; and whatever a kernel sends, the grader receives and
# decodes before its output budget drops it. Run in the kernel at start-up, this makes each flush send its text in
# messages of at most STREAM_CHUNK_CHARS characters (at most 6 bytes of JSON each), and each stream send at most
# stream_cap(output_bytes) characters per request (a cell): more than the grader keeps, so the grader still truncates
# and says so, but an honest print of any size costs the grader that much at most. It wraps
# OutStream._flush_buffers (ipykernel 7: the (parent header, text) pairs one flush sends), not write: IPython's
# run_cell puts a bound write of its own on the stream object, which would bypass the class's.
STREAM_CHUNK_CHARS = 2**20
STREAM_CHUNKS_SOURCE = """
import sys

import ipykernel.iostream


def in_chunks(flush_buffers, chunk, cap):
    '''OutStream._flush_buffers whose texts go out in pieces of at most `chunk` characters, and at most `cap`
    characters per request: the rest is dropped.'''
    def flush_buffers_in_chunks(self):
        sent = self.__dict__.setdefault("_chars_sent", {})  # request's msg_id -> characters sent for it
        for parent, text in flush_buffers(self):
            request = parent.get("msg_id")
            if request not in sent and len(sent) >= 16:
                sent.clear()
            text = text[:max(cap - sent.get(request, 0), 0)]
            sent[request] = sent.get(request, 0) + len(text)
            for start in range(0, len(text), chunk):
                yield parent, text[start:start + chunk]

    flush_buffers_in_chunks.chunked = True
    return flush_buffers_in_chunks


OutStream = ipykernel.iostream.OutStream
if not hasattr(OutStream, "_flush_buffers"):
    print("autograder: this ipykernel has no OutStream._flush_buffers; output is not sent in chunks",
          file=sys.__stderr__)
elif not getattr(OutStream._flush_buffers, "chunked", False):
    OutStream._flush_buffers = in_chunks(OutStream._flush_buffers, CHUNK, CAP)
"""

# One displayed value or error over MAX_FRAME_BYTES is a single message that no chunking splits (a huge string left as
# a cell's last line, raise ValueError(huge)): the grader would cut the kernel for it, and the cell would fail as
# KernelDied. Run in the kernel at start-up too, this sends such a message with its long values cut and a note instead:
# a display keeps the start of its plain text (a check's record its kind and label, so its check fails as a value it
# could not compare), an error (or an execute reply) its name and the start of its message and traceback, so the cell
# fails or passes by its own error and the kernel lives on. It wraps Session.serialize, which every message passes; a
# message of another type, one still over after the cut, or one the cut cannot read, is sent as it is.
MESSAGE_KEEP_CHARS = 2**16  # of each long string kept (at most 6 bytes of JSON each), the traceback's first 49 lines
MESSAGE_CAP_SOURCE = """
import functools

import jupyter_client.session

DISPLAYS = ("display_data", "execute_result", "update_display_data")
REPLIES = ("error", "execute_reply")


def within(content, msg_type, keep, note):
    '''content with its long values cut to `keep` characters and the note added (first in an error's message and
    within the traceback's first 50 lines, which the grader keeps of them).'''
    if msg_type in DISPLAYS:
        data = content.get("data", {})
        record = data.get(RECORD)
        if isinstance(record, dict):  # a check's record: its kind and label go on, its values are no longer there
            return {**content, "data": {RECORD: {"kind": str(record.get("kind"))[:100],
                                                 "label": str(record.get("label"))[:keep],
                                                 "actual": {"unsupported": "a value too large to send"}}},
                    "metadata": {}}
        text = data.get("text/plain")
        text = text[:keep] + "\\n" if isinstance(text, str) and text else ""
        return {**content, "data": {"text/plain": text + note}, "metadata": {}}
    cut = {key: str(content[key])[:keep] for key in ("ename", "evalue") if key in content}
    if "evalue" in cut:
        cut["evalue"] = note + "\\n" + cut["evalue"]
    if isinstance(content.get("traceback"), list):
        cut["traceback"] = [str(line)[:keep] for line in content["traceback"][:49]] + [note]
    cut.update({key: empty for key, empty in (("payload", []), ("user_expressions", {})) if key in content})
    return {**content, **cut}


def capped(serialize, limit, keep):
    '''Session.serialize that sends a display or error message with a frame over `limit` bytes cut (within).'''
    @functools.wraps(serialize)
    def serialize_capped(self, msg, ident=None):
        frames = serialize(self, msg, ident)
        size = max(map(len, frames))
        msg_type = (msg.get("header") or {}).get("msg_type")
        if size <= limit or msg_type not in DISPLAYS + REPLIES or not isinstance(msg.get("content"), dict):
            return frames
        note = (f"[the kernel cut this output: {size / 2**20:.1f} MiB, more than one message to the grader may "
                f"hold ({limit // 2**20} MiB)]")
        try:
            return serialize(self, {**msg, "content": within(msg["content"], msg_type, keep, note)}, ident)
        except Exception:  # content of a shape no kernel sends (data that is no dict): as it is, the grader cuts it
            return frames

    serialize_capped.capped = True
    return serialize_capped


Session = jupyter_client.session.Session
if not getattr(Session.serialize, "capped", False):
    Session.serialize = capped(Session.serialize, LIMIT, KEEP)
"""


def stream_cap(output_bytes: int) -> int:
    """Characters a kernel's stream sends per cell at most: twice the cell's output budget (bytes), and a chunk."""
    return max(2 * output_bytes, STREAM_CHUNK_CHARS)


def kernel_output_argument(output_bytes: int) -> str:
    """The ipykernel option whose start-up line makes the kernel's stdout and stderr send at most STREAM_CHUNK_CHARS
    characters per message and stream_cap(output_bytes) per cell (STREAM_CHUNKS_SOURCE), and send a display or
    error message over MAX_FRAME_BYTES cut (MESSAGE_CAP_SOURCE); each runs in a namespace of its own, so the
    student's gains no name."""
    chunks = f"CHUNK, CAP = {STREAM_CHUNK_CHARS}, {stream_cap(output_bytes)}\n{STREAM_CHUNKS_SOURCE}"
    messages = (f"LIMIT, KEEP, RECORD = {MAX_FRAME_BYTES}, {MESSAGE_KEEP_CHARS}, {RECORD_MIMETYPE!r}\n"
                f"{MESSAGE_CAP_SOURCE}")
    return f"--IPKernelApp.exec_lines=if True: exec({chunks!r}, {{}}); exec({messages!r}, {{}})"


def json_prefix(text: str, limit: int) -> str:
    """The longest prefix of text whose JSON form (json.dumps: quotes, escapes) is at most limit characters (bytes):
    output budgets count those, and a control or non-ASCII character takes up to 6 of them."""
    lo, hi = 0, min(len(text), limit)
    while lo < hi:  # the JSON form grows with the prefix: bisect for the last length that fits
        mid = (lo + hi + 1) // 2
        lo, hi = (mid, hi) if len(json.dumps(text[:mid])) <= limit else (lo, mid - 1)
    return text[:lo]


def sandbox_uid(scratch: str) -> int:
    """The unprivileged user id a root grader gives the kernel of this scratch folder."""
    import zlib

    first, count = SANDBOX_UIDS
    return first + zlib.crc32(str(scratch).encode()) % count


def _drop_to_nobody(uid: int = 65534) -> list[str]:
    """Command run inside the sandbox that becomes uid with no capabilities (root only)."""
    if not _run_as_nobody():
        return []
    return ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups",
            "--inh-caps=-all", "--no-new-privs", "--"]


def _host_view(read_only: list[str], read_write: tuple[str, ...] = ()) -> list[str]:
    """bwrap arguments that show these host paths at their own place in the sandbox's empty root.

    A symlink is recreated as the same symlink (/bin -> usr/bin); a read-only path that is
    absent here (/lib32) or inside a tree shown already is skipped. Missing parents are made
    with mode 0755: those bwrap makes itself are 0700, closed to the kernel's user.
    """
    args, shown, made = [], [], set()
    for option, path in [*(("--ro-bind", p) for p in read_only), *(("--bind", p) for p in read_write)]:
        path = Path(path)
        if option == "--ro-bind" and (not os.path.lexists(path) or any(path.is_relative_to(t) for t in shown)):
            continue
        for parent in reversed(path.parents[:-1]):
            if parent not in made and not any(parent.is_relative_to(t) for t in shown):
                made.add(parent)
                args += ["--perms", "0755", "--dir", str(parent)]
        if path.is_symlink():
            args += ["--symlink", os.readlink(path), str(path)]
        else:
            args += [option, str(path), str(path)]
            shown.append(path)
    return args


def sandbox_path(path: str) -> str:
    """path as the sandbox shows it: the venv is bound at its real path, so a path through a symlink to the venv's
    folder (.venv -> /opt/venvs/course) is rewritten to go through the real folder (the symlink is not there)."""
    prefix, real = Path(sys.prefix), Path(sys.prefix).resolve()
    if prefix != real and Path(path).is_relative_to(prefix):
        return str(real / Path(path).relative_to(prefix))
    return str(path)


def _interpreter_paths() -> list[Path]:
    """Where the kernel's Python lives (real paths): the venv, the base interpreter its python links to, site-packages."""
    import site

    return list(dict.fromkeys(Path(p).resolve() for p in [sys.prefix, sys.base_prefix, *site.getsitepackages()]))


def _course_paths(config: Config) -> list[Path]:
    """The course build folder and a SQLite gradebook's folder named in the nbgrader config (and PART_II_BUILD)."""
    paths = []
    root = config.CourseDirectory.get("root")
    if root:
        paths.append(Path(str(root)))
    gradebook = sqlite_file(str(config.CourseDirectory.get("db_url") or "sqlite://"))  # escapes undone: ? # % …
    if gradebook is not None:
        paths.append(gradebook.parent)
    build = os.environ.get("PART_II_BUILD")
    if build:
        paths.append(Path(build))
    return paths


def _check_nothing_secret_shown(shown: list[Path], config: Config) -> None:
    """Refuse a bound tree that holds the repository (solutions, hidden tests) or the course (gradebook, submissions)."""
    secrets = [REPO, *_course_paths(config)]
    # the instructor's notebooks, and grade's cache of their expected values (REPO/build/cache by default)
    for extra in (config.CourseDirectory.get("source_directory"), os.environ.get("PART_II_CACHE")):
        if extra:
            secrets.append(Path(str(extra)))
    # resolved, as bwrap binds them: /bin -> usr/bin shows what /usr/bin holds
    exposed = [f"{tree} holds {secret}" for tree in shown for secret in secrets
               if secret.resolve().is_relative_to(tree.resolve())]
    if exposed:
        raise ValueError(f"the sandbox would show the course or the repository to student code: {'; '.join(exposed)}")


def _part_ii_root(readable: list[Path]) -> str:
    """The folder that holds code/part-ii among the readable paths ('' when none does)."""
    for path in readable:
        if path.name == "part-ii" and path.parent.name == "code":
            return str(path.parent.parent)
    return ""


def configure_sandbox(config: Config, scratch: Path, readable: list[Path], limits: SandboxLimits,
                      fork_server: Path | None = None) -> None:
    """Make nbgrader's autograde run each kernel in bubblewrap, writing only under scratch.

    fork_server: the submission's folder (scratch's parent, shared by its notebooks): kernels
    are then forked from one fork server in one sandbox for the folder, with their ipc and
    working folders inside it, instead of each getting a sandbox and an interpreter of its own.
    Used only when the grader is root (the kernels then run as a user of their own); otherwise
    every kernel gets a sandbox of its own.
    """
    if not isinstance(config, Config):
        raise TypeError(f"config must be a traitlets Config, got {type(config).__name__}")
    if not isinstance(limits, SandboxLimits):
        raise TypeError(f"limits must be a SandboxLimits, got {type(limits).__name__}")
    scratch = Path(scratch).resolve()
    if not scratch.is_dir():
        raise ValueError(f"scratch must be an existing folder, got {scratch}")
    if len(str(scratch / "ipc" / "kernel-99999")) > 100:  # unix socket paths are limited to 107 bytes
        raise ValueError(f"scratch path too long for unix sockets ({len(str(scratch))} characters): {scratch}; "
                         "use a folder with a path of at most 80 characters")
    if fork_server is not None:
        fork_server = Path(fork_server).resolve()
        if not scratch.is_relative_to(fork_server) or scratch == fork_server:
            raise ValueError(f"fork_server must be a folder above scratch ({scratch}), got {fork_server}")
    readable = [Path(p).resolve() for p in readable]
    missing = [str(p) for p in readable if not p.exists()]
    if missing:
        raise ValueError(f"readable paths must exist; missing: {', '.join(missing)}")
    problem = sandbox_problem()
    if problem:
        raise RuntimeError(f"{problem}. {sandbox_remedy(problem)}, or grade with --no-sandbox")
    shown = list(dict.fromkeys([*readable, *_interpreter_paths()]))
    _check_nothing_secret_shown([*map(Path, SYSTEM_TREES + ETC_FILES), *shown, fork_server or scratch], config)
    km = config.SandboxedKernelManager
    km.scratch = str(scratch)
    # only with a user id of the sandbox's own: run as the grader's user, a kernel would own the
    # submission's folder (logs, connection files) that the grader writes into
    km.fork_server = str(fork_server) if fork_server is not None and _run_as_nobody() else ""
    km.readable = [str(p) for p in shown]
    km.cpu_seconds = limits.cpu_seconds
    km.memory_bytes = limits.memory_bytes
    km.max_processes = limits.max_processes
    km.file_size_bytes = limits.file_size_bytes
    km.disk_bytes = limits.disk_bytes
    env = dict(km.get("setenv", {}))
    root = _part_ii_root(readable)
    if root:
        env["PART_II_ROOT"] = root
    km.setenv = env
    config.GradingExecute.output_bytes = limits.output_bytes
    config.GradingExecute.sandboxed = True
    use_grading_execute(config)


def use_grading_execute(config: Config) -> None:
    """Replace nbgrader's Execute with GradingExecute in the autograde preprocessor list."""
    from nbgrader.converters import Autograde

    current = config.Autograde.get("autograde_preprocessors") or Autograde().autograde_preprocessors
    config.Autograde.autograde_preprocessors = [GradingExecute if p is Execute else p for p in list(current)]


async def _next_reply(channel, asked: set[str], seconds: float, msg_type: str | None = None) -> dict | None:
    """The next message on channel answering one of the requests asked (of msg_type, when given), read for at most
    seconds; None when none came. Messages about other requests are dropped, as nbclient drops them."""
    end = time.monotonic() + seconds
    while (left := end - time.monotonic()) > 0:
        try:
            msg = await channel.get_msg(timeout=left)
        except queue.Empty:
            return None
        if msg.get("parent_header", {}).get("msg_id") in asked and msg_type in (None, msg.get("msg_type")):
            return msg
    return None


class ReadyKernelClient(AsyncKernelClient):
    """AsyncKernelClient whose wait_for_ready returns as soon as the kernel is seen to answer and to publish.

    jupyter_client's then reads IOPub until it has been silent for 0.2 s, which cost every graded
    notebook 0.2 s of idle time. Nothing needs that flush: nbclient takes from IOPub only the
    messages of its own requests.
    """

    async def wait_for_ready(self, timeout: float | None = None) -> None:
        """Ask kernel_info until its reply comes on shell and a status of that request on IOPub (a subscription not
        yet connected misses it: ask again); RuntimeError when the kernel dies, or after timeout seconds."""
        deadline = time.monotonic() + (math.inf if timeout is None else timeout)
        asked: set[str] = set()
        while True:
            asked.add(self.kernel_info())
            reply = await _next_reply(self.shell_channel, asked, KERNEL_INFO_WAIT, "kernel_info_reply")
            if reply is not None and await _next_reply(self.iopub_channel, asked, IOPUB_WAIT) is not None:
                self._handle_kernel_info_reply(reply)
                return
            if not await self._async_is_alive():
                raise RuntimeError("Kernel died before replying to kernel_info")
            if time.monotonic() > deadline:
                raise RuntimeError(f"Kernel didn't respond in {timeout:g} seconds")


def guarded(context):
    """context (a zmq Context), its sockets given ZMQ_MAXMSGSIZE and ZMQ_SNDTIMEO as they are created, before they
    connect: ZeroMQ applies ZMQ_MAXMSGSIZE at connect(), and set later it does nothing."""
    context.setsockopt(zmq.MAXMSGSIZE, MAX_FRAME_BYTES)
    context.setsockopt(zmq.SNDTIMEO, SEND_TIMEOUT_MS)
    return context


class GuardedKernelClient(ReadyKernelClient):
    """Kernel client over connections a kernel cannot use to make grading hold unbounded memory, or to block it.

    A frame over MAX_FRAME_BYTES makes ZeroMQ drop the connection for good, and a request sent on a dropped
    connection fails after SEND_TIMEOUT_MS instead of waiting for ever (guarded). Frames under that size (a message's
    buffers, a flood of messages) are bounded by the grading worker's memory limit (worker.limit_memory): ZeroMQ
    drops the connection when it cannot allocate a message, or Python raises MemoryError; where ZeroMQ cannot
    recover (millions of tiny frames), it aborts the worker, and the submission is reported out of memory. A monitor
    on each channel notes a drop, and is_alive() is then False: nbclient ends the cell as a dead kernel's at its next
    check (each second), and GradingExecute._connection_cut names the cause.
    """

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self._monitors: dict = {}  # channel -> monitor socket reporting the connection's drop
        self._lost = ""

    def _context_default(self):
        """jupyter_client's context for this client, guarded."""
        return guarded(super()._context_default())

    def _create_connected_socket(self, channel, identity=None):
        """Connect as jupyter_client does, then watch the connection for a drop (the heartbeat makes its own sockets
        and reconnects by itself). A drop before the monitor exists would need the kernel to send on a connection
        whose handshake is not done yet."""
        sock = super()._create_connected_socket(channel, identity=identity)
        self._monitors[channel] = sock.get_monitor_socket(zmq.EVENT_DISCONNECTED)
        return sock

    def lost_channel(self) -> str:
        """The first channel whose connection has dropped ('' while none has): the kernel ended, or ZeroMQ cut it."""
        if not self._lost:
            self._lost = next((name for name, monitor in self._monitors.items()
                               if not monitor.closed and monitor.get(zmq.EVENTS) & zmq.POLLIN), "")
        return self._lost

    async def _async_is_alive(self) -> bool:
        """False once a channel's connection dropped (the kernel can no longer be heard or asked), else as the
        manager sees the kernel's process."""
        return not self.lost_channel() and await super()._async_is_alive()

    is_alive = _async_is_alive  # AsyncKernelClient binds is_alive to KernelClient's method, which this would not change


class SandboxedKernelManager(AsyncKernelManager):
    """AsyncKernelManager that starts the kernel in bubblewrap and talks to it over ipc."""

    scratch = Unicode("", help="per-submission folder: ipc sockets, connection file, log").tag(config=True)
    readable = List(Unicode(), help="paths bound read-only at their own path, besides the system trees"
                    ).tag(config=True)
    setenv = Dict(help="extra environment variables for the kernel").tag(config=True)
    cpu_seconds = Integer(SandboxLimits.cpu_seconds).tag(config=True)
    memory_bytes = Integer(SandboxLimits.memory_bytes).tag(config=True)
    max_processes = Integer(SandboxLimits.max_processes).tag(config=True)
    file_size_bytes = Integer(SandboxLimits.file_size_bytes).tag(config=True)
    disk_bytes = Integer(SandboxLimits.disk_bytes).tag(config=True)
    fork_server = Unicode("", help="the submission's folder: when set, kernels are forked from one fork server "
                                   "in one sandbox per folder (fork_server.py); '' starts a sandbox per kernel"
                          ).tag(config=True)
    fork_server_modules = List(Unicode(), default_value=PRELOAD_MODULES,
                               help="modules the fork server imports once for all its kernels").tag(config=True)

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        if not self.scratch:
            raise ValueError("SandboxedKernelManager.scratch is not set; call configure_sandbox() first")
        self.client_factory = GuardedKernelClient
        self.transport = "ipc"
        self.ipc_dir.mkdir(parents=True, exist_ok=True)
        (Path(self.scratch) / "work").mkdir(exist_ok=True)  # mount point of the private tmpfs
        # absolute: nbgrader changes directory; one kernel per scratch folder at a time
        self.ip = str(self.ipc_dir / "kernel")
        self.connection_file = str(self.ipc_dir / "kernel.json")

    def _context_default(self):
        """jupyter_client's context for this manager (its control socket: interrupts), guarded."""
        return guarded(super()._context_default())

    @property
    def ipc_dir(self) -> Path:
        """Folder shared with the kernel: connection file and ipc sockets."""
        return Path(self.scratch) / "ipc"

    def write_connection_file(self, **kwargs):
        """Write the connection file (jupyter_client also rewrites it after a launch whose ports differ); without a fork
        server, hand it to the kernel's user at once."""
        super().write_connection_file(**kwargs)
        if not self.fork_server:
            self._let_kernel_read_connection_file()

    def _let_kernel_read_connection_file(self) -> None:
        """Hand the connection file to the unprivileged user of a kernel in a sandbox of its own (which binds no other
        kernel's folder). A forked kernel gets its connection with the fork request instead: its sandbox is the whole
        submission's, where the notebook being graded runs as the same user, and the key must stay the grader's."""
        if _run_as_nobody():
            os.chown(self.connection_file, self.uid, self.uid)

    @property
    def uid(self) -> int:
        """The user id the kernel runs as when the grader is root (one per sandbox)."""
        return sandbox_uid(self.fork_server or self.scratch)

    async def _async_interrupt_kernel(self) -> None:
        """Interrupt by an interrupt_request on the control channel: ipykernel then signals itself.

        The default, SIGINT to the kernel's process group, reaches bwrap, which dies of it and
        takes the kernel along: every timed-out cell would cost a restart and a replay.
        """
        if not self.has_kernel:
            raise RuntimeError("Cannot interrupt kernel. No kernel is running!")
        self._connect_control_socket()
        self.session.send(self._control_socket, self.session.msg("interrupt_request", content={}))

    interrupt_kernel = run_sync(_async_interrupt_kernel)

    def format_kernel_cmd(self, extra_arguments=None):
        """Wrap the kernel spec's command in setpriv/bwrap/prlimit (bare when the fork server will fork it).

        An ipykernel of its own sandbox starts with STARTUP_CPU_SECONDS more CPU time and, after its
        start-up lines (the preload's imports, seconds of CPU), lowers its limit to what it used plus
        cpu_seconds: the notebook gets the whole limit, as a kernel forked from a fork server does.
        """
        cmd = super().format_kernel_cmd(extra_arguments)
        return cmd if self._forkable(cmd) else self._in_own_sandbox(cmd)

    def _in_own_sandbox(self, cmd: list[str]) -> list[str]:
        """The kernel command cmd run in a sandbox of its own (its CPU limit counted from after start-up)."""
        cmd = [sandbox_path(cmd[0]), *cmd[1:]]
        if _is_ipykernel(cmd):
            return self.sandbox_prefix(STARTUP_CPU_SECONDS) + cmd + [cpu_limit_argument(self.cpu_seconds)]
        return self.sandbox_prefix() + cmd

    def _forkable(self, cmd: list[str]) -> bool:
        """True when the fork server can start this kernel: fork_server set and cmd is this Python's ipykernel."""
        return (bool(self.fork_server) and os.path.realpath(self.fork_server) not in _FAILED_FORK_SERVERS
                and _is_ipykernel(cmd) and os.path.realpath(cmd[0]) == os.path.realpath(sys.executable))

    def sandbox_prefix(self, extra_cpu_seconds: int = 0) -> list[str]:
        """The command that precedes the kernel's own argv (bwrap options, then prlimit with extra CPU seconds)."""
        return self._sandbox_command(Path(self.scratch) / "work", str(self.ipc_dir), self.uid,
                                     extra_cpu_seconds=extra_cpu_seconds)

    def fork_server_prefix(self) -> list[str]:
        """The sandbox of the submission's fork server: its folder bound (every notebook's ipc), one tmpfs.

        MPLBACKEND as ipykernel sets it in a kernel it starts: the server imports pyplot before
        any kernel exists, and matplotlib reads the variable only when it is imported.
        """
        return self._sandbox_command(Path(self.fork_server) / "work", self.fork_server, self.uid,
                                     {"MPLBACKEND": INLINE_BACKEND})

    def _sandbox_command(self, work: Path, bound: str, uid: int, extra_env: dict | None = None,
                         extra_cpu_seconds: int = 0) -> list[str]:
        """bwrap (an empty root showing the system, the interpreter and readable paths read-only, bound
        read-write, a private tmpfs at work as cwd and HOME), setpriv to uid, prlimit."""
        work = str(work)
        venv = sandbox_path(sys.prefix)
        env = {
            "PATH": f"{venv}/bin:/usr/local/bin:/usr/bin:/bin",
            "HOME": work,
            "TMPDIR": "/tmp",
            "LANG": "C.UTF-8",
            "USER": "student",  # the sandbox user has no passwd entry; getpass.getuser() reads this
            "LOGNAME": "student",
            "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1"),
            "PYTHONHASHSEED": os.environ.get("PYTHONHASHSEED", "0"),
            "PYTHONDONTWRITEBYTECODE": "1",
            "MPLCONFIGDIR": f"{work}/.matplotlib",
            "IPYTHONDIR": f"{work}/.ipython",
            **(extra_env or {}),
            **{str(k): str(v) for k, v in self.setenv.items()},
        }
        cmd = [
            "bwrap", *_namespace_options(), "--unshare-net", "--unshare-pid",
            "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try", "--die-with-parent", "--clearenv",
            # /dev read-only: a kernel in a user namespace owns bwrap's /dev tmpfs, of no size limit
            "--tmpfs", "/", "--dev", "/dev", "--remount-ro", "/dev", "--proc", "/proc",
            "--perms", "1777", "--size", str(self.disk_bytes), "--tmpfs", "/tmp",
            *_host_view([*SYSTEM_TREES, *ETC_FILES, *self.readable], (bound,)),
            "--perms", "0777", "--size", str(self.disk_bytes), "--tmpfs", work,
            # the root's folders are the grader's, or (user namespace) the kernel's own: no place to write
            "--remount-ro", "/", "--chdir", work, "--seccomp", SECCOMP_FD,
        ]
        for key, value in env.items():
            cmd += ["--setenv", key, value]
        cmd += ["--", *_drop_to_nobody(uid)]
        cmd += [
            "prlimit", f"--cpu={self.cpu_seconds + extra_cpu_seconds}", f"--as={self.memory_bytes}",
            f"--nproc={self.max_processes}", f"--fsize={self.file_size_bytes}", f"--nofile={MAX_OPEN_FILES}",
            "--core=0", "--",
        ]
        return cmd

    async def _async_launch_kernel(self, kernel_cmd, **kw):
        """Open the ipc folder to the kernel, send its stdout/stderr to a capped log, launch."""
        self._set_ipc_writable(True)
        if self._forkable(kernel_cmd):
            try:
                return self._fork_kernel(kernel_cmd, kw.get("cwd"))
            except ForkServerError as exc:  # a sandbox of its own, as without a fork server
                self.log.warning("fork server of %s: %s; starting the kernel in a sandbox of its own",
                                 self.fork_server, exc)
                # not again for this submission: a server that cannot start here would fail every kernel, and a new
                # server's sandbox binds this kernel's folder, where the fallback hands its user the connection key
                _FAILED_FORK_SERVERS.add(os.path.realpath(self.fork_server))
                close_fork_servers(self.fork_server)
                kernel_cmd = self._in_own_sandbox(kernel_cmd)
        if self.fork_server:  # not forked after all (a fallback): without a fork server, write_connection_file did it
            self._let_kernel_read_connection_file()
        log = open(Path(self.scratch) / "kernel.log", "ab")  # noqa: SIM115 - the child keeps it
        try:
            kw["stdout"] = log
            kw["stderr"] = subprocess.STDOUT
            kw["stdin"] = subprocess.DEVNULL
            with with_seccomp_fd(kernel_cmd) as (kernel_cmd, kw["pass_fds"]):
                await super()._async_launch_kernel(kernel_cmd, **kw)
        finally:
            log.close()

    def _fork_kernel(self, kernel_cmd: list[str], cwd) -> None:
        """Have the submission's fork server (started on first use) fork this kernel; the provisioner keeps its handle."""
        key = os.path.realpath(self.fork_server)
        for folder in (self.fork_server, self.scratch):  # bound as they are: the kernel's user must pass through
            os.chmod(folder, os.stat(folder).st_mode & 0o7777 | 0o011)
        server = _FORK_SERVERS.get(key)
        if server is None or not server.alive():
            if server is not None:
                server.close()
            work = Path(self.fork_server) / "work"
            work.mkdir(exist_ok=True)  # mount point of the sandbox's tmpfs
            with with_seccomp_fd(self.fork_server_prefix() + [sandbox_path(kernel_cmd[0])]) as (cmd, fds):
                server = _FORK_SERVERS[key] = ForkServer(cmd, list(self.fork_server_modules),
                                                         Path(self.fork_server) / "kernel.log", fds)
        home = str(Path(self.fork_server) / "work" / Path(self.scratch).name)
        info = {k: v.decode() if isinstance(v, bytes) else v for k, v in self.get_connection_info().items()}
        kernel = server.spawn(kernel_cmd[3:], home, {"HOME": home, "IPYTHONDIR": f"{home}/.ipython"}, info)
        provisioner = self.provisioner
        provisioner.process, provisioner.pid, provisioner.pgid = kernel, kernel.pid, None
        provisioner.cwd = cwd or home
        self._reconcile_connection_info(provisioner.connection_info)

    async def _async_post_start_kernel(self, **kw):
        """Once the kernel has bound its sockets, stop it from creating files in the ipc folder.

        A pre-started kernel in a sandbox of its own (``defer_ipc_lock``) is not waited for
        here: its executor calls ``lock_ipc()`` when it adopts the kernel, before any student
        code runs in it. A forked kernel is always waited for (about 0.3 s): its sandbox is
        shared with the notebook being graded, whose code must never find the folder writable.
        """
        await super()._async_post_start_kernel(**kw)
        if self.fork_server or not getattr(self, "defer_ipc_lock", False):
            await self.lock_ipc()

    async def lock_ipc(self) -> None:
        """Wait until the kernel's ipc sockets exist, then make the ipc folder read-only for it (root only).

        Anything else found in the folder (only a process of the sandbox could have put it
        there) is removed.
        """
        if not _run_as_nobody():
            return
        info = self.get_connection_info()
        sockets = [Path(f"{self.ip}-{info[name]}") for name in IPC_SOCKETS]
        for _ in range(600):
            if all(s.exists() for s in sockets) or not await self.is_alive():
                break
            await asyncio.sleep(0.05)
        self._set_ipc_writable(False)
        expected = {s.name for s in sockets} | {Path(self.connection_file).name}
        for entry in self.ipc_dir.iterdir():
            if entry.name not in expected:
                if entry.is_dir() and not entry.is_symlink():
                    shutil.rmtree(entry, ignore_errors=True)
                else:
                    entry.unlink(missing_ok=True)

    def _set_ipc_writable(self, writable: bool) -> None:
        """Let the unprivileged kernel create its sockets, or not (only matters as root)."""
        if _run_as_nobody():
            os.chmod(self.ipc_dir, 0o1733 if writable else 0o755)

    async def _async_cleanup_resources(self, restart: bool = False) -> None:
        """Remove the connection file and the kernel's ipc socket files."""
        await super()._async_cleanup_resources(restart=restart)
        for stale in self.ipc_dir.glob("kernel-*"):
            stale.unlink(missing_ok=True)
        server = _FORK_SERVERS.get(os.path.realpath(self.fork_server)) if self.fork_server else None
        if server is not None:
            server.kill_strays()  # what the ended kernel left running must not run beside the next one


def last_log_line(logs: list[Path], limit: int = KERNEL_WORDS) -> str:
    """The last non-blank line of these log files, the most recently written first (the next one when its
    last lines are blank), cut to limit characters, unprintable ones as '?'; '' when no log has a line.
    A kernel that could not start wrote its reason last; a student's code may write there too."""
    written = sorted((log for log in logs if log.is_file()), key=lambda log: log.stat().st_mtime_ns, reverse=True)
    for log in written:
        with open(log, "rb") as file:  # the tail only: a kernel log may be large
            file.seek(max(0, log.stat().st_size - 8 * limit))
            tail = file.read().decode("utf-8", errors="replace")
        lines = [line.strip() for line in tail.splitlines() if line.strip()]
        if lines:
            return clipped(lines[-1], limit)
    return ""


def kernel_process(km):
    """The kernel's own process (below bwrap when sandboxed), as a psutil.Process, or None."""
    import psutil

    provisioner = getattr(km, "provisioner", None)
    process = getattr(provisioner, "process", None)
    if isinstance(process, ForkedKernel):  # the handle checked against pid reuse
        return process.host_process()
    pid = getattr(provisioner, "pid", None)
    if not pid:
        return None
    try:
        proc = psutil.Process(pid)
        while Path(proc.cmdline()[0]).name == "bwrap":  # outer bwrap, then bwrap as PID 1 of the namespace
            # the oldest child: what the kernel left behind when it forked and exited is PID 1's child too
            proc = min(proc.children(), key=lambda child: child.create_time())
        return proc
    except (psutil.Error, IndexError, ValueError):  # gone, not ours to read, or not the expected shape
        return None


def sandbox_init(kernel, server: ForkServer | None):
    """The PID 1 of the kernel's PID namespace (bwrap), as a psutil.Process; None without a sandbox or once gone."""
    import psutil

    try:
        if server is not None:
            host = server.server_process()
            return host.parent() if host is not None else None
        parent = kernel.parent() if kernel is not None else None
        return parent if parent is not None and parent.name() == "bwrap" else None
    except psutil.Error:
        return None


def fork_server_of(km) -> ForkServer | None:
    """The fork server the manager's kernel was forked from (None: a kernel of its own sandbox, or none)."""
    if not isinstance(getattr(getattr(km, "provisioner", None), "process", None), ForkedKernel):
        return None
    return _FORK_SERVERS.get(os.path.realpath(km.fork_server))


def kill_kernel_children(km) -> int:
    """SIGKILL every process the kernel started (a failed cell's workers, a fork bomb); return how many.

    An interrupt or an exception stops the cell in the kernel only: forked copies of it would
    go on burning CPU, and reading the kernel's sockets, through the rest of the notebook.
    Those below the kernel, and in a sandbox also those that were orphaned (a copy that forked
    and exited leaves its child to the namespace's PID 1): all in the sandbox but the kernels.
    """
    import psutil

    server = fork_server_of(km)
    if server is not None:
        return server.kill_strays(end_sandbox=False)
    kernel = kernel_process(km)
    if kernel is None:
        return 0
    root = sandbox_init(kernel, None) or kernel
    try:
        processes = [p for p in root.children(recursive=True) if p.pid != kernel.pid]
    except psutil.Error:
        return 0
    return kill_processes(processes)


def child_pids(pid: int) -> list[int]:
    """Pids of pid's children (those of every thread), from /proc/<pid>/task/<tid>/children; [] once it ended."""
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return []
    children = []
    for tid in tasks:
        try:
            with open(f"/proc/{pid}/task/{tid}/children", encoding="ascii") as listing:
                children += [int(c) for c in listing.read().split()]
        except (OSError, ValueError):
            continue  # the thread or the process ended meanwhile
    return children


def has_ended(pid: int) -> bool:
    """True when pid is a zombie (ended, not reaped yet by its parent) or gone, from /proc/<pid>/stat."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except (OSError, IndexError):
        return True


def count_descendants(pid: int, limit: int, skip: frozenset[int] | set[int] = frozenset()) -> int:
    """How many live processes are below pid, those in skip not counted (their children are), up to limit + 1.

    Reads /proc along the tree, so the cost follows the kernel's processes, not the machine's
    (psutil's children() reads every process): cheap enough to poll while a cell runs. Zombies are
    not counted: a kernel never reaps what its cells forked, and those that ended (or were killed
    after a failed cell) use no CPU and fork nothing, however many a notebook leaves.
    """
    count, queue = 0, [pid]
    while queue and count <= limit:
        children = [child for child in child_pids(queue.pop()) if not has_ended(child)]
        count += sum(1 for child in children if child not in skip)
        queue += children
    return min(count, limit + 1)


def freeze_and_kill(kernel) -> int:
    """SIGSTOP the kernel and every process below it, then SIGKILL them all; return how many.

    Stopped first because a stopped process cannot fork: killed one by one while the others
    run, a fork bomb's survivors refill the process budget as fast as it is freed.
    """
    import psutil

    frozen: dict[int, psutil.Process] = {}
    fresh = [kernel]
    deadline = time.monotonic() + 2.0  # a process in uninterruptible sleep stops late: not worth waiting for
    while fresh:
        for proc in fresh:
            try:
                proc.suspend()
            except psutil.Error:
                pass
            frozen[proc.pid] = proc
        for proc in fresh:  # SIGSTOP takes effect when the process is next scheduled: until then it can fork
            while time.monotonic() < deadline and _running_unstopped(proc):
                time.sleep(0.001)
        # listed once stopped: whatever a process forked before it stopped is its child by now
        pids = {pid for proc in fresh for pid in child_pids(proc.pid)} - frozen.keys()
        fresh = []
        for pid in pids:
            try:
                fresh.append(psutil.Process(pid))
            except psutil.Error:
                pass
    return kill_processes(list(frozen.values()))


def _running_unstopped(proc) -> bool:
    """True while proc exists and is neither stopped nor a zombie."""
    import psutil

    try:
        return proc.status() not in (psutil.STATUS_STOPPED, psutil.STATUS_TRACING_STOP, psutil.STATUS_ZOMBIE)
    except psutil.Error:
        return False


STALLED_COUNTS = 2  # counts in a row without growth, past the settle time, after which a cell's leftovers are let be


class ProcessWatch:
    """While a cell runs, stops its kernel once more than `limit` processes run beside it (a fork bomb).

    Counted are the live processes in the kernel's sandbox but the kernel (and a fork server and the
    kernels it forked): from the namespace's PID 1, so also those whose parent exited (a bomb that
    forks and exits leaves orphans, which PID 1 adopts); without a sandbox, those below the kernel.
    Zombies are not counted (count_descendants).
    A thread counts every `interval` seconds while the cell runs, and once more when it ends: a
    cell that returns at once may leave a bomb behind, so while processes the cell left run, the
    count goes on for `settle` seconds (a pool of workers left running costs that once), and
    after that while they keep growing (the limit bounds that; one count without growth, as a
    starved bomb on a loaded machine shows, is not enough to stop counting).
    Past the limit the sandbox's PID 1 is killed, which ends every process of its namespace at
    once (without a sandbox the kernel and its tree are frozen and killed), and `stopped_at`
    says how many processes it found. Without the watch
    a fork bomb spins at the sandbox's process limit until the cell timeout, taking the CPU from
    the kernels grading other submissions beside it.
    """

    def __init__(self, kernel, limit: int, sandbox: ForkServer | None = None, interval: float = 0.25,
                 settle: float = 2.0):
        """kernel: a psutil process (None: nothing to watch); sandbox: the fork server the kernel was forked from."""
        self.kernel, self.limit, self.sandbox, self.interval, self.settle = kernel, limit, sandbox, interval, settle
        self.stopped_at = 0  # processes found when it fired; 0 while it has not
        self._active = kernel is not None and limit > 0
        self._init = sandbox_init(kernel, sandbox) if self._active else None
        self._server_pid = None
        if sandbox is not None and (host := sandbox.server_process()) is not None:
            self._server_pid = host.pid
        self._before = 0
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="process-watch", daemon=True)

    def count(self) -> int:
        """Processes running beside the kernel now (see the class), counted up to limit + 1."""
        skip = {self.kernel.pid}
        if self._server_pid is not None:  # the server and the kernels it forked (the next notebook's, pre-started)
            skip |= {self._server_pid, *self.sandbox.kernel_pids()}
        root = self._init.pid if self._init is not None else self.kernel.pid
        return count_descendants(root, self.limit, skip)

    def __enter__(self) -> "ProcessWatch":
        if self._active:
            self._before = self.count()
            try:
                self._thread.start()
            except RuntimeError:  # no thread to spare in the grader: the count when the cell ends still stands
                pass
        return self

    def __exit__(self, *exc) -> None:
        self._done.set()
        if self._thread.is_alive():
            self._thread.join()
        if self._active and not self.stopped_at:
            self._after()

    def _after(self) -> None:
        """The count when the cell has ended: while processes the cell left run, count again until `settle` is up,
        and after that until STALLED_COUNTS counts in a row found no growth."""
        deadline, previous, stalled = time.monotonic() + self.settle, self._before, 0
        while self.kernel.is_running():
            found = self._count_or_stop()
            if found is None or found <= self._before:
                return  # stopped; or the cell left nothing running
            # once this count ends, the next cell is blamed for a bomb: on a busy machine a bomb's first copy may
            # not run for an interval or two, copies of a kernel that preloaded torch fork slowly, and a growing
            # bomb may get no CPU for one interval
            stalled = stalled + 1 if found <= previous else 0
            if stalled >= STALLED_COUNTS and time.monotonic() >= deadline:
                return  # what the cell left (a pool of workers) has stopped growing
            previous = found
            time.sleep(self.interval)

    def _watch(self) -> None:
        """Count until the cell ends or the kernel does; stop the lot past the limit."""
        while not self._done.wait(self.interval):
            if not self.kernel.is_running() or self._count_or_stop() is None:
                return

    def _count_or_stop(self) -> int | None:
        """Count once: the count, or None when it was past the limit and the lot has been stopped."""
        found = self.count()
        if found > self.limit:
            self._stop(found)
            return None
        return found

    def _stop(self, found: int) -> None:
        """End the sandbox (or, without one, freeze and kill the kernel's tree); note how many processes ran."""
        import psutil

        self.stopped_at = found
        if self._init is None:
            freeze_and_kill(self.kernel)
            return
        try:
            # PID 1 gone, the OS kills its namespace's processes at once: no bomb outruns that. Killed here
            # although kill_sandbox() kills it too: that one finds it through the server, which a cell may
            # have ended before it forked
            self._init.kill()
        except psutil.Error:
            pass
        if self.sandbox is not None:
            self.sandbox.kill_sandbox()  # and the bwrap outside the namespace; the next kernel gets a new server


class GradingExecute(Execute):
    """nbgrader's Execute with an output cap and recovery from kernel death or a stuck cell."""

    output_bytes = Integer(SandboxLimits.output_bytes, help="text/display bytes kept per cell").tag(config=True)
    sandboxed = Bool(False, help="start kernels with SandboxedKernelManager").tag(config=True)
    max_kernel_restarts = Integer(3, help="kernel restarts per notebook before the rest fails").tag(config=True)
    responsive_timeout = Integer(10, help="seconds a kernel has to answer after an interrupt").tag(config=True)
    max_cell_processes = Integer(64, min=0, help="processes that may run beside the kernel in its sandbox (below it "
                                          "without one) while a cell runs; past that the cell's sandbox is ended "
                                          "(a fork bomb); 0: no limit").tag(config=True)
    kernel_env = Dict(help="environment variables added to the kernel's (unsandboxed) environment").tag(config=True)
    scratch = Unicode("", help="working folder of the kernel (the submission's private scratch); also the key "
                               "under which prestart() leaves the kernel for this executor").tag(config=True)
    preload_modules = List(Unicode(), default_value=PRELOAD_MODULES,
                           help="modules a Python kernel imports while it starts, binding no name in the "
                                "student's namespace").tag(config=True)

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        if self.sandboxed:
            self.kernel_manager_class = SandboxedKernelManager

    def create_kernel_manager(self):
        """nbclient's, its clients GuardedKernelClients where they would be plain AsyncKernelClients (no sandbox: a
        student's check, a trusted class), so a cell that sends too much fails there as it does in the sandbox."""
        km = super().create_kernel_manager()
        if km.client_factory is AsyncKernelClient:
            km.client_factory = GuardedKernelClient
        return km

    @default("store_widget_state")
    def _store_widget_state_default(self):
        """Keep no widget state in the graded notebook: a student's comm messages would put any text there, of any
        size (hidden test sources a hook saw, say), with no output budget counting it."""
        return False

    def on_comm_open_jupyter_widget(self, msg):
        """Mimic no widget: nbclient's stand-in for an ipywidgets Output takes the outputs of the cells it captures
        into widget state (which is not kept, and it then fails with KeyError, read as a kernel death), so
        `with out: print(...)` leaves its outputs in the cell that printed them, counted by the output budget."""
        return None

    def _update_display_id(self, display_id, msg):
        """Apply no display update: nbclient would rewrite every earlier output with that display id, in cells the
        output budget has already counted and the hiding of outputs after test cells never looks at again, so an
        update sent from a test cell could carry its hidden inputs into a cell the feedback shows, and many outputs
        sharing one id could each receive a large update. A display with an id is kept as first shown; a new
        display_data reusing the id is still added (and counted) as an output of the cell that sent it."""
        self.log.debug("display update of %r not applied", display_id)

    @default("shutdown_kernel")
    def _shutdown_kernel_default(self):
        """Kill a notebook's kernel once its cells are done ('immediate'): a graded kernel has nothing to save, and
        a graceful shutdown cost every notebook 2.5 s, because ipykernel (with numpy, torch and matplotlib loaded)
        does not exit within the half of shutdown_wait_time jupyter_client waits before it sends SIGTERM."""
        return "immediate"

    def on_cell_executed(self, **kwargs):
        """nbgrader's hook after each cell's reply (it records an error the reply names), and: remember that the cell
        called IPython's exit() or quit() (not exit(keep_kernel=True)).

        The kernel then stops a moment after the reply, while a later cell runs or after it: which
        cell nbclient would blame depends on timing, so grading fails this cell and restarts instead.
        """
        reply = (kwargs.get("execute_reply") or {}).get("content", {})
        if reply.get("status") == "error":
            # nbgrader adds the reply's error when no kept error has its name: cut alike, the names match, and an
            # error it still adds (the cell's own, after MAX_ERRORS_PER_CELL sent by hand) is cut and counted
            cut_error(reply)
        cell = kwargs.get("cell")
        before = len(cell.outputs) if cell is not None else 0
        super().on_cell_executed(**kwargs)
        if cell is not None and len(cell.outputs) > before:
            self._output_used = getattr(self, "_output_used", 0)
            self._charge_error(cell.outputs[-1])
        if asks_kernel_to_exit(kwargs.get("execute_reply")):
            self._exit_requested = True

    @default("error_on_timeout")
    def _error_on_timeout_default(self):
        """The error a timed-out cell shows: the limit, and that the grader (not the student) stopped it."""
        message = f"the cell ran longer than its {self.timeout} s limit and was stopped by the grader"
        return {"ename": "CellTimeoutError", "evalue": message, "traceback": [f"CellTimeoutError: {message}"]}

    async def async_wait_for_reply(self, msg_id, cell=None):
        """nbclient's wait for the reply to msg_id (a replayed cell's, a kernel_info's), its timeout counted on the
        clock: nbclient's counts only the intervals in which the shell channel was silent, so a kernel sending other
        messages there, one a second, kept grading waiting past every time limit. Whether the kernel lives (or its
        connection was cut) is checked between messages too; the timeout is handled as nbclient handles it."""
        timeout = self._get_timeout(cell)
        deadline = time.monotonic() + timeout if timeout else math.inf
        while (left := deadline - time.monotonic()) > 0:
            try:
                msg = await ensure_async(self.kc.shell_channel.get_msg(timeout=min(self.shell_timeout_interval, left)))
            except queue.Empty:
                msg = None
            if msg is not None and msg["parent_header"].get("msg_id") == msg_id:
                return msg
            await self._async_check_alive()
        await self._async_handle_timeout(timeout, cell)
        return None

    wait_for_reply = run_sync(async_wait_for_reply)  # nbclient binds wait_for_reply to its own coroutine

    @validate("preload_modules")
    def _valid_modules(self, proposal):
        """Module names only: they end up in code the kernel runs at start-up."""
        bad = [m for m in proposal["value"] if not MODULE_NAME.fullmatch(m)]
        if bad:
            raise TraitError(f"preload_modules must be dotted module names like 'matplotlib.pyplot', got {bad}")
        return proposal["value"]

    def preload_argument(self) -> str | None:
        """The ipykernel option that imports preload_modules at start-up (None when there are none).

        One statement inside ``if True:`` so IPython displays nothing and sets no ``_``; the
        comprehension's variable is local to it, so the user namespace gains no name.
        """
        if not self.preload_modules:
            return None
        code = (f"if True: [__import__('importlib').import_module(m) for m in "
                f"{tuple(self.preload_modules)!r}]")
        return f"--IPKernelApp.exec_lines={code}"

    async def async_start_new_kernel(self, **kwargs):
        """Start the kernel in the scratch folder, with kernel_env in its environment, its streams sending output in
        chunks and its large messages cut (kernel_output_argument), and the preload."""
        if self.scratch:
            kwargs["cwd"] = self.scratch
        if self.kernel_env:
            kwargs["env"] = {**os.environ, **kwargs.get("env", {}), **self.kernel_env}
        saved = self.extra_arguments
        if getattr(self.km, "ipykernel", False):
            self.extra_arguments = [*saved, kernel_output_argument(self.output_bytes),
                                    *filter(None, [self.preload_argument()])]
        try:
            return await super().async_start_new_kernel(**kwargs)
        finally:
            self.extra_arguments = saved

    # nbclient's start_new_kernel wraps NotebookClient.async_start_new_kernel itself, which
    # would skip the override above (scratch folder, kernel_env, preload): wrap ours
    def start_new_kernel(self, **kwargs):
        """Blocking async_start_new_kernel (this class's, not nbclient's)."""
        return run_sync(self.async_start_new_kernel)(**kwargs)

    # --- kernels started ahead of their notebook --------------------------------------------
    def prestart(self, kernel_name: str = "") -> None:
        """Launch the kernel a later preprocess() in the same scratch folder will adopt; do not wait for it.

        Same kernel manager class, configuration, working folder, environment and arguments
        as preprocess() would use. kernel_name: the kernelspec the notebook will ask for
        ('' for the manager's default); the adopting executor checks it.
        """
        from nbclient import NotebookClient

        if not self.scratch:
            raise ValueError("GradingExecute.scratch is not set; a pre-started kernel is found by its scratch folder")
        discard_prestarted(self.scratch)
        NotebookClient.__init__(self, new_notebook(), None)
        if self.sandboxed:
            self.kernel_manager_class = SandboxedKernelManager
        self.kernel_name = self.kernel_name or kernel_name
        km = self.create_kernel_manager()
        km.defer_ipc_lock = True  # the adopter locks it (SandboxedKernelManager.lock_ipc)
        try:
            self.start_new_kernel()
        except BaseException:
            _shutdown_kernel(km)
            raise
        finally:
            self.km = None
        _PRESTARTED[_prestart_key(self.scratch)] = km

    def _adopt_prestarted(self) -> None:
        """Use the kernel pre-started for this scratch folder if it is alive and the kernel the notebook needs."""
        km = _PRESTARTED.pop(_prestart_key(self.scratch), None) if self.scratch else None
        if km is None:
            return
        wanted = self.kernel_name or self.nb.metadata.get("kernelspec", {}).get("name") or NATIVE_KERNEL_NAME
        usable = isinstance(km, self.kernel_manager_class) and km.kernel_name == wanted
        if usable and run_sync(_alive)(km):
            if isinstance(km, SandboxedKernelManager):
                run_sync(km.lock_ipc)()
            km.defer_ipc_lock = False  # a restart of this manager locks at once again
            self.km = km
            return
        self.log.info("pre-started kernel not used (%s): starting a fresh one",
                      "died" if usable else f"{km.kernel_name!r} instead of {wanted!r}")
        _shutdown_kernel(km)

    # --- output cap -------------------------------------------------------------------
    def output(self, outs, msg, display_id, cell_index):
        """Keep outputs while the notebook's budget lasts; errors and check records always pass."""
        content = msg.get("content", {})
        if getattr(self, "_budget_cell", None) != cell_index:  # a new cell gets its own budget
            self._budget_cell, self._cell_used, self._cell_truncated, self._cell_errors = cell_index, 0, False, 0
        self._output_used = getattr(self, "_output_used", 0)  # JSON bytes kept: a dropped output costs the notebook 0
        if msg.get("msg_type") == "error":
            return self._error_output(outs, msg, display_id, cell_index)
        if RECORD_MIMETYPE in content.get("data", {}):
            size = len(json.dumps(content, default=str))
            self._records_used = getattr(self, "_records_used", 0) + size
            if self._records_used <= RECORD_BUDGET:
                return super().output(outs, msg, display_id, cell_index)
            return None  # a flood of records: the missing ones fail their test cell
        size = len(json.dumps(content, default=str))
        left = min(self.output_bytes - self._cell_used, NOTEBOOK_OUTPUT_FACTOR * self.output_bytes - self._output_used)
        self._cell_used += size  # a cell's budget counts what it sent: its output is kept up to where it ran out
        if size <= left:
            self._output_used += size
            return super().output(outs, msg, display_id, cell_index)
        kept = None
        text = str(content.get("text", "")) if msg.get("msg_type") == "stream" and left > 0 else ""
        if text and (text := json_prefix(text, left - size + len(json.dumps(text)))):
            content["text"] = text  # the part whose message, its name and quotes included, fits what is left
            self._output_used += len(json.dumps(content, default=str))
            kept = super().output(outs, msg, display_id, cell_index)
        if not self._cell_truncated:
            self._cell_truncated = True
            note = new_output("stream", name="stdout", text=(
                f"\n[output truncated: a cell may print {self.output_bytes} bytes, "
                f"a notebook {NOTEBOOK_OUTPUT_FACTOR * self.output_bytes}]\n"))
            outs.append(note)
            return note
        return kept

    def _error_output(self, outs, msg, display_id, cell_index):
        """Keep a cell's first MAX_ERRORS_PER_CELL errors (nbgrader scores by errors: the first fails the cell), each
        cut, and charged to the notebook's budget; once that is spent, an error keeps its name and value's start."""
        self._cell_errors += 1
        if self._cell_errors > MAX_ERRORS_PER_CELL:
            return None  # the cell has failed already
        self._charge_error(cut_error(msg["content"]))
        return super().output(outs, msg, display_id, cell_index)

    def _charge_error(self, error: dict) -> None:
        """Count a kept error (cut_error's) in the notebook's output budget; once that is spent, keep only its name
        and the start of its value."""
        size = len(json.dumps(error, default=str))
        if size > NOTEBOOK_OUTPUT_FACTOR * self.output_bytes - self._output_used:
            error["traceback"], error["evalue"] = [], error["evalue"][:200]
            size = len(json.dumps(error, default=str))
        self._output_used += size

    # --- timeouts and kernel death ------------------------------------------------------
    async def _async_handle_timeout(self, timeout, cell=None):
        """Remember that the cell timed out, then interrupt it as nbgrader does."""
        self._timed_out = True
        return await super()._async_handle_timeout(timeout, cell)

    def preprocess(self, nb, resources=None, km=None):
        """Execute every cell; after a kernel death or a stuck cell, restart, replay, go on."""
        from nbclient import NotebookClient

        NotebookClient.__init__(self, nb, km)
        if self.sandboxed:
            self.kernel_manager_class = SandboxedKernelManager
        if km is None:
            self._adopt_prestarted()  # self.km set, owns_km still True: nbclient shuts it down as its own
        self.reset_execution_trackers()
        self._check_assign_resources(resources)
        self._output_used, self._records_used, self._budget_cell = 0, 0, None
        cells = self.nb.cells
        failed: set[int] = set()
        position, restarts = 0, 0
        startup_failures = 0
        while position < len(cells):
            try:
                with self.setup_kernel():
                    # asked (nbclient waits for this reply), not recorded: a kernel chooses its language_info, whose
                    # lexer names a CSS class of every cell on a page (a restarted kernel's could carry hidden tests)
                    self.wait_for_reply(self.kc.kernel_info())
                    if self._replay(cells[:position], failed):
                        position = self._run_from(position, resources, failed)
            except Exception as exc:  # noqa: BLE001 - e.g. "Kernel died before replying to kernel_info"
                # a kernel that cannot start (a busy machine, a transient limit) gets two more tries
                startup_failures += 1
                if startup_failures > 2:
                    # jupyter_client's words may quote the kernel at any length (an 'Invalid Signature'): the
                    # instructor's summary and the job table get the start of them
                    reason = clipped(str(exc) or type(exc).__name__)
                    raise RuntimeError(f"{NO_KERNEL} ({startup_failures} tries): {reason}") from exc
                time.sleep(2 * startup_failures)
                continue
            if position < len(cells):
                restarts += 1
                if restarts > self.max_kernel_restarts:
                    self._fail_rest(cells[position:], "not run: the kernel died too many times")
                    break
        self.set_widgets_metadata()
        return self.nb, self.resources

    def _run_from(self, start: int, resources, failed: set[int]) -> int:
        """Run cells from start; return the index after the last cell run in this kernel."""
        cells = self.nb.cells
        kernel, server = kernel_process(self.km), fork_server_of(self.km)
        for index in range(start, len(cells)):
            self._timed_out = self._exit_requested = False
            # only a code cell runs anything in the kernel: no watch thread for markdown
            watch = ProcessWatch(kernel if cells[index].cell_type == "code" else None, self.max_cell_processes, server)
            try:
                with watch:
                    self.preprocess_cell(cells[index], resources, index)
            except Exception as err:  # noqa: BLE001 - DeadKernelError, iopub timeouts, broken pipes
                stopped = (self._connection_cut(err)
                           or f"the kernel stopped while running this cell ({type(err).__name__})")
                self._log_stop(cells[index], index, err)
            else:  # a connection cut after the cell's reply came (IOPub's, say) is this cell's doing; exit()'s is not
                stopped = "" if self._exit_requested else self._connection_cut()
            # the watch may fire after the cell's reply came in, before the kernel's death was noticed
            if stopped or watch.stopped_at:
                failed.add(index)
                self._fail_cell(cells[index], self._too_many_processes(watch) or stopped,
                                TOO_MANY_PROCESSES if watch.stopped_at else KERNEL_DIED)
                return index + 1
            if self._exit_requested:
                failed.add(index)
                self._fail_cell(cells[index], "the cell called exit() or quit(), which stops the kernel; "
                                              "the grader restarted it without this cell")
                return index + 1
            if any(out.output_type == "error" for out in cells[index].get("outputs", [])):
                # a cell that failed or timed out may leave forked copies of the kernel running (a fork
                # bomb's, or workers of a loop cut short): they would share its sockets and burn CPU
                kill_kernel_children(self.km)
            if self._timed_out:
                failed.add(index)
                # the KeyboardInterrupt is the grader's interrupt, not the student's Ctrl-C: the timeout error says it
                cells[index].outputs = [o for o in cells[index].get("outputs", [])
                                        if not (o.output_type == "error" and o.get("ename") == "KeyboardInterrupt")]
                if not self._kernel_responds():
                    return index + 1
        return len(cells)

    def _replay(self, cells, failed: set[int]) -> bool:
        """Re-run earlier cells in a fresh kernel so later cells find their state; keep old outputs.

        False when the kernel did not live through it (the cell that ended it is in failed, and
        is not replayed again): the caller restarts rather than blame the next cell for the death.
        """
        kernel, server = kernel_process(self.km), fork_server_of(self.km)
        for index, cell in enumerate(cells):
            if cell.cell_type != "code" or index in failed or not cell.source.strip():
                continue
            self._timed_out = False
            watch = ProcessWatch(kernel, self.max_cell_processes, server)
            try:
                with watch:
                    # stop_on_error=False as in the graded run (nbgrader allows errors): otherwise a replayed
                    # cell that raises (sys.exit(), a wrong answer) makes ipykernel abort the next request
                    # that reaches it before it clears its abort flag - on a busy machine the next replayed
                    # cell is answered "aborted" without running, and later cells miss its names
                    msg_id = self.kc.execute(cell.source, store_history=False, allow_stdin=False, stop_on_error=False)
                    self.wait_for_reply(msg_id, cell)
            except Exception:  # noqa: BLE001 - a cell that dies on replay is skipped from now on
                failed.add(index)
                return False
            if watch.stopped_at or self._connection_cut():
                failed.add(index)
                return False
            if self._timed_out:
                failed.add(index)
                if not self._kernel_responds():
                    return False
        return True

    def _too_many_processes(self, watch: ProcessWatch) -> str:
        """What a cell that the process watch stopped shows ('' when the watch did not fire)."""
        if not watch.stopped_at:
            return ""
        return (f"the cell started more than {self.max_cell_processes} processes (a fork bomb?), so the grader "
                f"stopped it together with the kernel")

    def _connection_cut(self, err: Exception | None = None) -> str:
        """What a cell shows when the kernel sent the grader more than it accepts ('' when it did not): a channel's
        connection dropped while the kernel's process lives on (ZeroMQ cut it: a frame over MAX_FRAME_BYTES, or no
        memory left for a message), or err is the grader's MemoryError. A kernel that died drops its connections too,
        so one seen ending within CUT_GRACE seconds died: its cell says so as any other."""
        lost = self.kc.lost_channel() if isinstance(self.kc, GuardedKernelClient) else ""
        if not (lost or isinstance(err, MemoryError)) or (lost and self._kernel_ends(CUT_GRACE)):
            return ""
        self.log.info("the kernel sent more than the grader accepts (%s)",
                      f"{lost} connection cut" if lost else "MemoryError")
        return (f"the kernel sent the grader more than it accepts (a message over {MAX_FRAME_BYTES // 2**20} MiB, or "
                f"more than the grader's memory holds), so the grader stopped it and restarted it without this cell")

    def _kernel_ends(self, seconds: float) -> bool:
        """True when the kernel's process has ended, or ends within seconds."""
        deadline = time.monotonic() + seconds
        while run_sync(_alive)(self.km):
            if time.monotonic() > deadline:
                return False
            time.sleep(0.05)
        return True

    def _kernel_responds(self) -> bool:
        """True when the kernel answers kernel_info soon after an interrupt."""
        try:
            msg_id = self.kc.kernel_info()
            saved, self.timeout = self.timeout, self.responsive_timeout
            try:
                self._timed_out = False
                reply = self.wait_for_reply(msg_id)
            finally:
                self.timeout = saved
            return reply is not None and not self._timed_out
        except Exception:  # noqa: BLE001
            return False

    def _log_stop(self, cell, index: int, err: Exception) -> None:
        """Note in the grading log why cell `index` was failed as the kernel stopping: a kernel's end in one line, anything
        else (maybe a bug of the grader's, which the student is told was the kernel) with its traceback."""
        grade_id = nbgrader_meta(cell).get("grade_id")
        where = f"cell {index + 1}{f' ({grade_id})' if grade_id else ''}"  # counted from 1, as check and feedback do
        if isinstance(err, KERNEL_STOP_ERRORS):
            self.log.info("%s: the kernel stopped while running it (%s)", where, type(err).__name__)
        else:  # its message may quote megabytes the kernel sent (jupyter_client's "Invalid Signature: %r"): bounded
            import traceback

            self.log.warning("%s: unexpected %s while running it, failed as the kernel stopping: %s\n%s", where,
                             type(err).__name__, clipped(str(err)),
                             cut_middle("".join(traceback.format_exception(err)), UNEXPECTED_ERROR_CHARS))

    @staticmethod
    def _fail_cell(cell, message: str, ename: str = KERNEL_DIED) -> None:
        """Give a code cell an error output (ename: one of cells.py's grader errors), so nbgrader scores it 0."""
        if cell.cell_type != "code":
            return
        cell.outputs.append(new_output("error", ename=ename, evalue=message, traceback=[f"{ename}: {message}"]))

    def _fail_rest(self, cells, message: str) -> None:
        """Mark every code cell that was never run as failed (NotRun)."""
        for cell in cells:
            if cell.cell_type == "code" and cell.source.strip():
                cell.outputs = []
                self._fail_cell(cell, message, NOT_RUN)


# --- the registry of pre-started kernels ------------------------------------------------------

def _prestart_key(scratch: str) -> str:
    """Registry key of a scratch folder (its real path)."""
    return os.path.realpath(scratch)


async def _alive(km) -> bool:
    """True when the manager's kernel process is running."""
    return bool(await ensure_async(km.is_alive()))


async def _async_shutdown_kernel(km) -> None:
    """Kill a kernel that is not needed (any more) and remove its connection files."""
    try:
        if km.has_kernel:
            await ensure_async(km.shutdown_kernel(now=True))
    finally:
        await ensure_async(km.cleanup_resources())


def _shutdown_kernel(km) -> None:
    """Blocking _async_shutdown_kernel."""
    run_sync(_async_shutdown_kernel)(km)


def discard_prestarted(scratch: str | None = None) -> None:
    """Shut down the kernel pre-started for a scratch folder (every pre-started kernel when scratch is None)."""
    keys = list(_PRESTARTED) if scratch is None else [_prestart_key(scratch)]
    for key in keys:
        km = _PRESTARTED.pop(key, None)
        if km is not None:
            _shutdown_kernel(km)


def close_fork_servers(folder: str | None = None) -> float:
    """End the fork server of a submission's folder (every fork server when folder is None) and its sandbox.

    Returns the CPU seconds the closed servers and their kernels used, as they reported it
    (0 for a server that could not report: killed, or never ready).
    """
    keys = list(_FORK_SERVERS) if folder is None else [os.path.realpath(folder)]
    if folder is None:
        _FAILED_FORK_SERVERS.clear()
    cpu = 0.0
    for key in keys:
        server = _FORK_SERVERS.pop(key, None)
        if server is not None:
            server.close()
            cpu += server.cpu_seconds or 0.0
    return cpu


def prestarted_kernels() -> dict[str, AsyncKernelManager]:
    """A copy of the registry: scratch folder -> kernel manager waiting for its notebook."""
    return dict(_PRESTARTED)
