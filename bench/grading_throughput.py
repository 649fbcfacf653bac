"""Grading throughput: the harness (1 and 2 workers) vs serial `nbgrader autograde` vs bare nbclient.

    python bench/grading_throughput.py                  # 40 students x every part-ii notebook
    python bench/grading_throughput.py --students 3     # a small class (3 x 7 notebooks), for a quick look
    python bench/grading_throughput.py --quick          # 2 students, fewer kernel start-up repetitions

One synthetic class (perfect / partial / blank submissions in turn) is released and
collected once by the harness, then copied, so every configuration grades identical
files in an identical course:

    nbclient         every submitted notebook executed by bare nbclient, one fresh kernel
                     each, serially (the cost of running the cells and nothing else)
    nbclient-prestart  the same, with the next notebook's kernel started (and numpy,
                     torch and matplotlib imported in it) while the current one runs;
                     every notebook still gets a fresh process (a prototype for the harness)
    nbgrader         plain `nbgrader autograde part-ii`, serial, no sandbox
    harness-1, -2    `python -m autograder grade --workers N` (sandbox when bwrap works); each
                     submission's kernels are forked from one fork server that imported
                     numpy, torch and pyplot once, and each worker forks the next notebook's
                     kernel while the current one is graded, as nbclient-prestart does

Configurations run in a rotated order each repetition; ratios are taken within one
repetition. Also measured: nbclient on an empty notebook and on one that only imports
numpy, torch and matplotlib (kernel start-up and import cost), and the harness's seconds
per notebook as its job table records them (kernel start hidden except for a job's first
notebook, which also pays for starting the second one). Figures are printed
last and saved to build/bench/grading_throughput.json. Everything generated goes
under build/bench/grading/ (wiped at the start).
"""

from __future__ import annotations

import argparse
import copy
import os
import shutil
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("PYTHONHASHSEED", "0")

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import BUILD, ROOT, describe, die, fmt, load, machine, save, table  # noqa: E402

sys.path.insert(0, str(ROOT))
VENV_BIN = Path(sys.executable).parent
os.environ["PATH"] = f"{VENV_BIN}{os.pathsep}{os.environ.get('PATH', '')}"  # nbgrader calls alembic from PATH
WORK = BUILD / "grading"
KINDS = ("perfect", "partial", "blank")
CONFIGS = ("nbclient", "nbclient-prestart", "nbgrader", "harness-1", "harness-2")
PRELOAD = "import numpy, torch, matplotlib.pyplot"
CELL_TIMEOUT = 60


# --- the class -------------------------------------------------------------------------------

def partial_copy(solved, release, assignment):
    """Solved notebooks with every second exercise of each notebook put back to the release stub."""
    from autograder.cells import nbgrader_meta

    nbs = copy.deepcopy(solved)
    for ex in assignment.exercises()[::2]:
        stub = next(c for c in release[ex.notebook].cells if nbgrader_meta(c).get("grade_id") == ex.solution_id)
        cell = next(c for c in nbs[ex.notebook].cells if nbgrader_meta(c).get("grade_id") == ex.solution_id)
        cell.source = stub.source
    return nbs


def make_class(students: int) -> tuple[Path, list[str]]:
    """Release part-ii into WORK/master, collect a class of `students`; return (build dir, notebook names)."""
    from autograder.collect import collect
    from autograder.course import Course
    from autograder.release import release
    from autograder.sample_class import Assignment, SampleStudent, _dump, write_lms_zip

    master = WORK / "master"
    course = Course.load(master)
    release(course)
    a = Assignment.read(course)
    solved = a.solved()
    kinds = {"perfect": solved, "partial": partial_copy(solved, a.release, a), "blank": a.release}
    roster = []
    for i in range(students):
        kind = KINDS[i % len(KINDS)]
        files = {f"{n}.ipynb": _dump(nb) for n, nb in kinds[kind].items()}
        roster.append(SampleStudent(f"s{i + 1:03d}-{kind}", kind, files))
    lms = write_lms_zip(roster, WORK / "lms.zip")
    # a download of one student's folder does not say whose it is (collect asks for --student)
    collect(course, lms, student=roster[0].student if students == 1 else None)
    return master, course.notebook_names()


def warm_records(build: Path, notebooks: list[str]) -> None:
    """Record the trusted checks' expected values once (cached by content), outside every timing."""
    from autograder.course import Course
    from autograder.grade import expected_records

    expected_records(Course.load(build), notebooks)


