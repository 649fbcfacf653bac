"""The student release of every notebook in notebooks/part-ii/, as nbgrader generates it.

The release is generated once per test run by ``python -m autograder release`` into a
shared build folder (tests/shared_builds.py); each release notebook is executed, top to
bottom with errors allowed, by the grader itself: the sample class's ``blank`` student hands
in the release unchanged. Checks: no solution code, no hidden test and no output leak into the
release; every cell outside the exercises runs; solution cells raise only NotImplementedError
(from the stub) and demo cells only NotImplementedError or NameError (an answer not given
yet); every autograded test cell fails, with NotImplementedError, AssertionError or
NameError and nothing else.

That the *source* notebooks pass every graded cell is checked by nbval, not here:
pytest.ini runs ``--nbval`` over notebooks/part-ii/, which executes every source cell
(graded test cells included) and fails on any exception; tests/test_notebook_format.py
adds that every committed graded test cell was executed without an error output.

Anatomy the checks rely on (notebooks/README.md): an ungraded code cell that directly
follows a solution cell (or another such cell) is the exercise's demo cell.
"""

from __future__ import annotations

import re
from pathlib import Path

import nbformat
import pytest

from pins import plain_pins
from shared_builds import graded_build, released_build

REPO = Path(__file__).resolve().parent.parent
SOURCE_DIR = REPO / "notebooks" / "part-ii"
SOURCES = sorted(SOURCE_DIR.glob("*.ipynb"))
NAMES = [p.name for p in SOURCES]

SOLUTION_BLOCK = re.compile(r"^[ \t]*### BEGIN SOLUTION[^\n]*\n(.*?)^[ \t]*### END SOLUTION", re.S | re.M)
HIDDEN_BLOCK = re.compile(r"^[ \t]*### BEGIN HIDDEN TESTS[^\n]*\n(.*?)^[ \t]*### END HIDDEN TESTS", re.S | re.M)
MARKERS = ("BEGIN SOLUTION", "END SOLUTION", "BEGIN HIDDEN TESTS", "END HIDDEN TESTS")
CODE_STUB = "raise NotImplementedError()"
TEST_CELL_ERRORS = {"NotImplementedError", "AssertionError", "NameError"}
DEMO_CELL_ERRORS = {"NotImplementedError", "NameError"}


def _nbgrader(cell) -> dict:
    """The cell's nbgrader metadata ({} for an ordinary cell)."""
    return cell.metadata.get("nbgrader", {})


def _is_solution(cell) -> bool:
    return bool(_nbgrader(cell).get("solution"))


def _is_autograded_test(cell) -> bool:
    meta = _nbgrader(cell)
    return cell.cell_type == "code" and bool(meta.get("grade")) and not meta.get("solution")


def _cells_by_id(nb) -> dict:
    """grade_id -> cell for every nbgrader cell."""
    return {_nbgrader(c)["grade_id"]: c for c in nb.cells if _nbgrader(c).get("grade_id")}


def _leaked_lines(source_cell, release_cell, block: re.Pattern) -> list[str]:
    """Lines inside the source cell's marked blocks that reappear in the released cell (ignoring lines also outside the blocks)."""
    source = source_cell.source
    inside = {ln.strip() for body in block.findall(source) for ln in body.splitlines() if ln.strip()}
    outside = {ln.strip() for ln in block.sub("", source).splitlines() if ln.strip()}
    released = {ln.strip() for ln in release_cell.source.splitlines()}
    return sorted((inside - outside) & released)


def _error(cell):
    """The error output of an executed cell, or None."""
    return next((o for o in cell.get("outputs", []) if o.output_type == "error"), None)


@pytest.fixture(scope="module")
def release_dir() -> Path:
    """The student release made by the harness (`python -m autograder release`), once per test run."""
    build, _info = released_build()
    return build / "course" / "release" / "part-ii"


@pytest.fixture(scope="module")
def executed():
    """name -> the release notebook as the grader executed it: the sample class's `blank` student hands in
    the release unchanged (tests/shared_builds.py grades it in the sandbox, errors allowed)."""
    folder, info = graded_build()
    assert "blank" in info["sample"]
    autograded = folder / "build" / "course" / "autograded" / "blank" / "part-ii"

    def run(name: str) -> nbformat.NotebookNode:
        return nbformat.read(autograded / name, as_version=4)

    return run


def test_the_first_release_in_a_build_folder_says_it_made_a_new_course():
    """A TA's walkthrough: `release --build` with a mistyped folder made a new course, with a gradebook of its own,
    without a word. The first release in a build folder says so (releasing again does not: test_cli)."""
    _, info = released_build()
    out = info["release"]["stdout"]
    assert "a new course in " in out and "its first release, with a gradebook of its own (if you meant to release an " \
           "existing course again, check --build or $PART_II_BUILD)" in out, out


def test_there_are_source_notebooks():
    """The release checks below are parametrised over notebooks/part-ii/*.ipynb; an empty folder would check nothing."""
    assert NAMES, f"no notebooks in {SOURCE_DIR}"


def test_release_holds_every_source_notebook(release_dir):
    released = sorted(p.name for p in release_dir.glob("*.ipynb"))
    assert released == NAMES, f"release {released} differs from the sources {NAMES}"


