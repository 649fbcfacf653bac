"""Fast static checks over every source notebook in notebooks/part-ii/ (nothing is executed).

The conventions come from notebooks/README.md: clean committed form, the python3
kernel, nbgrader grade ids that are unique and follow one naming scheme
(solution cell ``ex_*``, autograded test ``test_*``, free-text answer ``answer_*``,
locked marking note ``note_*``), points on every graded cell adding up to the totals in
the title cell, test cells that open with a docstring and end with a hidden-test block (before the visible
checks, only stand-ins for earlier exercises' functions may be hidden), and
committed outputs without images or errors.
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

REPO = Path(__file__).resolve().parent.parent
SOURCE_DIR = REPO / "notebooks" / "part-ii"
SOURCES = sorted(SOURCE_DIR.glob("*.ipynb"))
NAMES = [p.name for p in SOURCES]

ID_PATTERN = {
    "solution": re.compile(r"^ex_[a-z0-9]+(_[a-z0-9]+)*$"),
    "test": re.compile(r"^test_[a-z0-9]+(_[a-z0-9]+)*$"),
    "answer": re.compile(r"^answer_[a-z0-9]+(_[a-z0-9]+)*$"),
    "note": re.compile(r"^note_[a-z0-9]+(_[a-z0-9]+)*$"),
}
TOTALS = re.compile(r"本笔记本共\s*(\d+)\s*分（自动评分\s*(\d+)\s*分，人工评分\s*(\d+)\s*分）")
HIDDEN = re.compile(r"^[ \t]*### BEGIN HIDDEN TESTS[ \t]*$.*?^[ \t]*### END HIDDEN TESTS[ \t]*$", re.S | re.M)


def _read(name: str) -> nbformat.NotebookNode:
    return nbformat.read(SOURCE_DIR / name, as_version=4)


def _graded_cells(nb):
    """(index, cell, nbgrader metadata) for every cell nbgrader knows about."""
    return [(i, c, c.metadata["nbgrader"]) for i, c in enumerate(nb.cells) if c.metadata.get("nbgrader")]


def _role(cell, meta) -> str:
    """solution / test / answer / note / other, from the cell type and the nbgrader flags."""
    if cell.cell_type == "code" and meta.get("solution") and not meta.get("grade"):
        return "solution"
    if cell.cell_type == "code" and meta.get("grade") and not meta.get("solution"):
        return "test"
    if cell.cell_type == "markdown" and meta.get("solution") and meta.get("grade"):
        return "answer"
    if meta.get("locked") and not (meta.get("solution") or meta.get("grade") or meta.get("task")):
        return "note"
    return "other"


def _stand_ins(block: str) -> set[str]:
    """The names a hidden block puts stand-ins under, when it holds nothing else: `from checks import standing_in`,
    the reference functions, one `standing_in(globals(), name=function, ...)` and a `del` of those functions
    (so that nothing but the cell-scoped stand-ins is left in the namespace); else {}."""
    body = ast.parse(block).body
    defs = {n.name for n in body if isinstance(n, ast.FunctionDef)}
    calls = [n.value for n in body if isinstance(n, ast.Expr) and isinstance(n.value, ast.Call)
             and isinstance(n.value.func, ast.Name) and n.value.func.id == "standing_in"]
    deleted = {t.id for n in body if isinstance(n, ast.Delete) for t in n.targets if isinstance(t, ast.Name)}
    imports = [n for n in body if isinstance(n, ast.ImportFrom)]
    if len(calls) != 1 or len(body) != len(defs) + len(imports) + 2 or deleted != defs or \
            [(n.module, [a.name for a in n.names]) for n in imports] != [("checks", ["standing_in"])]:
        return set()
    given = {k.arg: k.value.id for k in calls[0].keywords if isinstance(k.value, ast.Name)}
    return set(given) if set(given.values()) == defs and len(given) == len(calls[0].keywords) else set()


def _solution_functions(nb, before: int) -> set[str]:
    """Names of the functions the solution cells before cell `before` define (what a later exercise may call)."""
    return {n.name for c in nb.cells[:before] if c.cell_type == "code" and _role(c, c.metadata.get("nbgrader", {})) == "solution"
            for n in ast.parse(c.source).body if isinstance(n, ast.FunctionDef)}


def test_there_are_source_notebooks():
    assert NAMES, f"no notebooks in {SOURCE_DIR}"


@pytest.fixture(scope="module")
def clean_check():
    """One run of `python -m autograder.nbclean --check` over all sources: (exit code, its stderr)."""
    result = subprocess.run([sys.executable, "-m", "autograder.nbclean", "--check", *map(str, SOURCES)],
                            cwd=REPO, capture_output=True, text=True, timeout=300)
    return result.returncode, result.stderr


@pytest.mark.parametrize("name", NAMES)
def test_committed_in_clean_form(clean_check, name):
    code, stderr = clean_check
    assert code in (0, 1), f"nbclean --check crashed:\n{stderr}"
    dirty = {Path(line.strip()).name for line in stderr.splitlines()[1:] if line.strip()}
    assert code == 0 or dirty, f"nbclean --check failed without naming a notebook:\n{stderr}"
    assert name not in dirty, f"{name} is not in clean form; run: python -m autograder.nbclean --execute notebooks/part-ii/{name}"


@pytest.mark.parametrize("name", NAMES)
def test_python3_kernelspec(name):
    spec = _read(name).metadata.get("kernelspec", {})
    assert spec.get("name") == "python3" and spec.get("language") == "python", f"{name}: kernelspec is {spec}"


@pytest.mark.parametrize("name", NAMES)
def test_grade_ids_are_unique_and_follow_the_scheme(name):
    nb = _read(name)
    ids = [meta.get("grade_id") for _, _, meta in _graded_cells(nb)]
    assert all(ids), f"{name}: an nbgrader cell has no grade_id"
    duplicates = sorted({g for g in ids if ids.count(g) > 1})
    assert not duplicates, f"{name}: grade ids used twice: {duplicates}"
    for i, cell, meta in _graded_cells(nb):
        role = _role(cell, meta)
        assert role != "other", f"{name}: cell {i} ({meta['grade_id']!r}) has an nbgrader role outside the exercise anatomy: {meta}"
        assert ID_PATTERN[role].match(meta["grade_id"]), (
            f"{name}: {role} cell {i} has grade id {meta['grade_id']!r}; expected {ID_PATTERN[role].pattern}")
        assert meta.get("schema_version") == 3, f"{name}: cell {meta['grade_id']!r} has nbgrader schema_version {meta.get('schema_version')}"


@pytest.mark.parametrize("name", NAMES)
def test_points_add_up_to_the_title(name):
    nb = _read(name)
    found = TOTALS.search(nb.cells[0].source)
    assert found, f"{name}: the title cell does not state '本笔记本共 N 分（自动评分 A 分，人工评分 M 分）'"
    total, auto, manual = map(int, found.groups())
    points = {"test": 0, "answer": 0}
    for i, cell, meta in _graded_cells(nb):
        if meta.get("grade"):
            value = meta.get("points")
            assert isinstance(value, (int, float)) and value > 0, f"{name}: graded cell {meta['grade_id']!r} has points {value!r}"
            points[_role(cell, meta)] += value
        else:
            assert "points" not in meta or not meta["points"], f"{name}: ungraded cell {meta['grade_id']!r} carries points"
    assert points["test"] > 0, f"{name}: no autograded points"
    assert points["answer"] > 0, f"{name}: no manually graded free-text answer"
    assert (points["test"], points["answer"], points["test"] + points["answer"]) == (auto, manual, total), (
        f"{name}: cells hold {points['test']} autograded + {points['answer']} manual points, the title states {auto} + {manual} = {total}")


@pytest.mark.parametrize("name", NAMES)
def test_autograded_cells_have_a_docstring_and_hidden_tests(name):
    nb = _read(name)
    for i, cell, meta in _graded_cells(nb):
        if _role(cell, meta) != "test":
            continue
        gid = meta["grade_id"]
        body = ast.parse(cell.source).body
        first = body[0] if body else None
        assert isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str), (
            f"{name}: test cell {gid!r} must open with a docstring saying what it checks")
        assert first.value.value.strip() and "\n" not in first.value.value.strip(), f"{name}: test cell {gid!r}: the docstring should be one line"
        assert meta.get("locked"), f"{name}: test cell {gid!r} is not locked"
        blocks = HIDDEN.findall(cell.source)
        assert len(blocks) in (1, 2), f"{name}: test cell {gid!r} needs one '### BEGIN/END HIDDEN TESTS' block of checks"
        assert "reveal=False" in blocks[-1], f"{name}: hidden checks in {gid!r} must pass reveal=False"
        assert cell.source.rstrip().endswith(blocks[-1].rstrip()), (
            f"{name}: the hidden checks of {gid!r} must end the cell, so the visible lines keep their numbers")
        if len(blocks) == 2:
            stand_ins = _stand_ins(blocks[0])
            assert cell.source.split("\n", 1)[1].startswith(blocks[0]), (
                f"{name}: the first hidden block of {gid!r} (stand-ins) must come right after the docstring")
            earlier = _solution_functions(nb, before=i)
            assert stand_ins and stand_ins <= earlier, (
                f"{name}: the first hidden block of {gid!r} may only define stand-ins for earlier exercises' functions "
                f"({sorted(earlier)}), found {sorted(stand_ins) or 'none'}")
    for i, cell, meta in _graded_cells(nb):
        if _role(cell, meta) in ("solution", "answer"):
            assert "### BEGIN SOLUTION" in cell.source and "### END SOLUTION" in cell.source, (
                f"{name}: solution cell {meta['grade_id']!r} has no BEGIN/END SOLUTION block")


def test_the_readmes_name_every_exercise_graded_with_stand_ins_and_no_other():
    """README (students' section) and the student zip's README list the exercises graded with stand-ins for earlier
    functions; the list is read from the test cells, so a stand-in added or removed cannot leave them wrong."""
    graded_alone = []
    for path in SOURCES:
        exercise = None
        for cell in _read(path.name).cells:
            if cell.cell_type == "markdown" and (m := re.search(r"^#+\s*练习\s*(\d+\.\d+)", cell.source, re.M)):
                exercise = m.group(1)
            elif _role(cell, cell.metadata.get("nbgrader", {})) == "test" and len(HIDDEN.findall(cell.source)) == 2:
                graded_alone.append(exercise)
    assert graded_alone, "no test cell has stand-ins"
    listed = "（" + "、".join(graded_alone) + "）"
    for readme in (REPO / "README.md", REPO / "autograder" / "templates" / "student_README.md"):
        text = readme.read_text(encoding="utf-8")
        found = re.findall(r"可以调用前面练习里自己写的函数的题(（[\d.、]+）)", re.sub(r"\s*\n\s*", "", text))
        assert found == [listed], f"{readme.name} should list the exercises graded with stand-ins as {listed}, has {found}"


@pytest.mark.parametrize("name", NAMES)
def test_only_test_cells_are_marked_as_checking_the_answer_s_form_only(name):
    """part_ii.visible_checks = "format" (notebooks/README.md) tells check a pass is about form: only a test cell,
    whose hidden block then decides, may carry it, and "format" is its only value."""
    for cell in _read(name).cells:
        mark = cell.metadata.get("part_ii")
        if mark is None:
            continue
        meta = cell.metadata.get("nbgrader", {})
        assert mark == {"visible_checks": "format"}, f"{name}: unknown part_ii metadata {mark!r}"
        assert _role(cell, meta) == "test", f"{name}: {meta.get('grade_id', 'a cell')!r} is marked form-only but is no test cell"


# a number printed with more decimals than six (a float's repr, say): DESIGN's six decimals are what keeps the printed
# numbers the same on every machine, and what nbval compares
LONG_FLOAT = re.compile(r"(?<![\w.])\d+\.\d{7,}")


@pytest.mark.parametrize("name", NAMES)
def test_printed_numbers_have_at_most_six_decimals(name):
    """Nothing enforced the six decimals: a cell printing 1.584962500721156 passed every check (authoring review)."""
    nb = _read(name)
    for i, cell in enumerate(nb.cells, start=1):  # counted from 1, as check counts cells
        for out in cell.get("outputs", []):
            text = out.get("text", "") + out.get("data", {}).get("text/plain", "")
            long = LONG_FLOAT.findall(text)
            assert not long, f"{name}: cell {i} prints {long[0]}: print floats with six decimals ({{x:.6f}})"


def test_nbclean_execute_writes_nothing_when_a_cell_writes_to_stderr(tmp_path):
    """nbclean dropped stderr silently: nbval then failed the cell with 'Unexpected output fields ... stderr' and
    nothing said which warning (authoring review)."""
    path = tmp_path / "noisy.ipynb"
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("print('fine')"),
                                         nbformat.v4.new_code_cell("import numpy as np\nnp.log(0.0)")])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(nb, path)
    before = path.read_text(encoding="utf-8")
    result = subprocess.run([sys.executable, "-m", "autograder.nbclean", "--execute", str(path)], cwd=REPO,
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "cell 2 (import numpy as np): " in result.stderr and "RuntimeWarning" in result.stderr, result.stderr
    assert "cell 1" not in result.stderr
    assert path.read_text(encoding="utf-8") == before


@pytest.mark.parametrize("name", NAMES)
def test_committed_outputs_hold_no_images_or_errors(name):
    nb = _read(name)
    for i, cell in enumerate(nb.cells):
        for out in cell.get("outputs", []):
            assert out.output_type != "error", f"{name}: cell {i} was committed with an error output ({out.get('ename')})"
            images = [k for k in out.get("data", {}) if k.startswith("image/")]
            assert not images, f"{name}: cell {i} was committed with an image output {images}"


@pytest.mark.parametrize("name", NAMES)
def test_autograded_cells_were_executed_cleanly(name):
    """Every committed autograded test cell carries an execution count and no error: it passed on the source's last run."""
    nb = _read(name)
    for i, cell, meta in _graded_cells(nb):
        if _role(cell, meta) == "test":
            assert cell.execution_count is not None, f"{name}: test cell {meta['grade_id']!r} was not executed before committing"


# --- what an exercise forbids, its hidden tests enforce ------------------------------------------
BAN_SENTENCE = re.compile(r"[^。；—]*(?:不要调用|不要用|不能用)[^。；—]*")  # "do not call / use", up to the clause's end
QUOTED_NAME = re.compile(r"`((?:pp|F|torch|np)(?:\.[A-Za-z_]\w*)+|[A-Za-z_]\w*)`")
OWNER_PREFIX = {"pp": "pp.", "np": "np.", "F": "F.", "torch": "torch.", "torch.special": "torch.special.", "torch.Tensor": "Tensor.", "torch.autograd": "torch.autograd.",
                "globals()": ""}  # how checks.forbidden_calls names each owner in its verdict


def _forbidden_names(markdown: str, defined: set[str]) -> set[str]:
    """Names a markdown cell tells students not to call: pp./F./torch. names, and the notebook's own functions."""
    names = {n for sentence in BAN_SENTENCE.findall(markdown) for n in QUOTED_NAME.findall(sentence)}
    return {n for n in names if "." in n or n in defined}


def _defined_functions(nb) -> set[str]:
    """Names of the functions the notebook's code cells define outside hidden tests (a student can see them)."""
    return {node.name for cell in nb.cells if cell.cell_type == "code"
            for node in ast.walk(ast.parse(HIDDEN.sub("", cell.source))) if isinstance(node, ast.FunctionDef)}


def _is_guard(node) -> bool:
    """A call of checks.forbidden_calls, by its bare name or as an attribute (`checks.forbidden_calls(...)`)."""
    return isinstance(node, ast.Call) and "forbidden_calls" in (getattr(node.func, "id", ""), getattr(node.func, "attr", ""))


def _guarded_names(test_source: str) -> set[str]:
    """Names the forbidden_calls guards of a test cell watch, spelled as the notebooks spell them."""
    guarded = set()
    for node in ast.walk(ast.parse(test_source)):
        if _is_guard(node):
            for target in node.args[1:]:
                owner, name = ast.unparse(target.elts[0]), target.elts[1].value
                assert owner in OWNER_PREFIX, f"a guard on an owner this test cannot name: {owner}"
                guarded.add(OWNER_PREFIX[owner] + name)
    return guarded


def _exercises(nb) -> tuple[str, list[tuple[str, str, set[str]]]]:
    """(the exercise section's opening text, [(heading, exercise text, names its test cells guard)])."""
    intro, exercises = "", []
    for cell in nb.cells:
        meta = cell.metadata.get("nbgrader", {})
        if cell.cell_type == "markdown" and cell.source.startswith("## 练习"):
            intro = cell.source
        elif cell.cell_type == "markdown" and cell.source.startswith("### 练习"):
            exercises.append((cell.source.splitlines()[0], cell.source, set()))
        elif cell.cell_type == "markdown" and cell.source.startswith("## "):
            exercises.append(("", "", set()))  # a new section: later test cells belong to no exercise
        elif exercises and meta and _role(cell, meta) == "test":
            exercises[-1][2].update(_guarded_names(cell.source))
    return intro, [e for e in exercises if e[0]]


@pytest.mark.parametrize("name", NAMES)
def test_every_function_an_exercise_forbids_is_guarded_by_its_hidden_tests(name):
    """A ban in an exercise's text ("不要调用 `pp.perplexity`") that no hidden test checks is a free point for
    calling the reference; each must be watched by checks.forbidden_calls in that exercise's test cells
    (a ban in the section's opening text, in at least one of them)."""
    nb = _read(name)
    defined = _defined_functions(nb)
    intro, exercises = _exercises(nb)
    every_guard = set().union(*(guarded for _, _, guarded in exercises)) if exercises else set()
    for heading, text, guarded in exercises:
        missing = _forbidden_names(text, defined) - guarded
        assert not missing, f"{name}: {heading} forbids {sorted(missing)}, but no forbidden_calls in its test cells watches them"
    missing = _forbidden_names(intro, defined) - every_guard
    assert not missing, f"{name}: the exercises' opening text forbids {sorted(missing)}, but no test cell watches them"


# bans an exercise words instead of naming each function: the guarded names they cover
AUTOGRAD = {"Tensor.backward", "torch.autograd.backward", "torch.autograd.grad"}
WORDED_BANS = {"自动微分": AUTOGRAD, "autograd": AUTOGRAD, "数值差分": {"numerical_gradient"}}
TENSOR_METHOD = re.compile(r"`\.([A-Za-z_]\w*)\(\)`")  # "张量方法 `.softmax()`" bans torch.Tensor.softmax


def _stated_bans(markdown: str, defined: set[str]) -> set[str]:
    """Every guarded name a markdown cell's bans cover: named functions, tensor methods and worded bans."""
    sentences = BAN_SENTENCE.findall(markdown)
    stated = _forbidden_names(markdown, defined)
    stated |= {"Tensor." + m for sentence in sentences for m in TENSOR_METHOD.findall(sentence)}
    for word, names in WORDED_BANS.items():
        if any(word in sentence for sentence in sentences):
            stated |= names
    return stated


@pytest.mark.parametrize("name", NAMES)
def test_every_call_the_hidden_tests_forbid_is_forbidden_in_the_exercise_text(name):
    """The other way round: a hidden guard on a function the exercise never forbids takes points for an answer
    the text allows ("只用 numpy" does not tell a student that `pp.bce_with_logits`, the course's own numpy
    reference, is off limits), so every guarded name must be banned in its exercise's text or the opening text."""
    nb = _read(name)
    defined = _defined_functions(nb)
    intro, exercises = _exercises(nb)
    banned_for_all = _stated_bans(intro, defined)
    for heading, text, guarded in exercises:
        unstated = guarded - _stated_bans(text, defined) - banned_for_all
        assert not unstated, f"{name}: the tests of {heading} forbid {sorted(unstated)}, which its text never forbids"


def _guards(test_source: str) -> list[tuple[str, set[str]]]:
    """(the name forbidden_calls guards, the names the guarded block calls) of each guard in a test cell."""
    guards = []
    for node in ast.walk(ast.parse(test_source)):
        if not isinstance(node, ast.With):
            continue
        called = {getattr(n.func, "id", "") for statement in node.body for n in ast.walk(statement) if isinstance(n, ast.Call)}
        for item in node.items:
            call = item.context_expr
            if _is_guard(call):
                guards.append((call.args[0].value if call.args and isinstance(call.args[0], ast.Constant) else None, called))
    return guards


@pytest.mark.parametrize("name", NAMES)
def test_every_guard_names_a_function_its_exercise_defines_and_calls_it(name):
    """forbidden_calls(user, ...) also searches what the notebook's function `user` holds (an import under another
    name, a default argument...); a misspelt or stale name silently searches nothing, so each guard must name a
    function a solution cell defines, and call it inside the guarded block."""
    nb = _read(name)
    solutions = {node.name for cell in nb.cells if cell.cell_type == "code"
                 and cell.metadata.get("nbgrader", {}).get("solution")
                 for node in ast.walk(ast.parse(cell.source)) if isinstance(node, ast.FunctionDef)}
    tests = [c for c in nb.cells if c.cell_type == "code" and _role(c, c.metadata.get("nbgrader", {})) == "test"]
    guards = [(c.metadata["nbgrader"]["grade_id"], *g) for c in tests for g in _guards(c.source)]
    assert guards, f"{name}: no forbidden_calls guard found (the exercises forbid library calls)"
    for grade_id, user, called in guards:
        assert user in solutions, f"{name}: {grade_id} guards {user!r}, which no solution cell defines ({sorted(solutions)})"
        assert user in called, f"{name}: {grade_id} guards {user!r} but its guarded block never calls it"


@pytest.mark.parametrize("name", NAMES)
def test_no_reference_gradient_is_left_in_the_graded_kernel(name):
    """Grading blinds the expected values (the grader records them from the instructor's run), but a reference
    computed by a statement of its own stays in the student's kernel, where a patched check_close could read it and
    pass it off as the student's result (review of test_residual_grad). So a test cell's top-level backward() may only
    run on what a solution's function returned; autograd references go inside the expected argument."""
    from autograder.trusted_checks import blind_source

    nb = _read(name)
    solutions = {node.name for cell in nb.cells if cell.cell_type == "code"
                 and cell.metadata.get("nbgrader", {}).get("solution")
                 for node in ast.walk(ast.parse(cell.source)) if isinstance(node, ast.FunctionDef)}
    bad = []
    for _i, cell, meta in _graded_cells(nb):
        if _role(cell, meta) != "test":
            continue
        tree = ast.parse(blind_source(cell.source))
        inside = {id(n) for f in ast.walk(tree) if isinstance(f, (ast.FunctionDef, ast.Lambda)) for n in ast.walk(f)}
        students = {t.id for node in ast.walk(tree) if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call)
                    and isinstance(node.value.func, ast.Name) and node.value.func.id in solutions
                    for t in node.targets if isinstance(t, ast.Name)}
        for call in _calls_named(tree, "backward"):
            receiver = call.func.value if isinstance(call.func, ast.Attribute) else None
            if id(call) not in inside and not (isinstance(receiver, ast.Name) and receiver.id in students):
                bad.append(f"{meta['grade_id']}: {ast.unparse(call)[:100]}")
    assert not bad, f"{name}: reference gradients computed in the student's kernel after blinding: {bad}"


