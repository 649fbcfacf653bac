"""The grader's side of a submission's kernel fork server (the server: fork_server_main.py).

Every notebook of a submission gets a fresh kernel process, but ``import torch`` and its
company cost about 3 s of CPU per kernel, more than many notebooks' own cells. So the
grader starts one sandbox per submission running a fork server that has imported them,
and each notebook's kernel is a process forked from it: the same sandbox (user id, PID and
mount namespaces, limits), a fresh folder and session of its own, no state of any other
notebook. The server never runs student code; a kernel that kills it (same user) only
makes the next kernel of that submission start a new server.

``ForkServer`` starts the server and forks kernels; ``ForkedKernel`` is the Popen-like handle
jupyter_client's provisioner keeps for a forked kernel (poll, wait, signals, by host pid).
"""

from __future__ import annotations

import errno
import json
import os
import select
import signal
import subprocess
import time
from pathlib import Path

import psutil

SERVER_SOURCE = Path(__file__).with_name("fork_server_main.py")
READY_TIMEOUT = 120.0  # seconds the server may take to import its modules (a loaded machine)
SPAWN_TIMEOUT = 30.0  # seconds to answer one fork request
CLOSE_GRACE = 15.0  # seconds the server has to collect its kernels and exit (it kills them after 5)


class ForkServerError(RuntimeError):
    """The fork server did not start, died, or could not fork a kernel."""


def _running(proc: psutil.Process | None) -> bool:
    """True while proc exists and is not a zombie."""
    try:
        return proc is not None and proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def kill_processes(procs: list[psutil.Process], timeout: float = 5.0) -> int:
    """SIGSTOP, then SIGKILL procs (those already gone are skipped), wait up to timeout s for them to end; return how many.

    Stopped first so that those not killed yet cannot fork meanwhile (a fork bomb's copies would).
    A zombie has ended: a kernel never reaps what its cells forked, so waiting until those are gone
    (psutil.wait_procs) cost the whole timeout after every cell that left a child behind.
    """
    for signal_them in ("suspend", "kill"):
        for proc in procs:
            try:
                getattr(proc, signal_them)()
            except psutil.Error:
                pass
    deadline = time.monotonic() + timeout
    alive = [proc for proc in procs if _running(proc)]
    while alive and time.monotonic() < deadline:
        time.sleep(0.005)
        alive = [proc for proc in alive if _running(proc)]
    return len(procs)


def _children(proc: psutil.Process, recursive: bool = False) -> list[psutil.Process]:
    """proc's children ([] when proc has just ended: one process reaped mid-sweep must not spare the others)."""
    try:
        return proc.children(recursive=recursive)
    except psutil.Error:
        return []