@pytest.mark.parametrize("name", NAMES)
def test_release_has_no_solution_code(release_dir, name):
    source = nbformat.read(SOURCE_DIR / name, as_version=4)
    release = nbformat.read(release_dir / name, as_version=4)
    released = _cells_by_id(release)
    for grade_id, cell in _cells_by_id(source).items():
        if not _is_solution(cell):
            continue
        assert grade_id in released, f"{name}: solution cell {grade_id!r} is missing from the release"
        out = released[grade_id]
        leaked = _leaked_lines(cell, out, SOLUTION_BLOCK)
        assert not leaked, f"{name}: cell {grade_id!r} leaks solution lines {leaked[:3]}"
        if cell.cell_type == "code":
            assert CODE_STUB in out.source, f"{name}: released cell {grade_id!r} lacks the stub {CODE_STUB!r}"
    for i, cell in enumerate(release.cells):
        for marker in MARKERS[:2]:
            assert marker not in cell.source, f"{name}: release cell {i} still contains {marker!r}"


@pytest.mark.parametrize("name", NAMES)
def test_release_has_no_hidden_tests(release_dir, name):
    source = nbformat.read(SOURCE_DIR / name, as_version=4)
    release = nbformat.read(release_dir / name, as_version=4)
    released = _cells_by_id(release)
    hidden = 0
    for grade_id, cell in _cells_by_id(source).items():
        if not _is_autograded_test(cell):
            continue
        hidden += len(HIDDEN_BLOCK.findall(cell.source))
        assert grade_id in released, f"{name}: test cell {grade_id!r} is missing from the release"
        leaked = _leaked_lines(cell, released[grade_id], HIDDEN_BLOCK)
        assert not leaked, f"{name}: test cell {grade_id!r} leaks hidden lines {leaked[:3]}"
    assert hidden > 0, f"{name}: no hidden test block in any autograded cell, so nothing was checked"
    for i, cell in enumerate(release.cells):
        for marker in MARKERS[2:]:
            assert marker not in cell.source, f"{name}: release cell {i} still contains {marker!r}"


@pytest.mark.parametrize("name", NAMES)
def test_release_has_no_marking_notes(release_dir, name):
    """The instructor's marking notes (note_* cells, which quote the model answer) are not shipped."""
    source = nbformat.read(SOURCE_DIR / name, as_version=4)
    notes = [c for c in source.cells if _nbgrader(c).get("grade_id", "").startswith("note_")]
    assert notes, f"{name}: expected at least one note_* marking note in the source"
    released = nbformat.read(release_dir / name, as_version=4)
    left = [_nbgrader(c).get("grade_id") for c in released.cells if _nbgrader(c).get("grade_id", "").startswith("note_")]
    assert not left, f"{name}: marking notes {left} are in the student release"
    assert not any("评分要点" in c.source for c in released.cells), f"{name}: a 评分要点 text is in the student release"


@pytest.mark.parametrize("name", NAMES)
def test_release_has_no_outputs(release_dir, name):
    release = nbformat.read(release_dir / name, as_version=4)
    for i, cell in enumerate(release.cells):
        if cell.cell_type == "code":
            assert cell.outputs == [], f"{name}: release cell {i} carries outputs"
            assert cell.execution_count is None, f"{name}: release cell {i} carries an execution count"


@pytest.mark.parametrize("name", NAMES)
def test_release_keeps_graded_cells_and_points(release_dir, name):
    """The autograder needs every graded cell, with its points, in the student's copy."""
    def graded(nb):
        return {gid: _nbgrader(c).get("points") for gid, c in _cells_by_id(nb).items() if _nbgrader(c).get("grade")}

    source = nbformat.read(SOURCE_DIR / name, as_version=4)
    release = nbformat.read(release_dir / name, as_version=4)
    assert graded(release) == graded(source)


@pytest.mark.parametrize("name", NAMES)
def test_release_fails_only_where_the_student_must_work(executed, name):
    nb = executed(name)
    problems = []
    tests = 0
    in_exercise = False  # True while walking the demo cells after a solution cell
    for i, cell in enumerate(nb.cells):
        if cell.cell_type != "code":
            in_exercise = False
            continue
        err = _error(cell)
        ename = err.ename if err else None
        meta = _nbgrader(cell)
        if _is_solution(cell):
            # a cell that only defines stubbed functions runs cleanly (its stub raises when called, and
            # test_release_has_no_solution_code checks the stub is there); any top-level answer raises
            in_exercise = True
            if ename not in (None, "NotImplementedError"):
                problems.append(f"solution cell {meta['grade_id']!r} raised {ename}: {err.evalue}")
        elif _is_autograded_test(cell):
            in_exercise = False
            tests += 1
            if ename not in TEST_CELL_ERRORS:
                what = "passed without an answer" if ename is None else f"raised {ename}: {err.evalue}"
                problems.append(f"test cell {meta['grade_id']!r} {what}")
        elif in_exercise and not meta:
            if ename not in (None, *DEMO_CELL_ERRORS):
                problems.append(f"demo cell {i} raised {ename}: {err.evalue}")
        else:
            in_exercise = False
            if ename is not None:
                problems.append(f"cell {i} outside the exercises raised {ename}: {err.evalue}")
    assert tests > 0, f"{name}: no autograded test cell"
    assert not problems, f"{name}:\n  " + "\n  ".join(problems)


def test_formgrader_config_follows_a_copied_course(release_dir, tmp_path):
    """The course's nbgrader_config.py names its own folder: a copied build opens the copy, not the original."""
    from traitlets.config.loader import PyFileConfigLoader

    original = release_dir.parent.parent
    copy = tmp_path / "moved" / "course"
    copy.parent.mkdir()
    (copy).mkdir()
    (copy / "nbgrader_config.py").write_bytes((original / "nbgrader_config.py").read_bytes())
    config = PyFileConfigLoader("nbgrader_config.py", path=str(copy)).load_config()
    assert config.CourseDirectory.root == str(copy)
    assert config.CourseDirectory.db_url == f"sqlite:///{copy / 'gradebook.db'}"
    assert config.UseTheCommandLine.build == str(copy.parent)  # the --build that formgrader's refusals name
    assert str(original) not in (copy / "nbgrader_config.py").read_text(encoding="utf-8")


