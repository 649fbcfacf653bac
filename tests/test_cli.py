"""The command line: --help on every command; bad arguments exit non-zero with a message naming the problem."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from autograder.cli import main
from autograder.course import REPO, AutograderError

COMMANDS = ["release", "collect", "grade", "extend", "feedback", "export", "check", "demo"]


def run(argv, capsys) -> tuple[int, str, str]:
    """Exit code, stderr and stdout of `python -m autograder argv`, run in this process."""
    try:
        code = main(argv)
    except SystemExit as exc:  # argparse exits for usage errors and --help
        code = exc.code
    captured = capsys.readouterr()
    return code, captured.err, captured.out


@pytest.mark.parametrize("command", COMMANDS)
def test_help_on_every_command(command, capsys):
    with pytest.raises(SystemExit) as exc:
        main([command, "--help"])
    assert exc.value.code == 0
    assert f"python -m autograder {command}" in capsys.readouterr().out


def test_the_top_level_help_lists_each_command_once_then_the_exit_codes(capsys):
    """The epilog repeated the command list in other words below argparse's own (a TA's walkthrough)."""
    with pytest.raises(SystemExit) as exc:
        main(["--help"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    for command in COMMANDS:
        assert len(re.findall(rf"^ +{command}\b", out, flags=re.M)) == 1, (command, out)
    assert "exit codes:\n  0    done" in out and out.rstrip().endswith("130  interrupted (grade resumes where it stopped)")


@pytest.fixture()
def empty_build(tmp_path, monkeypatch):
    """A build folder with no course in it (nothing released); env restored afterwards."""
    monkeypatch.setenv("PART_II_BUILD", str(tmp_path))
    monkeypatch.delenv("PART_II_DB_URL", raising=False)
    return str(tmp_path / "build")


@pytest.mark.parametrize("argv, words", [
    ([], "required"),
    (["release", "--bogus"], "python -m autograder release: error: release does not take --bogus: its options are "
                             "--build DIR, --due-date WHEN, --no-source-check, --revert-tests (see --help)"),
    (["export", "--student", "alice", "--build", "{build}"],
     "usage: python -m autograder export [-h] [--build DIR] [--bom] [--final]\npython -m autograder export: error: "
     "export does not take --student: its options are --build DIR, --bom, --final (see --help)"),
    # the unknown option's value is read as the notebook: only the option is named, not the real notebook
    (["check", "--build", "{build}", "x.ipynb"], "check: error: check does not take --build: its options are "
                                                 "--timeout SECONDS, --notebook-timeout SECONDS (see --help)"),
    (["check", "x.ipynb", "y.ipynb"], "check: error: check takes one notebook at a time: run it once for each "
                                      "(y.ipynb left over)"),
    (["check", "x.ipynb", "--", "--y.ipynb"], "check: error: check takes one notebook at a time: run it once for each "
                                              "(--y.ipynb left over)"),  # no option after --
    (["export", "--", "-5"], "export: error: unrecognized arguments: -- -5"),
    (["collect"], "required: path"),
    (["collect", "/no/such/download.zip", "--build", "{build}"], "there is no course in {build}"),  # checked first
    (["grade", "--workers", "0", "--build", "{build}"], "whole number >= 1"),
    (["grade", "--workers", "two", "--build", "{build}"], "whole number >= 1"),
    (["grade", "--cell-timeout", "-1", "--build", "{build}"], "seconds > 0"),
    (["grade", "--cell-timeout", "0.0001", "--build", "{build}"], "expected at least 1 second(s), got 0.0001"),
    (["grade", "--notebook-timeout", "inf", "--build", "{build}"], "finite number of seconds"),
    (["grade", "--student", "bad id!", "--build", "{build}"], "student id"),
    # the folder's name, where collect filed the student as O_Brien_Pat without a word on the console (a TA's review)
    (["grade", "--student", "O'Brien, Pat", "--build", "{build}"],
     "expected a student id (letters, digits, . _ @ -), got \"O'Brien, Pat\" (collect files a folder of that name as "
     "O_Brien_Pat)"),
    # the advice repeats --build, so it runs as printed on this course
    (["grade", "--build", "{build}"], "run `python -m autograder release --build {build}` first"),
    (["feedback", "--build", "{build}"], "there is no course in {build} ({build}/course does not exist): run "
                                         "`python -m autograder release --build {build}` first"),
    (["feedback", "--student", "x/y", "--build", "{build}"], "student id"),
    (["feedback", "--mathjax-url", "javascript:alert(1)", "--build", "{build}"],
     "cannot load MathJax from 'javascript:alert(1)': its scheme is 'javascript'; expected an http:// or https://"),
    (["export", "--build", "{build}"], "release --build {build}` first"),
    (["release", "--due-date", "soon", "--build", "{build}"], "cannot read the due date 'soon'; expected '2026-03-01 23:59'"),
    (["release", "--due-date", "2026-03-01", "--build", "{build}"], "the due date '2026-03-01' has no time of day"),
    (["release", "--due-date", "2026-03-01 23:59 Mars/Base", "--build", "{build}"], "unknown time zone 'Mars/Base'"),
    # zoneinfo silently read a wall time the clocks skip, or pass twice (found by review)
    (["release", "--due-date", "2026-03-08 02:30 America/New_York", "--build", "{build}"],
     "the due date '2026-03-08 02:30 America/New_York' does not exist in America/New_York: the clocks skip that time "
     "(a daylight-saving or other clock change); give a time that exists, or an offset: '2026-03-08 02:30-05:00' or "
     "'2026-03-08 02:30-04:00'"),
    (["extend", "--student", "ann", "--until", "2026-11-01 01:30 America/New_York", "--build", "{build}"],
     "the end of the extension '2026-11-01 01:30 America/New_York' happens twice in America/New_York (the clocks go "
     "back); give the offset to say which: '2026-11-01 01:30-04:00' or '2026-11-01 01:30-05:00'"),
    # Python's own words named timedelta objects (found by review)
    (["release", "--due-date", "2026-03-01 23:59+25:00", "--build", "{build}"],
     "the due date '2026-03-01 23:59+25:00' has the UTC offset +25:00, which does not exist: an offset lies between "
     "-23:59 and +23:59; expected '2026-03-01 23:59'"),
    (["extend", "--student", "ann", "--until", "2026-03-01 23:59-0075", "--build", "{build}"],
     "the end of the extension '2026-03-01 23:59-0075' has the UTC offset -0075, which does not exist"),
    (["release", "--due-date", "0001-01-01 00:00+05:00", "--build", "{build}"],
     "the due date '0001-01-01 00:00+05:00' is out of range: in UTC it falls outside the years 1 to 9999"),
    (["extend", "--student", "ann", "--until", "9999-12-31 23:59 Etc/GMT+12", "--build", "{build}"],
     "the end of the extension '9999-12-31 23:59 Etc/GMT+12' is out of range"),
    (["feedback", "--mathjax-url", "http://", "--build", "{build}"], "cannot load MathJax from 'http://': it names no host"),
    (["extend", "--student", "a" * 129, "--until", "none"], "expected a student id of at most 128 characters (nbgrader's "
                                                          "limit), got 129"),
    (["export", "--build", ""], "--build: expected a folder path, got an empty string"),
    # `collect "$ZIP"` with ZIP unset collected the current folder: from the repository, its sources as students
    (["collect", "", "--build", "{build}"], "expected the path of an LMS download (a folder or a .zip), got an empty string"),
    (["extend", "--student", "ann", "--build", "{build}"], "--student ID and --until WHEN go together"),
    (["extend", "--until", "2026-03-01 23:59", "--build", "{build}"], "--student ID and --until WHEN go together"),
    (["extend", "--student", "ann", "--until", "Friday", "--build", "{build}"], "cannot read the end of the extension 'Friday'; expected '2026-03-01 23:59'"),
    # in form but not in the calendar: said so, not "cannot read" (found by review)
    (["extend", "--student", "ann", "--until", "2026-02-30 23:59", "--build", "{build}"],
     "the end of the extension '2026-02-30 23:59' is not a real date and time (day is out of range for month)"),
    (["release", "--due-date", "2026-03-01 24:00 Asia/Shanghai", "--build", "{build}"],
     "is not a real date and time (hour must be in 0..23)"),
    (["extend", "--student", "ann", "--until", "2026-03-04", "--build", "{build}"],
     "the end of the extension '2026-03-04' has no time of day; expected '2026-03-01 23:59' (this machine's time zone), "
     "'2026-03-01 23:59+08:00', '2026-03-01 23:59 Asia/Shanghai', or 'none' (removes the extension)"),
    (["extend", "--student", "ann", "--until", "2026-03-01 23:59", "--build", "{build}"],
     "run `python -m autograder release --build {build}` first"),
    (["extend", "--build", "{build}"], "run `python -m autograder release --build {build}` first"),
    (["check"], "required: notebook"),
    (["check", "no/such/notebook.ipynb"], "does not exist (a relative path starts in the folder you run this in, "),
    (["check", ""], "expected the path of a notebook (.ipynb), got an empty string"),  # it said ". is a folder"
    # a course among the sources: notebooks/course was made, which git does not ignore (found by review)
    (["release", "--build", str(REPO / "notebooks")], "is inside the repository"),
    (["release", "--build", str(REPO / "code" / "part-ii")], "but not in its build/ folder"),
    (["release", "--build", str(REPO)], "but not in its build/ folder"),  # REPO/course: not ignored either
    (["export", "--build", str(REPO / "notebooks")], "but not in its build/ folder"),  # not "run release there first"
    (["check", str(REPO / "README.md")], "not a .ipynb file"),
    (["check", "x.ipynb", "--timeout", "0"], "seconds > 0"),
    (["demo", "--workers", "0"], "whole number >= 1"),
    (["demo", "--cell-timeout", "soon"], "number of seconds"),
])
def test_bad_arguments_exit_nonzero_with_a_message(argv, words, empty_build, capsys):
    code, err, _ = run([a.replace("{build}", empty_build) for a in argv], capsys)
    assert code == 2  # nothing done
    assert "error" in err and words.replace("{build}", empty_build) in err, err
    if argv and argv[0] != "release":
        assert not Path(empty_build, "course").exists(), "a command that did nothing made the course folder"
    assert not (REPO / "course").exists() and not (REPO / "notebooks" / "course").exists()


def test_the_demo_s_manual_grading_line_leaves_the_shell_where_export_and_feedback_run(tmp_path):
    """The demo printed `cd COURSE && jupyter lab`, then export and feedback commands, which fail in the course folder
    (no module named autograder; found by review). JupyterLab now starts in a subshell: run as printed (jupyter
    replaced by `true`), the shell is still in the repository afterwards."""
    import shlex

    from traitlets.config import Config

    from autograder.course import Course
    from autograder.demo import manual_grading_hint

    config = Config()
    config.CourseDirectory.root = str(tmp_path / "term 1 & co" / "course")  # quoted, or cd goes elsewhere
    Path(config.CourseDirectory.root).mkdir(parents=True)
    line = manual_grading_hint(Course(config))
    command = line.removeprefix("manual grading: ").split("   ", 1)[0]
    jupyter = shlex.quote(str(REPO / ".venv" / "bin" / "jupyter"))
    assert f"{jupyter} lab" in command, line
    done = subprocess.run(["bash", "-c", command.replace(f"{jupyter} lab", "true", 1) + " && pwd"], cwd=REPO,
                          capture_output=True, text=True)
    assert done.returncode == 0 and done.stdout.strip() == str(REPO), (command, done.stdout, done.stderr)
    for step in ("export", "feedback"):
        assert f"`python -m autograder {step} --build {shlex.quote(str(tmp_path / 'term 1 & co'))}`" in line, line


def test_a_notebook_check_cannot_find_gets_an_example_that_exists(tmp_path, monkeypatch):
    """The example path was always build/lab/part-ii/02-shapes-and-loss.ipynb, also when that was the path that had
    just failed, before `make lab` (found by review): the unpacked copy of the name given, else the folder; before
    `make lab`, to run it first (an example named the unpacked 02, which did not exist yet: found by review)."""
    import autograder.check
    from autograder.check import read_for_check

    monkeypatch.setattr(autograder.check, "REPO", tmp_path)
    with pytest.raises(AutograderError, match=r"no student notebooks are unpacked yet: run `make lab` first, which "
                                              r"unpacks them into build/lab/part-ii/, or give the path of your own copy$"):
        read_for_check(Path("build/lab/part-ii/02-shapes-and-loss.ipynb"))
    lab = tmp_path / "build" / "lab" / "part-ii"
    lab.mkdir(parents=True)
    with pytest.raises(AutograderError, match=f"e\\.g\\. one in {re.escape(str(lab))}$"):
        read_for_check(Path("02-shapes-and-loss.ipynb"))
    (lab / "02-shapes-and-loss.ipynb").write_text("{}", encoding="utf-8")
    with pytest.raises(AutograderError, match=f"e\\.g\\. {re.escape(str(lab / '02-shapes-and-loss.ipynb'))}$"):
        read_for_check(Path("02-shapes-and-loss.ipynb"))


def test_suggested_commands_name_the_build_folder_only_where_a_command_without_it_runs_elsewhere(tmp_path, monkeypatch):
    """Advice such as "run `python -m autograder release` first" must run as printed on the course it is about."""
    import shlex

    import autograder.course
    from autograder.course import REPO, build_flag

    assert build_flag(REPO / "build") == build_flag(REPO / "build" / ".." / "build") == ""
    assert build_flag(tmp_path / "term 2") == f" --build '{tmp_path.resolve() / 'term 2'}'"  # quoted for the shell
    assert build_flag(Path("relative")) == f" --build {shlex.quote(str(Path.cwd().resolve() / 'relative'))}"  # absolute
    # the shell's $PART_II_BUILD is where a command without --build runs (found by review)
    monkeypatch.setattr(autograder.course, "SHELL_BUILD", str(tmp_path / "term 2"))
    assert build_flag(tmp_path / "term 2") == ""
    assert build_flag(REPO / "build") == f" --build {shlex.quote(str((REPO / 'build').resolve()))}"


def test_a_due_date_is_read_in_the_zone_it_names_or_else_in_local_time(monkeypatch):
    """nbgrader keeps due dates as naive UTC."""
    import datetime as dt
    import time

    from autograder.release import parse_due_date

    monkeypatch.setenv("TZ", "Europe/Berlin")  # UTC+1 in March
    time.tzset()
    try:
        utc = dt.datetime(2026, 3, 1, 15, 59)
        assert parse_due_date("2026-03-01 23:59 Asia/Shanghai") == utc
        assert parse_due_date("2026-03-01 23:59+08:00") == parse_due_date("2026-03-01T15:59:00Z") == utc
        assert parse_due_date("2026-03-01 16:59") == utc  # Berlin
        assert parse_due_date("2026-03-01 15:59 UTC") == utc
        assert parse_due_date(" None ") is None
    finally:
        monkeypatch.undo()
        time.tzset()


def test_a_local_time_the_clocks_skip_or_pass_twice_is_refused_too(monkeypatch):
    """Without a zone the time is this machine's: '2026-03-08 02:30' in New York became 01:30-05:00 (found by review)."""
    import time

    from autograder.release import parse_moment

    monkeypatch.setenv("TZ", "America/New_York")
    time.tzset()
    try:
        with pytest.raises(ValueError, match=r"'2026-03-08 02:30' does not exist in this machine's time zone: .* "
                                             r"'2026-03-08 02:30-05:00' or '2026-03-08 02:30-04:00'"):
            parse_moment("2026-03-08 02:30")
        with pytest.raises(ValueError, match=r"'2026-11-01 01:30' happens twice in this machine's time zone"):
            parse_moment("2026-11-01 01:30")
        assert parse_moment("2026-03-08 03:30").utcoffset().total_seconds() == -4 * 3600
    finally:
        monkeypatch.undo()
        time.tzset()


def test_a_time_given_off_utc_is_echoed_as_given_beside_its_utc_time(monkeypatch):
    """release and extend print the stored UTC time; the instructor also sees the time they typed, in their zone."""
    import datetime as dt
    import time

    from autograder.release import as_given, naive_utc, parse_moment

    monkeypatch.setenv("TZ", "Europe/Berlin")
    time.tzset()
    try:
        shanghai = parse_moment("2026-03-01 23:59 Asia/Shanghai")
        assert naive_utc(shanghai) == dt.datetime(2026, 3, 1, 15, 59)
        assert as_given(shanghai) == " (2026-03-01 23:59 Asia/Shanghai as given)"
        assert as_given(parse_moment("2026-03-01 23:59:30+08:00")) == " (2026-03-01 23:59:30 +08:00 as given)"
        assert as_given(parse_moment("2026-07-01 09:00")) == " (2026-07-01 09:00 +02:00 as given)"  # Berlin, summer
        assert as_given(parse_moment("2026-03-01 15:59 UTC")) == as_given(parse_moment("2026-03-01T15:59Z")) == ""
        assert as_given(None) == "" and parse_moment("none") is None
    finally:
        monkeypatch.undo()
        time.tzset()


