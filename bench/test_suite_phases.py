"""Wall time of the README test command (`make test`, i.e. `pytest` with pytest.ini's options), and where it goes.

    python bench/test_suite_phases.py              # the whole suite once
    python bench/test_suite_phases.py --reps 3     # median [min, max] over 3 runs

The suite runs as `make test` runs it: one `python -m pytest` with pytest.ini's options
(nbval, two xdist workers sharing the graded class). Its wall time is the figure the
target is about. pytest's JUnit report gives every test's time (setup + call +
teardown, on whichever worker ran it); summed by phase they show where the two workers'
time goes (the phases overlap in wall time, so they add up to about twice the wall
time). A test file that no phase names is counted in "other", so nothing is left out.
Two CPU figures: the CPU time of the processes pytest reaped (rusage; it misses the grading
workers and their kernels, whose parent, multiprocessing's fork server, is reaped by init,
and whatever runs inside bubblewrap), and the machine's
busy CPU time over the run from /proc/stat (everything, including whatever else the
shared machine ran), against what the cores could give (nproc x wall): near 100 %, the
suite is CPU-bound and only less work makes it faster.
xdist's ``--dist loadfile`` gives each test file to one worker, so no order of the files can
end before the schedule floor: the longest file, or half the files' worker time on two
workers, whichever is more. A wall time well above the floor means a worker sat idle (a
long file started last, as test_sandbox once did); near it, only less work makes the suite
faster.
Printed last: wall and CPU seconds of the run, worker seconds per phase and per file (the
longest), the schedule floor, the slowest tests, and pytest's result line; saved to
build/bench/test_suite_phases.json.
Not a test: it runs the tests.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import time
import xml.etree.ElementTree as ET
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import ROOT, describe, die, fmt, load, machine, run_logged, save, table  # noqa: E402

PHASES = {  # by what a file's tests spend their time on
    "unit": ["tests/test_reference.py", "tests/test_reference_chunked.py", "tests/test_arithmetic_data.py", "tests/test_checks.py",
             "tests/test_notebook_format.py", "tests/test_collect.py", "tests/test_feedback_text.py",
             "tests/test_environment.py"],
    # nbval, and the source notebooks run with other answers (tensors, forbidden shortcuts): a kernel per notebook
    "notebooks": ["notebooks/part-ii", "tests/test_tensor_answers.py", "tests/test_hidden_tests.py"],
    "release": ["tests/test_release.py"],
    # the commands end to end on real courses: release, collect, grade, feedback, export and the student's check
    "CLI": ["tests/test_cli.py", "tests/test_drop.py"],
    "grading": ["tests/test_grading.py", "tests/test_adversarial.py", "tests/test_sandbox.py",
                "tests/test_trusted_checks.py", "tests/test_worker_prestart.py",
                "tests/test_fork_server.py", "tests/test_extensions.py", "tests/test_postgres.py"],
    "browser": ["tests/test_browser.py"],
}
LONGEST_FILES = 8
RESULT_LINE = re.compile(r"=+ (.*(?:passed|failed|error|skipped|no tests ran).*) =+\s*$")
SLOWEST = 8


def phase_of(path: str) -> str:
    """The phase a test's file belongs to ("other" when no phase names it)."""
    for name, prefixes in PHASES.items():
        if any(path == p or path.startswith(p.rstrip("/") + "/") for p in prefixes):
            return name
    return "other"


def junit_case_times(junit: Path) -> list[tuple[str, float, str]]:
    """(test file path, seconds, test id) for every test case in a JUnit XML report."""
    cases = []
    for case in ET.parse(junit).getroot().iter("testcase"):
        path = case.get("file") or case.get("classname", "").replace(".", "/") + ".py"
        cases.append((path, float(case.get("time", 0.0)), f"{path}::{case.get('name')}"))
    return cases


def xdist_workers() -> int:
    """The number of xdist workers pytest.ini's addopts ask for (-n N)."""
    import configparser

    ini = configparser.ConfigParser()
    ini.read(ROOT / "pytest.ini", encoding="utf-8")
    match = re.search(r"(?:^|\s)-n\s*(\d+)\b", ini.get("pytest", "addopts", fallback=""))
    if match is None or int(match.group(1)) < 1:
        die(f"{ROOT / 'pytest.ini'}: addopts has no '-n N' with N >= 1; expected the number of xdist workers")
    return int(match.group(1))


def file_seconds(cases: list[tuple[str, float, str]]) -> dict[str, float]:
    """Worker seconds per test file (every test's setup + call + teardown), longest first."""
    sums = defaultdict(float)
    for path, seconds, _name in cases:
        sums[path] += seconds
    return dict(sorted(sums.items(), key=lambda item: -item[1]))


def schedule_floor(per_file: dict[str, float], workers: int) -> float:
    """Seconds before which no order of whole files on `workers` workers can end: the longest file, or the mean load."""
    return max(max(per_file.values(), default=0.0), sum(per_file.values()) / workers)


def children_cpu() -> float:
    """User + system CPU seconds of finished child processes (pytest, its xdist workers, kernels)."""
    import resource

    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def machine_cpu() -> dict[str, float]:
    """Machine-wide CPU seconds since boot from /proc/stat: busy (user, nice, system, irq, softirq), idle, steal."""
    fields = [int(v) for v in Path("/proc/stat").read_text().splitlines()[0].split()[1:9]]
    user, nice, system, idle, iowait, irq, softirq, steal = fields + [0] * (8 - len(fields))
    tick = os.sysconf("SC_CLK_TCK")
    return {"busy": (user + nice + system + irq + softirq) / tick, "idle": (idle + iowait) / tick, "steal": steal / tick}