def test_check_sees_no_edit_in_a_fresh_release_and_a_real_one_in_an_edited_test_cell(release_dir):
    """The self-check's edit detection (nbgrader's checksums): silent on the release as written, even after an
    editor adds trailing newlines; a changed test line is an edit."""
    from autograder.cells import is_edited, is_test_cell

    tests = 0
    for path in sorted(release_dir.glob("*.ipynb")):
        nb = nbformat.read(path, as_version=4)
        assert not [i for i, cell in enumerate(nb.cells) if is_edited(cell)], path.name
        for cell in filter(is_test_cell, nb.cells):
            tests += 1
            cell.source += "\n\n"
            assert not is_edited(cell), (path.name, cell.metadata["nbgrader"]["grade_id"])
            cell.source = cell.source.rstrip() + "\nassert True"
            assert is_edited(cell), (path.name, cell.metadata["nbgrader"]["grade_id"])
    assert tests >= 7


def _imported_modules(source: str) -> set[str]:
    """Top-level module names a Python source imports (absolute imports only)."""
    import ast

    found = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module.split(".")[0])
    return found


def test_the_student_zip_says_how_to_set_up_work_and_hand_in_with_the_graders_versions(release_dir, tmp_path):
    """A student with only the zip gets a README naming each notebook with its points and a requirements.txt
    pinning, at the versions grading runs, every package the notebooks and the bundled code import."""
    import hashlib
    import importlib.metadata as md
    import sys
    import zipfile

    from nbgrader.api import Gradebook
    from packaging.version import Version

    from autograder.course import Course
    from shared_builds import build_env

    build = release_dir.parent.parent.parent
    with zipfile.ZipFile(build / "course" / "student" / "part-ii.zip") as zf:
        readme = zf.read("part-ii/README.md").decode()
        validate_config = zf.read("part-ii/nbgrader_config.py").decode()
        requirements = zf.read("part-ii/requirements.txt").decode()
        code = {n: zf.read(n).decode() for n in zf.namelist() if n.startswith("part-ii/code/") and n.endswith(".py")}
        listing = zf.read("part-ii/course-files.sha256").decode()
        course_files = {n[len("part-ii/"):]: hashlib.sha256(zf.read(n)).hexdigest() for n in zf.namelist()
                        if n.startswith(("part-ii/code/", "part-ii/data/")) and not n.endswith("/")}
    assert code, "the zip carries no code/part-ii"
    # the digests check uses to tell a student's edits: every shipped code/ and data/ file, as `sha256sum -c` reads them
    assert dict(reversed(line.split("  ", 1)) for line in listing.splitlines()) == course_files
    # what not to hand back names every file release writes beside the notebooks (collect passes them over)
    from autograder.collect import RELEASE_WRITTEN

    not_handed_back = readme[readme.index("这份说明以及"):readme.index("都不用交回")]
    assert {name for name in RELEASE_WRITTEN if name != "README.md"} == set(re.findall(r"`([^`]+)`", not_handed_back))

    # the pins are the versions installed from the repo's requirements.txt, i.e. the grading environment
    pins = plain_pins(requirements)
    assert {name: Version(md.version(name)).public for name in pins} == pins  # 2.13.0+cpu is torch==2.13.0
    assert {"jupyterlab", "ipykernel"} <= pins.keys()
    # every third-party import of the release notebooks and of the bundled code is installed by one of the pins
    sources = list(code.values())
    for path in sorted(release_dir.glob("*.ipynb")):
        sources += [c.source for c in nbformat.read(path, as_version=4).cells if c.cell_type == "code"]
    local = {Path(n).stem for n in code}
    modules = set().union(*(_imported_modules(s) for s in sources)) - set(sys.stdlib_module_names) - local - {"__future__"}
    providers = md.packages_distributions()
    unpinned = {m: providers.get(m) for m in modules if not {d.lower() for d in providers.get(m, [])} & pins.keys()}
    assert not unpinned, f"imported by the student's notebooks but not in their requirements.txt: {unpinned}"
    assert f"torch=={pins['torch']} --index-url https://download.pytorch.org/whl/cpu" in readme

    # JupyterLab started in the folder gives Validate the cell time limit grading uses by default
    from traitlets.config import Config
    from autograder.course import DEFAULT_CELL_TIMEOUT

    config = Config()
    exec(compile(validate_config, "nbgrader_config.py", "exec"), {"get_config": lambda: config})
    assert config.Execute.timeout == DEFAULT_CELL_TIMEOUT and config.Execute.interrupt_on_timeout is True
    assert_validate_shows_whole_messages(config, tmp_path)
    assert_validate_drops_warnings_as_grading_does(config, tmp_path)
    # should Validator's list of steps live elsewhere (another traitlets), traitlets would drop the whole file on an
    # error in it: the time limit and the width must still apply (found by review)
    from nbgrader.validator import Validator

    elsewhere = Config()
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(Validator, "preprocessors", object())
        exec(compile(validate_config, "nbgrader_config.py", "exec"), {"get_config": lambda: elsewhere})
    assert elsewhere.Execute.timeout == DEFAULT_CELL_TIMEOUT and elsewhere.Validator.width == config.Validator.width

    # one row per release notebook: its file and its points, as nbgrader's gradebook records them
    with build_env(build):
        course = Course.load(build)
    gb = Gradebook(course.db_url, course_id=course.course_id)
    try:
        for path in sorted(release_dir.glob("*.ipynb")):
            max_score = gb.find_notebook(path.stem, "part-ii").max_score
            row = next((ln for ln in readme.splitlines() if ln.startswith(f"| `{path.name}` |")), None)
            assert row is not None, f"README.md has no row for {path.name}"
            assert row.endswith(f"| {max_score:g} |"), (row, max_score)
    finally:
        gb.close()
    # the markers it tells students to look for are the ones the release notebooks carry
    released = "\n".join(c.source for p in release_dir.glob("*.ipynb") for c in nbformat.read(p, as_version=4).cells)
    for quoted, marker in [("`{}`", "YOUR CODE HERE"), ("`{}`", "raise NotImplementedError()"), ("“{}”", "在此写下你的回答。")]:
        assert quoted.format(marker) in readme and marker in released, marker
    assert not re.search(r"\{[a-z_]+\}", readme), "an unfilled placeholder is left in README.md"


