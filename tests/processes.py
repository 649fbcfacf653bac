"""Process state as the tests read it from /proc."""

from pathlib import Path


def process_gone(pid: int) -> bool:
    """True when no live (non-zombie) process has this pid."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return True
    return state in ("Z", "X")