def run_suite(log: Path, junit: Path) -> tuple[float, float, dict, str, int]:
    """Run the README's pytest once; return (wall s, CPU s pytest reaped, machine CPU s, result line, exit code)."""
    bin_dir = Path(sys.executable).parent
    env = dict(os.environ, PATH=f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}", OMP_NUM_THREADS="1",
               PYTHONHASHSEED="0")
    cpu0, machine0, t0 = children_cpu(), machine_cpu(), time.perf_counter()
    rc = run_logged([sys.executable, "-m", "pytest", f"--junitxml={junit}", "-o", "junit_family=xunit1"], log,
                    cwd=ROOT, env=env)
    wall, cpu = time.perf_counter() - t0, children_cpu() - cpu0
    used = {k: v - machine0[k] for k, v in machine_cpu().items()}
    lines = [m.group(1) for m in map(RESULT_LINE.match, log.read_text(errors="replace").splitlines()) if m]
    return wall, cpu, used, (lines[-1] if lines else f"exit code {rc}, no result line"), rc


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--reps", type=int, default=1, help="runs of the whole suite (default 1: it is heavy)")
    args = parser.parse_args()
    if args.reps < 1:
        parser.error(f"--reps must be at least 1, got {args.reps}")
    info = machine()
    workers = xdist_workers()
    logs = ROOT / "build" / "bench" / "test-suite-logs"
    logs.mkdir(parents=True, exist_ok=True)
    walls, cpus, busy, busy_share, per_phase, results, floors = [], [], [], [], defaultdict(list), [], []
    slowest: list[tuple[float, str]] = []
    per_file: dict[str, float] = {}
    for rep in range(args.reps):
        print(f"run {rep + 1}/{args.reps}: pytest (pytest.ini's options)", flush=True)
        junit = logs / f"junit-{rep}.xml"
        junit.unlink(missing_ok=True)  # a report left by an earlier invocation must not stand for this run's
        wall, cpu, used, line, rc = run_suite(logs / f"suite-{rep}.log", junit)
        walls.append(wall)
        cpus.append(cpu)
        busy.append(used["busy"])
        busy_share.append(100 * used["busy"] / (os.cpu_count() * wall))  # /proc/stat counts every CPU of the host
        results.append({"line": line, "exit_code": rc, "machine_cpu": used})
        print(f"  {wall:.1f} s wall, {cpu:.1f} s CPU reaped by pytest, machine busy {used['busy']:.0f} s "
              f"({busy_share[-1]:.0f} % of {info['nproc']} cores), steal {used['steal']:.0f} s: {line}", flush=True)
        cases = junit_case_times(junit) if junit.exists() else []
        per_file = file_seconds(cases)
        sums = defaultdict(float)
        for path, seconds in per_file.items():
            sums[phase_of(path)] += seconds
        for name in list(PHASES) + ["other"]:
            if name in sums:
                per_phase[name].append(sums[name])
        floors.append(schedule_floor(per_file, workers) if per_file else None)  # None: no JUnit report that run
        if rep == args.reps - 1:
            slowest = sorted(((s, n) for _p, s, n in cases), reverse=True)[:SLOWEST]
    info["load_at_end"] = [round(x, 2) for x in load()]
    known = [f for f in floors if f is not None]
    worker_total = sum(describe(v)["median"] for v in per_phase.values())
    rows = [[n, fmt(describe(v), 1, " s"), f"{100 * describe(v)['median'] / worker_total:.0f} %"]
            for n, v in per_phase.items()]
    rows.append([f"all phases ({workers} workers)", f"{worker_total:.1f} s", "100 %"])
    file_rows = [[name, f"{seconds:.1f} s", f"{100 * seconds / sum(per_file.values()):.0f} %"]
                 for name, seconds in list(per_file.items())[:LONGEST_FILES]]
    result = {"machine": info, "reps": args.reps, "phases": PHASES, "wall": describe(walls), "cpu": describe(cpus),
              "machine_busy_cpu": describe(busy), "machine_busy_percent": describe(busy_share),
              "worker_seconds": {n: describe(v) for n, v in per_phase.items()}, "results": results,
              "slowest": [[n, s] for s, n in slowest], "xdist_workers": workers,
              "file_seconds_last_run": per_file, "schedule_floor": describe(known) if known else None}
    path = save("test_suite_phases", result)
    print()
    print(f"machine: {info['nproc']} x {info['cpu']}, {info['memory_gib']} GiB; load {info['load_1_5_15']} at start, "
          f"{info['load_at_end']} at end; {args.reps} run(s), median [min, max]")
    print(f"whole suite: {fmt(describe(walls), 1, ' s')} wall; {fmt(describe(cpus), 1, ' s')} CPU reaped by pytest "
          f"(grading workers, their kernels and sandboxes not included); machine busy {fmt(describe(busy), 0, ' s')} CPU, "
          f"{fmt(describe(busy_share), 0, ' %')} of what {info['nproc']} cores give in that wall time; "
          f"pytest: {results[-1]['line']}")
    print(table(["phase", "worker time (setup + call + teardown)", "share"], rows))
    print(table(["longest files (last run)", "worker time", "share"], file_rows))
    if known:
        ratio = describe([w / f for w, f in zip(walls, floors) if f is not None])  # each run against its own floor
        print(f"schedule floor (the longest file, or the worker time over {workers} workers): "
              f"{fmt(describe(known), 1, ' s')}; wall / floor {fmt(ratio, 2)} (near 1: no file order would be faster)")
    print("slowest tests (last run): " + "; ".join(f"{n} {s:.0f} s" for s, n in slowest))
    print(f"target: whole suite <= 240 s wall on 2 cores; logs in {logs.relative_to(ROOT)}; saved {path.relative_to(ROOT)}")
    sys.exit(1 if any(r["exit_code"] != 0 for r in results) else 0)


if __name__ == "__main__":
    main()