def test_the_release_keeps_the_form_only_mark_check_reads(release_dir):
    """check reads part_ii.visible_checks from the student's copy: nbgrader must carry it into the release."""
    marked = {(p.name, _nbgrader(c)["grade_id"]): c.metadata["part_ii"] for p in SOURCES
              for c in nbformat.read(p, as_version=4).cells if "part_ii" in c.metadata}
    assert marked, "no source test cell is marked as checking the answer's form only"
    for (name, grade_id), mark in marked.items():
        assert _cells_by_id(nbformat.read(release_dir / name, as_version=4))[grade_id].metadata.get("part_ii") == mark


NOT_FOR_STUDENTS = ("pytest", "pytest-xdist", "nbval", "hypothesis", "playwright", "psycopg", "threadpoolctl")


def test_the_student_constraints_pin_what_the_pins_install_in_turn_at_the_locked_versions(release_dir, tmp_path):
    """A student setting up late in the term gets the grading environment's versions of the dependencies too: the
    zip's requirements.txt reads its constraints.txt, which pins every package the pinned ones require (as installed
    here), at the lock's version, and nothing students do not install."""
    import os
    import subprocess
    import sys
    import zipfile
    from importlib import metadata

    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    build = release_dir.parent.parent.parent
    with zipfile.ZipFile(build / "course" / "student" / "part-ii.zip") as zf:
        zf.extractall(tmp_path)
    bundle = tmp_path / "part-ii"
    requirements = (bundle / "requirements.txt").read_text(encoding="utf-8")
    assert "-c constraints.txt" in requirements.splitlines()
    direct = plain_pins(requirements)
    constrained = plain_pins((bundle / "constraints.txt").read_text(encoding="utf-8"))
    assert not direct.keys() & constrained.keys(), "a package pinned twice"
    assert not {canonicalize_name(n) for n in NOT_FOR_STUDENTS} & constrained.keys(), "a grader's tool in the bundle"
    lock = {**plain_pins((REPO / "constraints.txt").read_text(encoding="utf-8")),
            **plain_pins((REPO / "requirements.txt").read_text(encoding="utf-8"))}
    assert {n: v for n, v in constrained.items() if lock.get(n) != v} == {}, "a constraint that is not the lock's"

    # closed: every requirement of a pinned package, judged on this machine (extras where one is asked for), is pinned
    pinned = direct | constrained
    lines = {name: [Requirement(r) for r in metadata.distribution(name).requires or []] for name in pinned}
    extras = {name: {""} for name in pinned}  # the extras some active requirement asks of each package

    def active(name: str, req: Requirement) -> bool:
        return req.marker is None or any(req.marker.evaluate({"extra": e}) for e in extras.get(name, {""}))

    asked = None
    while asked != extras:  # an extra asked for can make more requirements active, which may ask for more
        asked = {name: set(e) for name, e in extras.items()}
        for name, reqs in lines.items():
            for req in filter(lambda r: active(name, r), reqs):
                extras.setdefault(canonicalize_name(req.name), {""}).update(req.extras)
    unpinned = {(name, str(req)) for name, reqs in lines.items() for req in reqs if active(name, req)
                and canonicalize_name(req.name) not in pinned}
    assert not unpinned, f"required by a pinned package but pinned by neither file: {sorted(unpinned)}"
    # and no more: every constraint is reached from the direct pins through active requirements
    reached, edge = set(direct), set(direct)
    while edge:
        edge = {canonicalize_name(req.name) for name in edge for req in lines[name] if active(name, req)} - reached
        reached |= edge
    assert constrained.keys() == reached - direct.keys(), f"not needed: {sorted(constrained.keys() - reached)}"

    # pip reads the -c line from the file's own folder (run from elsewhere here), and every pin agrees with what is
    # installed: with no index and no configuration of the host's (no find-links, no constraints of its own), a pin or
    # constraint at any other version names a package pip cannot find, and fails
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")} | {"PIP_CONFIG_FILE": os.devnull}

    def pip_dry_run() -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "pip", "install", "--dry-run", "--no-index", "-r",
                               "part-ii/requirements.txt"], cwd=tmp_path, env=env, capture_output=True, text=True,
                              timeout=300)

    done = pip_dry_run()
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    name = next(n for n in sorted(constrained) if n.startswith("a"))
    text = (bundle / "constraints.txt").read_text(encoding="utf-8")
    (bundle / "constraints.txt").write_text(text.replace(f"{name}=={constrained[name]}\n", f"{name}==0.0.1\n"),
                                            encoding="utf-8")
    done = pip_dry_run()
    assert done.returncode != 0 and f"{name}==0.0.1" in done.stdout + done.stderr, done.stderr[-2000:]


