"""Shared helpers for the benchmarks: the machine, repetition statistics, tables. Not a test, not run in CI."""

from __future__ import annotations

import json
import os
import platform
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BUILD = ROOT / "build" / "bench"


def load() -> tuple[float, float, float]:
    """The 1, 5 and 15 minute load averages."""
    return os.getloadavg()


def machine() -> dict:
    """nproc (this process's CPU affinity), CPU model (from /proc/cpuinfo), memory, load, Python and the thread-related
    environment."""
    model = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem_gib = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    return {
        "nproc": len(os.sched_getaffinity(0)),  # the CPUs this process may run on, as nproc counts them
        "cpu": model,
        "memory_gib": round(mem_gib, 1),
        "load_1_5_15": [round(x, 2) for x in load()],
        "python": platform.python_version(),
        "env": {k: os.environ.get(k) for k in ("OMP_NUM_THREADS", "OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")},
    }


def describe(values: list[float]) -> dict:
    """Median, min and max of repeated measurements, and the measurements themselves (to trace an outlier)."""
    return {"median": statistics.median(values), "min": min(values), "max": max(values), "n": len(values),
            "values": list(values)}


def fmt(stat: dict, digits: int = 2, unit: str = "") -> str:
    """'median [min, max]' of a describe() result."""
    return f"{stat['median']:.{digits}f}{unit} [{stat['min']:.{digits}f}, {stat['max']:.{digits}f}]"


def table(header: list[str], rows: list[list[str]]) -> str:
    """A plain-text table with columns padded to their widest cell."""
    widths = [max(len(str(r[i])) for r in [header] + rows) for i in range(len(header))]
    line = lambda r: "  ".join(str(c).ljust(w) for c, w in zip(r, widths)).rstrip()
    return "\n".join([line(header), line(["-" * w for w in widths])] + [line(r) for r in rows])


def record_name(name: str, full: bool) -> str:
    """The JSON file's name for a run: name for a full run (the figures README quotes), name-dev for a quick or
    partial one, so that a development run never replaces the record."""
    return name if full else f"{name}-dev"


def save(name: str, result: dict) -> Path:
    """Write a benchmark's figures as JSON under build/bench/ and return the path."""
    BUILD.mkdir(parents=True, exist_ok=True)
    path = BUILD / f"{name}.json"
    path.write_text(json.dumps(result, indent=2, default=str))
    return path


class Timer:
    """Wall time (perf_counter) and this process's CPU time (process_time) of a block, in seconds."""

    def __enter__(self):
        self.wall0, self.cpu0 = time.perf_counter(), time.process_time()
        return self

    def __exit__(self, *exc):
        self.wall = time.perf_counter() - self.wall0
        self.cpu = time.process_time() - self.cpu0


def run_logged(cmd: list[str], log: Path, **kwargs) -> int:
    """Run cmd to completion with its output in log; return its exit code.

    The child runs in a session of its own, so the terminal's Ctrl-C reaches this process alone; it is passed on as
    exactly one SIGINT (pytest and nbgrader take a second one as "abort now"), the child is let finish its clean-up,
    killed only after a minute, and the KeyboardInterrupt raised again. subprocess.run would kill it after a quarter
    of a second, in the middle of its clean-up.
    """
    with open(log, "w") as fh:
        proc = subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT, start_new_session=True, **kwargs)
        try:
            return proc.wait()
        except KeyboardInterrupt:
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            raise


def die(message: str) -> None:
    """Print a usage error to stderr and exit with status 2."""
    print(f"error: {message}", file=sys.stderr)
    sys.exit(2)
