"""Grading throughput: the harness (1 and 2 workers) vs serial `nbgrader autograde` vs bare nbclient.

    python bench/grading_throughput.py                  # 40 students x every part-ii notebook
    python bench/grading_throughput.py --students 3     # a small class (3 x 7 notebooks), for a quick look
    python bench/grading_throughput.py --quick          # 2 students, fewer kernel start-up repetitions

One synthetic class (perfect / partial / blank submissions in turn) is released and
collected once by the harness, then copied, so every configuration grades identical
files in an identical course:

    nbclient         every submitted notebook executed by bare nbclient, one fresh kernel
                     each (unix sockets, as the harness's), serially, killed at once after its
                     last cell (the cost of running the cells and nothing else); each notebook
                     in the form nbgrader runs it, its locked cells (the tests, hidden ones
                     included) put back from the source notebook, so all configurations run
                     the same cells (but for the harness's trusted checks: its kernels never
                     compute the expected values, which the harness recorded once and
                     compares outside the kernel; nbgrader's and these compute and compare
                     them in the kernel)
    nbclient-prestart  the same, with the next notebook's kernel started (and the modules the
                     harness's fork server preloads imported in it: numpy, torch,
                     matplotlib.pyplot, jsonschema, sympy) while the current one runs;
                     every notebook still gets a fresh process (a prototype for the harness)
    nbgrader         plain `nbgrader autograde part-ii`, serial, no sandbox
    harness-1, -2    `python -m autograder grade --workers N` (sandbox when bwrap works); each
                     submission's kernels are forked from one fork server that imported
                     those modules once, and each worker forks the next notebook's
                     kernel while the current one is graded, as nbclient-prestart does

Configurations run forward, then backward (ABBA), the start rotated every two
repetitions, so a drifting machine load favours none; ratios are taken within one
repetition. The per-notebook overhead is taken only between serial configurations: the
harness with one worker against bare nbclient (cold: every kernel starts and imports
while the clock runs) and against nbclient-prestart (warm: start-up hidden as the
harness hides it), so parallelism is not counted as negative overhead. Also measured:
nbclient on an empty notebook and on one that only imports what the harness preloads
(kernel start-up and import cost), and the harness's seconds
per notebook as its job table records them (kernel start hidden except for a job's first
notebook, which also pays for starting the second one). Figures are printed
last and saved to build/bench/grading_throughput.json (grading_throughput-dev.json for a
--quick or --only run, one without the sandbox, or a class under 4 students, so that it
never replaces a full run's record), which is also written after every repetition
("complete": false until the last), so an interrupted run keeps what it measured. The
trusted checks' expected values are recorded once before any timing: the harness's first
`grade` after the sources change pays that recording (a run of each source notebook),
which nbgrader never does. Everything generated goes under build/bench/grading/ (wiped
at the start).
The exit code is 1 when the graders disagree on a student's total in any repetition or
a harness run reports an error (its times would not be of grading done right; each
repetition says so as it ends), and 3 when a configuration's command fails outright.
"""

from __future__ import annotations

import argparse
import copy
import os
import shutil
import resource
import sys
import time
from pathlib import Path