def test_the_student_constraints_name_what_the_lock_lacks(monkeypatch):
    """A package the student packages need that constraints.txt does not pin stops the release, naming it and what
    needs it; so do a package installed at another version than the lock's (its requirements were read), one that is
    not installed (they cannot be read), and arguments that are not what the functions take."""
    from importlib import metadata

    from autograder.course import AutograderError
    from autograder.release import LOCK, pinned_versions, required_distributions, student_constraints

    pins, lock = pinned_versions(), pinned_versions(LOCK)
    assert "anyio==" in student_constraints(pins, lock)
    # a requirements.txt line with extras or a marker gives no plain pin: the lock's version stands
    assert f"nbclient=={lock['nbclient']}\n" in student_constraints({**pins, "nbclient": None}, lock)
    with pytest.raises(AutograderError, match=r"no plain pin .* of anyio \(required by [\w-]+\).*regenerate") as error:
        student_constraints(pins, {name: v for name, v in lock.items() if name != "anyio"})
    needs = re.search(r"anyio \(required by ([\w-]+)\)", str(error.value))[1]
    assert any(re.match(r"anyio\b", line) for line in metadata.requires(needs)), f"{needs} does not require anyio"
    installed = metadata.version("anyio")
    with pytest.raises(AutograderError, match=rf"another version than the lock's: anyio {re.escape(installed)} "
                                              r"\(locked: 0\.0\.1\).*make venv"):
        student_constraints(pins, {**lock, "anyio": "0.0.1"})

    with pytest.raises(AutograderError, match=r"no-such-package \(one of the packages asked about\) is not installed"):
        required_distributions(("no-such-package",))
    real = metadata.distribution

    def without_anyio(name):
        if name == "anyio":
            raise metadata.PackageNotFoundError(name)
        return real(name)

    with monkeypatch.context() as mp:
        mp.setattr(metadata, "distribution", without_anyio)
        with pytest.raises(AutograderError, match=r"anyio \(required by [\w-]+\) is not installed.*make venv"):
            required_distributions(("jupyter-server",))
    for roots, said in [("numpy", "roots must be a tuple of distribution names"),
                        (("numpy==2.0",), "not a distribution name"), (("",), "not a distribution name"),
                        ((None,), "not a distribution name")]:
        with pytest.raises(AutograderError, match=said):
            required_distributions(roots)
    with pytest.raises(AutograderError, match="lock must be a dict"):
        student_constraints(pins, None)


def test_a_release_the_student_pins_cannot_be_written_for_stops_before_nbgrader_records_anything(tmp_path, monkeypatch):
    """The student's pin files are worked out before nbgrader generates the release: an environment that is not the
    lock's stops the release with nothing recorded in the gradebook and the zip as it was."""
    import autograder.release as release_module
    from autograder.course import AutograderError, Course
    from shared_builds import build_env, released_copy

    build = released_copy(tmp_path)
    with build_env(build):
        course = Course.load(build)
    lock = tmp_path / "constraints.txt"
    lock.write_text("".join(line for line in (REPO / "constraints.txt").read_text(encoding="utf-8").splitlines(True)
                            if not line.lower().startswith("anyio==")), encoding="utf-8")
    monkeypatch.setattr(release_module, "LOCK", lock)
    generated = []
    monkeypatch.setattr(release_module, "generate_release", lambda c: generated.append(c))
    zip_before = course.bundle_zip.read_bytes()
    with pytest.raises(AutograderError, match=r"no plain pin .* of anyio"):
        release_module.release(course)
    assert not generated, "nbgrader ran before the pin files were known"
    assert course.bundle_zip.read_bytes() == zip_before


def test_the_student_pins_come_only_from_plain_name_version_lines(tmp_path):
    """A pin with extras or an environment marker would not be the version grading runs (or not a shell-safe one in
    the student's README): release refuses it for a package students install, and names it."""
    from autograder.course import AutograderError
    from autograder.release import STUDENT_PACKAGES, pinned_versions, student_requirements

    path = tmp_path / "requirements.txt"
    plain = {name: f"1.{i}" for i, name in enumerate(STUDENT_PACKAGES)}
    path.write_text("# pins\n" + "".join(f"{name}=={v}  # why\n" for name, v in plain.items()) + "-r more.txt\n",
                    encoding="utf-8")
    pins = pinned_versions(path)
    assert pins == plain
    lines = [ln for ln in student_requirements(pins).splitlines() if not ln.startswith("#")]
    assert lines == ["-c constraints.txt", *(f"{name}=={v}" for name, v in plain.items())]
    for bad in ("torch[opt]==1.0", "torch==1.0 ; python_version < '3.12'", "torch>=1.0", "Torch===1.0"):
        path.write_text(bad + "\n" + "".join(f"{n}=={v}\n" for n, v in plain.items() if n != "torch"), encoding="utf-8")
        assert pinned_versions(path)["torch"] is None, bad
        with pytest.raises(AutograderError, match="no plain pin .* of torch"):
            student_requirements(pinned_versions(path))


def test_the_student_readme_gives_the_due_date_in_beijing_time_and_utc():
    """The gradebook keeps naive UTC; students read Beijing time (UTC+8, no daylight saving since 1991)."""
    import datetime as dt

    from autograder.release import due_date_text

    assert due_date_text(dt.datetime(2026, 3, 1, 15, 59)).startswith(
        "截止时间：**2026-03-01 23:59（北京时间）**，即 2026-03-01 15:59 UTC。")
    assert due_date_text(dt.datetime(2026, 12, 31, 20, 30)).startswith(
        "截止时间：**2027-01-01 04:30（北京时间）**，即 2026-12-31 20:30 UTC。")  # the next day, and year, there
    assert due_date_text(None) == "截止时间以老师的通知为准。"


