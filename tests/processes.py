"""Process state as the tests read it from /proc."""

import os
from pathlib import Path


def process_gone(pid: int) -> bool:
    """True when no live (non-zombie) process has this pid."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return True
    return state in ("Z", "X")


def processes_of_build(build: Path) -> list[int]:
    """Pids of the live processes (not this one) that name build in their command line or have
    PART_II_BUILD=build in their environment: a grade run's processes, its workers and what they exec."""
    marker_env, marker_arg = f"PART_II_BUILD={build}".encode(), str(build).encode()
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            environ = (entry / "environ").read_bytes().split(b"\0")
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:  # ended while we looked, or not ours to read
            continue
        if (marker_env in environ or marker_arg in cmdline) and not process_gone(int(entry.name)):
            pids.append(int(entry.name))
    return pids
