"""The main job: the whole assignment cycle on a generated sample class.

release -> sample class (as an LMS zip) -> collect -> grade (parallel, progress bar)
-> feedback -> export -> histogram of totals -> summary table with every path written.
It runs in <build>/demo (default build/demo) with a SQLite gradebook, starting fresh
each time, and checks each sample student's autograded total against the score the
notebooks' nbgrader metadata predicts (exit 1 when one differs).
"""

from __future__ import annotations

import os
import shlex
import shutil
import time
from pathlib import Path

from .course import REPO, Course, build_option, sqlite_file

DEMO_CELL_TIMEOUT = 60.0  # the sample infinite loop costs one cell timeout; honest cells need far less
DEMO_NOTEBOOK_TIMEOUT = 300.0


def demo_build(build: Path | None) -> Path:
    """The demo's build folder: DIR/demo for --build DIR, else $PART_II_BUILD/demo or build/demo."""
    base = Path(build) if build else Path(os.environ.get("PART_II_BUILD") or REPO / "build")
    return (base / "demo").resolve()


def choose_sandbox(no_sandbox: bool) -> tuple[bool, str]:
    """(run without sandbox?, a sentence saying which mode and why)."""
    if no_sandbox:
        return True, "without a sandbox (--no-sandbox)"
    try:
        from .sandbox import sandbox_problem
    except ImportError:
        return True, "without a sandbox: the sandbox module is not available"
    problem = sandbox_problem()
    if problem is None:
        return False, "in the bubblewrap sandbox"
    return True, f"without a sandbox: {problem}"


def manual_grading_hint(course: Course) -> str:
    """The line saying how to grade the free-text answers: JupyterLab in the course folder, started in a subshell so
    that the export and feedback commands after it run where they were typed, in the repository."""
    as_root = " --allow-root" if os.geteuid() == 0 else ""  # JupyterLab refuses root without it
    jupyter = shlex.quote(str(REPO / ".venv" / "bin" / "jupyter"))
    return (f"manual grading: (cd {shlex.quote(str(course.root))} && {jupyter} lab{as_root})   "
            f"(then Nbgrader > Formgrader > Manual Grading, with marking/<notebook>.md open beside it; afterwards run "
            f"`python -m autograder export{build_option(course)}` and "
            f"`python -m autograder feedback{build_option(course)}`)")