def assert_validate_shows_whole_messages(config, folder: Path) -> None:
    """`nbgrader validate` in a terminal, with the student's config, prints a failed check's whole line: the got and
    expected values come last, after the label, and nbgrader cut lines after 87 characters (found by review). (The
    Validate button gets nbgrader's JSON results, which are not cut.)"""
    import io

    from nbgrader.validator import Validator

    message = ("stable_softmax row by row: [ln 2, 0, 0] and the same row + 1000, as a [2, 3] batch: got [0.333333 0.333333 "
               "0.333333], expected [0.500000 0.250000 0.250000]")
    cell = nbformat.v4.new_code_cell(f"raise AssertionError({message!r})")
    cell.metadata["nbgrader"] = {"grade": True, "solution": False, "locked": True, "points": 1, "grade_id": "test_x",
                                 "schema_version": 3}
    path = folder / "validate-width.ipynb"
    nbformat.write(nbformat.v4.new_notebook(cells=[cell]), path)
    validator = Validator(config=config, ignore_checksums=True)
    validator.stream = io.StringIO()
    validator.validate_and_print(str(path))
    printed = " ".join(validator.stream.getvalue().split())  # the line as the terminal shows it, indent aside
    assert message in printed, printed


def assert_validate_drops_warnings_as_grading_does(config, folder: Path) -> None:
    """With the student's config, Validate passes a test cell that only printed a Python warning, as grading and check
    do (they drop such stderr output), and still fails one that raised. It failed both: `F.kl_div(torch.log(
    torch.tensor(q)), ...)` on tensors warns "To copy construct from a tensor..." (found by review)."""
    from nbgrader.validator import Validator

    def test_cell(grade_id, source):
        cell = nbformat.v4.new_code_cell(source)
        cell.metadata["nbgrader"] = {"grade": True, "solution": False, "locked": True, "points": 1, "grade_id": grade_id,
                                     "schema_version": 3}
        return cell

    path = folder / "validate-warnings.ipynb"
    nbformat.write(nbformat.v4.new_notebook(cells=[
        test_cell("test_warns", "import warnings\nwarnings.warn('To copy construct from a tensor, use clone()')"),
        test_cell("test_fails", "raise AssertionError('a real failure')"),
    ]), path)
    failed = Validator(config=config, ignore_checksums=True).validate(str(path)).get("failed", [])
    assert [c["source"].splitlines()[0] for c in failed] == ["raise AssertionError('a real failure')"], failed


def test_stated_points_are_read_outside_code_fences_and_from_task_headings():
    """A fenced '# comment' in an exercise's text closed the exercise, and a task cell's own 练习 heading was not read,
    so its points went to the exercise before it: both warned falsely (found by review)."""
    from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

    from autograder.release import stated_points_drift

    def meta(points, grade_id, task=False):
        return {"nbgrader": {"grade": not task, "solution": False, "task": task, "locked": True, "points": points,
                             "grade_id": grade_id, "schema_version": 3}}

    cells = [new_markdown_cell("本笔记本共 5 分（自动评分 3 分，人工评分 2 分）"),
             new_markdown_cell("### 练习 1（3 分）甲"), new_markdown_cell("例如：\n```python\n# 先算 softmax\n```"),
             new_code_cell("pass", metadata=meta(3, "test_a")),
             new_markdown_cell("### 练习 2（2 分）乙\n写出推导。", metadata=meta(2, "task_b", task=True))]
    assert stated_points_drift(new_notebook(cells=cells)) == []
    cells[3].metadata["nbgrader"]["points"] = 4  # and a real difference is still found
    assert stated_points_drift(new_notebook(cells=cells)) == [
        "the title says 5 (3 autograded + 2 by hand), the cells hold 6 (4 + 2)", "练习 1 says 3, its cells hold 4"]


@pytest.mark.parametrize("text, leaks", [
    ("def append_solution(x):\n    weekend_solution = 3  # a backend solution", False),
    ("In the end hidden tests check more inputs.", False),
    ("## BEGIN HIDDEN TEST\ncheck_close('p', p, q)", True),
    ("    # end solution", True),
    ("check_close('p', p, q, reveal=False)", True),
])
def test_leak_patterns_catch_marker_lines_not_words_in_code_or_prose(text, leaks):
    """Marker-like words in identifiers or prose refused a release (found by review); misspelt marker lines must not."""
    from autograder.release import LEAKS

    assert any(pattern.search(text) for pattern, _ in LEAKS) == leaks


