"""Reference cross-entropy at LLM scale: ours vs PyTorch (1 thread), naive numpy, and the np.exp floor.

    python bench/reference_ce.py            # logits [4096, 50257] float32, 5 repetitions
    python bench/reference_ce.py --quick    # [512, 50257], 3 repetitions (for development)

Every figure is a ratio against a baseline timed in the same repetition (the
methods run round-robin, in a rotated order each repetition), so a shared, loaded
machine slows numerator and denominator alike. Reported: median [min, max] over the
repetitions, for wall time and for this process's CPU time. Peak extra memory is
measured once per method in a fresh subprocess (RSS high-water mark minus RSS with
the logits already in memory) and, for the numpy paths, with tracemalloc.
Figures are printed last and saved to build/bench/reference_ce.json (reference_ce-dev.json for a run at
another size, or without the memory measurement, so that it never replaces the full run's record).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

# one thread everywhere, whatever the caller exported: the target compares against PyTorch at one thread, and
# numpy's BLAS (our first pass is a matrix-vector product) follows OPENBLAS_NUM_THREADS, not OMP_NUM_THREADS alone
THREAD_VARIABLES = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")
EXPORTED_THREADS = {name: os.environ.get(name) for name in THREAD_VARIABLES}  # what the caller had set, for the record
for _name in THREAD_VARIABLES:
    os.environ[_name] = "1"

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import ROOT, Timer, describe, die, fmt, load, machine, record_name, save, table  # noqa: E402

# float32 rounding: each result within this many float32 epsilons (relative) of the one it is compared with
ACCURACY_LIMIT_EPS32 = 2.0
ACCURACY_BLOCK_ROWS = 256  # rows per block of the float64 and unchunked references (bounded memory)

sys.path.insert(0, str(ROOT / "code" / "part-ii"))
METHODS = ("ours", "torch", "naive", "floor_out", "floor_alloc")
LABELS = {
    "ours": "ours: probability_practice.cross_entropy",
    "torch": "torch.nn.functional.cross_entropy, 1 thread",
    "naive": "naive numpy (materialises the softmax)",
    "floor_out": "floor: np.exp(z, out=prefaulted buffer)",
    "floor_alloc": "floor: np.exp(z) (fresh array, page faults)",
}


def make_inputs(rows: int, classes: int, seed: int = 0):
    """Logits [rows, classes] float32 (N(0, 2^2), generated in place) and integer targets [rows]."""
    import numpy as np

    rng = np.random.default_rng(seed)
    z = rng.standard_normal((rows, classes), dtype=np.float32)
    z *= 2.0
    return z, rng.integers(0, classes, rows)


def naive_ce(z, y):
    """Mean cross-entropy the textbook way: the whole softmax array, then -log of the target column."""
    import numpy as np

    e = np.exp(z - z.max(axis=1, keepdims=True))
    p = e / e.sum(axis=1, keepdims=True)
    return float(-np.log(p[np.arange(len(y)), y]).mean())


def build_calls(z, y):
    """One zero-argument callable per method, over the same logits and targets."""
    import numpy as np
    import torch
    import torch.nn.functional as F

    import probability_practice as pp

    torch.set_num_threads(1)
    zt, yt = torch.from_numpy(z), torch.from_numpy(y)
    out = np.empty_like(z)
    np.exp(z, out=out)  # fault the pages in once, so the floor measures exp and memory traffic only
    return {
        "ours": lambda: pp.cross_entropy(z, y),
        "torch": lambda: F.cross_entropy(zt, yt).item(),
        "naive": lambda: naive_ce(z, y),
        "floor_out": lambda: np.exp(z, out=out),
        "floor_alloc": lambda: np.exp(z),
    }


def thread_counts() -> dict:
    """{library: threads} for PyTorch's intra-op pool and every BLAS/OpenMP pool loaded in this process."""
    import torch
    from threadpoolctl import threadpool_info

    counts = {"torch": torch.get_num_threads()}
    for pool in threadpool_info():
        counts[f"{pool['internal_api']} ({Path(pool['filepath']).name})"] = pool["num_threads"]
    return counts


def require_one_thread() -> dict:
    """The thread counts, after checking that every pool runs one thread (exit 1 otherwise)."""
    counts = thread_counts()
    many = {name: n for name, n in counts.items() if n != 1}
    if many:
        print(f"error: every library must compute on one thread, but "
              f"{', '.join(f'{k} uses {v}' for k, v in many.items())}", file=sys.stderr)
        sys.exit(1)
    return counts


def time_round_robin(calls: dict, reps: int) -> dict:
    """({method: {"wall": [...], "cpu": [...]}}, {method: the last timed call's result}): each repetition runs
    every method once, order rotated."""
    names = list(calls)
    times = {n: {"wall": [], "cpu": []} for n in names}
    results = {}
    for name in names:  # warm-up: imports, first-touch of code paths
        calls[name]()
    for rep in range(reps):
        order = names[rep % len(names):] + names[: rep % len(names)]
        for name in order:
            with Timer() as t:
                results[name] = calls[name]()
            times[name]["wall"].append(t.wall)
            times[name]["cpu"].append(t.cpu)
    return times, results


