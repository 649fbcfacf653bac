"""Wall time of the README test command (`make test`, i.e. `pytest` with pytest.ini's options) by phase.

    python bench/test_suite_phases.py                   # every phase once
    python bench/test_suite_phases.py --phase unit      # one phase (repeatable)
    python bench/test_suite_phases.py --reps 3          # median [min, max] over 3 runs of each phase

Each phase is a separate `python -m pytest PATHS` invocation with pytest.ini's options
(nbval, two xdist workers, as `make test` runs them), so the phases add up to the
whole suite. A test file that no phase names is timed in an "other" phase, so
nothing is left out. Printed last: wall and CPU seconds per phase, its share of the
total, and pytest's result line; saved to build/bench/test_suite_phases.json.
Not a test: it runs the tests.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import ROOT, describe, die, fmt, load, machine, save, table  # noqa: E402

PHASES = {
    "unit": ["tests/test_reference.py", "tests/test_reference_chunked.py", "tests/test_arithmetic_data.py",
             "tests/test_notebook_format.py"],
    "notebooks": ["notebooks/part-ii"],
    "release": ["tests/test_release.py"],
    "grading": ["tests/test_grading.py", "tests/test_collect.py", "tests/test_sandbox.py", "tests/test_adversarial.py"],
    "browser": ["tests/test_browser.py"],
}
RESULT_LINE = re.compile(r"=+ (.*(?:passed|failed|error|skipped|no tests ran).*) =+\s*$")


def phases() -> dict[str, list[str]]:
    """The phases with the paths that exist, plus "other" for test files no phase names."""
    out = {name: [p for p in paths if (ROOT / p).exists()] for name, paths in PHASES.items()}
    named = {p for paths in out.values() for p in paths}
    other = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "tests").glob("test_*.py") if str(p.relative_to(ROOT)) not in named)
    if other:
        out["other"] = other
    return {name: paths for name, paths in out.items() if paths}


def children_cpu() -> float:
    """User + system CPU seconds of finished child processes (pytest, its xdist workers, kernels)."""
    import resource

    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def run_phase(name: str, paths: list[str], log: Path) -> tuple[float, float, str, int]:
    """Run pytest on paths; return (wall s, CPU s, pytest's result line, exit code)."""
    bin_dir = Path(sys.executable).parent
    env = dict(os.environ, PATH=f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}", OMP_NUM_THREADS="1",
               PYTHONHASHSEED="0")
    cpu0, t0 = children_cpu(), time.perf_counter()
    with open(log, "w") as fh:
        rc = subprocess.run([sys.executable, "-m", "pytest", *paths], cwd=ROOT, env=env, stdout=fh,
                            stderr=subprocess.STDOUT).returncode
    wall, cpu = time.perf_counter() - t0, children_cpu() - cpu0
    lines = [m.group(1) for m in map(RESULT_LINE.match, log.read_text(errors="replace").splitlines()) if m]
    return wall, cpu, (lines[-1] if lines else f"exit code {rc}, no result line"), rc


def main() -> None:
    available = phases()
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--phase", action="append", choices=list(available), help="run only this phase (repeatable)")
    parser.add_argument("--reps", type=int, default=1, help="runs of each phase (default 1: the suite is heavy)")
    args = parser.parse_args()
    if args.reps < 1:
        die(f"--reps must be >= 1, got {args.reps}")
    chosen = {n: p for n, p in available.items() if not args.phase or n in args.phase}
    info = machine()
    logs = ROOT / "build" / "bench" / "test-suite-logs"
    logs.mkdir(parents=True, exist_ok=True)
    walls = {n: [] for n in chosen}
    cpus = {n: [] for n in chosen}
    results = {}
    for rep in range(args.reps):
        for name, paths in chosen.items():
            print(f"rep {rep + 1}/{args.reps}: {name}: pytest {' '.join(paths)}", flush=True)
            wall, cpu, line, rc = run_phase(name, paths, logs / f"{name}-{rep}.log")
            walls[name].append(wall)
            cpus[name].append(cpu)
            results[name] = {"line": line, "exit_code": rc}
            print(f"  {wall:.1f} s wall, {cpu:.1f} s CPU: {line}", flush=True)
    info["load_at_end"] = [round(x, 2) for x in load()]
    total = sum(describe(v)["median"] for v in walls.values())
    rows = [[n, fmt(describe(walls[n]), 1, " s"), fmt(describe(cpus[n]), 1, " s"),
             f"{100 * describe(walls[n])['median'] / total:.0f} %", results[n]["line"]] for n in chosen]
    rows.append(["total (sum of medians)", f"{total:.1f} s", f"{sum(describe(v)['median'] for v in cpus.values()):.1f} s",
                 "100 %", ""])
    result = {"machine": info, "reps": args.reps, "phases": chosen,
              "wall": {n: describe(v) for n, v in walls.items()}, "cpu": {n: describe(v) for n, v in cpus.items()},
              "results": results, "total_wall_s": total}
    path = save("test_suite_phases", result)
    print()
    print(f"machine: {info['nproc']} x {info['cpu']}, {info['memory_gib']} GiB; load {info['load_1_5_15']} at start, "
          f"{info['load_at_end']} at end; {args.reps} run(s) per phase, median [min, max]")
    print(table(["phase", "wall", "CPU (children)", "share", "pytest result"], rows))
    print(f"target: whole suite <= 240 s on 2 cores; logs in {logs.relative_to(ROOT)}; saved {path.relative_to(ROOT)}")
    sys.exit(1 if any(r["exit_code"] not in (0,) for r in results.values()) else 0)


if __name__ == "__main__":
    main()
