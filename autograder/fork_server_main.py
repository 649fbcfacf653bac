"""Kernel fork server: runs inside one submission's sandbox, as ``python -c <this file's text> MODULES``.

The repository is not in the sandbox (only its venv and course files are), so the grader
passes this file's text rather than its path (standard library only, no import from
autograder). It imports MODULES (a JSON list: numpy, torch, matplotlib.pyplot) and
ipykernel once, answers ``{"ready": true}``,
then reads one JSON request per line on stdin and answers each on stdout:

    {"argv": [ipykernel arguments], "cwd": folder, "env": {name: value}, "connection": {...}}
    -> {"pid": pid in the sandbox's PID namespace} or {"error": reason}

"connection" (optional) holds a connection file's fields (ports, key): the kernel takes them
from the request and neither reads nor writes a connection file. The sandbox is the whole
submission's, and the notebook being graded runs in it as the same user while the next
notebook's kernel starts: a key in a file would be theirs to read.

and when stdin closes, after collecting its kernels, ``{"cpu": seconds}``: the CPU time of
the server and every kernel it forked (bubblewrap does not pass it on to the process that
started it; the grading worker logs it).

Each request forks a child that becomes an IPython kernel, in a fresh folder, with its own
session: a fresh process that never saw another notebook, without paying for the imports
again. It reads no IPython config file, runs no profile start-up file and imports nothing
from its working folder (both are on the submission's tmpfs, which the notebooks before it
could write). The server itself never runs code it is sent. It and its kernels are not dumpable:
a process of the same user can neither ptrace them nor read their memory, environment or
file descriptors (a process can still read its own). It reaps its kernels as they end,
and when stdin closes it waits for the last ones (killing any still running after a grace
period) before it exits, so their CPU time reaches whoever waits for the sandbox. Kernels'
stdout and stderr go to the server's stderr, the sandbox log.
"""

import importlib
import json
import os
import signal
import sys
import traceback

PR_SET_DUMPABLE = 4


def set_dumpable(flag: bool) -> None:
    """prctl(PR_SET_DUMPABLE): False keeps processes of the same user out of this one."""
    import ctypes

    try:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_DUMPABLE, int(flag), 0, 0, 0)
    except (OSError, AttributeError):  # pragma: no cover - not Linux
        pass


def become_kernel(request: dict) -> None:
    """In the forked child: own session, default signals, clean stdio, own folder; run the kernel; exit."""
    code = 1
    try:
        os.setsid()
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)  # the kernel waits for its own subprocesses
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        # stays non-dumpable, like the server: the next notebook's kernel (same user, already started)
        # cannot be ptraced or have its memory, and with it its connection key, read by this one
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.close(null)
        os.dup2(2, 1)  # the request and reply pipes stay with the server
        os.makedirs(request["cwd"], exist_ok=True)
        os.chdir(request["cwd"])
        os.environ.update(request["env"])
        # nothing is imported from the working folder: it is on the submission's tmpfs, where an earlier notebook's
        # kernel could leave a module (storemagic.py: IPython imports it by that name as it starts)
        argv = [*request["argv"], "--IPKernelApp.ignore_cwd=True"]
        sys.argv = [sys.executable, *argv]
        from ipykernel import kernelapp

        without_profile_files(kernelapp.IPKernelApp)
        if request.get("connection") is not None:
            use_connection(kernelapp.IPKernelApp, request["connection"])

        kernelapp.launch_new_instance(argv=argv)
        code = 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    except BaseException:  # noqa: BLE001 - reported in the sandbox log, the kernel counts as dead
        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
    sys.exit(code)  # interpreter shutdown as in any kernel process (atexit handlers run)


def use_connection(app_class, connection: dict) -> None:
    """Make the kernel application take its ports and key from connection, with no connection file read or written."""
    app_class.init_connection_file = lambda app: app.load_connection_info(connection)
    app_class.write_connection_file = lambda app, **kwargs: None


def without_profile_files(app_class) -> None:
    """Make the kernel application read no config file and run no start-up file of its IPython profile: the profile
    is on the submission's tmpfs, where an earlier notebook's kernel (same user) could put code to run before grading."""
    app_class.load_config_file = lambda app, *args, **kwargs: None
    app_class._run_startup_files = lambda app: None


def reap(signum=None, frame=None) -> None:
    """Collect every kernel that has ended (the SIGCHLD handler)."""
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def reap_all(grace: float) -> None:
    """Wait up to grace seconds for the kernels still running, then SIGKILL and collect the rest."""
    import time

    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline:
        try:
            if os.waitpid(-1, os.WNOHANG)[0] == 0:
                time.sleep(0.05)
        except ChildProcessError:
            return
    for entry in os.listdir("/proc"):  # kernels run in sessions of their own: one by one
        try:
            with open(f"/proc/{entry}/stat", encoding="ascii") as stat:
                if int(stat.read().rsplit(")", 1)[1].split()[1]) == os.getpid():
                    os.kill(int(entry), signal.SIGKILL)
        except (OSError, ValueError, IndexError):
            pass
    while True:
        try:
            os.waitpid(-1, 0)
        except ChildProcessError:
            return


def serve(modules: list) -> None:
    """Import, announce readiness, then fork one kernel per request until stdin closes."""
    if sys.path and sys.path[0] in ("", os.getcwd()):
        del sys.path[0]  # as ipykernel_launcher does; the kernel puts the cwd back
    replies = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)  # a module printing while it imports writes to the log, not into the replies
    for name in modules:
        importlib.import_module(name)
    importlib.import_module("ipykernel.kernelapp")
    importlib.import_module("ipykernel.ipkernel")
    set_dumpable(False)
    signal.signal(signal.SIGCHLD, reap)
    replies.write(json.dumps({"ready": True}) + "\n")
    for line in sys.stdin.buffer:
        try:
            request = json.loads(line)
            if not (isinstance(request, dict) and isinstance(request.get("argv"), list)
                    and isinstance(request.get("cwd"), str) and isinstance(request.get("env"), dict)
                    and isinstance(request.get("connection", {}), dict)):
                raise ValueError("a request is an object with argv (list), cwd (str), env (dict) and, optionally, "
                                 "connection (dict)")
            pid = os.fork()
        except (ValueError, OSError) as exc:
            replies.write(json.dumps({"error": f"{type(exc).__name__}: {exc}"}) + "\n")
            continue
        if pid == 0:
            replies.close()
            become_kernel(request)
        replies.write(json.dumps({"pid": pid}) + "\n")
    reap_all(grace=5.0)
    import resource

    used = [resource.getrusage(who) for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)]
    replies.write(json.dumps({"cpu": sum(u.ru_utime + u.ru_stime for u in used)}) + "\n")
    replies.flush()


if __name__ == "__main__":
    serve(json.loads(sys.argv[1]) if len(sys.argv) > 1 else [])
    sys.stdout.flush()
    sys.stderr.flush()
    # without the interpreter's finalisation: with numpy, torch and matplotlib imported it took 1.4 s of CPU,
    # which every submission waited for; the server holds nothing that needs saving (its kernels are collected)
    os._exit(0)
