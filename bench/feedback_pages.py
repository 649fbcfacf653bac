"""Feedback pages of crafted hand-ins: the time a page takes, as a ratio to a whole course notebook's page.

    python bench/feedback_pages.py            # every shape, 3 repetitions (~3 min)
    python bench/feedback_pages.py --shapes nested_emphasis,files_links

An audit found the parsers a feedback page runs on student text superlinear on crafted input: 227 s for one
20 KiB markdown line (nbconvert's strip_files_prefix), 97 s for 110 KiB of whitespace lines (the IPython lexer).
The page now formats a cell of up to autograder.feedback.FORMAT_CELL_CHARS characters and FORMAT_PAGE_WORK squared
characters in all, and shows the rest as written. For each shape of the audit this renders, as `feedback` does
(the course config and template, HideHiddenTests, HideCellOutputs, LabelGradedCells):
  one cell just under the cap (formatted: the most one cell may cost),
  20 such cells (the page budget formats the first few),
  one cell 50 times the cap (shown as written).
The baseline is the page of the course notebook with the most text, rendered in the same repetition; each figure
is median [min, max] over the repetitions. Target: every crafted page within 10 times the baseline (the bench exits
1 beyond it). Figures are printed last and saved to build/bench/feedback_pages.json (feedback_pages-dev.json for a
run of some shapes only).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import ROOT, Timer, describe, fmt, load, machine, record_name, save, table  # noqa: E402

sys.path.insert(0, str(ROOT))
import nbformat  # noqa: E402
from nbformat.v4 import new_code_cell, new_markdown_cell, new_output, new_raw_cell  # noqa: E402

TARGET_RATIO = 10.0  # a crafted page may take at most this many times a whole course notebook's page
COPIES = 20  # cells of one shape on the budget's page


def answer(cell):
    """cell as a graded answer cell, scored, as GetGrades leaves it."""
    cell.metadata["nbgrader"] = {"grade": True, "solution": True, "locked": False, "points": 1, "grade_id": "ans",
                                 "schema_version": 3, "score": 0.0}
    return cell


SHAPES = {  # what a student can put in a hand-in; each of the audit's, from its reproducers
    "files_links": lambda n: answer(new_markdown_cell("[a](files/" * n)),
    "nested_emphasis": lambda n: answer(new_markdown_cell("*a **b " * n + " c** d*" * n)),
    "math_begin": lambda n: answer(new_markdown_cell("\\begin{a}" * n)),
    "open_brackets": lambda n: answer(new_markdown_cell("[" * n)),
    "link_titles": lambda n: answer(new_markdown_cell('[a](b "' * n)),
    "attr_chain_code": lambda n: answer(new_code_cell("x = " + "a." * n + "a", execution_count=1)),
    "blank_lines_code": lambda n: answer(new_code_cell("def f():\n" + "    \n" * n + "    return 1\n", execution_count=1)),
    "newline_run_code": lambda n: answer(new_code_cell("x" + "\n" * n + "x", execution_count=1)),  # a review's
    "newline_run_fence": lambda n: answer(new_markdown_cell("```ipython3\nx" + "\n" * n + "x\n```")),
    "raw_div": lambda n: new_raw_cell("<div>" * n),
    "raw_items": lambda n: new_raw_cell("<li>" * n),
    "fence_csharp": lambda n: answer(new_markdown_cell("```csharp\n" + "a b\n" * n + "```\n")),
    "magics_language": lambda n: new_code_cell(" \n" * n, execution_count=1, metadata={"magics_language": "autohotkey"}),
}


def page_notebook(cells: list) -> nbformat.NotebookNode:
    """A graded notebook: an exercise heading, the cells, and a passed test cell."""
    test = new_code_cell("assert True", execution_count=2, outputs=[new_output("stream", name="stdout", text="ok\n")])
    test.metadata["nbgrader"] = {"grade": True, "solution": False, "locked": True, "points": 1, "grade_id": "t",
                                 "schema_version": 3, "score": 1.0}
    nb = nbformat.v4.new_notebook(cells=[new_markdown_cell("# 练习 1.1（1 分）"), *cells, test], metadata={
        "kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"},
        "language_info": {"name": "python", "pygments_lexer": "ipython3"}})
    return nbformat.reads(nbformat.writes(nb), as_version=4)  # as nbgrader reads a hand-in


def course_notebook() -> nbformat.NotebookNode:
    """The course notebook with the most text (sum of its cells' squared lengths), scored as GetGrades leaves it."""
    sources = sorted((ROOT / "notebooks" / "part-ii").glob("*.ipynb"))
    work = lambda path: sum(len(c.source) ** 2 for c in nbformat.read(path, as_version=4).cells)  # noqa: E731
    nb = nbformat.read(max(sources, key=work), as_version=4)
    for cell in nb.cells:
        if cell.metadata.get("nbgrader", {}).get("grade"):
            cell.metadata.nbgrader["score"] = cell.metadata.nbgrader["points"]
    return nb


def exporter():
    """An HTMLExporter as `feedback` configures it (course config, feedback template, the page's preprocessors)."""
    import nbgrader
    from nbconvert.exporters import HTMLExporter

    from autograder.course import load_config
    from autograder.feedback import HideCellOutputs, HideHiddenTests, LabelGradedCells, template_config

    config = load_config()
    template_config(config)
    formgrader = Path(nbgrader.__file__).parent / "server_extensions" / "formgrader"
    config.HTMLExporter.extra_template_paths = [str(formgrader / "static" / "node_modules" / "bootstrap" / "dist" / "css")]
    html = HTMLExporter(config=config)
    for preprocessor in (HideHiddenTests(), HideCellOutputs(), LabelGradedCells()):
        html.register_preprocessor(preprocessor, enabled=True)
    return html


def render(nb) -> tuple[float, int]:
    """(wall seconds, cells shown as written) of one page of nb."""
    resources = {"nbgrader": {"notebook": "nb", "score": 1.0, "max_score": 2.0, "late_penalty": 0.0}}
    with Timer() as t:
        body, _ = exporter().from_notebook_node(nbformat.from_dict(nb), resources=resources)
    return t.wall, body.count("(shown as written: ")


def repeats_under(shape: str, cap: int) -> int:
    """The largest n whose cell of shape has at most cap characters."""
    lo, hi = 1, 2
    while len(SHAPES[shape](hi).source) <= cap:
        lo, hi = hi, hi * 2
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if len(SHAPES[shape](mid).source) <= cap else (lo, mid)
    return lo


def cases(shapes: list[str], cap: int) -> dict[str, nbformat.NotebookNode]:
    """{'shape: case': page notebook} for each shape: one cell under the cap, COPIES of them, one 50 times over."""
    built = {}
    for shape in shapes:
        n = repeats_under(shape, cap)
        built[f"{shape}: 1 x {len(SHAPES[shape](n).source):,} chars"] = page_notebook([SHAPES[shape](n)])
        built[f"{shape}: {COPIES} x that"] = page_notebook([SHAPES[shape](n) for _ in range(COPIES)])
        built[f"{shape}: 1 x {len(SHAPES[shape](50 * n).source):,} chars"] = page_notebook([SHAPES[shape](50 * n)])
    return built


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--reps", type=int, default=3, help="timed repetitions, at least 3 (default 3)")
    parser.add_argument("--shapes", help="comma-separated shapes (default: all): " + ", ".join(SHAPES))
    args = parser.parse_args()
    if args.reps < 3:
        parser.error(f"--reps must be at least 3 (median, min and max need several repetitions), got {args.reps}")
    shapes = args.shapes.split(",") if args.shapes else list(SHAPES)
    if unknown := [s for s in shapes if s not in SHAPES]:
        parser.error(f"unknown shape(s) {', '.join(unknown)}; expected some of: {', '.join(SHAPES)}")
    from autograder.feedback import FORMAT_CELL_CHARS, FORMAT_PAGE_WORK

    info = machine()
    baseline = course_notebook()
    pages = cases(shapes, FORMAT_CELL_CHARS)
    render(page_notebook([new_markdown_cell("warm-up")]))  # templates and lexers loaded before any timing
    print(f"{len(pages)} crafted pages, {args.reps} repetitions; cap {FORMAT_CELL_CHARS:,} characters a cell, "
          f"{FORMAT_PAGE_WORK:.0e} squared characters a page; load at start {info['load_1_5_15']}", flush=True)
    times = {name: [] for name in ["course notebook", *pages]}
    ratios = {name: [] for name in pages}
    unformatted = {}
    for rep in range(args.reps):
        base, unformatted["course notebook"] = render(baseline)
        times["course notebook"].append(base)
        for name, nb in pages.items():  # each ratio against the baseline of its own repetition
            seconds, unformatted[name] = render(nb)
            times[name].append(seconds)
            ratios[name].append(seconds / base)
        print(f"repetition {rep + 1} done", flush=True)
    info["load_at_end"] = [round(x, 2) for x in load()]

    result = {"machine": info, "reps": args.reps, "cap_chars": FORMAT_CELL_CHARS, "page_work": FORMAT_PAGE_WORK,
              "seconds": {name: describe(v) for name, v in times.items()},
              "ratio_to_course_page": {name: describe(v) for name, v in ratios.items()},
              "cells_shown_as_written": unformatted}
    path = save(record_name("feedback_pages", not args.shapes), result)
    rows = [["course notebook (baseline)", fmt(describe(times["course notebook"]), 2, " s"), "1", "0"]]
    rows += [[name, fmt(describe(times[name]), 2, " s"), fmt(describe(ratios[name])), str(unformatted[name])]
             for name in pages]
    print()
    print(f"machine: {info['nproc']} x {info['cpu']}, {info['memory_gib']} GiB; load {info['load_1_5_15']} at start, "
          f"{info['load_at_end']} at end; median [min, max] over {args.reps} repetitions")
    print(table(["page", "wall time", "/ course page", "cells shown as written"], rows))
    worst = max(pages, key=lambda name: describe(ratios[name])["median"])
    print(f"target: every crafted page within {TARGET_RATIO:g} x the course page: worst {worst}, "
          f"{fmt(describe(ratios[worst]))}")
    print(f"saved {path.relative_to(ROOT)}")
    if describe(ratios[worst])["median"] > TARGET_RATIO:
        print(f"error: {worst} took {describe(ratios[worst])['median']:.1f} times the course page", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