# as make runs grading and CI runs the tests, whatever the caller exported
os.environ.update(OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", MKL_NUM_THREADS="1", PYTHONHASHSEED="0")

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import BUILD, ROOT, describe, fmt, load, machine, record_name, run_logged, save, table  # noqa: E402

sys.path.insert(0, str(ROOT))
from autograder.sandbox import PRELOAD_MODULES  # noqa: E402
VENV_BIN = Path(sys.executable).parent
os.environ["PATH"] = f"{VENV_BIN}{os.pathsep}{os.environ.get('PATH', '')}"  # nbgrader calls alembic from PATH
WORK = BUILD / "grading"
KINDS = ("perfect", "partial", "blank")
CONFIGS = ("nbclient", "nbclient-prestart", "nbgrader", "harness-1", "harness-2")
# what the harness's fork server imports once per submission (autograder/sandbox.py), so that the pre-started
# baseline hides exactly the imports the harness hides
PRELOAD = "import " + ", ".join(PRELOAD_MODULES)
CELL_TIMEOUT = 60
SERIAL = ("nbclient", "nbclient-prestart", "nbgrader", "harness-1")  # one notebook at a time


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


def autograded_forms(build: Path, files: list[Path]) -> list[Path]:
    """Each submitted notebook as nbgrader's autograde runs it: every cell the source notebook locks (its tests,
    hidden ones included) put back from the source notebook (type and source, as nbgrader's OverwriteCells puts
    them back), so that the bare-nbclient baselines run the cells nbgrader and the harness run; written under
    WORK/baseline. Deleted cells are not restored (the harness does that): the synthetic class deletes none."""
    import nbformat
    from nbgrader.utils import is_locked

    from autograder.cells import nbgrader_meta
    from autograder.course import Course

    course = Course.load(build)
    locked = {}
    for path in sorted(course.source_dir.glob("*.ipynb")):
        cells = nbformat.read(path, as_version=4).cells
        locked[path.stem] = {nbgrader_meta(c)["grade_id"]: c for c in cells
                             if nbgrader_meta(c).get("grade_id") and is_locked(c)}
    out = []
    for f in files:
        nb = nbformat.read(f, as_version=4)
        for cell in nb.cells:
            source = locked[f.stem].get(nbgrader_meta(cell).get("grade_id"))
            if source is not None:
                cell.cell_type, cell.source = source.cell_type, source.source
        dest = WORK / "baseline" / f.parent.parent.name / f.name  # submitted/<student>/part-ii/<notebook>
        dest.parent.mkdir(parents=True, exist_ok=True)
        nbformat.write(nb, dest)
        out.append(dest)
    return out


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

class RunFailed(Exception):
    """A configuration's command ended with an exit code that means it did not do the work."""


def run_cmd(cmd: list[str], env: dict, cwd: Path, log: Path, ok: tuple[int, ...] = (0,)) -> tuple[float, int]:
    """Run a command to completion (output to log); return (wall seconds, exit code); RunFailed when the code is
    not in ok."""
    started = time.perf_counter()
    rc = run_logged(cmd, log, env=env, cwd=cwd)
    seconds = time.perf_counter() - started
    if rc not in ok:
        raise RunFailed(f"{' '.join(cmd)} failed with exit code {rc}; see {log}")
    return seconds, rc


def harness(build: Path, workers: int, no_sandbox: bool, tag: str) -> tuple[float, int]:
    """`python -m autograder grade --workers N` on a fresh copy (build); (wall seconds, exit code)."""
    cmd = [sys.executable, "-m", "autograder", "grade", "--build", str(build), "--workers", str(workers)]
    if no_sandbox:
        cmd.append("--no-sandbox")
    env = dict(os.environ, PART_II_BUILD=str(build))
    # 1: the harness graded, but some job reported an error; kept, and the run's exit code reports it at the end
    return run_cmd(cmd, env, ROOT, WORK / f"harness-{workers}-{tag}.log", ok=(0, 1))


def job_table_seconds(build: Path) -> list[float]:
    """Seconds per graded notebook as the harness's job table recorded them (0.1 s resolution)."""
    import json

    from autograder.course import sqlite_url
    from autograder.grade import job_rows

    rows = job_rows(sqlite_url(build / 'course' / 'gradebook.db'))
    return [nb["seconds"] for row in rows.values() for nb in json.loads(row["notebooks"] or "{}").values()
            if nb.get("status") == "graded"]


def plain_nbgrader(build: Path, tag: str) -> tuple[float, int]:
    """Serial `nbgrader autograde part-ii` (no sandbox, nbgrader's defaults) on a fresh copy (build); (wall seconds,
    exit code)."""
    # nbgrader also reads the course root's nbgrader_config.py: the formgrader config that release writes there
    # turns Autograde off (autograder/formgrader.py), which is not nbgrader's default this baseline measures
    (build / "course" / "nbgrader_config.py").unlink(missing_ok=True)
    env = dict(os.environ, PART_II_BUILD=str(build), PART_II_ROOT=str(build / "course" / "student" / "part-ii"))
    cmd = [str(VENV_BIN / "nbgrader"), "autograde", "part-ii", f"--ExecutePreprocessor.timeout={CELL_TIMEOUT}"]
    return run_cmd(cmd, env, ROOT / "autograder", WORK / f"nbgrader-{tag}.log")  # cwd: its nbgrader_config.py


def ipc_config():
    """A Config giving the next kernel unix sockets in a folder of its own, as the harness's kernels have: over TCP,
    two kernels started at once may pick the same free port, and one's clients then talk to the other (seen here:
    'DELIM not in msg_list' in a kernel's log). The folder lies in WORK, which every run wipes first."""
    import tempfile

    from traitlets.config import Config

    (WORK / "ipc").mkdir(exist_ok=True)
    config = Config()
    config.KernelManager.transport = "ipc"
    config.KernelManager.ip = str(Path(tempfile.mkdtemp(dir=WORK / "ipc")) / "kernel")
    return config


def run_notebook(path: Path, km=None, kc=None) -> float:
    """Execute one notebook with nbclient in a scratch folder (errors allowed); wall seconds incl. kernel start.
    km, kc: a started kernel's manager, and a client that has readied it (nbclient does not ready it again)."""
    import nbformat
    from nbclient import NotebookClient

    nb = nbformat.read(path, as_version=4)
    scratch = WORK / "scratch"
    scratch.mkdir(exist_ok=True)
    started = time.perf_counter()
    # killed at once, as the harness and the pre-started path kill theirs: a graceful shutdown waits about 0.6 s
    client = NotebookClient(nb, timeout=CELL_TIMEOUT, kernel_name="python3", allow_errors=True, km=km,
                            shutdown_kernel="immediate", resources={"metadata": {"path": str(scratch)}},
                            config=ipc_config())
    if kc is not None:
        kc.allow_stdin = False  # as nbclient sets it on a client of its own
        client.kc = kc
    client.execute(cwd=str(scratch)) if km is None else client.execute()
    return time.perf_counter() - started


def start_warm_kernel():
    """Start a kernel and queue the heavy imports in it; returns (manager, client) without waiting."""
    from jupyter_client import KernelManager

    km = KernelManager(kernel_name="python3", config=ipc_config())
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
        # readied once, as bare nbclient readies a kernel (waiting for the preloads left, then for 0.2 s of IOPub
        # silence), and that client handed to nbclient: until 2026-12-06 nbclient readied it again with a client of
        # its own, which doubled the silent wait (letting nbclient ready it alone hung on a kernel still importing)
        kc.wait_for_ready(timeout=120)
        t0 = time.perf_counter()
        try:
            run_notebook(f, km=km, kc=kc)
        finally:
            kc.stop_channels()
            km.shutdown_kernel(now=True)
        per_nb.append(time.perf_counter() - t0)
    return time.perf_counter() - started, per_nb


def kernel_costs(reps: int) -> dict:
    """nbclient seconds for an empty notebook and for one that only imports what the harness preloads."""
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


def run_order(configs: list[str], rep: int) -> list[str]:
    """The configurations' order in repetition rep: forward, then backward (ABBA), the start rotated every two."""
    shift = (rep // 2) % len(configs)
    order = configs[shift:] + configs[:shift]
    return order if rep % 2 == 0 else order[::-1]


def run_config(c: str, rep: int, master: Path, files: list[Path], sandbox: bool) -> dict:
    """One configuration once: {"wall", "cpu", "rc", "build", "per_nb"}; the copy of the course is made before, and
    the bookkeeping done after, the CPU window."""
    tag = f"r{rep}"
    build = None
    if c == "nbgrader":
        build = copy_course(master, f"nbgrader-{tag}")
    elif c.startswith("harness"):
        build = copy_course(master, f"{c}-{tag}")
    cpu0 = cpu_seconds()
    per_nb, rc = [], 0
    if c in ("nbclient", "nbclient-prestart"):
        t, per_nb = bare_nbclient(files, prestart=c == "nbclient-prestart")
    elif c == "nbgrader":
        t, rc = plain_nbgrader(build, tag)
    else:
        t, rc = harness(build, int(c.rsplit("-", 1)[1]), not sandbox, tag)
    time.sleep(1)  # let exiting orphans finish, then reap them
    reap_orphans()
    return {"wall": t, "cpu": cpu_seconds() - cpu0, "rc": rc, "build": build, "per_nb": per_nb}


def summarize(info: dict, students: int, n_nb: int, reps_done: int, reps: int, sandbox: bool, kcost: dict,
              configs: list[str], seconds: dict, cpu: dict, per_nb: dict, totals_by_rep: list, exit_codes: dict) -> dict:
    """Every figure of the repetitions done so far, as saved to the JSON file."""
    result = {"machine": info, "students": students, "notebooks": n_nb, "reps": reps, "reps_done": reps_done,
              "complete": reps_done == reps, "sandbox": sandbox, "kernel_costs": kcost,
              "seconds": {c: describe(v) for c, v in seconds.items() if v},
              "cpu_seconds": {c: describe(v) for c, v in cpu.items() if v},
              "per_notebook": {c: describe(v) for c, v in per_nb.items() if v},
              "exit_codes": exit_codes, "totals": totals_by_rep, "derived": {}}
    if not reps_done:
        return result
    base, cold, warm = seconds.get("nbgrader"), seconds.get("nbclient"), seconds.get("nbclient-prestart")
    for c in configs:
        s = seconds[c]
        serial = c in SERIAL
        result["derived"][c] = {
            "notebooks_per_minute": describe([60 * n_nb / t for t in s]),
            "speedup_vs_nbgrader": describe([b / t for b, t in zip(base, s)]) if base else None,
            # only between serial runs: a parallel one's shorter wall time is not less overhead
            "overhead_vs_nbclient_s_per_notebook": (describe([(t - b) / n_nb for t, b in zip(s, cold)])
                                                    if cold and serial and c != "nbclient" else None),
            "overhead_vs_nbclient_prestart_s_per_notebook": (describe([(t - b) / n_nb for t, b in zip(s, warm)])
                                                             if warm and serial and c != "nbclient-prestart" else None),
            "cpu_s_per_notebook": describe([x / n_nb for x in cpu[c]]),
            "cpu_overhead_vs_nbclient_s_per_notebook": (describe([(x - b) / n_nb for x, b in zip(cpu[c], cpu["nbclient"])])
                                                        if cold and c != "nbclient" else None),
        }
    return result


def failures(result: dict) -> list[str]:
    """Why the measured grading cannot be trusted: graders that disagreed, harness runs that reported errors."""
    out = []
    for rep, totals_of in enumerate(result["totals"]):
        if len({tuple(sorted(t.items())) for t in totals_of.values()}) > 1:
            out.append(f"repetition {rep + 1}: the graders gave different totals ("
                       + "; ".join(f"{c}: {t}" for c, t in totals_of.items()) + ")")
    for c, codes in result["exit_codes"].items():
        if any(codes):
            out.append(f"{c} exited with {codes} (1: some job reported an error; see its log under {WORK})")
    return out


def print_report(result: dict, configs: list[str], n_notebooks: int, students: int) -> None:
    """The figures, last on the screen."""
    info, sandbox, kcost = result["machine"], result["sandbox"], result["kernel_costs"]
    d = result["derived"]
    show = lambda stat, digits=2, unit="": fmt(stat, digits, unit) if stat else "-"
    rows = [[c, show(result["seconds"][c], 1, " s"), show(d[c]["notebooks_per_minute"], 1),
             show(d[c]["speedup_vs_nbgrader"]), show(d[c]["overhead_vs_nbclient_s_per_notebook"], 2, " s"),
             show(d[c]["overhead_vs_nbclient_prestart_s_per_notebook"], 2, " s"), show(d[c]["cpu_s_per_notebook"], 2, " s"),
             show(d[c]["cpu_overhead_vs_nbclient_s_per_notebook"], 2, " s")] for c in configs]
    print()
    print(f"machine: {info['nproc']} x {info['cpu']}, {info['memory_gib']} GiB; load {info['load_1_5_15']} at start, "
          f"{info['load_at_end']} at end")
    print(f"class: {students} students x {n_notebooks} notebooks = {result['notebooks']} notebooks; harness "
          f"{'in the bubblewrap sandbox' if sandbox else 'without sandbox'}; {result['reps']} repetitions, "
          "median [min, max]")
    print(table(["configuration", "wall time", "notebooks/min", "speed-up vs nbgrader",
                 "wall overhead /nb vs nbclient", "vs nbclient-prestart", "CPU /nb", "CPU overhead /nb vs nbclient"], rows))
    print("(wall overhead: only between serial configurations, one notebook at a time; nbclient starts a cold kernel "
          "per notebook while the clock runs, nbclient-prestart hides that start-up as the harness does. "
          "CPU: user + system seconds of the configuration's processes and kernels; the harness imports its preloaded "
          "modules once per submission, every nbclient kernel once per notebook, so its CPU overhead is "
          "negative by design)")
    if sandbox and any(c.startswith("harness") for c in configs):
        print("(harness in the sandbox: bubblewrap's processes are orphaned to this process, a subreaper, and "
              "counted when it reaps them; a process killed inside bubblewrap's PID namespace after its reaper "
              "ended is not, so the harness's CPU figures are lower bounds. Each worker log also states what its "
              "fork server and kernels used.)")
    print(f"kernel start-up under nbclient: empty notebook {fmt(kcost['empty'], 2, ' s')}, "
          f"'{PRELOAD}' only {fmt(kcost['imports'], 2, ' s')}")
    for c, v in result["per_notebook"].items():
        print(f"per notebook, {c}: {fmt(v, 2, ' s')}")
    if result["totals"]:
        agree = all(len({tuple(sorted(t.items())) for t in r.values()}) <= 1 for r in result["totals"])
        print(f"total scores per student identical across graders in every repetition: {'yes' if agree else 'NO'}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--students", type=int, help="students in the class (default 40, which takes hours; 2 with --quick)")
    parser.add_argument("--reps", type=int, default=3, help="repetitions of every configuration, at least 3 (default 3)")
    parser.add_argument("--kernel-reps", type=int, help="repetitions of the kernel start-up probes (default 5; 3 with --quick)")
    parser.add_argument("--quick", action="store_true", help="a 2-student class, for development")
    parser.add_argument("--no-sandbox", action="store_true", help="grade with the harness's --no-sandbox")
    parser.add_argument("--only", action="append", choices=CONFIGS, help="run only these configurations (repeatable)")
    args = parser.parse_args()
    students = args.students if args.students is not None else (2 if args.quick else 40)
    kernel_reps = args.kernel_reps if args.kernel_reps is not None else (3 if args.quick else 5)
    if students < 1:
        parser.error(f"--students must be at least 1, got {students}")
    if args.reps < 3:  # the median of two is their mean
        parser.error(f"--reps must be at least 3 (median, min and max need several repetitions), got {args.reps}")
    if kernel_reps < 1:
        parser.error(f"--kernel-reps must be at least 1, got {kernel_reps}")
    configs = [c for c in CONFIGS if not args.only or c in args.only]
    sandbox = not args.no_sandbox
    if sandbox:
        from autograder.sandbox import sandbox_problem

        problem = sandbox_problem()
        if problem:
            print(f"{problem}: the harness grades with --no-sandbox", file=sys.stderr)
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
    baseline = autograded_forms(master, files)
    os.environ["PART_II_ROOT"] = str(master / "course" / "student" / "part-ii")  # bare kernels' code/ and data/

    print(f"kernel start-up probes ({kernel_reps} each)", flush=True)
    kcost = kernel_costs(kernel_reps)
    seconds = {c: [] for c in configs}
    cpu = {c: [] for c in configs}
    per_nb, totals_by_rep, exit_codes = {}, [], {c: [] for c in configs if c.startswith("harness")}
    # written now, so a run that fails in its first repetition leaves no earlier run's figures standing as its own
    # the run README quotes: every configuration, in the sandbox, a class of 4 or more (--students 3 is a quick look)
    name = record_name("grading_throughput", full=not args.only and not args.quick and sandbox and students >= 4)
    save(name, summarize(info, students, n_nb, 0, args.reps, sandbox, kcost, configs, seconds, cpu, per_nb,
                         totals_by_rep, exit_codes))
    for rep in range(args.reps):
        totals_of = {}
        for c in run_order(configs, rep):
            print(f"rep {rep + 1}/{args.reps}: {c} ...", flush=True)
            try:
                run = run_config(c, rep, master, baseline, sandbox)
            except RunFailed as exc:
                print(f"error: {exc}", file=sys.stderr)
                sys.exit(3)
            seconds[c].append(run["wall"])
            cpu[c].append(run["cpu"])
            if c in exit_codes:
                exit_codes[c].append(run["rc"])
            if run["build"] is not None:
                totals_of[c] = totals(run["build"])
            if c.startswith("harness"):
                per_nb.setdefault(f"{c} (job table)", []).extend(job_table_seconds(run["build"]))
            elif run["per_nb"]:
                per_nb.setdefault(c, []).extend(run["per_nb"])
            print(f"  {run['wall']:.1f} s wall, {run['cpu']:.1f} s CPU", flush=True)
        totals_by_rep.append(totals_of)
        if len({tuple(sorted(t.items())) for t in totals_of.values()}) > 1:  # said now: a full run takes hours
            print(f"  warning: the graders gave different totals in repetition {rep + 1}: {totals_of}", file=sys.stderr)
        info["load_at_end"] = [round(x, 2) for x in load()]
        result = summarize(info, students, n_nb, rep + 1, args.reps, sandbox, kcost, configs, seconds, cpu, per_nb,
                           totals_by_rep, exit_codes)
        path = save(name, result)

    print_report(result, configs, len(notebooks), students)
    print(f"saved {path.relative_to(ROOT)}")
    problems = failures(result)
    if problems:
        print("error: these times are not of grading done right:\n  " + "\n  ".join(problems), file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
