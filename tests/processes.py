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


def session_processes(sid: int) -> list[int]:
    """Pids of the live (non-zombie) processes in session sid."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if os.getsid(int(entry.name)) == sid and not process_gone(int(entry.name)):
                pids.append(int(entry.name))
        except OSError:  # the process ended while we looked
            continue
    return pids