def _calls_named(tree, name: str):
    """Call nodes of `name(...)` or `anything.name(...)` in tree."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            func = node.func
            if (isinstance(func, ast.Name) and func.id == name) or (isinstance(func, ast.Attribute) and func.attr == name):
                yield node


@pytest.mark.parametrize("name", NAMES)
def test_no_visible_check_expects_a_bare_true_or_false(name):
    """A visible check_equal(label, <condition>, True) fails with 'got False, expected True': a student whose answer
    is the boolean False reads that as the answer (found by review of exercise 2.6). Compare what the student can act
    on (a type name, a value) instead, or use check_true with a hint."""
    bad = []
    for _i, cell, meta in _graded_cells(_read(name)):
        if _role(cell, meta) != "test":
            continue
        for call in _calls_named(ast.parse(HIDDEN.sub("", cell.source)), "check_equal"):
            expected = call.args[2] if len(call.args) > 2 else next((k.value for k in call.keywords if k.arg == "expected"), None)
            if isinstance(expected, ast.Constant) and isinstance(expected.value, bool):
                bad.append(f"{meta['grade_id']}: {ast.unparse(call)[:100]}")
    assert not bad, f"{name}: visible checks expecting a bare True/False: {bad}"


ARRAY_ONLY = {"shape", "ndim", "dtype", "sum", "mean", "max", "min", "tolist", "astype", "reshape"}


@pytest.mark.parametrize("name", NAMES)
def test_test_cells_read_a_solution_s_result_as_any_array_like(name):
    """`f(x).shape` fails with AttributeError on a list a student's f returns (found by review of 5.4), where the
    exercise asks for an array of a shape: reduce and measure through numpy (np.shape(...), np.asarray(...).sum()),
    as notebooks/README.md says."""
    nb = _read(name)
    defined = {node.name for _i, cell, meta in _graded_cells(nb) if _role(cell, meta) == "solution"
               for node in ast.walk(ast.parse(cell.source)) if isinstance(node, ast.FunctionDef)}
    bad = []
    for _i, cell, meta in _graded_cells(nb):
        if _role(cell, meta) != "test":
            continue
        for node in ast.walk(ast.parse(cell.source)):
            if (isinstance(node, ast.Attribute) and node.attr in ARRAY_ONLY and isinstance(node.value, ast.Call)
                    and isinstance(node.value.func, ast.Name) and node.value.func.id in defined):
                bad.append(f"{meta['grade_id']}: {ast.unparse(node)[:90]}")
    assert not bad, f"{name}: array attributes read straight off a student's result: {bad}"


PLAN = REPO / "notebooks" / "teaching-plan.md"
PLAN_ROW = re.compile(r"^\| `(?P<name>[0-9][^`]*)` \| [^|]+ \| (?P<first>\d+\.\d+)–(?P<last>\d+\.\d+) \| "
                      r"(?P<total>\d+) 分（自动 (?P<auto>\d+)，人工 (?P<manual>\d+)） \| 讲授 (?P<lectures>\d+) \+ 实验 "
                      r"(?P<labs>\d+) \|", re.M)


def _points(nb) -> tuple[float, float]:
    """(autograded, hand-graded) points of a notebook's graded cells, from their nbgrader metadata."""
    auto = manual = 0.0
    for cell in nb.cells:
        meta = cell.metadata.get("nbgrader", {})
        if meta.get("grade"):
            if meta.get("solution"):
                manual += meta["points"]
            else:
                auto += meta["points"]
    return auto, manual