def copy_course(master: Path, name: str) -> Path:
    """A fresh copy of the collected course as its own build folder (its formgrader config pointed at the copy)."""
    dest = WORK / name
    if dest.exists():
        shutil.rmtree(dest)
    shutil.copytree(master, dest, symlinks=True)
    config = dest / "course" / "nbgrader_config.py"  # nbgrader also loads this file, and it names the master course
    if config.exists():
        config.write_text(config.read_text().replace(str(master), str(dest)))
    return dest


def become_subreaper() -> None:
    """Adopt orphaned descendants (e.g. a fork server or a kernel whose parent exited), so their CPU time counts."""
    import ctypes

    PR_SET_CHILD_SUBREAPER = 36
    ctypes.CDLL("libc.so.6", use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1)


def reap_orphans() -> None:
    """Wait for adopted descendants that have exited (their CPU time then enters RUSAGE_CHILDREN)."""
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def cpu_seconds() -> float:
    """CPU seconds (user + system) of this process and of every finished, reaped descendant."""
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


def submitted_files(build: Path) -> list[Path]:
    """Every submitted notebook of the course, by student then notebook."""
    return sorted((build / "course" / "submitted").glob("*/part-ii/*.ipynb"))


# --- configurations ------------------------------------------------------------------------------

def run_cmd(cmd: list[str], env: dict, cwd: Path, log: Path, ok: tuple[int, ...] = (0,)) -> float:
    """Run a command to completion (output to log); return wall seconds; exit when its code is not in ok."""
    started = time.perf_counter()
    with open(log, "w") as fh:
        rc = subprocess.run(cmd, env=env, cwd=cwd, stdout=fh, stderr=subprocess.STDOUT).returncode
    seconds = time.perf_counter() - started
    if rc not in ok:
        die(f"{' '.join(cmd)} failed with exit code {rc}; see {log}")
    return seconds


def harness(master: Path, workers: int, no_sandbox: bool, tag: str) -> float:
    """`python -m autograder grade --workers N` on a fresh copy; wall seconds."""
    build = copy_course(master, f"harness-{workers}-{tag}")
    cmd = [sys.executable, "-m", "autograder", "grade", "--build", str(build), "--workers", str(workers)]
    if no_sandbox:
        cmd.append("--no-sandbox")
    env = dict(os.environ, PART_II_BUILD=str(build))
    # 1: the harness graded, but some job reported an error (the totals check below says whether it matters)
    return run_cmd(cmd, env, ROOT, WORK / f"harness-{workers}-{tag}.log", ok=(0, 1))


def job_table_seconds(build: Path) -> list[float]:
    """Seconds per graded notebook as the harness's job table recorded them (0.1 s resolution)."""
    import json

    from autograder.course import sqlite_url
    from autograder.grade import job_rows

    rows = job_rows(sqlite_url(build / 'course' / 'gradebook.db'))
    return [nb["seconds"] for row in rows.values() for nb in json.loads(row["notebooks"] or "{}").values()
            if nb.get("status") == "graded"]


def plain_nbgrader(master: Path, tag: str) -> float:
    """Serial `nbgrader autograde part-ii` (no sandbox, nbgrader's defaults) on a fresh copy; wall seconds."""
    build = copy_course(master, f"nbgrader-{tag}")
    # nbgrader also reads the course root's nbgrader_config.py: the formgrader config that release writes there
    # turns Autograde off (autograder/formgrader.py), which is not nbgrader's default this baseline measures
    (build / "course" / "nbgrader_config.py").unlink(missing_ok=True)
    env = dict(os.environ, PART_II_BUILD=str(build), PART_II_ROOT=str(build / "course" / "student" / "part-ii"))
    cmd = [str(VENV_BIN / "nbgrader"), "autograde", "part-ii", f"--ExecutePreprocessor.timeout={CELL_TIMEOUT}"]
    return run_cmd(cmd, env, ROOT / "autograder", WORK / f"nbgrader-{tag}.log")  # cwd: its nbgrader_config.py


def run_notebook(path: Path, km=None) -> float:
    """Execute one notebook with nbclient in a scratch folder (errors allowed); wall seconds incl. kernel start."""
    import nbformat
    from nbclient import NotebookClient

    nb = nbformat.read(path, as_version=4)
    scratch = WORK / "scratch"
    scratch.mkdir(exist_ok=True)
    started = time.perf_counter()
    client = NotebookClient(nb, timeout=CELL_TIMEOUT, kernel_name="python3", allow_errors=True, km=km,
                            resources={"metadata": {"path": str(scratch)}})
    client.execute(cwd=str(scratch)) if km is None else client.execute()
    return time.perf_counter() - started


def start_warm_kernel():
    """Start a kernel and queue the heavy imports in it; returns (manager, client) without waiting."""
    from jupyter_client import KernelManager

    km = KernelManager(kernel_name="python3")
    scratch = WORK / "scratch"
    scratch.mkdir(exist_ok=True)
    km.start_kernel(cwd=str(scratch))
    kc = km.client()
    kc.start_channels()
    kc.execute(PRELOAD, silent=True)
    return km, kc