def test_the_module_entry_point_reports_errors_too():
    proc = subprocess.run([sys.executable, "-m", "autograder", "grade", "--workers", "0"], cwd=REPO,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2
    assert "--workers: expected a whole number >= 1, got 0" in proc.stderr


def test_output_into_a_pipe_closed_early_ends_without_a_traceback(tmp_path):
    """`python -m autograder collect PATH | head` printed a BrokenPipeError traceback once head had stopped reading;
    the command's work is done by then: exit 1, nothing on stderr about the pipe."""
    from shared_builds import cli_env, released_copy

    build = released_copy(tmp_path)
    proc = subprocess.Popen([sys.executable, "-m", "autograder", "extend", "--build", str(build)], cwd=REPO,
                            env=cli_env(build), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    proc.stdout.close()  # the reader is gone before the first line
    err = proc.stderr.read()
    assert proc.wait(timeout=300) == 1, err
    assert "Traceback" not in err and "BrokenPipeError" not in err, err


def _smallest_source_notebook():
    """The part-ii source notebook with the fewest code cells, read with nbformat."""
    import nbformat

    paths = sorted((REPO / "notebooks" / "part-ii").glob("*.ipynb"))
    nbs = {p: nbformat.read(p, as_version=4) for p in paths}
    return min(nbs.items(), key=lambda item: sum(c.cell_type == "code" for c in item[1].cells))


@pytest.mark.parametrize("name, held", [
    # {notebook: cells of it the file holds: "g2" its first 2 graded cells, "s3" its first 3 answer (solution) cells}
    ("02-shapes-and-loss", {"02-shapes-and-loss": "g1", "03-maximum-likelihood": "g3"}),  # its own cells win, however few
    ("02-shapes-and-loss", {"02-shapes-and-loss": "s2", "03-maximum-likelihood": "g1"}),  # answer cells count too
    ("02-shapes-and-loss", {"03-maximum-likelihood": "g2", "04-entropy-cross-entropy-kl": "g1"}),  # none of its own
    ("02-shapes-and-loss-final", {"03-maximum-likelihood": "g2"}),  # a copy's name
    ("my-homework", {"05-sequence-loss-and-perplexity": "g1", "01-probability-and-bayes": "g2"}),  # no notebook's name
    ("my-homework", {"03-maximum-likelihood": "s3", "02-shapes-and-loss": "g1"}),
    ("01-probability-and-bayes", {"01-probability-and-bayes": "g2"}),
])
def test_check_names_the_notebook_collect_files_a_file_as(name, held):
    """check tells a student what collect will do with the file: both read the notebook a file is the same way (a file
    named 02 that also held more of 03's cells was called 03 by check, and filed as 02 by collect; found by review:
    check counted graded cells only, collect every cell with a grade id)."""
    import nbformat

    from autograder.check import course_cells, course_grade_ids, course_notebooks, matched_notebook, naming_problem
    from autograder.collect import exercises_notebook, graded_release_cells, match_notebook

    sources = {p.stem: nbformat.read(p, as_version=4) for p in sorted((REPO / "notebooks" / "part-ii").glob("*.ipynb"))}

    def cells(notebook: str, spec: str) -> list:
        meta = [(c, c.metadata.get("nbgrader", {})) for c in sources[notebook].cells]
        kind = [c for c, m in meta if (m.get("grade") if spec[0] == "g" else m.get("solution") and not m.get("grade"))]
        return kind[:int(spec[1:])]

    nb = nbformat.v4.new_notebook(cells=[c for notebook, spec in held.items() for c in cells(notebook, spec)])
    course = course_notebooks()
    checked = matched_notebook(Path(f"{name}.ipynb"), nb, course_grade_ids(course))
    hit = match_notebook(name, list(sources))
    assert checked == exercises_notebook(nb, hit[0] if hit else None, graded_release_cells(sources))
    counts = {notebook: int(spec[1:]) for notebook, spec in held.items()}
    named_holds = hit is not None and hit[0] in held
    assert checked == (hit[0] if named_holds else max(counts, key=counts.get))
    assert (naming_problem(Path(f"{name}.ipynb"), checked, course_cells(course)) is None) == named_holds


def test_check_passes_a_solved_notebook_and_fails_a_stub(tmp_path, monkeypatch, capsys):
    import nbformat

    path, nb = _smallest_source_notebook()
    # the copy in tmp_path is outside any course folder: its setup cell cannot find code/part-ii, but grading would
    # run it with the course's code, and so does check, saying so (it failed every exercise, found by review)
    monkeypatch.delenv("PART_II_ROOT", raising=False)
    solved = tmp_path / path.name
    nbformat.write(nb, solved)
    code, _, out = run(["check", str(solved)], capsys)
    assert code == 0, out
    cells = sum(c.cell_type == "code" for c in nb.cells)  # said first: a slow notebook looked hung for a minute
    assert out.startswith(f"running {path.name} from the top in a fresh kernel ({cells} code cells, each interrupted "
                          "after 60 s, 600 s in all); the table follows when it is done\n"), out
    assert (f"note: {tmp_path} is not inside the course folder (no code/part-ii in it or above it), so the notebook's "
            f"setup cell cannot find the course code there; this check runs it with {REPO}'s") in out, out
    assert "PART_II_ROOT" not in os.environ, "set for the check's kernel only"
    meta = [c.metadata.get("nbgrader", {}) for c in nb.cells]
    solution = next(i for i, m in enumerate(meta) if m.get("solution") and nb.cells[i].cell_type == "code")
    test_id = next(m["grade_id"] for m in meta[solution:] if m.get("grade") and not m.get("solution"))
    nb.cells[solution].source = "# YOUR CODE HERE\nraise NotImplementedError()"  # as released
    # and a later answer that ends the kernel: grading (and check) restart it and go on without that cell
    last = max(i for i, m in enumerate(meta) if m.get("solution") and nb.cells[i].cell_type == "code")
    nb.cells[last].source += "\nexit()"
    free_text = next(i for i, m in enumerate(meta) if m.get("solution") and nb.cells[i].cell_type == "markdown")
    nb.cells[free_text].source = "在此写下你的回答。"  # the release's text, not replaced
    stubbed = tmp_path / "stubbed" / path.name
    stubbed.parent.mkdir()
    nbformat.write(nb, stubbed)
    code, _, out = run(["check", str(stubbed)], capsys)
    assert code == 1
    line = next(ln for ln in out.splitlines() if test_id in ln)
    assert "✘" in line
    # the test cell's own error is a consequence: the line says the exercise is not answered, naming the answer cell
    # (it said "an earlier cell failed first: ex_..., NotImplementedError", a grade id JupyterLab never shows)
    assert (f"✘ not answered yet: cell {solution + 1} (# YOUR CODE HERE) still raises NotImplementedError; replace "
            "`raise NotImplementedError()` there with your answer") in line, line
    line = next(ln for ln in out.splitlines() if meta[free_text]["grade_id"] in ln)
    assert "not answered yet: the cell still reads '在此写下你的回答。'; write your answer there" in line, line
    assert (f"✘ cell {last + 1} (" in out and "stopped the Python kernel. Grading, like this check, then starts a new "
            "kernel, re-runs the cells before it and goes on without it" in out), out


def test_check_flags_an_edited_test_cell_even_when_the_edit_makes_it_pass(tmp_path, monkeypatch, capsys):
    """A student who edits a failing test cell must not read ✔: grading restores the released cell."""
    import nbformat
    from nbgrader.utils import compute_checksum, is_locked

    path, nb = _smallest_source_notebook()
    monkeypatch.setenv("PART_II_ROOT", str(REPO))
    for cell in nb.cells:  # checksums as nbgrader's release writes them (its own function)
        meta = cell.metadata.get("nbgrader", {})
        if "grade_id" in meta and (is_locked(cell) or meta.get("solution")):
            meta["checksum"] = compute_checksum(cell)
    meta = [c.metadata.get("nbgrader", {}) for c in nb.cells]
    solution = next(i for i, m in enumerate(meta) if m.get("solution") and nb.cells[i].cell_type == "code")
    test = next(i for i in range(solution, len(meta)) if meta[i].get("grade") and not meta[i].get("solution"))
    note = next(i for i, m in enumerate(meta) if m.get("locked") and not m.get("grade") and not m.get("solution"))
    nb.cells[solution].source = "raise NotImplementedError()"
    nb.cells[test].source = "pass  # the test was in my way"
    nb.cells[note].source += "\n(edited)"
    edited = tmp_path / path.name
    nbformat.write(nb, edited)
    code, _, out = run(["check", str(edited)], capsys)
    assert code == 1, out
    line = next(ln for ln in out.splitlines() if meta[test]["grade_id"] in ln)
    assert "✘ This test cell was changed: grading uses the released cell" in line, line
    assert "earlier cell failed first" not in line
    first_line = nb.cells[note].source.splitlines()[0].strip()[:60]
    assert f"read-only cells changed: cell {note + 1} ({first_line}" in out, out
    assert "(cell numbers count every cell from the top of the notebook, text cells included)" in out
    others = [ln for ln in out.splitlines() if any(m.get("grade_id", "§") in ln for j, m in enumerate(meta)
                                                   if j != test and m.get("grade") and not m.get("solution"))]
    assert others and not any("was changed" in ln for ln in others), out


def test_check_fails_a_test_cell_turned_into_markdown_and_counts_a_pasted_copy_once(tmp_path, monkeypatch, capsys):
    """A test cell turned into Markdown (the M key) did not run, so the check called it 'graded by your instructor',
    counted its points as free-text ones and passed with 0, while grading turns it back and runs it; a pasted copy of
    a test cell counted twice in the totals (found by review). The fix counted the first copy, while grading scores the
    last: an answer written into the upper copy is not graded (found by the next review)."""
    import copy

    import nbformat
    from nbgrader.utils import compute_checksum, is_locked

    from autograder.cells import cell_points, is_hand_graded, is_test_cell
    from autograder.course import load_config

    path, nb = _smallest_source_notebook()
    monkeypatch.setenv("PART_II_ROOT", str(REPO))
    for cell in nb.cells:  # checksums as nbgrader's release writes them
        meta = cell.metadata.get("nbgrader", {})
        if "grade_id" in meta and (is_locked(cell) or meta.get("solution")):
            meta["checksum"] = compute_checksum(cell)
    tests = [i for i, c in enumerate(nb.cells) if is_test_cell(c)]
    assert len(tests) >= 2, "the notebook has two test cells"
    ids = [nb.cells[i].metadata["nbgrader"]["grade_id"] for i in tests]
    points = sum(cell_points(nb.cells[i]) for i in tests)
    retyped, pasted = tests[-1], tests[0]
    worth = cell_points(nb.cells[retyped])
    nb.cells[retyped] = nbformat.v4.new_markdown_cell(nb.cells[retyped].source, metadata=nb.cells[retyped].metadata)
    pasted_copy = copy.deepcopy(nb.cells[pasted])
    pasted_copy.id = "pasted-copy"  # JupyterLab gives a pasted cell an id of its own
    nb.cells.insert(pasted + 1, pasted_copy)
    # a free-text answer cell pasted below itself, the answer then written into the upper one: grading (nbgrader's
    # DeduplicateIds) scores the last cell of a grade id, so the answer would not be graded
    answer = next(i for i, c in enumerate(nb.cells) if is_hand_graded(c) and c.cell_type == "markdown")
    answer_id = nb.cells[answer].metadata["nbgrader"]["grade_id"]
    written = copy.deepcopy(nb.cells[answer])
    written.id, written.source = "written-above", "My answer, in the copy above the answer cell."
    nb.cells[answer].source = load_config().ClearSolutions.text_stub  # the lower, scored copy left as released
    nb.cells.insert(answer, written)
    edited = tmp_path / path.name
    nbformat.write(nb, edited)
    code, _, out = run(["check", str(edited)], capsys)
    assert code == 1, out
    line = next(ln for ln in out.splitlines() if f" {ids[-1]} " in ln)
    assert "✘ This test cell was turned into a Markdown cell, so it did not run here; grading turns it back" in line, line
    assert "graded by your instructor" not in line and "read-only cells changed" not in out, out
    assert (f"visible tests passed: {len(ids) - 1} of {len(ids)} cells, {points - worth:g} of {points:g} autograded "
            "points") in out, out
    first = next(ln for ln in out.splitlines() if ln.startswith("✘ copies of graded cells that differ: "))
    assert f"cell {pasted + 1} (" in first and f"carry {ids[0]}, and grading scores only the last, cell {pasted + 2}" in first
    assert (f"cell {answer + 1} (My answer, in the copy above the answer cell.) and cell {answer + 2} (" in first and
            f"carry {answer_id}, and grading scores only the last, cell {answer + 2}") in first, first
    assert "move your answer into it and delete the copies above it (of a test cell, just delete them" in first, first
    row = next(ln for ln in out.splitlines() if f" {answer_id} " in ln)  # the table scores the lower copy, as grading
    assert "not answered yet: the cell still reads" in row, row
    from autograder.check import copied_graded_cells

    del nb.cells[answer]  # identical copies only: a note, no failure
    assert copied_graded_cells(nb)[1] is False and len(copied_graded_cells(nb)[0]) == 1


@pytest.mark.parametrize("db_url, words", [
    ("foo", "is not a database URL; expected a SQLAlchemy URL such as sqlite:////"),
    ("nosuchdb://host/x", "names an unknown database kind"),
    ("mysql+pymysql://localhost:1/x", "needs the Python database driver 'pymysql', which is not installed"),
    ("mysql://localhost:1/x", "driver 'MySQLdb', which is not installed; install it into the venv (e.g. "
                              "`.venv/bin/pip install mysqlclient`)"),  # the module's pip package has another name
])
def test_a_bad_gradebook_url_is_reported_before_anything_runs(db_url, words, empty_build, monkeypatch, capsys):
    if db_url.startswith("mysql"):  # psycopg (PostgreSQL) comes with the venv: a driver it does not have
        import importlib.util

        assert importlib.util.find_spec("pymysql") is None, "pymysql is installed: pick a driver that is not"
    monkeypatch.setenv("PART_II_DB_URL", db_url)
    code, err, _ = run(["export", "--build", empty_build], capsys)
    assert code == 2
    assert "export: error: the gradebook URL" in err and words in err, err


def test_a_gradebook_that_cannot_be_opened_is_reported_without_a_traceback(tmp_path, empty_build, monkeypatch, capsys):
    """A damaged SQLite file, a folder that does not exist, a server that does not answer: exit 2, what failed, no password."""
    damaged = tmp_path / "build" / "course" / "gradebook.db"
    damaged.parent.mkdir(parents=True)
    damaged.write_bytes(b"these bytes are not a database " * 200)
    for command in (["release"], ["extend"]):
        code, err, _ = run([*command, "--build", empty_build], capsys)
        assert code == 2, err
        assert (f"{command[0]}: error: cannot use the gradebook sqlite:///{damaged}: file is not a database; expected a "
                "database this machine can open and write") in err, err
        assert "Traceback" not in err
    for url, cause in [(f"sqlite:///{tmp_path}/no/such/folder/gradebook.db", "unable to open database file"),
                       ("postgresql+psycopg://grader:s3cret@127.0.0.1:1/course", "Connection refused")]:
        monkeypatch.setenv("PART_II_DB_URL", url)
        code, err, _ = run(["release", "--build", str(tmp_path / "other")], capsys)
        assert code == 2 and "release: error: cannot use the gradebook" in err and cause in err, err
        assert "s3cret" not in err and "Traceback" not in err, err


def test_a_course_released_with_another_gradebook_keeps_it_when_the_variable_is_unset(tmp_path, monkeypatch, capsys):
    """A shell without $PART_II_DB_URL used to open a new, empty course/gradebook.db beside the real one; release
    then pointed formgrader at it, and the course had two gradebooks."""
    import stat

    from autograder.course import DB_URL_RECORD, Course
    from autograder.release import write_formgrader_config

    build = tmp_path / "b"
    other = f"sqlite:///{tmp_path / 'elsewhere.db'}"
    monkeypatch.setenv("PART_II_DB_URL", other)
    course = Course.load(build)
    write_formgrader_config(course)  # what release does last
    record = course.root / DB_URL_RECORD
    assert record.read_text().strip() == other and stat.S_IMODE(record.stat().st_mode) == 0o600
    monkeypatch.delenv("PART_II_DB_URL")
    assert Course.load(build).db_url == other
    code, err, _ = run(["export", "--build", str(build)], capsys)
    assert code == 2 and not (course.root / "gradebook.db").exists(), err
    third = f"sqlite:///{tmp_path / 'third.db'}"
    monkeypatch.setenv("PART_II_DB_URL", third)  # set, the variable still says which gradebook
    assert Course.load(build).db_url == third
    monkeypatch.setenv("PART_II_DB_URL", f"sqlite:///{course.root / 'gradebook.db'}")
    write_formgrader_config(Course.load(build))  # released again with the default gradebook: nothing to remember
    assert not record.exists()
    # the course's own file spelled otherwise is not recorded either: a copied build must keep its own copy
    monkeypatch.chdir(build)
    monkeypatch.setenv("PART_II_DB_URL", "sqlite+pysqlite:///course/../course/gradebook.db")
    write_formgrader_config(Course.load(build))
    assert not record.exists()
    monkeypatch.setenv("PART_II_DB_URL", "sqlite:///elsewhere.db")  # relative to where release ran: made absolute
    write_formgrader_config(Course.load(build))
    assert record.read_text().strip() == f"sqlite:///{(build / 'elsewhere.db').resolve()}"


def test_a_variable_naming_another_gradebook_is_refused_once_the_course_has_collected(tmp_path, capsys, monkeypatch):
    """A $PART_II_DB_URL left set from another course used to switch this one to that gradebook: collect wrote its
    students there, and export said this course had none (found by review). Once hand-ins are collected the variable
    must name the course's own gradebook (its file, however spelled, or the URL release recorded), or be unset."""
    from autograder.course import DB_URL_RECORD, Course, sqlite_file
    from shared_builds import released_copy

    build = released_copy(tmp_path)
    root = build / "course"
    (root / "reports").mkdir(exist_ok=True)
    (root / "reports" / "collect.json").write_text('{"students": {}, "rejected": [], "ignored": []}', encoding="utf-8")
    for other in (f"sqlite:///{tmp_path / 'other-course.db'}", "postgresql+psycopg://grader:s3cret@127.0.0.1:1/course"):
        monkeypatch.setenv("PART_II_DB_URL", other)
        code, err, _ = run(["export", "--build", str(build)], capsys)
        assert code == 2 and "export: error: $PART_II_DB_URL names the gradebook" in err, err
        assert f"but this course's gradebook is sqlite:///{root / 'gradebook.db'} (its own SQLite file)" in err, err
        assert "Unset $PART_II_DB_URL" in err and "s3cret" not in err and "Traceback" not in err, err
    assert not (tmp_path / "other-course.db").exists()
    monkeypatch.chdir(build)
    monkeypatch.setenv("PART_II_DB_URL", "sqlite+pysqlite:///course/../course/gradebook.db")  # its own, spelled otherwise
    assert Course.load(build).db_url.endswith("course/../course/gradebook.db")
    monkeypatch.delenv("PART_II_DB_URL")
    assert sqlite_file(Course.load(build).db_url).resolve() == (root / "gradebook.db").resolve()
    # a course released with another gradebook: the variable may name that one, not a third
    recorded = f"sqlite:///{tmp_path / 'recorded.db'}"
    shutil.copy(root / "gradebook.db", tmp_path / "recorded.db")
    (root / DB_URL_RECORD).write_text(recorded + "\n", encoding="utf-8")
    monkeypatch.setenv("PART_II_DB_URL", recorded)
    assert Course.load(build).db_url == recorded
    monkeypatch.setenv("PART_II_DB_URL", f"sqlite:///{root / 'gradebook.db'}")
    code, err, _ = run(["export", "--build", str(build)], capsys)
    assert code == 2 and f"but this course's gradebook is {recorded} (the URL release recorded in" in err, err
    # before anything is collected the variable still chooses (release records it)
    (root / "reports" / "collect.json").unlink()
    assert Course.load(build).db_url == f"sqlite:///{root / 'gradebook.db'}"
    # the course's file moved: the variable may name it where it is now, as the "moved or deleted" error advises
    (root / "reports" / "collect.json").write_text('{"students": {}, "rejected": [], "ignored": []}', encoding="utf-8")
    (root / DB_URL_RECORD).unlink()
    moved = tmp_path / "moved.db"
    (root / "gradebook.db").rename(moved)
    monkeypatch.setenv("PART_II_DB_URL", f"sqlite:///{moved}")
    assert Course.load(build).db_url == f"sqlite:///{moved}"
    monkeypatch.delenv("PART_II_DB_URL")
    code, err, _ = run(["export", "--build", str(build)], capsys)
    assert code == 2 and "Put it back, or point $PART_II_DB_URL at it" in err, err


def test_one_server_database_is_one_gradebook_however_its_url_is_written():
    """Driver, password (one URL carries it, another leaves it to PGPASSWORD) and the default port do not make
    another gradebook (found by review of the diff); user, host, port and database name do."""
    from autograder.course import gradebook_key

    same = ["postgresql+psycopg://grader:s3cret@db.example/course", "postgresql://grader@db.example:5432/course",
            "postgresql+psycopg2://grader:other@db.example/course"]
    assert len({gradebook_key(url) for url in same}) == 1
    for other in ["postgresql://grader@db.example/course2", "postgresql://marker@db.example/course",
                  "postgresql://grader@db2.example/course", "postgresql://grader@db.example:5433/course"]:
        assert gradebook_key(other) != gradebook_key(same[0]), other
    assert "s3cret" not in gradebook_key(same[0])
    assert gradebook_key("not a url") == "not a url"  # a damaged record compares as written, without a traceback


def test_a_gradebook_replaced_after_the_release_is_reported_without_a_traceback(tmp_path, capsys, monkeypatch):
    import sqlite3

    from shared_builds import released_copy

    build = released_copy(tmp_path)
    (build / "course" / "gradebook.db").unlink()  # a fresh, empty one is made on first use
    reports = build / "course" / "reports"  # a student collected before the gradebook went
    reports.mkdir(exist_ok=True)
    (reports / "collect.json").write_text('{"students": {"ann": {"missing": [], "notebooks": {}}}, "rejected": [], '
                                          '"ignored": []}', encoding="utf-8")
    monkeypatch.delenv("PART_II_DB_URL", raising=False)
    code, err, _ = run(["feedback", "--build", str(build)], capsys)  # gone: put it back, not "release again"
    assert code == 2 and "the gradebook" in err and "does not exist, but this course has collected hand-ins" in err, err
    sqlite3.connect(build / "course" / "gradebook.db").close()  # an empty file in its place: replaced
    code, err, _ = run(["feedback", "--build", str(build)], capsys)
    assert code == 2, err
    assert "feedback: error: the gradebook sqlite:///" in err, err
    assert ("does not know the assignment (No such assignment: part-ii): it was replaced or emptied after the release; "
            f"run `python -m autograder release --build {build}` first") in err, err


def test_a_build_path_that_is_a_file_is_reported(tmp_path, empty_build, capsys):
    afile = tmp_path / "notes.txt"
    afile.write_text("not a folder")
    for command in ("release", "export"):
        code, err, _ = run([command, "--build", str(afile)], capsys)
        assert code == 2
        assert f"{afile} is a file, but the course needs a folder there" in err and "--build" in err, err


def test_a_build_folder_that_cannot_be_created_is_reported_without_a_traceback(empty_build, capsys):
    """/proc refuses new folders even to root (a permission check would let root through)."""
    code, err, _ = run(["release", "--build", "/proc/no-such-build"], capsys)
    assert code == 2 and "cannot create the course folder /proc/no-such-build/course" in err, err
    assert "Traceback" not in err


def _course_files_copy(course: Path) -> Path:
    """course, made to hold a copy of this repository's code/part-ii and data/part-ii, as an unpacked student zip does."""
    for part in ("code/part-ii", "data/part-ii"):
        shutil.copytree(REPO / part, course / part, ignore=shutil.ignore_patterns("__pycache__"))
    return course


def test_check_names_deleted_test_and_answer_cells_and_changed_course_files_and_fails(tmp_path, monkeypatch, capsys):
    """A solved notebook without one of its test cells is not a pass: grading puts the test back and scores it. Its
    written-answer cell deleted (the answer moved to a cell of the student's own) passed with exit 0 and cost its
    points; an edited tolerance in the student's checks.py turned failures into passes that grading does not give."""

    import nbformat

    from autograder.check import MISSING_TEST, cell_places

    path, nb = _smallest_source_notebook()
    monkeypatch.delenv("PART_II_ROOT", raising=False)
    course = _course_files_copy(tmp_path / "course")  # the unpacked student zip: the setup cell finds code/ above it
    with open(course / "code/part-ii/checks.py", "a", encoding="utf-8") as fh:
        fh.write("\n# RTOL loosened by the student\n")
    meta = {c.metadata.get("nbgrader", {}).get("grade_id"): c for c in nb.cells}
    tests = [g for g, c in meta.items() if g and c.cell_type == "code" and c.metadata["nbgrader"].get("grade")
             and not c.metadata["nbgrader"].get("solution")]
    gone = tests[len(tests) // 2]
    answer = next(g for g, c in meta.items() if g and c.metadata["nbgrader"].get("grade")
                  and c.metadata["nbgrader"].get("solution"))
    source = nbformat.read(path, as_version=4)
    nb.cells = [c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") not in (gone, answer)]
    trimmed = course / "part-ii" / path.name
    trimmed.parent.mkdir()
    nbformat.write(nb, trimmed)
    code, _, out = run(["check", str(trimmed)], capsys)
    assert code == 1, out
    [test_place] = cell_places(source, [gone])
    [answer_place] = cell_places(source, [answer])
    assert test_place.startswith("the test cell of 练习") and answer_place.startswith("the written-answer cell of 练习")
    assert f"✘ test cells missing from this notebook: {test_place}. Grading puts the released cells back" in out, out
    assert f"✘ answer cells missing from this notebook: {answer_place}. Only the released answer cell is graded" in out
    assert f"✘ course files changed in your copy: code/part-ii/checks.py (they differ from {REPO}'s). Grading runs" in out
    # the missing test keeps its row, under its exercise, and its points in the total (a walkthrough read "4 of 8
    # autograded points" for a notebook of 11 as the whole notebook)
    points = {g: c.metadata["nbgrader"]["points"] for g, c in meta.items() if g in tests}
    assert re.search(rf"^  {re.escape(gone)} +{points[gone]:g} pt  {re.escape(MISSING_TEST)}$", out, re.M), out
    assert f"visible tests passed: {len(tests) - 1} of {len(tests)} cells, {sum(points.values()) - points[gone]:g} of " \
           f"{sum(points.values()):g} autograded points" in out, out


@pytest.mark.parametrize("which", ["first", "middle", "last"])
def test_deleted_test_rows_take_the_released_place_in_every_notebook(which):
    """A deleted test cell's row goes where the released notebook has it: the same headings, grade ids and points in
    the same order as the table of the whole notebook (no kernel: the rows' order does not depend on outputs)."""
    import nbformat

    from autograder.check import exercise_rows, with_deleted_tests
    from autograder.cells import is_test_cell

    for path in sorted((REPO / "notebooks" / "part-ii").glob("*.ipynb")):
        source = nbformat.read(path, as_version=4)
        tests = [c.metadata["nbgrader"]["grade_id"] for c in source.cells if is_test_cell(c)]
        if not tests:
            continue
        gone = tests[{"first": 0, "middle": len(tests) // 2, "last": -1}[which]]
        trimmed = nbformat.from_dict(source)
        trimmed.cells = [c for c in source.cells if c.metadata.get("nbgrader", {}).get("grade_id") != gone]
        whole = [r[:3] for r in exercise_rows(source)]
        rows = with_deleted_tests(exercise_rows(trimmed), source, [gone])
        assert [r[:3] for r in rows] == whole, path.name
        assert [r[4] for r in rows if r[1] == gone] == [False], path.name


def test_check_names_a_deleted_code_answer_cell_its_failing_tests_need(tmp_path, monkeypatch, capsys):
    """A student's walkthrough: with an exercise's answer cell deleted, the table blamed the first cell that failed
    (a demonstration cell using the function), and said to fix that; the check now names the missing answer cell."""
    import nbformat

    from autograder.check import cell_places

    path, nb = _smallest_source_notebook()
    monkeypatch.delenv("PART_II_ROOT", raising=False)
    course = _course_files_copy(tmp_path / "course")
    answers = [c.metadata["nbgrader"]["grade_id"] for c in nb.cells if c.cell_type == "code"
               and c.metadata.get("nbgrader", {}).get("solution") and not c.metadata["nbgrader"].get("grade")]
    gone = answers[0]
    source = nbformat.read(path, as_version=4)
    nb.cells = [c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") != gone]
    trimmed = course / "part-ii" / path.name
    trimmed.parent.mkdir()
    nbformat.write(nb, trimmed)
    code, _, out = run(["check", str(trimmed)], capsys)
    [place] = cell_places(source, [gone])
    assert code == 1 and re.fullmatch(r"the answer cell of 练习 .+ \(def .+\)", place), (code, place)
    assert f"✘ code answer cells missing from this notebook: {place}. Grading runs your notebook as it is" in out, out


def test_check_tells_a_student_s_edit_of_a_course_file_from_a_zip_of_another_release(tmp_path, monkeypatch, capsys):
    """Found by review: a zip released before the repository's data/ gained a case failed the check untouched, with
    advice (unzip again) that could not help. The zip's course-files.sha256 now says what was released: a file as
    released but unlike the repository's gets a note, a file changed since the release the ✘."""
    import hashlib
    import shutil

    import nbformat

    path, nb = _smallest_source_notebook()
    monkeypatch.delenv("PART_II_ROOT", raising=False)
    course = _course_files_copy(tmp_path / "course")  # the unpacked student zip
    # the release this zip came from had a data file unlike the repository's (whitespace: the same JSON)
    with open(course / "data/part-ii/arithmetic.json", "a", encoding="utf-8") as fh:
        fh.write("\n")
    listed = sorted(p for p in course.rglob("*") if p.is_file())
    (course / "course-files.sha256").write_text("".join(
        f"{hashlib.sha256(p.read_bytes()).hexdigest()}  {p.relative_to(course).as_posix()}\n" for p in listed))
    with open(course / "code/part-ii/checks.py", "a", encoding="utf-8") as fh:  # the student's own edit
        fh.write("\n# RTOL loosened by the student\n")
    (course / "part-ii").mkdir()
    nbformat.write(nb, course / "part-ii" / path.name)
    code, _, out = run(["check", str(course / "part-ii" / path.name)], capsys)
    assert code == 1, out
    assert ("✘ course files changed in your copy: code/part-ii/checks.py (they differ from the copies your course zip "
            "shipped, listed in its course-files.sha256). Grading runs") in out, out
    assert (f"note: your copy of data/part-ii/arithmetic.json is as your course zip shipped it, but differs from "
            f"{REPO}'s") in out, out

    # the student puts the file back as released: the check passes, the note stays
    shutil.copy(REPO / "code/part-ii/checks.py", course / "code/part-ii/checks.py")
    code, _, out = run(["check", str(course / "part-ii" / path.name)], capsys)
    assert code == 0 and "course files changed" not in out and "note: your copy of data/part-ii/arithmetic.json" in out, out


def test_course_file_drift_trusts_the_repository_s_bytes_and_names_deleted_files(tmp_path, monkeypatch):
    """Found by review: a file as this repository has it was an edit when the list said otherwise (a student who
    took the new release's code/ kept the old list); an emptied or BOM-prefixed list turned the comparison off, and a
    listed file the student deleted went unnamed."""
    import hashlib

    from autograder.check import course_file_drift

    monkeypatch.delenv("PART_II_ROOT", raising=False)
    course = _course_files_copy(tmp_path / "course")
    folder = course / "part-ii"
    folder.mkdir()
    files = sorted(p.relative_to(course).as_posix() for p in course.rglob("*") if p.is_file())
    digests = {rel: hashlib.sha256((course / rel).read_bytes()).hexdigest() for rel in files}
    old, gone, edited, unlisted = "code/part-ii/checks.py", "data/part-ii/arithmetic.json", files[0], files[-1]
    assert len({old, gone, edited, unlisted}) == 4, files
    digests[old] = hashlib.sha256(b"the release before").hexdigest()  # the student's checks.py is this repository's
    del digests[unlisted]
    listing = course / "course-files.sha256"
    listing.write_text("\ufeff" + "".join(f"{d}  {rel}\n" for rel, d in digests.items()), encoding="utf-8")
    (course / gone).unlink()
    for rel in (edited, unlisted):
        with open(course / rel, "ab") as fh:
            fh.write(b"\n# edited\n")
    assert course_file_drift(folder) == (sorted([edited, unlisted]) + [f"{gone} (missing)"], [], True)

    listing.write_text("\n", encoding="utf-8")  # emptied: this repository's copies are the reference again
    assert course_file_drift(folder) == (sorted([edited, unlisted]), [], False)


def test_check_ignores_warnings_as_grading_does_and_names_only_this_exercise_s_failures(tmp_path, monkeypatch, capsys):
    """A warning on stderr passes (grading strips it with nbgrader's IgnorePattern); an unfinished first
    exercise is named under its own test cell only, not under a later exercise's failure."""
    import re

    import nbformat

    path, nb = _smallest_source_notebook()
    monkeypatch.setenv("PART_II_ROOT", str(REPO))
    meta = [c.metadata.get("nbgrader", {}) for c in nb.cells]
    solutions = [i for i, m in enumerate(meta) if m.get("solution") and nb.cells[i].cell_type == "code"]
    tests = [i for i, m in enumerate(meta) if m.get("grade") and not m.get("solution") and nb.cells[i].cell_type == "code"]
    first_test = next(i for i in tests if i > solutions[0])
    warned = nbformat.from_dict(nb)  # every check_close call warns once: the first test cell writes to stderr
    warned.cells[solutions[0]].source += ("\nimport warnings\n_real_check_close = check_close\n\n\n"
                                          "def check_close(*args, **kwargs):\n"
                                          "    warnings.warn('a harmless warning', RuntimeWarning)\n"
                                          "    return _real_check_close(*args, **kwargs)\n")
    nbformat.write(warned, tmp_path / path.name)
    code, _, out = run(["check", str(tmp_path / path.name)], capsys)
    assert code == 0, out
    assert "✔" in next(ln for ln in out.splitlines() if meta[first_test]["grade_id"] in ln), out

    second = next(i for i in solutions if i > first_test)
    name = re.search(r"^def (\w+)\(", nb.cells[second].source, flags=re.M).group(1)
    nb.cells[solutions[0]].source = "raise NotImplementedError()"      # exercise 1 not done yet
    nb.cells[second].source += f"\n{name} = lambda *args, **kwargs: None\n"  # exercise 2 wrong, raises nothing
    (tmp_path / "two").mkdir()
    nbformat.write(nb, tmp_path / "two" / path.name)
    code, _, out = run(["check", str(tmp_path / "two" / path.name)], capsys)
    assert code == 1
    later = next(i for i in tests if i > second)
    line = next(ln for ln in out.splitlines() if meta[later]["grade_id"] in ln)
    assert "✘" in line and "earlier cell failed first" not in line, line
    first_line = next(ln for ln in out.splitlines() if meta[first_test]["grade_id"] in ln)
    assert f"✘ not answered yet: cell {solutions[0] + 1} (raise NotImplementedError())" in first_line, first_line


def test_check_lists_each_graded_cell_under_its_exercise_heading_as_the_feedback_contents_do():
    """The table groups rows by the heading above them: a '# comment' in a fenced block of a markdown cell is
    not a heading, and in each course notebook every test cell sits under the 练习 heading above it."""
    import nbformat
    from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

    from autograder.check import exercise_rows

    def graded(cell, grade_id):
        cell.metadata["nbgrader"] = {"grade": True, "solution": False, "grade_id": grade_id, "points": 1}
        return cell

    nb = new_notebook(cells=[new_markdown_cell("### 练习 1（1 分）实现 `__init__`"), graded(new_code_cell("pass"), "test_a"),
                             new_markdown_cell("例：\n```python\n# not a heading\n```"), graded(new_code_cell("pass"), "test_b")])
    assert [(r[0], r[1]) for r in exercise_rows(nb)] == [("练习 1（1 分）实现 __init__", "test_a"),
                                                         ("练习 1（1 分）实现 __init__", "test_b")]
    for path in sorted((REPO / "notebooks" / "part-ii").glob("*.ipynb")):
        source = nbformat.read(path, as_version=4)
        exercise, expected = None, []
        for cell in source.cells:  # independently of check: the last '### 练习' line of an instructor markdown cell
            nbg = cell.metadata.get("nbgrader", {})
            if cell.cell_type == "markdown" and not nbg:
                exercise = next((ln.lstrip("#").strip().replace("`", "") for ln in reversed(cell.source.splitlines())
                                 if ln.startswith("### 练习")), exercise)
            elif nbg.get("grade") and not nbg.get("solution") and cell.cell_type == "code":
                expected.append((exercise, nbg["grade_id"]))
        tests = [(r[0], r[1]) for r in exercise_rows(source) if r[4] is not None]  # not the free-text answers
        assert expected and tests == expected, path.name


def ran_cell(source, grade_id=None, solution=False, error=None):
    """A code cell as check reads it after a run: a test cell (grade_id) or an answer cell (solution), ended by error
    (ename, evalue) if given."""
    from nbformat.v4 import new_code_cell, new_output

    made = new_code_cell(source)
    if grade_id or solution:
        made.metadata["nbgrader"] = {"grade": bool(grade_id), "solution": solution, "grade_id": grade_id or "answer",
                                     "points": 1 if grade_id else 0}
    if error:
        made.outputs = [new_output("error", ename=error[0], evalue=error[1], traceback=[])]
    return made


def test_every_test_cell_of_an_unanswered_exercise_says_it_is_not_answered_yet_and_no_other_exercise_s_does():
    """Exercise 1 has two test cells after one answer cell that still raises NotImplementedError: the second said only
    "NameError: name 'posterior' is not defined". Exercise 2 has no code answer cell of its own: its failure is its own."""
    from nbformat.v4 import new_markdown_cell, new_notebook

    from autograder.check import exercise_rows

    undefined = ("NameError", "name 'posterior' is not defined")
    nb = new_notebook(cells=[
        new_markdown_cell("### 练习 1"),
        ran_cell("# YOUR CODE HERE\nraise NotImplementedError()", solution=True, error=("NotImplementedError", "")),
        ran_cell("check_close('p', posterior([1, 1], [1, 1]), [0.5, 0.5])", "test_1a", error=undefined),
        ran_cell("check_close('p', posterior([1, 0], [0, 1]), [0, 1])", "test_1b", error=undefined),
        new_markdown_cell("### 练习 2"),
        ran_cell("check_true('p sums to 1', total == 1)", "test_2", error=("NameError", "name 'total' is not defined")),
    ])
    rows = {grade_id: message for _, grade_id, _, message, _ in exercise_rows(nb)}
    stub = "✘ not answered yet: cell 2 (# YOUR CODE HERE) still raises NotImplementedError"
    assert rows["test_1a"].startswith(stub) and rows["test_1b"].startswith(stub), rows
    assert "not answered" not in rows["test_2"] and "total" in rows["test_2"], rows
    # two exercises under the same heading text are two exercises (found by review)
    nb.cells[4].source = nb.cells[0].source
    rows = {grade_id: message for _, grade_id, _, message, _ in exercise_rows(nb)}
    assert rows["test_1b"].startswith(stub) and "not answered" not in rows["test_2"], rows


def test_every_test_cell_of_an_answer_that_failed_half_way_names_the_answer_cell():
    """Exercise 2.6's answer cell defines ex6_loss, then ex6_same_failure; when it fails at the first, both test cells
    fail with a NameError. The second said only "name 'ex6_same_failure' is not defined", though the student did define
    it (found by review). A failure in another exercise is not named under this one's tests."""
    from nbformat.v4 import new_markdown_cell, new_notebook

    from autograder.check import exercise_rows

    nb = new_notebook(cells=[
        new_markdown_cell("### 练习 1"),
        ran_cell("ex1 = broken()", solution=True, error=("NameError", "name 'broken' is not defined")),
        ran_cell("check_true('ex1', ex1)", "test_1", error=("NameError", "name 'ex1' is not defined")),
        new_markdown_cell("### 练习 6"),
        ran_cell("ex6_loss = float(loss(z[None], y))\nex6_same_failure = 0", solution=True,
             error=("TypeError", "expected logits [T, V]")),
        ran_cell("check_close('ex6_loss', ex6_loss, 0.5)", "test_loss", error=("NameError", "name 'ex6_loss' is not defined")),
        ran_cell("check_equal('ex6_same_failure', ex6_same_failure, 0)", "test_same",
             error=("NameError", "name 'ex6_same_failure' is not defined")),
    ])
    rows = {grade_id: message for _, grade_id, _, message, _ in exercise_rows(nb)}
    named = "[an earlier cell failed first: cell 5 (ex6_loss = float(loss(z[None], y))), TypeError: expected logits [T, V]"
    assert named in rows["test_loss"] and named in rows["test_same"], rows
    assert "cell 2" not in rows["test_loss"] + rows["test_same"], rows
    # an exercise with no heading of its own starts at its answer cell: exercise 1's failure is not blamed there
    nb.cells[3:3] = [ran_cell("ex2 = 3", solution=True),
                     ran_cell("check_equal('ex2', ex2, 4)", "test_2", error=("AssertionError", "ex2: got 3, expected 4"))]
    rows = {grade_id: message for _, grade_id, _, message, _ in exercise_rows(nb)}
    assert rows["test_2"] == "✘ Failed: ex2: got 3, expected 4", rows["test_2"]


def test_check_says_a_pass_is_about_form_only_where_the_visible_checks_look_only_at_the_form(capsys):
    """Exercise 2.6's visible checks accept any of the four letters: its pass must not read as a right answer."""
    import nbformat

    from autograder.check import FORMAT_OK, exercise_rows, print_table

    path = REPO / "notebooks" / "part-ii" / "02-shapes-and-loss.ipynb"
    nb = nbformat.read(path, as_version=4)  # committed with its outputs: no test cell shows an error
    rows = exercise_rows(nb)
    marked = {r[1] for r in rows if r[3] == FORMAT_OK}
    assert marked == {"test_same_failure"}
    assert all(r[4] for r in rows if r[4] is not None)  # still a pass: the exit code does not change
    assert all(r[3].startswith("✔ Passed") for r in rows if r[4] and r[1] not in marked)
    points = next(r[2] for r in rows if r[1] == "test_same_failure")
    print_table(path, rows)
    out = capsys.readouterr().out
    worth = f"{points:g} point{'' if points == 1 else 's'}"
    assert f"of these, 1 cell worth {worth} checks only the answer's form" in out and FORMAT_OK in out

    # a form-only cell that fails says why, as any test cell does: the mark changes only what a pass means
    cell = next(c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") == "test_same_failure")
    cell.outputs = [nbformat.v4.new_output("error", ename="AssertionError", evalue="ex6_fix_underflow is one of 'a', "
                                           "'b', 'c', 'd': got 'e'", traceback=["AssertionError"])]
    (row,) = [r for r in exercise_rows(nb) if r[1] == "test_same_failure"]
    assert row[4] is False and row[3].startswith("✘ Failed") and "got 'e'" in row[3], row


def test_check_fails_a_file_named_after_another_notebook_or_not_collectable_and_refuses_a_foreign_notebook(tmp_path, monkeypatch,
                                                                                                  capsys):
    import nbformat

    path, nb = _smallest_source_notebook()
    monkeypatch.setenv("PART_II_ROOT", str(REPO))
    other = next(p.stem for p in sorted(path.parent.glob("*.ipynb")) if p != path)
    cases = {"misnamed": f"{other}.ipynb", "renamed": f"{path.stem[:2]}.ipynb", "copy": f"Copy of {path.name}"}
    for folder, name in cases.items():
        (tmp_path / folder).mkdir()
        nbformat.write(nb, tmp_path / folder / name)
    code, _, out = run(["check", str(tmp_path / "misnamed" / f"{other}.ipynb")], capsys)
    assert code == 1, out
    assert (f"holds the exercises of {path.stem}: grading takes it as {path.stem}, and {other} counts as not handed in. "
            f"Save it as {path.name}") in out, out
    code, _, out = run(["check", str(tmp_path / "renamed" / cases["renamed"])], capsys)
    assert code == 1 and f"save this notebook as {path.name}" in out, out
    code, _, out = run(["check", str(tmp_path / "copy" / cases["copy"])], capsys)  # collect files a 'Copy of' name
    assert code == 0 and "✘" not in out, out
    foreign = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("assert True")])
    foreign.cells[0].metadata["nbgrader"] = {"grade": True, "solution": False, "locked": True, "points": 2,
                                             "grade_id": "q1", "schema_version": 3}
    nbformat.write(foreign, tmp_path / path.name)
    code, err, out = run(["check", str(tmp_path / path.name)], capsys)
    assert code == 2 and "is not a notebook of this course" in err + out and "q1" in err + out, err + out


def test_feedback_names_students_collected_but_not_graded_and_exits_1(tmp_path, capsys, monkeypatch):
    """Export warns about them and exits 1; feedback did neither, printing "wrote 0 feedback files". release and collect
    end with the command to run next: collect before any hand-in (the rejected files again after a collect that filed
    nothing), grade while one is not graded."""
    import shutil

    from shared_builds import released_copy

    build = released_copy(tmp_path)
    monkeypatch.delenv("PART_II_DB_URL", raising=False)
    download = tmp_path / "download" / "carol"
    download.mkdir(parents=True)
    shutil.copy(build / "course" / "release" / "part-ii" / "02-shapes-and-loss.ipynb", download)
    code, err, out = run(["release", "--build", str(build)], capsys)  # nothing collected yet: collect comes next
    assert code == 0 and out.endswith(f"next: hand out the student zip; `python -m autograder collect PATH --build "
                                      f"{build}` files the LMS download (PATH: its folder or zip)\n"), err + out
    code, err, out = run(["feedback", "--build", str(build)], capsys)  # grade would only say to collect first
    assert code == 2 and err.endswith(f"no graded submissions; run `python -m autograder collect PATH --build {build}` "
                                      "first\n"), err + out
    broken = tmp_path / "broken" / "dave"  # a download whose every file is rejected: the files are needed again
    broken.mkdir(parents=True)
    (broken / "02-shapes-and-loss.ipynb").write_text("{not json", encoding="utf-8")
    code, err, out = run(["collect", str(broken.parent), "--build", str(build)], capsys)
    assert code == 1 and "rejected files (1)" in out, err + out
    assert out.endswith("next: nothing is filed yet; once the rejected files above are handed in again or put right, "
                        f"`python -m autograder collect PATH --build {build}` files them\n"), out
    code, err, out = run(["grade", "--student", "dave", "--build", str(build)], capsys)  # collected, nothing filed
    assert code == 2 and "no collected submission for student(s) dave; collected: none; collect filed no notebook of " \
                         "dave (no valid notebook): see reports/collect.json" in err, err + out
    code, err, out = run(["collect", str(download.parent), "--build", str(build)], capsys)
    assert code == 0, err + out
    grade_next = f"next: `python -m autograder grade --build {build}` (1 student is collected and not graded yet)\n"
    assert out.endswith(grade_next), out
    code, err, out = run(["collect", str(download.parent), "--build", str(build)], capsys)
    assert code == 0 and re.search(r"carol +unchanged", out) and out.endswith(grade_next), out  # still not graded
    code, err, out = run(["release", "--build", str(build)], capsys)
    assert code == 0 and out.endswith(grade_next), err + out
    code, err, out = run(["feedback", "--build", str(build)], capsys)
    assert code == 1, err + out
    assert ("carol: no pages yet: collected but not graded yet: no feedback written; "
            f"run `python -m autograder grade --build {build}` first") in out, out
    assert not (build / "course" / "feedback" / "carol").exists(), "no page before grading"


def test_collect_replace_older_files_an_older_file_the_default_rejects(tmp_path, capsys, monkeypatch):
    import os

    from shared_builds import released_copy

    build = released_copy(tmp_path)
    monkeypatch.delenv("PART_II_DB_URL", raising=False)
    name = "02-shapes-and-loss.ipynb"
    release = (build / "course" / "release" / "part-ii" / name).read_bytes()
    for folder, data, when in (("new", release, 1_800_400_000), ("old", release + b"\n", 1_800_000_000)):
        (tmp_path / folder / "dana").mkdir(parents=True)
        (tmp_path / folder / "dana" / name).write_bytes(data)
        os.utime(tmp_path / folder / "dana" / name, (when, when))
    assert run(["collect", str(tmp_path / "new"), "--build", str(build)], capsys)[0] == 0
    code, _, out = run(["collect", str(tmp_path / "old"), "--build", str(build)], capsys)
    assert code == 1 and "which stays filed; to file this one instead, collect again with --replace-older" in out, out
    filed = build / "course" / "submitted" / "dana" / "part-ii" / name
    assert filed.read_bytes() == release
    code, _, out = run(["collect", str(tmp_path / "old"), "--replace-older", "--build", str(build)], capsys)
    assert code == 0 and "updated" in out, out
    assert filed.read_bytes() == release + b"\n"


def test_check_names_a_cell_that_ran_out_of_time_and_fails(tmp_path, monkeypatch, capsys):
    """A student's own cell that never ends is interrupted, as grading interrupts it; every test may still pass."""
    import nbformat

    path, nb = _smallest_source_notebook()
    monkeypatch.setenv("PART_II_ROOT", str(REPO))
    setup = next(i for i, c in enumerate(nb.cells) if c.cell_type == "code")
    nb.cells.insert(setup + 1, nbformat.v4.new_code_cell("import time\nwhile True:  # my experiment\n    time.sleep(0.05)"))
    looping = tmp_path / path.name
    nbformat.write(nb, looping)
    code, _, out = run(["check", str(looping), "--timeout", "10"], capsys)
    assert code == 1, out
    assert f"✘ did not finish within 10 s and was interrupted: cell {setup + 2} (import time)" in out, out
    assert "✘" not in "".join(line for line in out.splitlines() if "test_" in line), "the tests themselves passed"
    # grading's notebook budget too: the loop is cut when it runs out, and the cells after it are not run and fail
    code, _, out = run(["check", str(looping), "--timeout", "60", "--notebook-timeout", "12"], capsys)
    assert code == 1 and "each interrupted after 60 s, 12 s in all)" in out, out
    assert "did not finish within 60 s" not in out, "the budget stopped the loop, not the cell's own limit"
    after = next(i for i in range(setup + 2, len(nb.cells)) if nb.cells[i].cell_type == "code")
    assert (f"✘ the notebook used up its time budget of 12 s: cell {setup + 2} (import time) was stopped, and the cells "
            f"from cell {after + 1} (" in out and "on were not run; that counts as failed. Grading gives a notebook a "
            "budget too (600 s unless" in out), out
    tests = [line for line in out.splitlines() if line.lstrip().startswith("test_")]
    assert tests and all(line.endswith("✘ not run: the notebook used up its time budget of 12 s") for line in tests), tests


def test_a_cell_the_notebook_budget_stops_says_so_not_its_own_limit(tmp_path):
    """The budget running out during the last cell gave it the error of its own 60 s limit, and check then said
    'did not finish within 60 s' about a cell stopped after seconds (found by review)."""
    from nbformat.v4 import new_code_cell, new_notebook
    from traitlets.config import Config

    from autograder.check import budget_spent, timed_out_cells
    from autograder.worker import BudgetedExecute

    nb = new_notebook(cells=[new_code_cell("print('a')"), new_code_cell("import time\nwhile True:\n    time.sleep(0.05)")])
    nb.metadata.kernelspec = {"name": "python3", "display_name": "Python 3", "language": "python"}
    config = Config()
    config.KernelManager.transport, config.KernelManager.ip = "ipc", str(tmp_path / "kernel")
    # the budget counts from the kernel's start: 8 s ran out before the loop began on a machine loaded by another test
    # run (a fresh-clone CI beside the developer's tests), so the loop gets 20
    BudgetedExecute(config=config, timeout=60, kernel_name="python3", interrupt_on_timeout=True,
                    notebook_timeout=20).preprocess(nb, {"metadata": {"path": str(tmp_path)}})
    (error,) = nb.cells[1].outputs
    assert error.ename == "CellTimeoutError" and error.evalue == ("the notebook used up its time budget of 20 s while "
                                                                   "the cell ran, and the grader stopped it"), error
    assert budget_spent(nb) == ("cell 2 (import time)", None) and timed_out_cells(nb) == []


def test_a_course_folder_given_as_build_gets_a_hint_and_no_folder_is_made(tmp_path, empty_build, capsys):
    course = tmp_path / "b" / "course"
    (course / "release" / "part-ii").mkdir(parents=True)
    for command in ("grade", "feedback", "export"):
        code, err, _ = run([command, "--build", str(course)], capsys)
        assert code == 2, err
        # the right advice first, and not "run release first": the course is there (found by review)
        assert err.startswith(f"python -m autograder {command}: error: {course} is a course folder itself: give "
                              f"--build {course.parent}, the folder that holds course/"), err
        assert f"({course}/course does not exist)" in err and "release" not in err, err
    # release would build a second course in course/course
    code, err, _ = run(["release", "--build", str(course)], capsys)
    assert code == 2 and f"{course} is a course folder itself: give --build {course.parent}, the folder" in err, err
    assert sorted(p.name for p in course.iterdir()) == ["release"]


def test_every_command_that_writes_the_course_waits_for_no_one_and_says_who_holds_it(tmp_path, capsys, monkeypatch):
    import os
    import shutil

    from autograder.course import Course
    from shared_builds import released_copy

    build = released_copy(tmp_path)
    monkeypatch.delenv("PART_II_DB_URL", raising=False)
    (tmp_path / "download" / "ann").mkdir(parents=True)
    shutil.copy(build / "course" / "release" / "part-ii" / "02-shapes-and-loss.ipynb", tmp_path / "download" / "ann")
    assert run(["collect", str(tmp_path / "download"), "--build", str(build)], capsys)[0] == 0
    with Course.load(build).lock("grade"):
        for argv in (["release"], ["collect", str(tmp_path / "download")], ["grade"], ["feedback"], ["export"],
                     ["extend", "--student", "ann", "--until", "2026-03-02 00:00 UTC"]):
            code, err, _ = run([*argv, "--build", str(build)], capsys)
            assert code == 2, (argv, err)
            assert f"is busy (`grade` running as pid {os.getpid()}); wait for it to finish" in err, (argv, err)
    code, _, out = run(["extend", "--build", str(build)], capsys)  # listing changes nothing: no lock needed
    assert code == 0 and "no extensions" in out, out
    for command in ("grade", "feedback"):
        code, err, _ = run([command, "--student", "ANN", "--build", str(build)], capsys)
        assert code == 2 and "ANN (ids are case-sensitive: did you mean ann?)" in err, err


def test_check_says_to_clear_saved_outputs_of_a_large_notebook_and_refuses_one_collect_would_not_take(tmp_path, monkeypatch,
                                                                                                      capsys):
    """A student printed a 126 MB loss log: check passed it without a word, and the upload may fail or, over collect's
    limits, the notebook is never graded."""
    import nbformat
    from nbformat.v4 import new_output

    from autograder import check

    path, nb = _smallest_source_notebook()
    code_cell = next(c for c in nb.cells if c.cell_type == "code")
    code_cell.outputs = [new_output("stream", name="stdout", text="loss 2.302585\n" * 900_000)]  # 12.4 MiB
    big = tmp_path / path.name
    nbformat.write(nb, big)
    size, bare = big.stat().st_size, check.bytes_without_outputs(nb)
    assert size > check.LARGE_NOTEBOOK_BYTES > 100 * bare and len(code_cell.outputs) == 1, "bytes_without_outputs copies"
    note = check.size_note(big, nb)
    assert note == (f"note: {path.name} is {size / 2**20:.1f} MiB, {bare / 2**20:.1f} MiB without its saved outputs. "
                    "Grading runs every cell again and does not use them; a large upload may be slow or refused by your "
                    "course's site. Clear them before you hand it in (in JupyterLab, Edit › Clear Outputs of All Cells, "
                    "then save)."), note
    monkeypatch.setattr(check, "MAX_NOTEBOOK_BYTES", 10 * 2**20)  # collect files it without its outputs
    assert "over 10.0 MiB, it is accepted with its outputs removed; a large upload" in check.size_note(big, nb)
    assert check.size_note(REPO / "notebooks" / "part-ii" / path.name, nb) is None, "the run notebook is small"
    monkeypatch.setattr(check, "run_notebook", lambda *args, **kwargs: None)  # the note comes first, before the run
    monkeypatch.setenv("PART_II_ROOT", str(REPO))
    _, _, out = run(["check", str(big)], capsys)
    assert out.startswith(check.size_note(big, nb) + "\nrunning "), out

    monkeypatch.setattr(check, "MAX_READ_BYTES", 12 * 2**20)  # collect opens no file this large: never graded
    code, err, out = run(["check", str(big)], capsys)
    assert code == 2 and out == "", out
    assert (f"{big} is {size / 2**20:.1f} MiB: a hand-in over 12.0 MiB is not accepted, so it would not be graded. "
            "Clear its saved outputs (in JupyterLab, Edit › Clear Outputs of All Cells, then save) or make pictures "
            "pasted into its text cells smaller, and check it again") in err
    monkeypatch.setattr(check, "MAX_READ_BYTES", 512 * 2**20)
    monkeypatch.setattr(check, "MAX_NOTEBOOK_BYTES", 2**20)
    nb.cells[0].source += "\n\n![photo](data:image/png;base64," + "A" * (2 * 2**20) + ")"  # a picture pasted as text
    nbformat.write(nb, big)
    code, err, out = run(["check", str(big)], capsys)
    assert code == 2 and out == "", out
    assert "without its outputs: a notebook over 1.0 MiB even without outputs is not accepted, so it would not be " \
           "graded. Make pictures pasted into its text cells smaller, and check it again" in err, err
    # a notebook large for its pictures, not its outputs: clearing outputs would not help (found by review)
    code_cell.outputs = []
    nbformat.write(nb, big)
    assert check.size_note(big, nb) is None
    monkeypatch.setattr(check, "LARGE_NOTEBOOK_BYTES", 2**20)
    assert check.size_note(big, nb) == (f"note: {path.name} is {big.stat().st_size / 2**20:.1f} MiB, "
                                        f"{check.bytes_without_outputs(nb) / 2**20:.1f} MiB of it in its text and code "
                                        "cells (pictures pasted into text cells?): a large upload may be slow or refused "
                                        "by your course's site. Make the pictures smaller before you hand it in.")


def test_an_earlier_copy_of_a_test_cell_still_closes_its_exercise_for_the_blame_of_later_failures():
    """The self-check skips an earlier pasted copy of a test cell (grading scores the last), but that copy ran as a test:
    exercise 1's unanswered stub must not be blamed on exercise 2's failing test (found by review: 'not answered yet:
    cell 3 (def f2…) still raises NotImplementedError')."""
    from nbformat.v4 import new_code_cell, new_notebook, new_output

    from autograder.check import exercise_rows

    def cell(source, grade_id, grade, solution, error=None):
        outputs = [new_output("error", ename=error[0], evalue=error[1], traceback=[])] if error else []
        return new_code_cell(source, outputs=outputs, metadata={"nbgrader": {
            "grade": grade, "solution": solution, "grade_id": grade_id, "points": 1 if grade else 0}})

    stub = ("NotImplementedError", "")
    nb = new_notebook(cells=[
        cell("def f1():\n    raise NotImplementedError()", "answer_1", False, True),
        cell("assert f1() == 1", "test_1", True, False, stub),
        cell("def f2():\n    return 3", "answer_2", False, True),
        cell("assert f2() == 2, 'f2 should give 2'", "test_2", True, False, ("AssertionError", "f2 should give 2")),
        cell("assert f1() == 1", "test_1", True, False, stub),  # pasted at the end: the copy grading scores
    ])
    rows = {grade_id: message for _, grade_id, _, message, _ in exercise_rows(nb)}
    assert rows["test_2"] == "✘ Failed: f2 should give 2", rows
    assert list(rows) == ["test_2", "test_1"], rows  # in the order of the copies grading scores


def test_check_names_a_syntax_error_s_line_in_the_cell_not_ipython_s_file_name():
    """'invalid syntax (1321635150.py, line 2)' named IPython's file for the cell (found by review)."""
    from nbformat.v4 import new_code_cell, new_output

    from autograder.check import cell_error

    source = "x = 1\ny = ("
    with pytest.raises(SyntaxError) as compiled:
        compile(source, "<cell>", "exec")
    cell = new_code_cell(source, outputs=[new_output("error", ename="SyntaxError", traceback=[],
                                                     evalue="incomplete input (34936886.py, line 2)")])
    assert cell_error(cell, 5) == f"cell 5 (x = 1), SyntaxError: {compiled.value.msg} (line 2 of the cell)"
    cell.outputs[0].ename, cell.outputs[0].evalue = "ValueError", "bad value\nmore"
    assert cell_error(cell, 5) == "cell 5 (x = 1), ValueError: bad value"


def test_check_given_a_folder_says_it_takes_one_notebook(tmp_path, capsys):
    code, err, _ = run(["check", str(tmp_path)], capsys)
    assert code == 2 and f"{tmp_path} is a folder, with no notebook in it; check takes one notebook file" in err, err
    # a folder of notebooks, or a typo in a notebook's name: the message names what is there (found by review: it
    # suggested FOLDER/NAME.ipynb, and spoke of relative paths for an absolute one)
    for name in ("02-shapes-and-loss.ipynb", "01-probability-and-bayes.ipynb"):
        (tmp_path / name).write_text("{}")
    code, err, _ = run(["check", str(tmp_path)], capsys)
    assert code == 2 and (f"e.g. python -m autograder check {tmp_path / '01-probability-and-bayes.ipynb'} (the notebooks "
                          "there: 01-probability-and-bayes.ipynb, 02-shapes-and-loss.ipynb)") in err, err
    code, err, _ = run(["check", str(tmp_path / "02-shapes-and-los.ipynb")], capsys)
    assert code == 2 and (f"{tmp_path / '02-shapes-and-los.ipynb'} does not exist; the notebooks in {tmp_path}: "
                          "01-probability-and-bayes.ipynb, 02-shapes-and-loss.ipynb") in err, err


def test_check_reads_an_upper_case_suffix_as_collect_does(tmp_path, capsys):
    shouted = tmp_path / "02-shapes-and-loss.IPYNB"
    shouted.write_text("not json")
    code, err, _ = run(["check", str(shouted)], capsys)
    assert code == 2 and "cannot be checked" in err and "not a .ipynb file" not in err, err


def test_check_says_a_notebook_without_grading_metadata_lost_it_and_what_to_do(tmp_path, capsys):
    """Answers pasted into a new notebook lose the cells' nbgrader metadata: the student knows it is the course's."""
    import nbformat

    path, nb = _smallest_source_notebook()
    for cell in nb.cells:
        cell.metadata = {}
    nbformat.write(nb, tmp_path / path.name)
    code, err, _ = run(["check", str(tmp_path / path.name)], capsys)
    assert code == 2, err
    assert "its cells lost the metadata grading needs (answers pasted into a new notebook lose it)" in err, err
    assert "Paste your answers into the cells of the released notebook instead" in err, err


def _graded_cell(source: str, grade_id: str, test: bool):
    """A code cell with nbgrader metadata: a test cell (grade, locked) or an answer cell (solution)."""
    import nbformat

    cell = nbformat.v4.new_code_cell(source)
    cell.metadata["nbgrader"] = {"grade": test, "solution": not test, "locked": test, "points": 1, "grade_id": grade_id,
                                 "schema_version": 3}
    return cell


@pytest.mark.parametrize("stop, why", [
    ("import os\nos._exit(1)", "the kernel stopped while running this cell (DeadKernelError)"),
    # IPython's exit() stops the kernel a moment after the cell ends, while a quick next cell may still run
    ("import os\nexit()", "the cell called exit() or quit(), which stops the kernel; the grader restarted it"),
], ids=["os-exit", "exit"])
def test_a_cell_that_ends_the_kernel_is_named_and_the_rest_run_after_a_restart_as_grading_does(tmp_path, stop, why):
    """exit() in a cell used to end check with nbclient's DeadKernelError traceback, and no table; then check
    counted every later cell as not run, while grading restarts the kernel, re-runs the cells before and goes on."""
    import nbformat

    from autograder.check import exercise_rows, kernel_death, run_notebook

    nb = nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_code_cell("x = 1"),
        _graded_cell("def f():\n    return 2", "ex_f", test=False),
        _graded_cell("assert f() == 2", "test_f", test=True),
        _graded_cell(f"y = 3\n{stop}", "ex_g", test=False),
        nbformat.v4.new_code_cell("pass"),
        _graded_cell("assert y == 3", "test_y", test=True),
        _graded_cell("assert x == 1 and f() == 2", "test_g", test=True),
        nbformat.v4.new_markdown_cell("the end"),
    ])
    run_notebook(nb, tmp_path, timeout=60)
    assert kernel_death(nb) == "cell 4 (y = 3)"
    assert why in nb.cells[3].outputs[-1].evalue, nb.cells[3].outputs
    rows = {grade_id: (message, passed) for _, grade_id, _, message, passed in exercise_rows(nb)}
    assert rows["test_f"][1] is True and rows["test_g"][1] is True, rows  # replayed x and f: as graded
    message, passed = rows["test_y"]  # the stopping cell is not replayed, so its y never exists
    assert passed is False and "NameError: name 'y' is not defined" in message, message
    assert f"[an earlier cell failed first: cell 4 (y = 3), KernelDied: {why}" in message, message  # not its grade id


def test_exit_that_keeps_the_kernel_is_not_blamed_for_a_later_stop(tmp_path):
    """exit(keep_kernel=True) leaves the kernel running: the os._exit() after it is the cell that stopped it."""
    import nbformat

    from autograder.check import kernel_death, run_notebook

    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("exit(keep_kernel=True)"),
                                         nbformat.v4.new_code_cell("x = 1"),
                                         nbformat.v4.new_code_cell("import os\nos._exit(1)"),
                                         nbformat.v4.new_code_cell("print(x + 1)")])
    run_notebook(nb, tmp_path, timeout=60)
    assert kernel_death(nb) == "cell 3 (import os)"
    assert nb.cells[1].outputs == [] and [o.get("text") for o in nb.cells[3].outputs] == ["2\n"]


def test_a_test_cell_that_wrote_to_stderr_shows_the_student_its_first_line(tmp_path):
    """logging.warning does not match grading's warning pattern: the cell fails, and the student sees what wrote."""
    import nbformat

    from autograder.check import exercise_rows, run_notebook

    nb = nbformat.v4.new_notebook(cells=[
        _graded_cell("import logging\ndef f():\n    logging.warning('careful: %d', 3)\n    return 2", "ex_f", test=False),
        _graded_cell("assert f() == 2", "test_f", test=True),
        _graded_cell("import warnings\nwarnings.warn('only a warning')", "test_w", test=True),
    ])
    run_notebook(nb, tmp_path, timeout=60)
    rows = {grade_id: (message, passed) for _, grade_id, _, message, passed in exercise_rows(nb)}
    message, passed = rows["test_f"]
    assert passed is False and message == ("✘ Failed: the cell wrote to standard error, which grading scores as a failure. "
                                           "Its first line: WARNING:root:careful: 3 (logging and print(..., "
                                           "file=sys.stderr) write there; warnings do not count)"), message
    assert rows["test_w"][1] is True, rows["test_w"]


READ_ONLY = "the file system refused: Read-only file system ("


@pytest.mark.parametrize("argv, words", [
    (["export"], [READ_ONLY, "must be writable by this user, then run the command again"]),
    (["feedback"], [READ_ONLY, "must be writable by this user, then run the command again"]),
    (["collect", "{download}"], ["cannot use the gradebook sqlite:///"]),  # it opens the gradebook first
], ids=["export", "feedback", "collect"])
def test_a_read_only_course_is_named_with_what_to_do_not_a_traceback(tmp_path, argv, words):
    """The course mounted read-only (root ignores file modes, so bubblewrap makes it so): exit 2 and a message."""
    import shutil

    import nbformat

    from autograder.sandbox import bwrap_available

    if not bwrap_available():
        pytest.fail("bubblewrap is not usable here; `make sysdeps` installs it")
    build = tmp_path / "build"
    release = build / "course" / "release" / "part-ii"
    release.mkdir(parents=True)
    nbformat.write(nbformat.v4.new_notebook(), release / "02-shapes-and-loss.ipynb")
    course = build / "course"
    download = tmp_path / "download" / "pia"
    download.mkdir(parents=True)
    nbformat.write(nbformat.v4.new_notebook(), download / "02-shapes-and-loss.ipynb")
    argv = [a.replace("{download}", str(download.parent)) for a in argv]
    env = {**os.environ, "PART_II_BUILD": str(build)}
    env.pop("PART_II_DB_URL", None)
    done = subprocess.run([shutil.which("bwrap"), "--dev-bind", "/", "/", "--ro-bind", str(course), str(course),
                           sys.executable, "-m", "autograder", *argv, "--build", str(build)],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    assert done.stderr.startswith(f"python -m autograder {argv[0]}: error: "), done.stderr
    assert all(w in done.stderr for w in words), done.stderr


def test_an_os_error_that_is_no_refusal_keeps_its_traceback(monkeypatch):
    """A broken pipe (`... | head`) or a timeout is not 'the file system refused': it propagates as before."""
    import autograder.cli as cli

    def broken(args):
        raise BrokenPipeError(32, "Broken pipe")

    monkeypatch.setattr(cli, "_run", broken)
    with pytest.raises(BrokenPipeError):
        cli.main(["export"])


def test_a_file_named_on_its_own_is_filed_for_a_student_the_download_names_and_export_lists_nobody_s(
        tmp_path, capsys, monkeypatch):
    """2024001_mywork.ipynb is 2024001's (2024001_00-….ipynb names her) and holds 02's exercises: filed as 02, and its
    feedback page says so. Nobody else is named 1011, so 1011_mywork.ipynb stays nobody's: collect says how to file
    it, export that grades.csv lacks it."""
    import csv
    import shutil

    from autograder.feedback import page_text
    from shared_builds import released_copy, sandbox_works

    build = released_copy(tmp_path)
    monkeypatch.delenv("PART_II_DB_URL", raising=False)
    release = build / "course" / "release" / "part-ii"
    download = tmp_path / "flat"
    download.mkdir()
    shutil.copy(release / "00-vectors-shapes-and-gradients.ipynb", download / "2024001_00-vectors-shapes-and-gradients.ipynb")
    shutil.copy(release / "02-shapes-and-loss.ipynb", download / "2024001_mywork.ipynb")
    shutil.copy(release / "02-shapes-and-loss.ipynb", download / "1011_mywork.ipynb")
    code, err, out = run(["collect", str(download), "--build", str(build)], capsys)
    assert code == 1, err + out  # a rejected file
    assert "2024001_mywork.ipynb -> 02-shapes-and-loss.ipynb" in out, out
    assert "1011_mywork.ipynb: wrong name" in out and "--student 1011" in out, out
    assert (build / "course" / "submitted" / "2024001" / "part-ii" / "02-shapes-and-loss.ipynb").exists()
    code, err, out = run(["grade", "--build", str(build), *([] if sandbox_works() else ["--no-sandbox"])], capsys)
    assert code == 0, err + out
    assert (f"next: `python -m autograder feedback --build {build.resolve()}` (a page per student and notebook) and "
            f"`python -m autograder export --build {build.resolve()}` (grades.csv)") in out, out
    code, err, out = run(["feedback", "--build", str(build)], capsys)
    assert code == 0, err + out
    pages = build / "course" / "feedback" / "2024001" / "part-ii"
    # the page says which of her files it grades, where the name does not say it
    note = ("Graded from your file 2024001_mywork.ipynb. It is named otherwise, but it holds the exercises of "
            "02-shapes-and-loss, so this page grades it as 02-shapes-and-loss.ipynb.")
    text = page_text((pages / "02-shapes-and-loss.html").read_text(encoding="utf-8"))
    assert note in text and text.index(note) < text.index("Why a test failed."), "which file comes first"
    assert "Graded from your file" not in (pages / "00-vectors-shapes-and-gradients.html").read_text(encoding="utf-8")
    code, err, out = run(["export", "--build", str(build)], capsys)
    assert code == 0, err + out
    assert "1 rejected file is no student's, so grades.csv has no row for it" in out, out
    assert "  1011_mywork.ipynb: wrong name" in out, out
    with open(build / "course" / "reports" / "grades.csv", newline="", encoding="utf-8") as fh:
        assert [r["student_id"] for r in csv.DictReader(fh)] == ["2024001"]


def test_a_student_id_given_decomposed_is_read_composed_as_collect_files_it():
    """--student José typed on macOS arrives decomposed; collect files ids composed (NFC), so they must match."""
    import unicodedata

    from autograder.cli import build_parser

    decomposed, composed = unicodedata.normalize("NFD", "José"), unicodedata.normalize("NFC", "José")
    for argv in (["collect", "dl", "--student", decomposed], ["extend", "--student", decomposed, "--until", "none"]):
        args, _ = build_parser().parse_known_args(argv)
        assert args.student in (composed, [composed]), args.student


def test_check_s_table_keeps_one_column_for_long_grade_ids(capsys):
    """test_perplexity_from_target_probs (33 characters) pushed its row's points out of the column."""
    import nbformat

    from autograder.check import exercise_rows, print_table

    path = REPO / "notebooks" / "part-ii" / "05-sequence-loss-and-perplexity.ipynb"
    rows = exercise_rows(nbformat.read(path, as_version=4))
    assert max(len(r[1]) for r in rows) > 32
    print_table(path, rows)
    columns = {line.index(" pt  ") for line in capsys.readouterr().out.splitlines() if " pt  " in line}
    assert len(columns) == 1, columns


def test_ctrl_c_inside_asyncio_is_reported_as_an_interrupt(monkeypatch, capsys):
    """Ctrl-C while grade recorded the expected values (nbclient runs under asyncio.run) surfaced as a 130-line
    CancelledError traceback with exit code 1 (found by review)."""
    import asyncio

    from autograder import cli

    def cancelled(_args):
        raise asyncio.CancelledError

    monkeypatch.setattr(cli, "_run", cancelled)
    assert cli.main(["grade"]) == 130
    assert capsys.readouterr().err == "python -m autograder grade: interrupted\n"  # grade's summary says what is left


@pytest.mark.parametrize("command, more", [("release", []), ("collect", ["{folder}"]), ("feedback", []),
                                           ("export", []), ("drop", ["--student", "s1"])])
def test_an_interrupted_command_says_to_run_it_again(command, more, tmp_path, monkeypatch, capsys):
    """An end-of-term walkthrough: an interrupted release printed only 'interrupted'. Each command but grade (whose
    summary says what an interrupted run left) finishes when run again, and now says so."""
    from autograder import cli

    def interrupted(_args):
        raise KeyboardInterrupt

    monkeypatch.setattr(cli, "_run", interrupted)
    assert cli.main([command, *(a.replace("{folder}", str(tmp_path)) for a in more)]) == 130
    assert capsys.readouterr().err == f"python -m autograder {command}: interrupted; run the same command again to finish\n"


def test_after_an_interrupt_more_ctrl_c_and_the_exit_clean_up_print_nothing():
    """A second Ctrl-C while nbclient's exit hooks stopped the kernels printed a KeyboardInterrupt traceback below
    "grade: interrupted", and coroutines the interrupt cut short printed "Exception ignored" as they were collected
    (a fresh-clone CI run of this stop failed on it). Here: an exit hook, a collected object whose clean-up fails,
    and a Ctrl-C while the hook runs."""
    script = (
        "import atexit, os, signal, sys, time\n"
        "from autograder.cli import settle_after_interrupt\n"
        "class Dying:\n"
        "    def __del__(self):\n"
        "        raise AssertionError('km is None')\n"
        "def hook():\n"
        "    os.kill(os.getpid(), signal.SIGINT)\n"
        "    time.sleep(0.2)\n"
        "    print('hook finished', file=sys.stderr)\n"
        "atexit.register(hook)\n"
        "print('interrupted', file=sys.stderr)\n"
        "settle_after_interrupt()\n"
        "Dying()\n"
        "sys.exit(130)\n")
    done = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert done.returncode == 130 and done.stderr == "interrupted\nhook finished\n", done.stderr


def test_a_released_course_whose_gradebook_file_is_gone_is_refused_not_given_a_new_empty_one(tmp_path, capsys,
                                                                                            monkeypatch):
    """A moved gradebook.db was silently recreated empty, and every command then advised releasing again
    (found by review)."""
    import shutil

    from shared_builds import released_copy

    build = released_copy(tmp_path)
    monkeypatch.delenv("PART_II_DB_URL", raising=False)
    download = tmp_path / "download" / "carol"
    download.mkdir(parents=True)
    shutil.copy(build / "course" / "release" / "part-ii" / "02-shapes-and-loss.ipynb", download)
    assert run(["collect", str(download.parent), "--build", str(build)], capsys)[0] == 0
    gradebook = build / "course" / "gradebook.db"
    gradebook.rename(tmp_path / "elsewhere.db")
    for argv in (["export"], ["extend"], ["release"], ["grade"], ["collect", str(download.parent)]):
        code, err, _ = run([*argv, "--build", str(build)], capsys)
        assert code == 2, err
        assert (f"the gradebook {gradebook} does not exist, but this course has collected hand-ins" in err
                and "Put it back" in err), err
        assert not gradebook.exists(), f"{argv[0]} made a new, empty gradebook"


def test_a_release_that_changes_a_given_code_cell_warns_that_students_keep_their_copies(tmp_path, capsys, monkeypatch):
    """Editing a setup or demo cell mid-term changed the hidden tests' expected values while every student kept the
    old cell, and release said nothing (found by review): a right answer then failed."""
    import nbformat

    from shared_builds import editable_sources, released_copy

    build = released_copy(tmp_path)
    monkeypatch.delenv("PART_II_DB_URL", raising=False)
    edited = editable_sources(tmp_path, monkeypatch) / "06-counting-language-model.ipynb"
    nb = nbformat.read(edited, as_version=4)
    number, cell = next((n, c) for n, c in enumerate(nb.cells, 1) if n > 2 and c.cell_type == "code"
                        and not c.metadata.get("nbgrader"))
    cell.source = "# changed after the release\n" + cell.source
    # a new cell counts too (found by review: a hidden test using a name it defined failed for the whole class)
    nb.cells.insert(number, nbformat.v4.new_code_cell("_SEED = 12  # added after the release"))
    nbformat.write(nb, edited)
    code, err, out = run(["release", "--build", str(build)], capsys)
    assert code == 0, err + out
    assert (f"WARNING: code cells that are no exercise changed or were added since the last release "
            f"(06-counting-language-model: cell {number} (# changed after the release), cell {number + 1} (_SEED = 12  "
            "# added after the release), new). Students keep the copies they started from (without new cells)") in out, out
    code, err, out = run(["release", "--build", str(build)], capsys)
    assert code == 0 and "WARNING" not in out, err + out  # released as it is now: nothing changed since
    assert "a new course" not in out, out  # a course released again is no new course


def test_export_and_feedback_warn_when_the_sources_changed_after_the_release(tmp_path, capsys, monkeypatch):
    """A TA's walkthrough: with a hidden test and points edited in the source after the release, grade refused, but
    export and feedback went on without a word, with the old tests' scores; a hand-graded answer's new points were
    noticed by nothing until the next release. Both now warn, naming the cells (and not before the edit)."""
    import nbformat

    from shared_builds import editable_sources, released_copy

    build = released_copy(tmp_path)
    monkeypatch.delenv("PART_II_DB_URL", raising=False)
    edited = editable_sources(tmp_path, monkeypatch) / "02-shapes-and-loss.ipynb"
    _, err, _ = run(["export", "--build", str(build)], capsys)
    assert "warning: the source notebooks changed" not in err, err
    nb = nbformat.read(edited, as_version=4)
    test = next(c for c in nb.cells if "### BEGIN HIDDEN TESTS" in c.source)
    test.source = test.source.replace("### END HIDDEN TESTS", "assert True\n### END HIDDEN TESTS", 1)
    answer = next(c for c in nb.cells if c.cell_type == "markdown" and c.metadata.get("nbgrader", {}).get("grade"))
    answer.metadata["nbgrader"]["points"] += 1
    nbformat.write(nb, edited)
    test_id, answer_id = test.metadata["nbgrader"]["grade_id"], answer.metadata["nbgrader"]["grade_id"]
    for command in (["export"], ["feedback"]):
        _, err, _ = run([*command, "--build", str(build)], capsys)
        assert (f"warning: the source notebooks changed after the release: test cells: 02-shapes-and-loss ({test_id}); "
                f"the points of hand-graded answers: 02-shapes-and-loss ({answer_id}). The grades follow the released "
                f"cells until `python -m autograder release --build {build}` and then `grade` run.") in err, err
        assert "Cells added or removed" not in err, err


def test_a_final_export_exits_1_while_cells_wait_for_a_grader(tmp_path, capsys, monkeypatch):
    """An end-of-term walkthrough: export exited 0 while it said cells wait for a grader, so a scripted final export
    uploaded scores that could still change. `export --final` exits 1 then; a plain export, run all term, does not."""
    import autograder.export as export_module
    from autograder.course import Course
    from shared_builds import build_env, released_copy

    build = released_copy(tmp_path)
    monkeypatch.delenv("PART_II_DB_URL", raising=False)
    with build_env(build):
        with Course.load(build).gradebook() as gb:
            gb.update_or_create_student("s1")  # on the roster, nothing handed in: export has a row to write
    code, _, out = run(["export", "--final", "--build", str(build)], capsys)
    assert code == 0 and "wait for a grader" not in out, out  # nothing waits: a final export like any other
    monkeypatch.setattr(export_module, "waiting_for_a_grader", lambda path: {"s1": 2, "s2": 1})
    code, _, out = run(["export", "--build", str(build)], capsys)
    assert code == 0 and "3 cells of 2 students wait for a grader in formgrader" in out and "--final" not in out, out
    code, _, out = run(["export", "--final", "--build", str(build)], capsys)
    assert code == 1 and "run export again after grading them (--final: their scores can still change)" in out, out


def test_a_release_nbgrader_refuses_names_the_notebook_cell_and_cause_and_keeps_the_previous_release(tmp_path, capsys,
                                                                                                       monkeypatch):
    """A source notebook nbgrader refuses (here a solution region opened twice) made release say only "Please see the
    above traceback" (there was none: nbgrader's log went nowhere) and left release/ empty until it was fixed (found by
    review). A missing `### END SOLUTION` is caught before nbgrader runs, as a marker left in the student version."""
    import nbformat

    from shared_builds import editable_sources, released_copy

    build = released_copy(tmp_path)
    monkeypatch.delenv("PART_II_DB_URL", raising=False)
    release_dir = build / "course" / "release" / "part-ii"
    before = {p.name: p.read_bytes() for p in sorted(release_dir.glob("*.ipynb"))}
    zip_before = (build / "course" / "student" / "part-ii.zip").read_bytes()
    course_before = sorted(p.name for p in (build / "course").iterdir())
    edited = editable_sources(tmp_path, monkeypatch) / "03-maximum-likelihood.ipynb"
    nb = nbformat.read(edited, as_version=4)
    number, cell = next((n, c) for n, c in enumerate(nb.cells, 1) if "### END SOLUTION" in c.source)
    solved = cell.source
    first = cell.source.strip().splitlines()[0]
    cell.source = solved.replace("### END SOLUTION", "", 1)
    nbformat.write(nb, edited)
    code, err, out = run(["release", "--build", str(build)], capsys)
    assert code == 2 and (f"03-maximum-likelihood.ipynb: cell {number} ({first[:60]}") in err and \
        "a solution or hidden-test marker" in err and "the previous release is kept" in err, err + out
    cell.source = solved.replace("### BEGIN SOLUTION", "### BEGIN SOLUTION\n### BEGIN SOLUTION", 1)
    nbformat.write(nb, edited)
    code, err, out = run(["release", "--build", str(build)], capsys)
    assert code == 2, err + out
    assert (f"nbgrader could not generate the student version of 03-maximum-likelihood.ipynb: encountered nested begin "
            f"solution statements, in cell {number} ({first[:60]}") in err, err
    assert str(edited) in err and "the previous release is kept" in err, err
    assert "above traceback" not in err, err
    assert {p.name: p.read_bytes() for p in sorted(release_dir.glob("*.ipynb"))} == before
    assert (build / "course" / "student" / "part-ii.zip").read_bytes() == zip_before
    assert sorted(p.name for p in (build / "course").iterdir()) == course_before  # no copy of the release left over
    cell.source = solved
    graded = [c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id")]
    twice, own = graded[0].metadata.nbgrader["grade_id"], graded[1].metadata.nbgrader["grade_id"]
    graded[1].metadata.nbgrader["grade_id"] = twice
    nbformat.write(nb, edited)
    code, err, out = run(["release", "--build", str(build)], capsys)  # the cause is the check's, not nbgrader's summary
    assert code == 2 and f"03-maximum-likelihood.ipynb: Duplicate grade id: {twice}; fix it in {edited}" in err, err
    assert {p.name: p.read_bytes() for p in sorted(release_dir.glob("*.ipynb"))} == before
    graded[1].metadata.nbgrader["grade_id"] = own
    nbformat.write(nb, edited)
    code, err, out = run(["release", "--build", str(build)], capsys)
    assert code == 0, err + out


def collect_unanswered(tmp_path, capsys, build, students=("carol",), name="02-shapes-and-loss") -> None:
    """Collect into build each student's hand-in of the released notebook `name`, unanswered (a download folder
    tmp_path/download/STUDENT/NAME.ipynb)."""
    for student in students:
        (tmp_path / "download" / student).mkdir(parents=True)
        (tmp_path / "download" / student / f"{name}.ipynb").write_bytes(
            (build / "course" / "release" / "part-ii" / f"{name}.ipynb").read_bytes())
    assert run(["collect", str(tmp_path / "download"), "--build", str(build)], capsys)[0] == 0


def test_a_build_folder_whose_name_a_url_would_misread_keeps_its_gradebook_inside(tmp_path, capsys, monkeypatch):
    """`sqlite:///…` was written with the path as it is: SQLAlchemy read '%41' in a build folder's name as 'A' and opened
    a gradebook in another folder (and a '?' began the URL's query; such paths are now refused, nbgrader globs them)."""
    from sqlalchemy.engine import make_url
    from traitlets.config.loader import PyFileConfigLoader

    monkeypatch.delenv("PART_II_DB_URL", raising=False)
    monkeypatch.setenv("PATH", f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
    build = tmp_path / "term #2 %41 @x:y"
    code, err, out = run(["release", "--build", str(build)], capsys)
    assert code == 0, err + out
    gradebook = build / "course" / "gradebook.db"
    assert gradebook.is_file(), sorted(p.name for p in tmp_path.iterdir())
    assert sorted(p.name for p in tmp_path.iterdir()) == [build.name]  # no stray gradebook beside the build folder
    formgrader = PyFileConfigLoader("nbgrader_config.py", path=str(build / "course")).load_config()
    assert make_url(formgrader.CourseDirectory.db_url).database == str(gradebook)
    collect_unanswered(tmp_path, capsys, build)  # collect, grade (each job's own gradebook too) and export in there
    code, err, out = run(["grade", "--workers", "1", "--build", str(build)], capsys)
    assert code == 0, err + out
    assert run(["export", "--build", str(build)], capsys)[0] == 0
    from shared_builds import read_grades_csv

    rows = read_grades_csv(build / "course" / "reports" / "grades.csv")
    assert list(rows) == ["carol"] and rows["carol"]["status"] == "incomplete", rows  # 6 of the 7 notebooks missing
    assert "could not be graded" not in str(rows) and "grading failed" not in str(rows), rows
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([build.name, "download"])


def test_make_lab_releases_a_course_of_its_own_and_leaves_the_instructors_gradebook_alone(tmp_path, capsys,
                                                                                          monkeypatch):
    """`make lab` released the course in build/course again, behind an instructor previewing the student view (its
    hand-ins then read as not graded); released into a folder of its own, it still wrote the gradebook
    PART_II_DB_URL names (found by review)."""
    build, _ = one_notebook_course(tmp_path, capsys, monkeypatch, graded=("carol",))
    gradebook = build / "course" / "gradebook.db"
    before = gradebook.read_bytes()
    lab = tmp_path / "lab"
    env = {**os.environ, "PART_II_DB_URL": f"sqlite:///{gradebook}", "PART_II_BUILD": str(build)}
    # what a make lab run with the variable set recorded before it was left out (found by review)
    (lab / "course").mkdir(parents=True)
    (lab / "course" / "gradebook-url.txt").write_text(f"sqlite:///{gradebook}\n")
    done = subprocess.run(["make", "--no-print-directory", "lab-notebooks", f"LAB_DIR={lab}", "STAMP="], cwd=REPO,
                          env=env, capture_output=True, text=True, timeout=900)  # STAMP=: no pip run on the venv
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"unpacked the student notebooks into {lab}/part-ii" in done.stdout, done.stdout
    assert gradebook.read_bytes() == before, "the instructor's gradebook was written"
    recorded = lab / "course" / "gradebook-url.txt"  # where release notes a gradebook other than the course's own
    assert not recorded.exists(), f"the lab's course uses {recorded.read_text()}, not a gradebook of its own"
    assert (lab / "course" / "gradebook.db").is_file() and (lab / "part-ii" / "02-shapes-and-loss.ipynb").is_file()
    code, err, out = run(["export", "--build", str(build)], capsys)
    assert code == 0 and "not graded" not in err + out, err + out


def test_the_demos_manual_grading_command_runs_as_printed_in_a_folder_with_spaces(tmp_path, capsys, monkeypatch):
    """The demo's `cd COURSE && jupyter lab` line printed the course folder unquoted: pasted into a shell, a build
    folder with a space or '&' in its name sent cd somewhere else."""
    import shlex

    from autograder.course import Course
    from autograder.demo import print_paths

    monkeypatch.delenv("PART_II_DB_URL", raising=False)
    course = Course.load(tmp_path / "term 1 & co")
    print_paths(course, *(tmp_path / name for name in ("s.zip", "l.zip", "g.csv", "c.csv", "t.png")), "sandbox",
                "sandbox")
    out = capsys.readouterr().out
    line = next(line for line in out.splitlines() if line.startswith("manual grading: "))
    words = shlex.split(line.removeprefix("manual grading: ").split("   (")[0])
    assert words[:4] == ["(cd", str(course.root), "&&", str(REPO / ".venv" / "bin" / "jupyter")], words  # a subshell
    assert f"  marking guides         {course.root / 'marking'}\n" in out and "marking/<notebook>.md open beside" in line


@pytest.mark.parametrize("name", ["term[1]", "a*b", "a?b"])
def test_a_build_or_source_folder_nbgrader_would_read_as_a_glob_pattern_is_refused(name, tmp_path, capsys, monkeypatch):
    """nbgrader finds notebooks with glob patterns built from the course folder: in 'term[1]' grading failed with
    "No such submitted notebook" after collect had filed it, and '*' or '?' also match other folders' files."""
    monkeypatch.delenv("PART_II_DB_URL", raising=False)
    build = tmp_path / name
    code, err, out = run(["release", "--build", str(build)], capsys)
    assert code == 2, err + out
    wildcards = {"term[1]": "[ ]", "a*b": "*", "a?b": "?"}[name]
    assert (f"the course folder {build / 'course'} has {wildcards} in its path" in err
            and "choose a folder whose path has none of [ ] * ?" in err), err
    assert not build.exists()
    monkeypatch.setenv("PART_II_SOURCE", str(build / "notebooks"))
    code, err, out = run(["release", "--build", str(tmp_path / "plain")], capsys)
    assert code == 2 and f"the source notebooks' folder {build / 'notebooks' / 'part-ii'} has" in err, err + out


def _hidden_test_cell(nb):
    """(number from 1, cell) of the notebook's first test cell with a hidden block."""
    return next((n, c) for n, c in enumerate(nb.cells, 1) if "### BEGIN HIDDEN TESTS" in c.source)


def _misspell_hidden_markers(nb):
    _, cell = _hidden_test_cell(nb)
    cell.source = cell.source.replace("### BEGIN HIDDEN TESTS", "### BEGIN HIDDEN TEST")
    return cell


def _drop_hidden_begin(nb):
    _, cell = _hidden_test_cell(nb)
    cell.source = cell.source.replace("### BEGIN HIDDEN TESTS\n", "")
    return cell


def _unprefixed_marking_note(nb):
    note = next(c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id", "").startswith("note_"))
    note.metadata["nbgrader"]["grade_id"] = "cell-5a1b2c3d"  # the kind of id Create Assignment makes
    return note


def _negative_points(nb):
    _, cell = _hidden_test_cell(nb)
    cell.metadata["nbgrader"]["points"] = -3
    return None


def _no_grade_id(nb):
    _, cell = _hidden_test_cell(nb)
    del cell.metadata["nbgrader"]["grade_id"]
    return None


@pytest.mark.parametrize("mistake, says", [
    (_misspell_hidden_markers, "a solution or hidden-test marker (nbgrader removes only the exact lines"),
    (_drop_hidden_begin, "a hidden check (reveal=False) outside a hidden-test block: its ### BEGIN HIDDEN TESTS / "
                         "### END HIDDEN TESTS lines are missing or misspelt"),
    (_unprefixed_marking_note, "a marking note (评分要点): release removes only cells whose grade id starts with note_"),
    (_negative_points, "nbgrader could not generate the student version of 01-probability-and-bayes.ipynb: -3 is less "
                       "than the minimum of 0; fix it in"),
    (_no_grade_id, "nbgrader could not generate the student version of 01-probability-and-bayes.ipynb: nbgrader cell "
                   'does not have a grade_id: """Check event_probability'),  # the cell by its first line
], ids=["misspelt-hidden-marker", "hidden-begin-missing", "note-without-prefix", "negative-points", "no-grade-id"])
def test_an_authoring_mistake_is_refused_naming_its_cause_and_nothing_secret_is_released(mistake, says, tmp_path,
                                                                                          capsys, monkeypatch):
    """Found by review: a misspelt or missing hidden-test marker released the hidden tests (nbgrader removes only exact
    markers, a stray END silently), a marking note under another grade id than note_* was released, and nbgrader's
    schema errors were quoted by their last line ('    -3') instead of their cause."""
    import nbformat

    from shared_builds import editable_sources, released_copy

    build = released_copy(tmp_path)
    monkeypatch.delenv("PART_II_DB_URL", raising=False)
    release_dir = build / "course" / "release" / "part-ii"
    before = {p.name: p.read_bytes() for p in sorted(release_dir.glob("*.ipynb"))}
    zip_before = (build / "course" / "student" / "part-ii.zip").read_bytes()
    edited = editable_sources(tmp_path, monkeypatch) / "01-probability-and-bayes.ipynb"
    nb = nbformat.read(edited, as_version=4)
    cell = mistake(nb)
    nbformat.write(nb, edited)
    code, err, out = run(["release", "--build", str(build)], capsys)
    assert code == 2 and says in err and "the previous release is kept" in err, err + out
    if cell is not None:  # the leak is named by notebook and cell
        number = next(n for n, c in enumerate(nb.cells, 1) if c is cell)
        first = cell.source.strip().splitlines()[0]
        assert f"01-probability-and-bayes.ipynb: cell {number} ({first[:60]}" in err, err
    assert {p.name: p.read_bytes() for p in sorted(release_dir.glob("*.ipynb"))} == before
    assert (build / "course" / "student" / "part-ii.zip").read_bytes() == zip_before


def test_grade_ids_shared_between_notebooks_are_refused(tmp_path, capsys, monkeypatch):
    """A notebook copied to start a new one kept its grade ids; collect then filed a hand-in of the copy as the
    original notebook, by its ids (found by review)."""
    import shutil

    from shared_builds import editable_sources

    monkeypatch.delenv("PART_II_DB_URL", raising=False)
    sources = editable_sources(tmp_path, monkeypatch)
    shutil.copy(sources / "01-probability-and-bayes.ipynb", sources / "07-extra.ipynb")
    code, err, out = run(["release", "--build", str(tmp_path / "build")], capsys)
    assert code == 2, err + out
    assert ("grade ids must differ between notebooks, but " in err
            and " in 01-probability-and-bayes.ipynb and 07-extra.ipynb" in err), err
    assert not (tmp_path / "build" / "course" / "release").exists()


def test_notebooks_added_or_removed_after_hand_in_are_refused_before_nbgrader(tmp_path, capsys, monkeypatch):
    """Renaming a source notebook after hand-in got nbgrader's "Cannot modify existing assignment 'Assignment<part-ii>'"
    as the notebook's name, and grading then crashed on the missing source (found by review)."""
    from shared_builds import editable_sources, released_copy

    build = released_copy(tmp_path)
    monkeypatch.delenv("PART_II_DB_URL", raising=False)
    collect_unanswered(tmp_path, capsys, build)  # collected, not graded yet
    sources = editable_sources(tmp_path, monkeypatch)
    (sources / "01-probability-and-bayes.ipynb").rename(sources / "01-probability.ipynb")
    code, err, out = run(["release", "--build", str(build)], capsys)
    assert code == 2, err + out
    assert (f"the source notebooks in {sources} are not the ones students handed in for (no longer in the sources: "
            "01-probability-and-bayes; new: 01-probability)") in err and "put them back as they were" in err, err
    assert "Assignment<" not in err


def one_notebook_course(tmp_path, capsys, monkeypatch, name: str = "02-shapes-and-loss", graded: tuple = (),
                        released: bool = True):
    """(build, its editable source notebook): a course of that one notebook (recording its expected values and grading
    run one notebook, not seven), released into tmp_path/build (unless not released) with its expected-values cache in
    tmp_path; each student in graded hands in the release unanswered and is collected and graded."""
    from shared_builds import editable_sources

    monkeypatch.delenv("PART_II_DB_URL", raising=False)
    monkeypatch.setenv("PART_II_CACHE", str(tmp_path / "cache"))
    sources = editable_sources(tmp_path, monkeypatch)
    for other in sources.glob("*.ipynb"):
        if other.stem != name:
            other.unlink()
    build = tmp_path / "build"
    if released:
        assert run(["release", "--build", str(build)], capsys)[0] == 0
    if graded:
        collect_unanswered(tmp_path, capsys, build, graded, name)
        code, err, out = run(["grade", "--workers", "1", "--build", str(build)], capsys)
        assert code == 0, err + out
    return build, sources / f"{name}.ipynb"


def test_a_student_removed_from_the_gradebook_behind_the_harness_s_back_is_named_and_graded_again(tmp_path, capfd,
                                                                                                  monkeypatch):
    """`nbgrader db student remove --force` took a collected, graded student's grades out of the gradebook: grade
    skipped them as already graded, export left them out of grades.csv and exited 0, and feedback said only
    "NbGraderException: Please see the the above traceback"; `nbgrader db student remove` (no grades, no --force
    needed) dropped a collected student not graded yet from grades.csv too (found by review). Nothing collected may
    drop out of sight."""
    capsys = capfd
    from shared_builds import read_grades_csv

    build, _ = one_notebook_course(tmp_path, capsys, monkeypatch, graded=("carol", "dave"))
    collect_unanswered(tmp_path, capsys, build, ("erin",))
    (tmp_path / "rita-download" / "rita").mkdir(parents=True)  # handed in only a file collect rejects
    (tmp_path / "rita-download" / "rita" / "notes.txt").write_text("my answers")
    # a download of nothing but a new student's text file is refused, registering nobody; the message says how to
    # put it on record (a student of the gradebook gets it filed as rejected)
    code, err, _ = run(["collect", str(tmp_path / "rita-download"), "--build", str(build)], capsys)
    assert code == 2 and f"if this student (rita) handed the files in, add the student to the gradebook (`nbgrader db " \
        f"student add rita`, run in {build / 'course'}) and collect again" in err, err
    done = subprocess.run(["nbgrader", "db", "student", "add", "rita"], cwd=build / "course", capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert run(["collect", str(tmp_path / "rita-download"), "--build", str(build)], capsys)[0] == 1
    for removal in (["dave", "--force"], ["erin"], ["rita"]):  # nbgrader's own command, where the README says to run it
        done = subprocess.run(["nbgrader", "db", "student", "remove", *removal], cwd=build / "course",
                              capture_output=True, text=True)  # the venv's: editable_sources put it first on PATH
        assert done.returncode == 0, done.stderr
    code, err, out = run(["export", "--build", str(build)], capsys)
    assert code == 1 and "2 students are not graded yet (dave, erin): their scores are left empty" in err + out, err + out
    rows = read_grades_csv(build / "course" / "reports" / "grades.csv")
    assert set(rows) == {"carol", "dave", "erin", "rita"}, rows
    assert rows["rita"]["status"] == "no valid notebook", rows["rita"]  # grade never adds her back: the note says how
    assert (f"collected, but not in the gradebook (removed from it, e.g. by `nbgrader db student remove`); `nbgrader db "
            f"student add rita`, run in {build / 'course'}, puts them back") in rows["rita"]["notes"], rows["rita"]
    assert rows["dave"]["status"] == "not graded" and rows["dave"]["score"] == "", rows["dave"]
    assert "the gradebook holds no grades of this hand-in (removed from it" in rows["dave"]["notes"], rows["dave"]
    assert rows["erin"]["status"] == "not graded" and rows["erin"]["score"] == "", rows["erin"]
    assert "collected, but not in the gradebook (removed from it" in rows["erin"]["notes"], rows["erin"]
    code, err, out = run(["feedback", "--build", str(build)], capsys)
    assert code == 1 and "dave: ERROR the gradebook holds no grades of this hand-in (removed from it" in out + err, err + out
    assert "NbGraderException" not in out + err, err + out
    code, err, out = run(["grade", "--workers", "1", "--build", str(build)], capsys)
    assert code == 0 and "graded 2" in out, err + out
    assert run(["export", "--build", str(build)], capsys)[0] == 0
    again = read_grades_csv(build / "course" / "reports" / "grades.csv")
    for student in ("dave", "erin"):
        assert (again[student]["status"], again[student]["score"]) == (again["carol"]["status"], again["carol"]["score"])
        assert "gradebook" not in again[student]["notes"], again[student]


def test_a_forced_regrade_refused_for_a_broken_source_leaves_every_grade_standing(tmp_path, capfd, monkeypatch):
    """`grade --force` reset the jobs before recording the sources; a model answer that failed its own check then
    refused the grading with every forced student exported as 'not graded', scores empty, after screens of the other
    notebooks' kernels dying (found by review)."""
    capsys = capfd  # the kernels' own output too: they write to the process's stderr
    import nbformat

    from shared_builds import read_grades_csv

    build, edited = one_notebook_course(tmp_path, capsys, monkeypatch, graded=("carol", "dave"))
    assert run(["export", "--build", str(build)], capsys)[0] == 0
    graded = read_grades_csv(build / "course" / "reports" / "grades.csv")
    nb = nbformat.read(edited, as_version=4)
    cell = next(c for c in nb.cells if "def perplexity_from_loss" in c.source)
    cell.source = cell.source.replace('return float(2.0 ** mean_loss)', 'return float(np.exp(mean_loss))')
    nbformat.write(nb, edited)
    code, err, out = run(["grade", "--force", "--workers", "1", "--build", str(build)], capsys)
    assert code == 2 and "the instructor notebooks cannot be used for grading" in err, err + out
    assert "Traceback" not in err and "DeadKernelError" not in err, err
    assert run(["export", "--build", str(build)], capsys)[0] == 0
    assert read_grades_csv(build / "course" / "reports" / "grades.csv") == graded
    cell.source += "\nraise RuntimeError('boom')"  # a source cell that raises: nbclient's error carries colour codes
    nbformat.write(nb, edited)
    code, err, out = run(["grade", "--force", "--workers", "1", "--build", str(build)], capsys)
    assert code == 2 and re.search(r"the instructor notebooks cannot be used for grading: 02-shapes-and-loss\.ipynb: "
                                   r"cell \d+ \(def perplexity_from_loss\(mean_loss, unit\):\) raised RuntimeError: boom",
                                   err), err + out
    assert "\x1b[" not in err, repr(err[-500:])


def test_grading_with_a_released_notebooks_source_gone_says_so(tmp_path, capsys, monkeypatch):
    """A source notebook renamed without a release: grade crashed with a FileNotFoundError traceback (found by
    review)."""
    from shared_builds import editable_sources, released_copy

    build = released_copy(tmp_path)
    monkeypatch.delenv("PART_II_DB_URL", raising=False)
    collect_unanswered(tmp_path, capsys, build)
    sources = editable_sources(tmp_path, monkeypatch)
    (sources / "01-probability-and-bayes.ipynb").rename(sources / "01-probability.ipynb")
    code, err, out = run(["grade", "--workers", "1", "--build", str(build)], capsys)
    assert code == 2, err + out
    assert (f"the source of released notebook 01-probability-and-bayes is not in {sources} (renamed or removed?)"
            in err and "Traceback" not in err), err


def test_with_answers_waiting_for_a_grader_the_next_step_points_to_formgrader(tmp_path, capsys, monkeypatch):
    """Every hand-in graded but an answer waiting for a grader (here flagged, as a regrade flags a hand score): the
    next step said only "nothing to grade" and to run feedback and export, which would give provisional scores (found
    by review). It names the students and formgrader first."""
    from autograder.course import Course
    from shared_builds import build_env

    build, _ = one_notebook_course(tmp_path, capsys, monkeypatch, graded=("carol",))
    with build_env(build):
        course = Course.load(build)
    with course.gradebook() as gb:
        grade = next(g for nb in gb.find_submission("part-ii", "carol").notebooks for g in nb.grades)
        grade.needs_manual_grade = True
        gb.db.commit()
    code, err, out = run(["release", "--build", str(build)], capsys)
    assert code == 0 and out.endswith(
        f"next: nothing to grade (every collected hand-in is graded); answers of 1 student (carol) wait for a grader in "
        f"formgrader (JupyterLab started in {build.resolve() / 'course'}: Nbgrader > Formgrader > Manual Grading), then "
        f"`python -m autograder feedback --build {build}` and `python -m autograder export --build {build}` write the "
        "pages and grades.csv\n"), err + out


def test_a_release_whose_changed_tests_fail_the_model_answers_is_refused_and_the_grades_stand(tmp_path, capsys,
                                                                                               monkeypatch):
    """A hidden check the model answer fails was released, every graded student queued again, and the next grade
    refused: export then showed the whole class ungraded, and feedback removed their pages (found by review)."""
    import nbformat

    from shared_builds import read_grades_csv

    build, edited = one_notebook_course(tmp_path, capsys, monkeypatch, graded=("carol",))
    code, err, out = run(["release", "--build", str(build)], capsys)  # nothing changed: it printed no next step
    assert code == 0 and out.endswith(f"next: nothing to grade (every collected hand-in is graded); `python -m "
                                      f"autograder feedback --build {build}` and `python -m autograder export --build "
                                      f"{build}` write the pages and grades.csv, `python -m autograder collect PATH "
                                      f"--build {build}` files new hand-ins\n"), err + out
    assert run(["export", "--build", str(build)], capsys)[0] == 0
    graded = read_grades_csv(build / "course" / "reports" / "grades.csv")["carol"]
    release_before = (build / "course" / "release" / "part-ii" / "02-shapes-and-loss.ipynb").read_bytes()
    nb = nbformat.read(edited, as_version=4)
    test = next(c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") == "test_perplexity_from_loss")
    test.source = test.source.replace("give PPL = K\", perplexity_from_loss(float(np.log(_k)), \"nats\"), _k,",
                                      "give PPL = K\", perplexity_from_loss(float(np.log(_k)), \"nats\"), _k + 1,")
    assert "_k + 1" in test.source
    nbformat.write(nb, edited)
    code, err, out = run(["release", "--build", str(build)], capsys)
    assert code == 2, err + out
    assert ("the instructor's solution fails its own check in test_perplexity_from_loss: uniform predictions over K "
            "candidates give PPL = K" in err and "nothing was released, and the class keeps its grades" in err), err
    assert (build / "course" / "release" / "part-ii" / "02-shapes-and-loss.ipynb").read_bytes() == release_before
    assert run(["export", "--build", str(build)], capsys)[0] == 0
    assert read_grades_csv(build / "course" / "reports" / "grades.csv")["carol"] == graded
    test.source = test.source.replace("_k + 1,", "_k,").replace("for _k in (2, 7, 50257):", "for _k in (2, 3, 7, 50257):")
    nbformat.write(nb, edited)  # a change the model answers pass: released, and the class queued again
    code, err, out = run(["release", "--build", str(build)], capsys)
    assert code == 0 and out.endswith(f"next: `python -m autograder grade --build {build}` (1 student is to be graded "
                                      "again)\n"), err + out  # it said 'collected and not graded yet' (found by review)
    # grade says what grading again changed (nothing said a changed test had moved a score: authoring review)
    code, err, out = run(["grade", "--workers", "1", "--build", str(build)], capsys)
    assert code == 0 and "graded again 1 submission graded before: no score changed\n" in out, err + out
    test.source = 'check_close("a check every hand-in passes", 1.0, 1.0)\n'  # carol's unanswered notebook now scores
    nbformat.write(nb, edited)
    assert run(["release", "--build", str(build)], capsys)[0] == 0
    code, err, out = run(["grade", "--workers", "1", "--build", str(build)], capsys)
    points = test.metadata["nbgrader"]["points"]
    assert code == 0 and (f"graded again 1 submission graded before: scores changed for 1: carol +{points:g} "
                          f"(02-shapes-and-loss 0 -> {points:g})\n") in out, err + out


def test_a_first_release_whose_model_answer_fails_its_own_test_is_refused(tmp_path, capsys, monkeypatch):
    """A first release never ran the sources: a model answer failing its test (or a setup cell that raises) reached the
    students, and the first grade, after hand-in, was the first to say so (found by an authoring review)."""
    import nbformat

    build, edited = one_notebook_course(tmp_path, capsys, monkeypatch, released=False)
    nb = nbformat.read(edited, as_version=4)
    answer = next(c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") == "ex_perplexity_from_loss")
    answer.source = answer.source.replace("return float(2.0 ** mean_loss)", "return float(np.exp(mean_loss))")
    assert "2.0 ** mean_loss" not in answer.source
    nbformat.write(nb, edited)
    code, err, out = run(["release", "--build", str(build)], capsys)
    assert code == 2, err + out
    assert ("02-shapes-and-loss.ipynb: the instructor's solution fails its own check in test_perplexity_from_loss: "
            "ex3_ppl" in err and err.rstrip().endswith("fix the source and release again (nothing was released)")), err
    assert not (build / "course" / "release" / "part-ii").exists()
    # a student's preview (make lab) does not run the sources
    code, err, out = run(["release", "--no-source-check", "--build", str(build)], capsys)
    assert code == 0 and (build / "course" / "release" / "part-ii" / "02-shapes-and-loss.ipynb").is_file(), err + out


def test_a_release_warns_when_the_notebook_text_states_other_points_than_its_cells(tmp_path, capsys, monkeypatch):
    """New points on a test cell left '本笔记本共 13 分' and '练习 1.2（3 分）' in the text students read, and a task cell's
    points were missing from the student README's table while nbgrader counted them (found by review)."""
    import nbformat

    from shared_builds import editable_sources

    monkeypatch.delenv("PART_II_DB_URL", raising=False)
    edited = editable_sources(tmp_path, monkeypatch) / "01-probability-and-bayes.ipynb"
    nb = nbformat.read(edited, as_version=4)
    test = next(c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") == "test_posterior")
    test.metadata["nbgrader"]["points"] = 4
    nb.cells.append(nbformat.v4.new_markdown_cell("请在下面写出推导过程。", metadata={"nbgrader": {
        "grade": False, "solution": False, "task": True, "locked": True, "points": 2, "grade_id": "task_derivation",
        "schema_version": 3}}))
    nbformat.write(nb, edited)
    build = tmp_path / "build"
    code, err, out = run(["release", "--build", str(build)], capsys)
    assert code == 0, err + out
    assert ("WARNING: the notebooks' text states other points than their cells hold (01-probability-and-bayes: the "
            "title says 13 (11 autograded + 2 by hand), the cells hold 16 (12 + 4), 练习 1.2 says 3, its cells hold 4)"
            ) in out, out
    readme = (build / "course" / "student" / "part-ii" / "README.md").read_text(encoding="utf-8")
    assert re.search(r"\| `01-probability-and-bayes.ipynb` \| .* \| 16 \|", readme), readme


def test_check_on_a_course_notebook_without_exercises_says_there_is_nothing_to_check(tmp_path, capsys, monkeypatch):
    """A released appendix notebook with no graded cells was called 'not a notebook of this course' by check, which
    told the student to paste answers into the released notebook (found by review)."""
    import nbformat

    from shared_builds import editable_sources

    sources = editable_sources(tmp_path, monkeypatch)
    appendix = nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell("# 附录"),
                                               nbformat.v4.new_code_cell("print(6 * 7)")])
    nbformat.write(appendix, sources / "07-appendix.ipynb")
    student = tmp_path / "student"
    student.mkdir()
    nbformat.write(appendix, student / "07-appendix.ipynb")
    nbformat.write(appendix, student / "notes.ipynb")
    code, err, out = run(["check", str(student / "07-appendix.ipynb")], capsys)
    assert code == 0 and "this notebook of the course has no graded exercises, so there is nothing to check" in out, \
        err + out
    code, err, out = run(["check", str(student / "notes.ipynb")], capsys)  # any other notebook: as before
    assert code == 2 and "has no graded cells: it is not a notebook of this course" in err, err + out


def test_a_first_release_refused_for_a_leak_leaves_no_student_version(tmp_path, capsys, monkeypatch):
    """With no earlier release to put back, the refused student version stayed in release/ while the message said
    'the previous release is kept' (found by review)."""
    import nbformat

    from shared_builds import editable_sources

    monkeypatch.delenv("PART_II_DB_URL", raising=False)
    edited = editable_sources(tmp_path, monkeypatch) / "01-probability-and-bayes.ipynb"
    nb = nbformat.read(edited, as_version=4)
    _misspell_hidden_markers(nb)
    nbformat.write(nb, edited)
    build = tmp_path / "build"
    code, err, out = run(["release", "--build", str(build)], capsys)
    assert code == 2 and "(nothing was released)" in err and "previous release" not in err, err + out
    assert not (build / "course" / "release" / "part-ii").exists()
    assert not (build / "course" / "student").exists()


def test_a_source_notebook_that_is_no_json_is_named_not_a_traceback(tmp_path, capsys, monkeypatch):
    """A merge conflict left in a source notebook crashed release with NotJSONError's traceback (found by review)."""
    from shared_builds import editable_sources

    monkeypatch.delenv("PART_II_DB_URL", raising=False)
    broken = editable_sources(tmp_path, monkeypatch) / "03-maximum-likelihood.ipynb"
    broken.write_text("<<<<<<< HEAD\n" + broken.read_text(encoding="utf-8"), encoding="utf-8")
    code, err, out = run(["release", "--build", str(tmp_path / "build")], capsys)
    assert code == 2 and f"the source notebook {broken} cannot be read (" in err and "Traceback" not in err, err + out


def test_a_release_records_changed_tests_with_the_code_it_ships_not_the_last_bundles(tmp_path, capsys, monkeypatch):
    """The check that model answers pass changed tests ran with the last release's code/ and data/: a test using a
    case or helper new in this release was refused, every time, since only a release rewrites them (found by review)."""
    import nbformat

    build, edited = one_notebook_course(tmp_path, capsys, monkeypatch)
    stale = build / "course" / "student" / "part-ii" / "data" / "part-ii" / "arithmetic.json"
    stale.write_text("{}", encoding="utf-8")  # stands for the last release's data, which lacks the cases used now
    nb = nbformat.read(edited, as_version=4)
    test = next(c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") == "test_perplexity_from_loss")
    test.source = test.source.replace("for _k in (2, 7, 50257):", "for _k in (2, 7, 50257, 3):")
    nbformat.write(nb, edited)
    code, err, out = run(["release", "--build", str(build)], capsys)
    assert code == 0, err + out
    assert "test cells changed since the last release: 02-shapes-and-loss (test_perplexity_from_loss)" in out, out
    assert stale.read_text(encoding="utf-8") != "{}"  # the bundle now ships the course's data again


def test_hand_scores_are_flagged_also_when_the_release_fails_after_nbgrader(tmp_path, monkeypatch):
    """nbgrader records an answer's new points before a later failure; the next release then saw no change, and hand
    scores given under the old points were never flagged (found by review)."""
    import nbformat

    import autograder.release as release_module
    from autograder.course import AutograderError, Course
    from shared_builds import editable_sources, released_copy

    build = released_copy(tmp_path)
    monkeypatch.delenv("PART_II_DB_URL", raising=False)
    edited = editable_sources(tmp_path, monkeypatch) / "01-probability-and-bayes.ipynb"
    nb = nbformat.read(edited, as_version=4)
    answer = next(c for c in nb.cells if c.metadata.get("nbgrader", {}).get("solution")
                  and c.metadata["nbgrader"].get("grade") and c.cell_type == "markdown")
    answer.metadata["nbgrader"]["points"] += 1
    nbformat.write(nb, edited)
    flagged = []

    def failing_generate(course):
        raise AutograderError("nbgrader failed after recording the new points")

    monkeypatch.setattr(release_module, "generate_release", failing_generate)
    monkeypatch.setattr(release_module, "flag_hand_scores", lambda course, answers: flagged.append(answers) or 0)
    with pytest.raises(AutograderError, match="after recording the new points"):
        release_module.release(Course.load(build))
    assert flagged == [{"01-probability-and-bayes": [answer.metadata["nbgrader"]["grade_id"]]}]


def test_a_cell_outside_the_tests_that_raised_is_named_unless_the_table_or_another_note_names_it():
    """A student's walkthrough: 4.5 returned a float, its visible checks passed and the demo cell after them raised,
    and check said nothing of it. A demo or setup cell that raised gets a note; one a failed test names already, a
    cell cut at its time limit (its own note), a test cell (its row) and the cells of an exercise not answered yet
    do not."""
    from nbformat.v4 import new_markdown_cell, new_notebook

    from autograder.check import exercise_rows, unreported_errors

    nb = new_notebook(cells=[
        new_markdown_cell("### 练习 1"),
        ran_cell("def f(x):\n    return float(x)", solution=True),
        ran_cell("check_true('f', f(1) == 1)", "test_1"),
        ran_cell("print(f(torch.ones(2)).item())", error=("AttributeError", "'float' object has no attribute 'item'")),
        new_markdown_cell("### 练习 2"),
        ran_cell("g = 1", solution=True),
        ran_cell("check_true('g', g == 1)", "test_2"),
        ran_cell("h = broken()", solution=True, error=("NameError", "name 'broken' is not defined")),
        ran_cell("check_true('h', h)", "test_3", error=("NameError", "name 'h' is not defined")),
        ran_cell("while True: pass", error=("CellTimeoutError", "cell ran past 60 s")),
        ran_cell("plt.plot(h)", error=("NameError", "name 'h' is not defined")),
        new_markdown_cell("### 练习 3"),  # not answered yet: its rows say so, its demo's error goes without saying
        ran_cell("# YOUR CODE HERE\nraise NotImplementedError()", solution=True, error=("NotImplementedError", "")),
        ran_cell("check_true('k', k)", "test_4", error=("NameError", "name 'k' is not defined")),
        ran_cell("print(k)", error=("NameError", "name 'k' is not defined")),
        ran_cell("print(m(1))", error=("NotImplementedError", "")),  # m defined, its body as released
        ran_cell("print(1)", error=("NotRun", "not run: the kernel stopped too many times in this notebook")),
    ])
    rows = exercise_rows(nb)
    assert "cell 8 (h = broken())" in rows[2][3], rows  # the failed test names it
    errors = unreported_errors(nb, rows)
    assert errors == ["cell 4 (print(f(torch.ones(2)).item())), AttributeError: 'float' object has no attribute "
                      "'item'", "cell 11 (plt.plot(h)), NameError: name 'h' is not defined"], errors
    nb.cells[3].outputs = []
    assert unreported_errors(nb, exercise_rows(nb)) == ["cell 11 (plt.plot(h)), NameError: name 'h' is not defined"]


def test_check_names_a_test_cell_moved_below_a_later_test_cell_that_stands_in_for_earlier_answers():
    """Grading fails 4.1's test cell moved below 4.3's (whose hidden part stands in for entropy_nats): the check, which
    runs the student's copy without hidden parts, would pass it, so it names it too. Moving it elsewhere is fine."""
    import nbformat

    from autograder.cells import nbgrader_meta
    from autograder.check import course_notebooks, moved_test_cells

    source = course_notebooks()["04-entropy-cross-entropy-kl"]
    released = nbformat.read(REPO / "notebooks" / "part-ii" / "04-entropy-cross-entropy-kl.ipynb", as_version=4)
    assert moved_test_cells(released, source) == {}
    ids = [nbgrader_meta(c).get("grade_id") for c in released.cells]
    entropy = released.cells.pop(ids.index("test_entropy"))
    ids.remove("test_entropy")
    released.cells.insert(ids.index("test_decomposition") + 1, entropy)
    assert moved_test_cells(released, source) == {"test_entropy": "test_decomposition"}
    # a pasted copy of 4.3's test above 4.1's: grading keeps only the last copy of a grade id, and so does the check
    pasted = nbformat.read(REPO / "notebooks" / "part-ii" / "04-entropy-cross-entropy-kl.ipynb", as_version=4)
    (decomposition,) = [c for c in pasted.cells if nbgrader_meta(c).get("grade_id") == "test_decomposition"]
    pasted.cells.insert(0, nbformat.from_dict(decomposition))
    assert moved_test_cells(pasted, source) == {}


def test_the_warning_pattern_drops_warnings_only_and_reads_a_long_stderr_in_linear_time():
    """An audit of the patterns applied to student text: '\\w*Warning: ' rescanned a run of letters from each of its
    starts (an hour projected for the 1 MiB of 'a' a cell may print to stderr; grading runs it after the cells, in
    the worker). 'Warning: ' drops the same outputs (\\w* could match nothing)."""
    from linear_time import run_on
    from nbformat.v4 import new_code_cell, new_notebook, new_output
    from nbgrader.preprocessors import IgnorePattern

    from autograder.cells import WARNING_PATTERN

    setup = ("from nbformat.v4 import new_code_cell, new_notebook, new_output\n"
             "from nbgrader.preprocessors import IgnorePattern\nfrom autograder.cells import WARNING_PATTERN")
    kept = run_on("len(IgnorePattern(pattern=WARNING_PATTERN, enabled=True).preprocess(new_notebook(cells=[new_code_cell("
                  "'x', outputs=[new_output('stream', name='stderr', text=text)])]), {})[0].cells[0].outputs)",
                  "a" * 2**20, setup)
    assert kept == "1"
    texts = ["/x.py:3: DeprecationWarning: old\n  f()\n", "UserWarning: once\n", "my own error\n", "warning: lower\n"]
    nb = new_notebook(cells=[new_code_cell("x", outputs=[new_output("stream", name="stderr", text=t)]) for t in texts])
    nb, _ = IgnorePattern(pattern=WARNING_PATTERN, enabled=True).preprocess(nb, {})
    assert [len(c.outputs) for c in nb.cells] == [0, 0, 1, 1]