@pytest.mark.parametrize("name", NAMES)
def test_each_exercise_heading_states_the_points_its_cells_hold(name):
    """An authoring walkthrough: a heading '练习 3.5（3 分）' over cells holding 2 points passed every test (release only
    warned). release's own reader of the stated points (stated_points_drift) finds nothing to say."""
    from autograder.release import stated_points_drift

    assert stated_points_drift(_read(name)) == [], f"{name}: {stated_points_drift(_read(name))}"


@pytest.mark.parametrize("name", NAMES)
def test_hidden_tests_print_nothing(name):
    """An authoring walkthrough: a hidden block that printed its expected value passed every check; the value is then
    computed in the student's kernel (blind_source leaves a value used elsewhere in place) and printed into the
    committed notebook. Hidden checks report through the check helpers only."""
    from autograder.cells import hidden_line_numbers

    nb = _read(name)
    for i, cell, meta in _graded_cells(nb):
        lines = cell.source.split("\n")
        shown = [lines[n - 1].strip() for n in sorted(hidden_line_numbers(cell.source))
                 if re.search(r"\b(print|display|pprint)\s*\(", lines[n - 1])]
        assert not shown, f"{name}: test cell {meta['grade_id']!r} prints in its hidden tests: {shown[0]}"


def test_the_teaching_plan_lists_every_notebook_with_its_exercises_and_points():
    """notebooks/teaching-plan.md tells instructors each notebook's exercises and points and the course's totals: they
    are read here from the notebooks' headings and nbgrader metadata, so the page cannot drift from them."""
    text = PLAN.read_text(encoding="utf-8")
    rows = {m["name"]: m for m in PLAN_ROW.finditer(text)}
    assert sorted(rows) == [p.stem for p in SOURCES], sorted(rows)
    totals = [0.0, 0.0]
    for path in SOURCES:
        nb = nbformat.read(path, as_version=4)
        numbers = [m.group(1) for c in nb.cells if c.cell_type == "markdown"
                   for m in re.finditer(r"^### 练习 (\d+\.\d+)", c.source, re.M)]
        auto, manual = _points(nb)
        row = rows[path.stem]
        assert (row["first"], row["last"]) == (numbers[0], numbers[-1]), (
            f"notebooks/teaching-plan.md: {path.stem}'s row gives exercises {row['first']}-{row['last']}, the notebook "
            f"has {numbers[0]}-{numbers[-1]}")
        assert (float(row["total"]), float(row["auto"]), float(row["manual"])) == (auto + manual, auto, manual), (
            f"notebooks/teaching-plan.md: {path.stem}'s row gives {row['total']} points ({row['auto']} + "
            f"{row['manual']}), the notebook's cells hold {auto + manual:g} ({auto:g} + {manual:g})")
        totals = [totals[0] + auto, totals[1] + manual]
    lectures = sum(int(r["lectures"]) for r in rows.values())
    labs = sum(int(r["labs"]) for r in rows.values())
    total = f"合计 {sum(totals):g} 分（自动评分 {totals[0]:g} 分，人工评分 {totals[1]:g} 分），约 {lectures} 次讲授加 {labs} 次实验。"
    assert total in text, f"notebooks/teaching-plan.md should state the course's totals as: {total}"
