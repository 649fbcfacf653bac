"""A correct answer returned as torch tensors scores what the numpy answer scores.

The notebooks import torch and teach its API, so a student may well solve an exercise with
tensors: a 0-d float64 tensor for a scalar, a tensor for an array. Every check helper reads
tensors, but a test cell that calls numpy on the student's result can still break on one
(``np.sum(tensor)`` raises TypeError: numpy hands ``axis``/``out`` to ``Tensor.sum``). Here each
source notebook runs with every model solution's function results and answer variables turned
into tensors, and no cell, visible test, hidden test or given code, may raise or write to stderr:
not even a warning, which grading removes but a student sees (numpy 2 warns about
``__array_wrap__`` when a ufunc such as ``np.exp`` is given a tensor). Each answer must have been a tensor at least once, so
one that is never called, or returns what is not converted (a dict), is not passed untested.
"""

import re
from pathlib import Path

import nbformat
import pytest

from autograder.check import run_notebook

REPO = Path(__file__).resolve().parent.parent
NOTEBOOKS = REPO / "notebooks" / "part-ii"
MARKERS = ("### BEGIN SOLUTION", "### END SOLUTION")

# Exercises whose visible test asks for a Python float (their docstring says so, and the visible
# test tells the student before grading does): a tensor answer fails there by design.
MUST_RETURN_FLOAT = {"masked_token_mean"}

# Answers with no number in them (a choice given as a string), by notebook: nothing to turn into a tensor.
NOT_NUMERIC = {"02-shapes-and-loss": ["ex6_fix_exact_zero", "ex6_fix_underflow", "ex6_same_failure"]}

# Runs first in the kernel; names start with TZ_ so no notebook variable can shadow them.
TENSORIZE = r'''
import functools as TZ_functools
import numpy as TZ_np
import torch as TZ_torch

TZ_made = set()  # names (functions, answer variables) at least one of whose values became a tensor
TZ_named = set()  # every name wrapped or converted


def TZ_tensor(value, name):
    """A numpy array or real number as a torch tensor (bools and strings unchanged, tuples and lists item by item);
    name (the answer's) is noted in TZ_made when something became a tensor."""
    TZ_named.add(name)
    if isinstance(value, (bool, TZ_np.bool_, str)):
        return value
    if isinstance(value, TZ_torch.Tensor):  # already one (a PyTorch exercise, or built on a wrapped answer)
        TZ_made.add(name)
        return value
    if isinstance(value, TZ_np.ndarray) and value.dtype.kind in "biuf":
        TZ_made.add(name)
        return TZ_torch.from_numpy(value.copy())
    if isinstance(value, (float, TZ_np.floating)):
        TZ_made.add(name)
        return TZ_torch.tensor(float(value), dtype=TZ_torch.float64)
    if isinstance(value, (int, TZ_np.integer)):
        TZ_made.add(name)
        return TZ_torch.tensor(int(value))
    if isinstance(value, (tuple, list)):
        return type(value)(TZ_tensor(item, name) for item in value)
    return value


def TZ_returning_tensors(func):
    """func with its result turned into tensors."""
    TZ_named.add(func.__name__)

    @TZ_functools.wraps(func)
    def wrapper(*args, **kwargs):
        return TZ_tensor(func(*args, **kwargs), func.__name__)
    wrapper.TZ_wrapped = True
    return wrapper
'''


def solution_names(source: str) -> tuple[list[str], list[str]]:
    """(top-level functions the cell defines, top-level names it assigns between the solution markers)."""
    inside, functions, answers = False, [], []
    for line in source.split("\n"):
        if line.strip() in MARKERS:
            inside = line.strip() == MARKERS[0]
            continue
        if m := re.match(r"def (\w+)\(", line):
            functions.append(m.group(1))
        elif inside and (m := re.match(r"(\w+)\s*=[^=]", line)):
            answers.append(m.group(1))
    return functions, answers


def tensor_answer_notebook(path: Path) -> nbformat.NotebookNode:
    """The source notebook with a cell after each solution that turns its results into tensors."""
    nb = nbformat.read(path, as_version=4)
    cells = [nbformat.v4.new_code_cell(TENSORIZE)]
    for cell in nb.cells:
        cells.append(cell)
        if cell.cell_type != "code" or not cell.metadata.get("nbgrader", {}).get("solution"):
            continue
        functions, answers = solution_names(cell.source)
        code = "".join(f"{f} = TZ_returning_tensors({f})\n" for f in functions if f not in MUST_RETURN_FLOAT)
        code += "".join(f"{a} = TZ_tensor({a}, {a!r})\n" for a in answers if a not in functions)
        if code:
            cells.append(nbformat.v4.new_code_cell(code))
    cells.append(nbformat.v4.new_code_cell("print('never a tensor:', sorted(TZ_named - TZ_made))"))
    nb.cells = cells
    return nb


def test_solution_names_finds_functions_and_answers_only():
    source = ("def f(x):\n    ### BEGIN SOLUTION\n    y = x\n    return y\n    ### END SOLUTION\n\n\n"
              "given = 1\n### BEGIN SOLUTION\nex1 = f(given)\nex2 == 3\nex3 =f(2)\n### END SOLUTION\nafter = 2\n")
    assert solution_names(source) == (["f"], ["ex1", "ex3"])


@pytest.mark.parametrize("name", sorted(p.stem for p in NOTEBOOKS.glob("*.ipynb")))
def test_every_cell_accepts_solutions_that_return_tensors(name):
    nb = tensor_answer_notebook(NOTEBOOKS / f"{name}.ipynb")
    # check's runner (grading's executor, over local unix sockets: no TCP port another test's kernel could take
    # first); warnings are kept: grading would drop them, but a student running the notebook sees them
    run_notebook(nb, NOTEBOOKS, timeout=300, drop_warnings=False)
    failures = [f"{cell.metadata.get('nbgrader', {}).get('grade_id') or cell.source.splitlines()[0]}: "
                + (f"{out.ename}: {out.evalue.splitlines()[0] if out.evalue else ''}" if out.output_type == "error"
                   else f"wrote to stderr: {out.text.strip()[:200]}")
                for cell in nb.cells for out in cell.get("outputs", [])
                if out.output_type == "error" or out.output_type == "stream" and out.name == "stderr"]
    assert not failures, "\n".join(failures)
    # each answer was tested as tensors: a function never called, or returning a kind TZ_tensor does not convert
    # (a dict), would pass here untested
    never = "".join(out.get("text", "") for out in nb.cells[-1].outputs)
    assert never == f"never a tensor: {sorted(NOT_NUMERIC.get(name, []))}\n", never