@pytest.mark.parametrize("name", NAMES)
def test_graders_get_each_hand_graded_question_with_its_model_answer_and_marking_note(release_dir, name):
    """release writes <course>/marking/<notebook>.md beside formgrader: every hand-graded answer cell of the source
    (grade and solution marks), in order, under its exercise heading, with the text students read above it, the model
    answer between the solution markers and the note_ cells below it; none of it goes into the student zip."""
    import zipfile

    source = nbformat.read(SOURCE_DIR / name, as_version=4)
    guide = (release_dir.parent.parent / "marking" / f"{Path(name).stem}.md").read_text(encoding="utf-8")
    answers = [i for i, c in enumerate(source.cells) if _nbgrader(c).get("grade") and _nbgrader(c).get("solution")]
    assert answers, f"{name}: no hand-graded answer in the source, so nothing was checked"
    at = 0
    for i in answers:
        cell, grade_id = source.cells[i], _nbgrader(source.cells[i])["grade_id"]
        question = source.cells[i - 1].source
        title = re.search(r"^#+\s+(.+)$", question, re.M).group(1).strip()
        asked = [ln for ln in question.splitlines() if ln.strip() and not ln.startswith("#")]
        model = SOLUTION_BLOCK.search(cell.source).group(1).strip()
        notes = []
        for later in source.cells[i + 1:]:
            if not _nbgrader(later).get("grade_id", "").startswith("note_"):
                break
            notes.append(later.source.strip())
        assert notes, f"{name}: {grade_id} has no note_ cell right below it"
        where = guide.index(f"## {title}\n", at)  # raises when missing or out of order
        at = guide.index(f"`{grade_id}`, {_nbgrader(cell)['points']:g} points", where)
        for text in [*asked, model, *notes]:
            at = guide.index(text, at)
    build = release_dir.parent.parent.parent
    with zipfile.ZipFile(build / "course" / "student" / "part-ii.zip") as zf:
        shipped = "\n".join(zf.read(n).decode("utf-8", "replace") for n in zf.namelist())
    assert "marking" not in "".join(zipfile.ZipFile(build / "course" / "student" / "part-ii.zip").namelist())
    assert "评分要点" not in shipped


def test_a_notebook_without_hand_graded_answers_gets_no_guide_and_an_old_guide_goes(tmp_path):
    """The marking folder is rewritten on each release: a notebook that no longer has a hand-graded answer loses its
    guide instead of keeping a stale one; a code answer graded by hand is shown as code."""
    from types import SimpleNamespace

    from autograder.release import write_marking_guides

    def cell(kind, text, **meta):
        made = nbformat.v4.new_markdown_cell(text) if kind == "markdown" else nbformat.v4.new_code_cell(text)
        if meta:
            made.metadata["nbgrader"] = {"schema_version": 3, "locked": False, "task": False, **meta}
        return made

    sources = tmp_path / "source"
    sources.mkdir()
    auto = nbformat.v4.new_notebook(cells=[cell("markdown", "## 练习 9.1\n\n实现 f。"),
                                           cell("code", "### BEGIN SOLUTION\nx = 1\n### END SOLUTION", grade=False,
                                                solution=True, grade_id="f")])
    by_hand = nbformat.v4.new_notebook(cells=[
        cell("markdown", "## 练习 9.2（人工评分）\n\n写出 g。"),
        cell("code", "### BEGIN SOLUTION\ndef g():\n    return 2\n### END SOLUTION", grade=True, solution=True,
             grade_id="answer_g", points=1.5),
        cell("markdown", "**评分要点** 返回 2 即可。", grade=False, solution=False, grade_id="note_g")])
    nbformat.write(auto, sources / "09-auto.ipynb")
    nbformat.write(by_hand, sources / "09-hand.ipynb")
    course = SimpleNamespace(root=tmp_path / "course")
    (course.root / "marking").mkdir(parents=True)
    (course.root / "marking" / "09-auto.md").write_text("stale", encoding="utf-8")
    folder = write_marking_guides(course, sorted(sources.glob("*.ipynb")))
    assert sorted(p.name for p in folder.iterdir()) == ["09-hand.md"]
    guide = (folder / "09-hand.md").read_text(encoding="utf-8")
    assert "## 练习 9.2（人工评分）" in guide and "`answer_g`, 1.5 points" in guide
    assert "写出 g。" in guide and "```python\ndef g():\n    return 2\n```" in guide and "返回 2 即可。" in guide
    assert "BEGIN SOLUTION" not in guide


def test_the_marking_guide_takes_each_question_from_its_own_exercise_and_keeps_every_note(tmp_path):
    """Review found: a note above its answer was dropped, the text of an autograded exercise under the same heading
    (and text before a heading in the same cell) became the next question, a code answer holding ``` broke its
    fence, and '1 points'."""
    from types import SimpleNamespace

    from autograder.release import marking_guide, write_marking_guides

    def cell(kind, text, **meta):
        made = nbformat.v4.new_markdown_cell(text) if kind == "markdown" else nbformat.v4.new_code_cell(text)
        if meta:
            made.metadata["nbgrader"] = {"schema_version": 3, "locked": False, "task": False, **meta}
        return made

    nb = nbformat.v4.new_notebook(cells=[
        cell("markdown", "**评分要点** 先写的要点。", grade=False, solution=False, grade_id="note_first"),
        cell("markdown", "## 练习 9.1\n\n实现 f。"),
        cell("code", "### BEGIN SOLUTION\nf = 1\n### END SOLUTION", grade=False, solution=True, grade_id="ex_f"),
        cell("code", "assert f == 1", grade=True, solution=False, grade_id="test_f", points=1),
        cell("markdown", "上一题的结尾。\n\n## 练习 9.2（人工评分）\n\n写出 g，并解释。"),
        cell("code", "### BEGIN SOLUTION\ns = '```'\n### END SOLUTION", grade=True, solution=True, grade_id="answer_g",
             points=1),
        cell("markdown", "**评分要点** g 的要点。", grade=False, solution=False, grade_id="note_g")])
    guide = marking_guide(nb, "09-edge")
    (first,) = guide.split("\n## ")[1:]  # one hand-graded answer, one section
    assert first.startswith("练习 9.2（人工评分）\n") and "`answer_g`, 1 point\n" in first, guide
    question = first.split("### Question\n\n")[1].split("\n\n### Model answer")[0]
    assert question == "写出 g，并解释。", question  # not 实现 f, not 上一题的结尾
    assert "````python\ns = '```'\n````" in first, first
    assert "先写的要点。" in first and "g 的要点。" in first, first  # the note above the first answer is kept
    course = SimpleNamespace(root=tmp_path / "course")
    source = tmp_path / "09-edge.ipynb"
    nbformat.write(nb, source)
    folder = write_marking_guides(course, [source])
    assert (folder / "09-edge.md").stat().st_mode & 0o222 == 0, "a grader's edits would be lost on the next release"
    write_marking_guides(course, [source])  # a read-only guide is replaced all the same
    assert (folder / "09-edge.md").read_text(encoding="utf-8") == guide