def bare_nbclient(files: list[Path], prestart: bool) -> tuple[float, list[float]]:
    """Execute every file serially, each in a fresh kernel; with prestart the next kernel boots meanwhile."""
    per_nb = []
    started = time.perf_counter()
    if not prestart:
        for f in files:
            per_nb.append(run_notebook(f))
        return time.perf_counter() - started, per_nb
    nxt = start_warm_kernel()
    for i, f in enumerate(files):
        km, kc = nxt
        nxt = start_warm_kernel() if i + 1 < len(files) else None  # boots while this notebook runs
        kc.wait_for_ready(timeout=120)
        t0 = time.perf_counter()
        try:
            run_notebook(f, km=km)
        finally:
            kc.stop_channels()
            km.shutdown_kernel(now=True)
        per_nb.append(time.perf_counter() - t0)
    return time.perf_counter() - started, per_nb


def kernel_costs(reps: int) -> dict:
    """nbclient seconds for an empty notebook and for one that only imports numpy, torch and matplotlib."""
    import nbformat

    out = {}
    for name, source in (("empty", None), ("imports", PRELOAD)):
        nb = nbformat.v4.new_notebook()
        if source:
            nb.cells.append(nbformat.v4.new_code_cell(source))
        path = WORK / f"kernel-{name}.ipynb"
        nbformat.write(nb, path)
        out[name] = describe([run_notebook(path) for _ in range(reps)])
    return out


# --- scores: do the graders agree? --------------------------------------------------------------