def _ns_pid(proc: psutil.Process) -> int | None:
    """proc's pid in its innermost PID namespace (the last NSpid field), None when unreadable."""
    try:
        with open(f"/proc/{proc.pid}/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("NSpid:"):
                    return int(line.split()[-1])
    except (OSError, ValueError):
        pass
    return None


class ForkServer:
    """One fork server in its sandbox: start with a command line, then spawn() kernels from it."""

    def __init__(self, cmd: list[str], modules: list[str], log_path: Path, pass_fds: tuple[int, ...] = ()):
        """cmd: the sandbox prefix ending in the interpreter; modules: what the server imports once; pass_fds: the
        descriptors cmd names (the sandbox's seccomp filter)."""
        with open(log_path, "ab") as log:
            self.process = subprocess.Popen(
                [*cmd, "-c", SERVER_SOURCE.read_text(encoding="utf-8"), json.dumps(modules)],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log, pass_fds=pass_fds)
        self._buffer = b""
        self.ready = False
        self._server: psutil.Process | None = None
        self._kernels: list[psutil.Process] = []  # what spawn forked: any other child of the server is a stray
        self.cpu_seconds: float | None = None  # reported by the server when it closes cleanly
        self.log_path = log_path

    def _read_reply(self, timeout: float) -> dict:
        """The next JSON line from the server, or ForkServerError on timeout or end of output."""
        deadline = time.monotonic() + timeout
        fd = self.process.stdout.fileno()
        while b"\n" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0:
                raise ForkServerError(f"the fork server did not answer within {timeout:g} s")
            readable, _, _ = select.select([fd], [], [], left)
            if readable:
                chunk = os.read(fd, 65536)
                if not chunk:
                    raise ForkServerError(f"the fork server exited (see {self.log_path})")
                self._buffer += chunk
        line, self._buffer = self._buffer.split(b"\n", 1)
        try:
            reply = json.loads(line)
        except ValueError as exc:
            raise ForkServerError(f"the fork server answered something that is not JSON: {line[:200]!r}") from exc
        if not isinstance(reply, dict):
            raise ForkServerError(f"the fork server answered {reply!r}, expected a JSON object")
        return reply

    def wait_ready(self, timeout: float = READY_TIMEOUT) -> None:
        """Block until the server has imported its modules; find it as the host sees it."""
        if not self.ready:
            if not self._read_reply(timeout).get("ready"):
                raise ForkServerError("the fork server's first answer was not 'ready'")
            self._server = self._find_server()  # now, while it is the only process below bwrap
            if self._server is None:
                raise ForkServerError("the fork server answered, but its process was not found below bwrap")
            self.ready = True

    def alive(self) -> bool:
        """True while the sandbox and the server in it run."""
        return self.process.poll() is None and (not self.ready or _running(self._server))

    def _find_server(self) -> psutil.Process | None:
        """The server below bwrap and bwrap's PID 1 of the namespace (each with a single child)."""
        try:
            proc = psutil.Process(self.process.pid)
            while proc.name() == "bwrap":
                children = proc.children()
                if len(children) != 1:
                    return None
                proc = children[0]
            return proc
        except psutil.Error:
            return None

    def server_process(self) -> psutil.Process | None:
        """The server as the host sees it (None before it is ready or after it ended)."""
        return self._server if _running(self._server) else None

    def spawn(self, argv: list[str], cwd: str, env: dict[str, str], connection: dict | None = None) -> "ForkedKernel":
        """Fork a kernel with these ipykernel arguments, folder (created) and variables; with connection (ports, key:
        a connection file's fields), the kernel takes them from the request and reads and writes no connection file."""
        self.wait_ready()
        request = {"argv": list(argv), "cwd": str(cwd), "env": {str(k): str(v) for k, v in env.items()}}
        if connection is not None:
            request["connection"] = dict(connection)
        request = json.dumps(request)
        try:
            self.process.stdin.write(request.encode() + b"\n")
            self.process.stdin.flush()
        except (BrokenPipeError, OSError) as exc:
            raise ForkServerError(f"the fork server is gone ({type(exc).__name__})") from exc
        reply = self._read_reply(SPAWN_TIMEOUT)
        if not isinstance(reply.get("pid"), int):
            raise ForkServerError(f"the fork server could not fork a kernel: {reply.get('error', reply)}")
        host = self._host_process(reply["pid"])
        if host is not None:
            self._kernels.append(host)
        return ForkedKernel(host)

    def kernel_pids(self) -> set[int]:
        """Host pids of the kernels this server forked that still run (a kernel's copy made with clone(CLONE_PARENT)
        is the server's child too, but not one of these)."""
        self._kernels = [k for k in self._kernels if _running(k)]
        return {k.pid for k in self._kernels}

    def _host_process(self, ns_pid: int) -> psutil.Process | None:
        """The server's child with this namespace pid, as a host process (None when it already ended)."""
        server = self.server_process()
        if server is None:
            return None
        for _ in range(50):  # the reply may come before /proc shows the child to the host
            try:
                for child in server.children():
                    if _ns_pid(child) == ns_pid:
                        return child
            except psutil.Error:
                return None
            time.sleep(0.01)
        return None

    def kill_strays(self, end_sandbox: bool = True) -> int:
        """SIGKILL every process in the sandbox that is neither the server nor a kernel it forked; return how many.

        Called when a kernel ends. What it forked and left behind (a daemon, a fork bomb's
        copies) is re-parented to the namespace's PID 1, and would run on beside the next
        notebook; the kernel still alive then (the next notebook's, not yet used) has no
        business with processes of its own either. Also called after a cell failed, with
        end_sandbox False: the kernel goes on, so the sandbox is not ended even if five passes
        do not finish (the process watch stops a bomb).
        """
        killed: set[int] = set()
        for _ in range(5):  # what forked while a pass listed and killed is found by the next
            strays = [p for p in self._strays() if p.pid not in killed]
            if not strays:
                break
            kill_processes(strays)
            killed.update(p.pid for p in strays)
        else:  # still forking after five passes (a bomb): end the whole sandbox; the next kernel gets a new one
            if end_sandbox:
                self.kill_sandbox()
        return len(killed)

    def kill_sandbox(self) -> None:
        """SIGKILL the sandbox's PID 1: the OS then ends every process in its PID namespace at once (the server, its
        kernels and all they forked, which no fork bomb outruns); the next kernel asked for gets a new server."""
        server = self.server_process()
        try:
            init = server.parent() if server is not None else None
            if init is not None:
                init.kill()
        except psutil.Error:
            pass
        self.process.kill()  # bwrap outside the namespace (Popen skips it once reaped: never another process's pid)

    def _strays(self) -> list[psutil.Process]:
        """The processes kill_strays ends: all below the sandbox's PID 1 but the server and the kernels it forked."""
        server = self.server_process()
        if server is None:
            return []
        try:
            init = server.parent()
        except psutil.Error:
            return []
        kernels = self.kernel_pids()
        strays = [p for p in _children(init) if p.pid != server.pid] if init else []
        # a copy a kernel made with clone(CLONE_PARENT) is the server's child (an ended kernel not yet reaped is too)
        strays += [p for p in _children(server) if p.pid not in kernels and _running(p)]
        strays += [d for p in list(strays) for d in _children(p, recursive=True)]
        strays += [d for kernel in _children(server) if kernel.pid in kernels for d in _children(kernel, recursive=True)]
        return strays

    def close(self, grace: float = CLOSE_GRACE) -> None:
        """End the server (its stdin closed, it collects its kernels and exits) and with it the sandbox.

        Killed after grace seconds. A clean exit lets the kernels' CPU time reach the grader's
        resource accounting (bench/grading_throughput.py reads it); bwrap's PID 1 ends every
        process left in the sandbox either way.
        """
        try:
            self.process.stdin.close()
        except OSError:
            pass
        if self.ready:
            try:  # its last answer: the CPU time it and its kernels used
                cpu = self._read_reply(grace).get("cpu")
                self.cpu_seconds = float(cpu) if isinstance(cpu, (int, float)) else None
            except ForkServerError:
                pass
        try:
            self.process.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self.process.stdout.close()


class ForkedKernel:
    """subprocess.Popen's interface for a kernel forked by a ForkServer (not our child: polled by pid)."""

    stdin = stdout = stderr = None

    def __init__(self, proc: psutil.Process | None):
        """proc: the kernel as the host sees it (None: it ended before it could be found)."""
        self._proc = proc
        self.pid = proc.pid if proc is not None else 0
        self.returncode = None if _running(proc) else 1
        self._signal = None

    def host_process(self) -> psutil.Process | None:
        """The kernel as the host sees it, while it runs (never a later process that got its pid)."""
        return self._proc if self.poll() is None else None

    def poll(self) -> int | None:
        """None while the kernel runs, else an exit code (-signal when we killed it, 1 otherwise)."""
        if self.returncode is None and not _running(self._proc):
            self.returncode = -self._signal if self._signal else 1
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        """Block until the kernel has ended; subprocess.TimeoutExpired after timeout seconds."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            if deadline is not None and time.monotonic() > deadline:
                raise subprocess.TimeoutExpired(["forked kernel", str(self.pid)], timeout)
            time.sleep(0.02)
        return self.returncode

    def send_signal(self, signum: int) -> None:
        """Signal the kernel; ProcessLookupError when it is gone (what Popen's callers tolerate)."""
        if self.poll() is not None:
            raise ProcessLookupError(errno.ESRCH, "the kernel has ended")
        try:
            self._proc.send_signal(signum)
        except psutil.NoSuchProcess as exc:
            raise ProcessLookupError(errno.ESRCH, "the kernel has ended") from exc
        if signum in (signal.SIGKILL, signal.SIGTERM):
            self._signal = signum

    def kill(self) -> None:
        """SIGKILL the kernel."""
        self.send_signal(signal.SIGKILL)

    def terminate(self) -> None:
        """SIGTERM the kernel."""
        self.send_signal(signal.SIGTERM)
