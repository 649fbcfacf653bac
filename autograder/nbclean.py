"""Keep committed notebooks in one clean form: small diffs, no images, nothing volatile.

    python -m autograder.nbclean --execute notebooks/part-ii/02-shapes-and-loss.ipynb
    python -m autograder.nbclean --check notebooks/part-ii/*.ipynb

Clean form: the ``python3`` kernelspec; no execution timestamps or widget state;
text outputs kept (nbval compares them); a cell that drew a figure keeps no output
and no execution count, so nbval runs it without comparing it; stderr dropped. --execute
writes nothing when a cell wrote to stderr (a warning, say): nbval would fail that cell
(grading, which passes over Python warnings, fails a test cell for any other stderr); it
names the cells.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import nbformat

KERNELSPEC = {"display_name": "Python 3 (ipykernel)", "language": "python", "name": "python3"}
LANGUAGE_INFO = {"name": "python", "pygments_lexer": "ipython3"}
VOLATILE_CELL_METADATA = ("execution", "collapsed", "scrolled", "jupyter", "ExecuteTime")
IMAGE_PREFIX = "image/"


def _is_figure_output(output) -> bool:
    """True for display outputs that carry an image (their text is just '<Figure ...>')."""
    data = output.get("data", {})
    return any(key.startswith(IMAGE_PREFIX) for key in data)


def clean_notebook(nb: nbformat.NotebookNode) -> nbformat.NotebookNode:
    """Return nb in clean form (modified in place)."""
    nb.metadata = nbformat.from_dict({"kernelspec": KERNELSPEC, "language_info": LANGUAGE_INFO})
    for cell in nb.cells:
        for key in VOLATILE_CELL_METADATA:
            cell.metadata.pop(key, None)
        if cell.cell_type != "code":
            cell.pop("outputs", None)
            cell.pop("execution_count", None)
            continue
        if any(_is_figure_output(o) for o in cell.outputs):
            cell.outputs = []
            cell.execution_count = None
            continue
        kept = []
        for out in cell.outputs:
            if out.output_type == "stream" and out.name == "stderr":
                continue
            if out.output_type in ("execute_result", "display_data"):
                out.metadata = {}
            if out.output_type == "stream" and kept and kept[-1].output_type == "stream" and kept[-1].name == out.name:
                kept[-1].text += out.text  # how stdout is chunked depends on timing; one block diffs stably
                continue
            kept.append(out)
        cell.outputs = kept
    return nb


def execute_notebook(path: Path, timeout: int = 600) -> nbformat.NotebookNode:
    """Run every cell of the notebook at path in a fresh python3 kernel, cwd = its folder."""
    from nbclient import NotebookClient

    nb = nbformat.read(path, as_version=4)
    client = NotebookClient(nb, timeout=timeout, kernel_name="python3", resources={"metadata": {"path": str(path.parent)}})
    client.execute()
    return nb


def stderr_cells(nb: nbformat.NotebookNode) -> list[str]:
    """'cell N (its first line): the first line it wrote to stderr' for each code cell of an executed nb that did."""
    from .cells import first_line, numbered_cell

    found = []
    for number, cell in enumerate(nb.cells, start=1):
        text = "".join(o.get("text", "") for o in cell.get("outputs", [])
                       if o.get("output_type") == "stream" and o.get("name") == "stderr")
        if text.strip():
            found.append(f"{numbered_cell(cell, number)}: {first_line(text)[:200]}")
    return found


def dumps(nb: nbformat.NotebookNode) -> str:
    """Serialise the way nbformat does, with a trailing newline."""
    return nbformat.writes(nb) + "\n"


def main(argv: list[str] | None = None) -> int:
    """CLI: clean (default), --execute then clean, or --check that files are already clean."""
    parser = argparse.ArgumentParser(prog="python -m autograder.nbclean", description=__doc__.splitlines()[0])
    parser.add_argument("notebooks", nargs="+", type=Path, help="notebook files (.ipynb)")
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--execute", action="store_true", help="run the notebook first, then write it in clean form")
    mode.add_argument("--check", action="store_true", help="exit 1 if a notebook is not in clean form; write nothing")
    parser.add_argument("--timeout", type=int, default=600, help="per-cell timeout in seconds for --execute (default 600)")
    args = parser.parse_args(argv)

    dirty, noisy = [], False
    for path in args.notebooks:
        if path.suffix != ".ipynb" or not path.is_file():
            parser.error(f"{path}: expected an existing .ipynb file")
        text = path.read_text(encoding="utf-8")
        nb = execute_notebook(path, args.timeout) if args.execute else nbformat.reads(text, as_version=4)
        if args.execute and (noise := stderr_cells(nb)):
            noisy = True
            print(f"{path}: not written: cells wrote to stderr, which nbval fails (grading fails a test cell for any "
                  "stderr but a Python warning); silence the warning (np.errstate, warnings.catch_warnings) or fix "
                  "the cell:", file=sys.stderr)
            for line in noise:
                print(f"  {line}", file=sys.stderr)
            continue
        cleaned = dumps(clean_notebook(nb))
        if args.check:
            if cleaned != text:
                dirty.append(path)
        elif cleaned != text:
            path.write_text(cleaned, encoding="utf-8")
            print(f"wrote {path}")
    if dirty:
        print("not in clean form (run: python -m autograder.nbclean --execute FILE):", file=sys.stderr)
        for path in dirty:
            print(f"  {path}", file=sys.stderr)
        return 1
    return 1 if noisy else 0


if __name__ == "__main__":
    sys.exit(main())