def totals(build: Path) -> dict[str, float]:
    """{student: total score} from a course's gradebook."""
    from nbgrader.api import Gradebook

    from autograder.course import sqlite_url

    url = sqlite_url(build / 'course' / 'gradebook.db')
    with Gradebook(url, "llm-probability-part-ii") as gb:
        return {s.student.id: round(s.score, 6) for s in gb.assignment_submissions("part-ii")}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--students", type=int, help="students in the class (default 40; 2 with --quick)")
    parser.add_argument("--reps", type=int, default=1, help="repetitions of every configuration (default 1)")
    parser.add_argument("--kernel-reps", type=int, help="repetitions of the kernel start-up probes (default 5; 3 with --quick)")
    parser.add_argument("--quick", action="store_true", help="a 2-student class, for development")
    parser.add_argument("--no-sandbox", action="store_true", help="grade with the harness's --no-sandbox")
    parser.add_argument("--only", action="append", choices=CONFIGS, help="run only these configurations (repeatable)")
    args = parser.parse_args()
    students = args.students if args.students is not None else (2 if args.quick else 40)
    kernel_reps = args.kernel_reps if args.kernel_reps is not None else (3 if args.quick else 5)
    if students < 1 or args.reps < 1 or kernel_reps < 1:
        die(f"--students, --reps and --kernel-reps must be >= 1, got {students}, {args.reps}, {kernel_reps}")
    configs = [c for c in CONFIGS if not args.only or c in args.only]
    sandbox = not args.no_sandbox
    if sandbox:
        from autograder.sandbox import bwrap_available

        if not bwrap_available():
            print("bubblewrap is not available: the harness grades with --no-sandbox", file=sys.stderr)
            sandbox = False

    info = machine()
    become_subreaper()
    if WORK.exists():
        shutil.rmtree(WORK)
    WORK.mkdir(parents=True)
    print(f"class: {students} students ({', '.join(KINDS)} in turn); load at start {info['load_1_5_15']}", flush=True)
    master, notebooks = make_class(students)
    files = submitted_files(master)
    n_nb = len(files)
    print(f"{n_nb} submitted notebooks ({len(notebooks)} per student); recording trusted checks", flush=True)
    warm_records(master, notebooks)
    os.environ["PART_II_ROOT"] = str(master / "course" / "student" / "part-ii")  # bare kernels' code/ and data/

    print(f"kernel start-up probes ({kernel_reps} each)", flush=True)
    kcost = kernel_costs(kernel_reps)
    seconds = {c: [] for c in configs}
    cpu = {c: [] for c in configs}
    per_nb = {}
    agree = {}
    for rep in range(args.reps):
        order = configs[rep % len(configs):] + configs[: rep % len(configs)]
        for c in order:
            print(f"rep {rep + 1}/{args.reps}: {c} ...", flush=True)
            cpu0 = cpu_seconds()
            if c == "nbclient":
                t, per_nb["nbclient"] = bare_nbclient(files, prestart=False)
            elif c == "nbclient-prestart":
                t, per_nb["nbclient-prestart"] = bare_nbclient(files, prestart=True)
            elif c == "nbgrader":
                t = plain_nbgrader(master, f"r{rep}")
                agree["nbgrader"] = totals(WORK / f"nbgrader-r{rep}")
            else:
                w = int(c.rsplit("-", 1)[1])
                t = harness(master, w, not sandbox, f"r{rep}")
                agree[c] = totals(WORK / f"harness-{w}-r{rep}")
                per_nb.setdefault(f"{c} (job table)", []).extend(job_table_seconds(WORK / f"harness-{w}-r{rep}"))
            time.sleep(1)  # let exiting orphans finish, then reap them
            reap_orphans()
            seconds[c].append(t)
            cpu[c].append(cpu_seconds() - cpu0)
            print(f"  {t:.1f} s wall, {cpu[c][-1]:.1f} s CPU", flush=True)
    info["load_at_end"] = [round(x, 2) for x in load()]

    result = {"machine": info, "students": students, "notebooks": n_nb, "reps": args.reps,
              "sandbox": sandbox, "kernel_costs": kcost, "seconds": {c: describe(v) for c, v in seconds.items()},
              "cpu_seconds": {c: describe(v) for c, v in cpu.items()},
              "per_notebook": {c: describe(v) for c, v in per_nb.items() if v}}
    base = seconds.get("nbgrader")
    bare = seconds.get("nbclient")
    rows = []
    for c in configs:
        s = seconds[c]
        nbpm = [60 * n_nb / t for t in s]
        vs_nbgrader = describe([b / t for b, t in zip(base, s)]) if base else None
        overhead = describe([(t - b) / n_nb for t, b in zip(s, bare)]) if bare else None
        cpu_nb = describe([x / n_nb for x in cpu[c]])
        cpu_over = describe([(x - b) / n_nb for x, b in zip(cpu[c], cpu["nbclient"])]) if bare else None
        result.setdefault("derived", {})[c] = {"notebooks_per_minute": describe(nbpm), "speedup_vs_nbgrader": vs_nbgrader,
                                               "overhead_vs_nbclient_s_per_notebook": overhead,
                                               "cpu_s_per_notebook": cpu_nb, "cpu_overhead_vs_nbclient_s_per_notebook": cpu_over}
        rows.append([c, fmt(describe(s), 1, " s"), fmt(describe(nbpm), 1), fmt(vs_nbgrader) if vs_nbgrader else "-",
                     fmt(overhead, 2, " s") if overhead else "-", fmt(cpu_nb, 2, " s"),
                     fmt(cpu_over, 2, " s") if cpu_over else "-"])
    if agree:
        ref = next(iter(agree.values()))
        result["scores_agree"] = {c: v == ref for c, v in agree.items()}
        result["totals"] = agree
    path = save("grading_throughput", result)

    print()
    print(f"machine: {info['nproc']} x {info['cpu']}, {info['memory_gib']} GiB; load {info['load_1_5_15']} at start, "
          f"{info['load_at_end']} at end")
    print(f"class: {students} students x {len(notebooks)} notebooks = {n_nb} notebooks; harness "
          f"{'in the bubblewrap sandbox' if sandbox else 'without sandbox'}; {args.reps} repetition(s), "
          "median [min, max]")
    print(table(["configuration", "wall time", "notebooks/min", "speed-up vs nbgrader", "wall overhead vs nbclient /nb",
                 "CPU /nb", "CPU overhead vs nbclient /nb"], rows))
    print("(CPU: user + system seconds of the configuration's processes and kernels; on a shared, loaded machine it is "
          "the steadier measure of cost, while wall time also reflects how much of the machine the run got)")
    if sandbox and any(c.startswith("harness") for c in configs):
        print("(harness in the sandbox: bubblewrap's processes are orphaned to this process, a subreaper, and "
              "counted when it reaps them; a process killed inside bubblewrap's PID namespace after its reaper "
              "ended is not, so the harness's CPU figures are lower bounds. Each worker log also states what its "
              "fork server and kernels used.)")
    print(f"kernel start-up under nbclient: empty notebook {fmt(kcost['empty'], 2, ' s')}, "
          f"'{PRELOAD}' only {fmt(kcost['imports'], 2, ' s')}")
    for c, v in per_nb.items():
        if not v:
            continue
        print(f"per notebook, {c}: {fmt(describe(v), 2, ' s')} (median {statistics.median(v):.2f} s)")
    if agree:
        print("total scores per student identical across graders: "
              + ", ".join(f"{c}: {'yes' if ok else 'NO'}" for c, ok in result["scores_agree"].items()))
    print(f"saved {path.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