def plot_totals(totals: dict[str, float], max_score: float, path: Path) -> Path:
    """Save a histogram of total scores (points) as PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 3.6))
    bins = [max_score * i / 10 for i in range(11)]
    ax.hist(list(totals.values()), bins=bins, color="#4c72b0", edgecolor="white")
    ax.set_xlim(0, max_score)
    ax.set_xlabel(f"total score (points of {max_score:g}; free-text answers not graded by hand yet count 0)")
    ax.set_ylabel("students")
    ax.set_title(f"Part II sample class: total scores (n={len(totals)})")
    ax.yaxis.get_major_locator().set_params(integer=True)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def _step(title: str) -> float:
    """Print a step header; return the start time."""
    print(f"\n== {title}", flush=True)
    return time.monotonic()


def demo(build: Path | None = None, workers: int | None = None, cell_timeout: float | None = None,
         notebook_timeout: float | None = None, no_sandbox: bool = False) -> int:
    """Run the cycle; return 0 when every sample student got its expected score, else 1."""
    from .collect import collect, print_report
    from .export import export
    from .feedback import feedback, print_feedback
    from .grade import GradeOptions, grade, job_rows
    from .release import release
    from .sample_class import build_sample_class, write_lms_zip

    started = time.monotonic()
    root = demo_build(build)
    os.environ.pop("PART_II_DB_URL", None)  # the demo always uses its own SQLite gradebook
    course = Course.load(root)
    for old in (course.root, root / "lms-download.zip"):
        if old.is_dir():
            shutil.rmtree(old)
        elif old.exists():
            old.unlink()
    unsandboxed, mode = choose_sandbox(no_sandbox)
    print(f"demo in {root}; student code runs {mode}")

    _step("release: student version and student zip")
    released = release(course)
    print(f"{len(released.notebooks)} notebooks released; student zip {released.zip_path}")

    _step("sample class: written as an LMS download (one folder per student)")
    students = build_sample_class(course)
    lms_zip = write_lms_zip(students, root / "lms-download.zip")
    for s in students:
        print(f"  {s.student:<14} {s.description}")

    _step("collect")
    print_report(collect(course, lms_zip))

    _step("grade")
    options = GradeOptions(workers=workers or os.cpu_count() or 1, cell_timeout=cell_timeout or DEMO_CELL_TIMEOUT,
                           notebook_timeout=notebook_timeout or DEMO_NOTEBOOK_TIMEOUT, no_sandbox=unsandboxed)
    graded = grade(course, options)

    _step("feedback")
    feedback_result = feedback(course, workers=options.workers)
    print_feedback(feedback_result)

    _step("export")
    grades_csv, cells_csv = export(course)
    print(f"wrote {grades_csv}\nwrote {cells_csv}")
    rows = _read_rows(grades_csv)
    max_score = float(rows[0]["max_score"]) if rows else 0.0
    scored = {r["student_id"]: float(r["score"]) for r in rows if r["score"] != ""}  # '' = not graded
    plot = plot_totals(scored, max_score, course.reports_dir / "totals.png")

    ok = print_summary(students, rows, job_rows(course.db_url))
    print_paths(course, released.zip_path, lms_zip, grades_csv, cells_csv, plot, mode, graded.mode)
    print(f"\ndemo finished in {time.monotonic() - started:.0f} s: "
          + ("every sample student got the score its notebooks predict" if ok else "SOME SCORES DIFFER FROM THE PREDICTION"))
    return 0 if ok and not graded.errors and not feedback_result.errors else 1


def _read_rows(path: Path) -> list[dict]:
    """grades.csv as a list of dicts."""
    import csv

    with open(path, newline="", encoding="utf-8-sig") as fh:
        return list(csv.DictReader(fh))


def print_summary(students, rows: list[dict], jobs: dict) -> bool:
    """Per student: total, expected autograded total, status; return True when all match."""
    by_id = {r["student_id"]: r for r in rows}
    print("\n== summary")
    print(f"  {'student':<14} {'score':>7} {'expected':>9}  {'manual':>6}  {'graded in':>9}  status")
    ok = True
    for s in students:
        row = by_id.get(s.student, {})
        score = float(row.get("score") or 0)
        match = abs(score - s.expected_auto) < 1e-9
        ok &= match
        seconds = jobs.get(s.student, {}).get("seconds")
        took = f"{seconds:.0f} s" if seconds is not None else "-"
        note = f"  [{row.get('notes')}]" if row.get("notes") else ""
        print(f"  {s.student:<14} {score:>7g} {s.expected_auto:>9g}{'' if match else ' MISMATCH'}  "
              f"{row.get('needs_manual_grading', ''):>6}  {took:>9}  {row.get('status', 'missing')}{note}")
    print("  (score: autograded points; 'manual': free-text cells waiting for a grader in formgrader)")
    return ok


def print_paths(course: Course, student_zip: Path, lms_zip: Path, grades_csv: Path, cells_csv: Path, plot: Path,
                mode: str, graded_mode: str) -> None:
    """Where everything went, and how to open formgrader on this gradebook."""
    items = [
        ("student zip", student_zip),
        ("marking guides", course.root / "marking"),
        ("sample LMS download", lms_zip),
        ("collect report", course.reports_dir / "collect.json"),
        ("rejected files", course.rejected_dir),
        ("gradebook (SQLite)", sqlite_file(course.db_url)),
        ("autograded notebooks", course.root / "autograded"),
        ("feedback (HTML)", course.root / "feedback"),
        ("each student's total", course.root / "feedback" / "<student>" / "index.html"),
        ("grades per student", grades_csv),
        ("grades per cell", cells_csv),
        ("histogram of totals", plot),
        ("grading logs", course.reports_dir / "grade-logs"),
    ]
    print("\n== written")
    for label, path in items:
        print(f"  {label:<22} {path}")
    print(f"  {'grading mode':<22} {graded_mode} ({mode})")
    print(f"\n{manual_grading_hint(course)}")