def ratios(times: dict, num: str, den: str, clock: str) -> dict:
    """describe() of time[num] / time[den] per repetition on one clock."""
    return describe([a / b for a, b in zip(times[num][clock], times[den][clock])])


def _status_kib(field: str) -> int:
    """A field of /proc/self/status in KiB (VmRSS, VmHWM)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"/proc/self/status has no {field}")


def memory_child(method: str, rows: int, classes: int) -> None:
    """(Subprocess) print peak RSS growth during one call and, for numpy paths, its tracemalloc peak, in bytes."""
    import tracemalloc

    z, y = make_inputs(rows, classes)
    calls = build_calls(z, y)  # includes the prefaulted out= buffer of the floor: part of the baseline
    Path("/proc/self/clear_refs").write_text("5")  # reset the RSS high-water mark (VmHWM) to the current RSS
    base = _status_kib("VmRSS")
    calls[method]()
    rss_extra = max(0, _status_kib("VmHWM") - base) * 1024
    traced = -1
    if method != "torch":  # torch's allocator is not seen by tracemalloc
        tracemalloc.start()
        calls[method]()
        traced = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    print(rss_extra, traced)


def measure_memory(rows: int, classes: int) -> dict:
    """{method: (rss_peak_extra_bytes, tracemalloc_peak_bytes or None)} from one fresh subprocess each."""
    out = {}
    for method in METHODS:
        res = subprocess.run([sys.executable, __file__, "--memory-child", method, "--rows", str(rows),
                              "--classes", str(classes)], capture_output=True, text=True)
        if res.returncode != 0:
            die(f"memory measurement of {method} failed:\n{res.stderr[-2000:]}")
        rss, traced = (int(v) for v in res.stdout.split()[-2:])
        out[method] = (rss, None if traced < 0 else traced)
    return out


def reference_losses(z, y) -> tuple:
    """Per-row losses [rows] float64 two independent ways: PyTorch in float64, and the unchunked float32 formula."""
    import numpy as np
    import torch
    import torch.nn.functional as F

    exact, unchunked = np.empty(len(y)), np.empty(len(y))
    for start in range(0, len(y), ACCURACY_BLOCK_ROWS):  # blocks of rows: rows are independent, memory stays small
        rows = slice(start, start + ACCURACY_BLOCK_ROWS)
        zz, yy = z[rows], y[rows]
        exact[rows] = F.cross_entropy(torch.from_numpy(zz.astype(np.float64)), torch.from_numpy(yy),
                                      reduction="none").numpy()
        m = zz.max(axis=1, keepdims=True)  # each row whole, all in float32
        unchunked[rows] = m[:, 0] + np.log(np.exp(zz - m).sum(axis=1)) - zz[np.arange(len(yy)), yy]
    return exact, unchunked


def accuracy(z, y, timed: dict) -> dict:
    """Ours per row (every row) vs PyTorch float64 and vs the unchunked float32 formula, and every timed mean vs
    the float64 mean; differences relative, in float32 epsilons."""
    import numpy as np

    import probability_practice as pp

    eps = float(np.finfo(np.float32).eps)
    exact, unchunked = reference_losses(z, y)
    ours = pp.nll_from_logits(z, y).astype(np.float64)
    mean = float(exact.mean())
    return {
        "rows_checked": len(y),
        "ours_rows_vs_torch_float64": float(np.max(np.abs(ours - exact) / exact) / eps),
        "ours_rows_vs_unchunked_float32": float(np.max(np.abs(ours - unchunked) / exact) / eps),
        "timed_mean_vs_float64": {m: abs(float(timed[m]) - mean) / mean / eps for m in ("ours", "torch", "naive")},
        "limit_eps32": ACCURACY_LIMIT_EPS32,
    }


def accuracy_failures(acc: dict) -> list[str]:
    """What of ours is further than the limit from its references (empty when all is within float32 rounding)."""
    checks = {"per-row losses vs PyTorch float64": acc["ours_rows_vs_torch_float64"],
              "per-row losses vs the unchunked float32 formula": acc["ours_rows_vs_unchunked_float32"],
              "the timed mean vs the float64 mean": acc["timed_mean_vs_float64"]["ours"]}
    return [f"{what}: {value:.2f} eps32" for what, value in checks.items() if not value <= acc["limit_eps32"]]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, help="rows of logits (default 4096; 512 with --quick)")
    parser.add_argument("--classes", type=int, default=50257, help="classes per row (default 50257, GPT-2's vocabulary)")
    parser.add_argument("--reps", type=int, help="timed repetitions, at least 3 (default 5; 3 with --quick)")
    parser.add_argument("--quick", action="store_true", help="small size and fewer repetitions, for development")
    parser.add_argument("--no-memory", action="store_true", help="skip the memory subprocesses")
    parser.add_argument("--memory-child", choices=METHODS, help=argparse.SUPPRESS)
    args = parser.parse_args()
    rows = args.rows if args.rows is not None else (512 if args.quick else 4096)
    reps = args.reps if args.reps is not None else (3 if args.quick else 5)
    if rows < 1:
        parser.error(f"--rows must be at least 1, got {rows}")
    if args.classes < 2:
        parser.error(f"--classes must be at least 2, got {args.classes}")
    if reps < 3:
        parser.error(f"--reps must be at least 3 (median, min and max need several repetitions), got {reps}")
    if args.memory_child:
        memory_child(args.memory_child, rows, args.classes)
        return

    import numpy as np
    import torch

    info = machine()
    threads = require_one_thread()
    z, y = make_inputs(rows, args.classes)
    logits_bytes = z.nbytes
    print(f"logits [{rows}, {args.classes}] float32 = {logits_bytes / 2**20:.0f} MiB; {reps} repetitions; "
          f"numpy {np.__version__}, torch {torch.__version__}; load at start {info['load_1_5_15']}", flush=True)
    calls = build_calls(z, y)
    times, timed = time_round_robin(calls, reps)
    acc = accuracy(z, y, timed)
    del calls
    del z
    mem = {} if args.no_memory else measure_memory(rows, args.classes)
    info["load_at_end"] = [round(x, 2) for x in load()]

    result = {"machine": info, "rows": rows, "classes": args.classes, "reps": reps, "logits_bytes": logits_bytes,
              "seconds": {m: {c: describe(times[m][c]) for c in ("wall", "cpu")} for m in METHODS},
              "ratios": {}, "memory": mem, "accuracy": acc, "threads": threads,
              "exported_thread_variables": EXPORTED_THREADS}
    rows_out = []
    for m in METHODS:
        r = {c: ratios(times, m, "floor_out", c) for c in ("wall", "cpu")}
        vs_ours = {c: ratios(times, m, "ours", c) for c in ("wall", "cpu")}
        result["ratios"][m] = {"vs_floor_out": r, "vs_ours": vs_ours}
        rss, traced = mem.get(m, (None, None))
        memtxt = "-" if rss is None else f"{100 * rss / logits_bytes:.1f} %"
        tracetxt = "-" if traced is None else f"{100 * traced / logits_bytes:.2f} %"
        rows_out.append([LABELS[m], fmt(describe(times[m]["wall"]), 3, " s"), fmt(r["wall"]), fmt(r["cpu"]),
                         fmt(vs_ours["wall"]), fmt(vs_ours["cpu"]), memtxt, tracetxt])
    full = rows == 4096 and args.classes == 50257 and not args.no_memory  # the run README quotes
    path = save(record_name("reference_ce", full), result)
    print()
    print(f"machine: {info['nproc']} x {info['cpu']}, {info['memory_gib']} GiB; load {info['load_1_5_15']} at start, "
          f"{info['load_at_end']} at end; OPENBLAS_CORETYPE={info['env']['OPENBLAS_CORETYPE']}; threads: "
          + ", ".join(f"{k} {v}" for k, v in threads.items()))
    print(f"logits [{rows}, {args.classes}] float32 ({logits_bytes / 2**20:.0f} MiB), integer targets, mean reduction; "
          f"median [min, max] over {reps} repetitions")
    print(table(["method", "wall time", "/ floor (wall)", "/ floor (cpu)", "/ ours (wall)", "/ ours (cpu)",
                 "peak extra RSS", "tracemalloc peak"], rows_out))
    means = acc["timed_mean_vs_float64"]
    print(f"accuracy (all {acc['rows_checked']} rows, relative, in float32 epsilons): ours per row vs PyTorch float64 "
          f"{acc['ours_rows_vs_torch_float64']:.2f}, vs the unchunked float32 formula "
          f"{acc['ours_rows_vs_unchunked_float32']:.2f}; the timed means vs the float64 mean: "
          + ", ".join(f"{m} {v:.2f}" for m, v in means.items()) + f" (limit for ours: {acc['limit_eps32']:g})")
    t = result["ratios"]
    ours_mem = "-" if not mem else f"{100 * mem['ours'][0] / logits_bytes:.1f} % (RSS)"
    print(f"targets: torch / ours >= 2: {fmt(t['torch']['vs_ours']['wall'])} (wall); "
          f"ours / floor <= 2.5: {fmt(t['ours']['vs_floor_out']['wall'])} (wall); "
          f"extra memory <= 10 %: {ours_mem}")
    print(f"saved {path.relative_to(ROOT)}")
    failures = accuracy_failures(acc)
    if failures:
        print("error: ours is not equal to its references to float32 rounding: " + "; ".join(failures), file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
