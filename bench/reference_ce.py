"""Reference cross-entropy at LLM scale: ours vs PyTorch (1 thread), naive numpy, and the np.exp floor.

    python bench/reference_ce.py            # logits [4096, 50257] float32, 5 repetitions
    python bench/reference_ce.py --quick    # [512, 50257], 3 repetitions (for development)

Every figure is a ratio against a baseline timed in the same repetition (the
methods run round-robin, in a rotated order each repetition), so a shared, loaded
machine slows numerator and denominator alike. Reported: median [min, max] over the
repetitions, for wall time and for this process's CPU time. Peak extra memory is
measured once per method in a fresh subprocess (RSS high-water mark minus RSS with
the logits already in memory) and, for the numpy paths, with tracemalloc.
Figures are printed last and saved to build/bench/reference_ce.json.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import ROOT, Timer, describe, die, fmt, load, machine, save, table  # noqa: E402

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


def time_round_robin(calls: dict, reps: int) -> dict:
    """{method: {"wall": [...], "cpu": [...]}}: each repetition runs every method once, order rotated."""
    names = list(calls)
    times = {n: {"wall": [], "cpu": []} for n in names}
    for name in names:  # warm-up: imports, first-touch of code paths
        calls[name]()
    for rep in range(reps):
        order = names[rep % len(names):] + names[: rep % len(names)]
        for name in order:
            with Timer() as t:
                calls[name]()
            times[name]["wall"].append(t.wall)
            times[name]["cpu"].append(t.cpu)
    return times


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


def accuracy(z, y) -> dict:
    """Ours vs PyTorch float64 and vs the unchunked numpy formula, per-row losses on the first rows."""
    import numpy as np
    import torch
    import torch.nn.functional as F

    import probability_practice as pp

    n = min(len(y), 256)
    ours = pp.nll_from_logits(z[:n], y[:n]).astype(np.float64)
    exact = F.cross_entropy(torch.from_numpy(z[:n].astype(np.float64)), torch.from_numpy(y[:n]),
                            reduction="none").numpy()
    zz = z[:n]
    m = zz.max(axis=1, keepdims=True)  # unchunked, all in float32
    unchunked = (m[:, 0] + np.log(np.exp(zz - m).sum(axis=1)) - zz[np.arange(n), y[:n]]).astype(np.float64)
    eps = float(np.finfo(np.float32).eps)
    return {
        "rows_checked": n,
        "max_rel_diff_vs_torch_float64_in_eps32": float(np.max(np.abs(ours - exact) / exact) / eps),
        "max_rel_diff_vs_unchunked_float32_in_eps32": float(np.max(np.abs(ours - unchunked) / exact) / eps),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, help="rows of logits (default 4096; 512 with --quick)")
    parser.add_argument("--classes", type=int, default=50257, help="classes per row (default 50257, GPT-2's vocabulary)")
    parser.add_argument("--reps", type=int, help="timed repetitions, at least 3 (default 5; 3 with --quick)")
    parser.add_argument("--quick", action="store_true", help="small size and fewer repetitions, for development")
    parser.add_argument("--no-memory", action="store_true", help="skip the memory subprocesses")
    parser.add_argument("--memory-child", choices=METHODS, help=argparse.SUPPRESS)
    args = parser.parse_args()
    rows = args.rows if args.rows is not None else (512 if args.quick else 4096)
    reps = args.reps if args.reps is not None else (3 if args.quick else 5)
    if rows < 1 or args.classes < 2:
        die(f"--rows must be >= 1 and --classes >= 2, got {rows} and {args.classes}")
    if reps < 3:
        die(f"--reps must be >= 3 (median, min and max need several repetitions), got {reps}")
    if args.memory_child:
        memory_child(args.memory_child, rows, args.classes)
        return

    import numpy as np
    import torch

    info = machine()
    z, y = make_inputs(rows, args.classes)
    logits_bytes = z.nbytes
    print(f"logits [{rows}, {args.classes}] float32 = {logits_bytes / 2**20:.0f} MiB; {reps} repetitions; "
          f"numpy {np.__version__}, torch {torch.__version__}; load at start {info['load_1_5_15']}", flush=True)
    calls = build_calls(z, y)
    times = time_round_robin(calls, reps)
    acc = accuracy(z, y)
    del calls
    del z
    mem = {} if args.no_memory else measure_memory(rows, args.classes)
    info["load_at_end"] = [round(x, 2) for x in load()]

    result = {"machine": info, "rows": rows, "classes": args.classes, "reps": reps, "logits_bytes": logits_bytes,
              "seconds": {m: {c: describe(times[m][c]) for c in ("wall", "cpu")} for m in METHODS},
              "ratios": {}, "memory": mem, "accuracy": acc}
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
    path = save("reference_ce", result)
    print()
    print(f"machine: {info['nproc']} x {info['cpu']}, {info['memory_gib']} GiB; load {info['load_1_5_15']} at start, "
          f"{info['load_at_end']} at end; OMP_NUM_THREADS={info['env']['OMP_NUM_THREADS']}, "
          f"OPENBLAS_CORETYPE={info['env']['OPENBLAS_CORETYPE']}")
    print(f"logits [{rows}, {args.classes}] float32 ({logits_bytes / 2**20:.0f} MiB), integer targets, mean reduction; "
          f"median [min, max] over {reps} repetitions")
    print(table(["method", "wall time", "/ floor (wall)", "/ floor (cpu)", "/ ours (wall)", "/ ours (cpu)",
                 "peak extra RSS", "tracemalloc peak"], rows_out))
    print(f"accuracy (first {acc['rows_checked']} rows): ours vs PyTorch float64 max rel. diff "
          f"{acc['max_rel_diff_vs_torch_float64_in_eps32']:.2f} eps32; ours vs unchunked float32 numpy "
          f"{acc['max_rel_diff_vs_unchunked_float32_in_eps32']:.2f} eps32")
    t = result["ratios"]
    ours_mem = "-" if not mem else f"{100 * mem['ours'][0] / logits_bytes:.1f} % (RSS)"
    print(f"targets: torch / ours >= 2: {fmt(t['torch']['vs_ours']['wall'])} (wall); "
          f"ours / floor <= 2.5: {fmt(t['ours']['vs_floor_out']['wall'])} (wall); "
          f"extra memory <= 10 %: {ours_mem}")
    print(f"saved {path.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