def test_a_note_above_a_later_answer_goes_with_it_and_a_sub_heading_stays_in_its_question():
    """Second review: a note placed above any answer but the first went under the question before it (which then
    showed two notes, and its own answer none); a question cell ending in a sub-heading ('#### 你的回答') lost its text
    and was titled after the sub-heading."""
    from autograder.release import marking_guide

    def cell(kind, text, **meta):
        made = nbformat.v4.new_markdown_cell(text) if kind == "markdown" else nbformat.v4.new_code_cell(text)
        if meta:
            made.metadata["nbgrader"] = {"schema_version": 3, "locked": False, "task": False, **meta}
        return made

    def answer(grade_id):
        return cell("markdown", "### BEGIN SOLUTION\n模型答案。\n### END SOLUTION", grade=True, solution=True,
                    grade_id=grade_id, points=2)

    nb = nbformat.v4.new_notebook(cells=[
        cell("markdown", "### 练习 1（人工评分）\n\n第一问？\n\n#### 你的回答"), answer("answer_one"),
        cell("markdown", "一问的要点。", grade=False, solution=False, grade_id="note_one"),
        cell("markdown", "### 练习 2（人工评分）\n\n第二问？"),
        cell("markdown", "二问的要点。", grade=False, solution=False, grade_id="note_two"), answer("answer_two")])
    one, two = marking_guide(nb, "09-notes").split("\n## ")[1:]
    assert one.startswith("练习 1（人工评分）\n"), one
    assert one.split("### Question\n\n")[1].split("\n\n### Model answer")[0] == "第一问？\n\n#### 你的回答", one
    assert one.split("### Marking note\n\n")[1].strip() == "一问的要点。", one
    assert two.startswith("练习 2（人工评分）\n") and two.split("### Marking note\n\n")[1].strip() == "二问的要点。", two


def test_a_checkout_without_a_released_test_fix_is_refused_by_grade_and_release(tmp_path, monkeypatch):
    """An end-of-term walkthrough: a test fix released from one clone, then grade run from a clone without it, said
    the tests had 'changed after the release' and advised release, which put the old test back and graded the class
    again under it. Both now say that the checkout has an earlier release's tests; release --revert-tests does it
    on purpose."""
    import json
    import shutil

    from autograder.collect import collect
    from autograder.course import AutograderError, Course
    from autograder.grade import RELEASES, refuse_stale_release, release_drift_warning
    from autograder.release import release
    from shared_builds import build_env, editable_sources, released_copy

    build = released_copy(tmp_path)
    sources = editable_sources(tmp_path, monkeypatch)
    with build_env(build):
        course = Course.load(build)
    (course.root / RELEASES).unlink()  # a course released before the list was kept: its first entry is the one in use
    name = "02-shapes-and-loss"
    hand_in = tmp_path / "download" / "s1"
    hand_in.mkdir(parents=True)
    shutil.copy(course.release_dir / f"{name}.ipynb", hand_in)
    collect(course, tmp_path / "download")
    original = (sources / f"{name}.ipynb").read_bytes()
    nb = nbformat.read(sources / f"{name}.ipynb", as_version=4)
    test = next(c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade") and c.cell_type == "code"
                and not c.metadata["nbgrader"].get("solution"))
    test.source = test.source.replace("### END HIDDEN TESTS", "assert True  # fixed after the release\n### END HIDDEN TESTS")
    nbformat.write(nb, sources / f"{name}.ipynb")
    assert release(course).changed == {name: [test.metadata["nbgrader"]["grade_id"]]}  # the fix, released
    history = json.loads((course.root / RELEASES).read_text(encoding="utf-8"))
    assert len(history) == 2 and history[0]["tests"][name] != history[1]["tests"][name]

    (sources / f"{name}.ipynb").write_bytes(original)  # a checkout without the fix
    with course.gradebook() as gb, pytest.raises(AutograderError) as refused:
        refuse_stale_release(course, gb, course.notebook_names())
    assert f"are those of an earlier release, not of the one in use: {name} (as released before the list of " \
           "releases began)" in str(refused.value)
    assert "releasing from here would put the earlier tests back" in str(refused.value), refused.value
    with pytest.raises(AutograderError, match=r"release with --revert-tests if that is what you want.*Bring that "
                                              r"change here \(git pull"):
        release(course)
    warning = release_drift_warning(course, course.notebook_names())  # export's and feedback's
    assert warning.startswith("warning: the test cells of the source notebooks") and "earlier release" in warning
    assert "so the grades follow the release in use. Bring" in warning and warning.endswith("until then."), warning
    assert len(json.loads((course.root / RELEASES).read_text(encoding="utf-8"))) == 2  # nothing released
    assert release(course, revert_tests=True).changed == {name: [test.metadata["nbgrader"]["grade_id"]]}
    history = json.loads((course.root / RELEASES).read_text(encoding="utf-8"))
    assert len(history) == 3 and history[2]["tests"] == history[0]["tests"] and history[2]["released"]
