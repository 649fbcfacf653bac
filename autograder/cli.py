"""The Part II grading harness: one command per pipeline step (python -m autograder <command>).

    release             student version of part-ii + the zip students download
    collect PATH        file an LMS download (folder or zip) as nbgrader submissions
    grade               autograde every collected submission, in parallel, resumable
    extend              a later due date for one student (or list the extensions)
    drop                take a student out of the course (their files kept), or back in with --undo
    feedback            one HTML report per student and notebook (hidden tests never shown)
    export              grades as CSV: per student and per cell
    check NOTEBOOK      a student's self-check: run the notebook, print a table per exercise
    demo                the whole cycle on a generated sample class

exit codes:
  0    done
  1    done, but the output names something to look at: collect rejected files or could not
       file a student; grade could not grade a submission; extend named a student who is not
       in the gradebook; feedback wrote no pages for a collected student (not graded yet,
       collected again, a hand score out of range) or could not write a report; export left a
       student's scores empty or found a hand score outside its cell's points (with --final,
       also cells waiting for a grader); check found a failing, edited, retyped or deleted
       test, a deleted answer cell, changed course files, a cell that ran out of time or
       stopped the kernel, differing copies of a graded cell, or a name grading rejects; demo
       gave a score other than predicted or hit a grading or feedback error; any command
       whose output went into a pipe its reader closed early (| head)
  2    nothing done: bad arguments or input, no course or release, the course busy, or a
       refusal the message explains (a download whose layout collect cannot tell, a release
       that would leak solutions, test cells changed since the release); also when the file
       system refused (read-only, disk full): the command stopped there, run it again once fixed
  130  interrupted (grade resumes where it stopped)
"""

from __future__ import annotations

import argparse
import asyncio
import errno
import os
import re
import shlex
import sys
from pathlib import Path

from .course import (ASSIGNMENT, DEFAULT_CELL_TIMEOUT, DEFAULT_NOTEBOOK_TIMEOUT, AutograderError, Course, build_flag, build_option,
                     gradebook_error, listed, load_config)
from .demo import DEMO_CELL_TIMEOUT, DEMO_NOTEBOOK_TIMEOUT


def _defaults(grade_seconds: float, demo_seconds: float) -> str:
    """A timeout option's defaults for its help: 'default 600; demo 300', or 'default 60' when both agree."""
    if grade_seconds == demo_seconds:
        return f"default {grade_seconds:g}"
    return f"default {grade_seconds:g}; demo {demo_seconds:g}"


def settle_after_interrupt() -> None:
    """After Ctrl-C was reported (exit 130): the clean-up at exit (nbclient's hooks that stop the kernels) runs to its
    end whatever more Ctrl-C's come, and the dying words of what the interrupt cut short (half-run coroutines
    collected, an exit hook failing) are not printed below "interrupted"."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    sys.unraisablehook = lambda unraisable: None


def _folder_path(text: str) -> Path:
    """argparse type: a non-empty path ('' would quietly mean the current folder)."""
    if not text.strip():
        raise argparse.ArgumentTypeError("expected a folder path, got an empty string")
    return Path(text)


def _download_path(text: str) -> Path:
    """argparse type: a non-empty path of a folder or zip ('' would quietly collect the current folder)."""
    if not text.strip():
        raise argparse.ArgumentTypeError("expected the path of an LMS download (a folder or a .zip), got an empty string")
    return Path(text)


def _notebook_path(text: str) -> Path:
    """argparse type: a non-empty path of a notebook ('' would be read as the current folder)."""
    if not text.strip():
        raise argparse.ArgumentTypeError("expected the path of a notebook (.ipynb), got an empty string")
    return Path(text)


def _positive_int(text: str) -> int:
    """argparse type: an integer >= 1."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 1, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 1, got {value}")
    return value


MIN_TIMEOUT = 1.0  # seconds: below it even an honest print cell fails, so a smaller value is a slip (ms for s?)


def _positive_seconds(text: str) -> float:
    """argparse type: a timeout in seconds, finite and at least MIN_TIMEOUT."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of seconds > 0, got {text!r}") from None
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"expected a finite number of seconds > 0, got {text}")
    if value < MIN_TIMEOUT:
        raise argparse.ArgumentTypeError(f"expected at least {MIN_TIMEOUT:g} second(s), got {text}: no cell runs that "
                                         "fast (a timeout is given in seconds, not milliseconds)")
    return value


def _moment(what: str, none_means: str):
    """An argparse type for a time in parse_moment's forms, worded as `what` (aware as given, or None for 'none')."""
    from .release import parse_moment

    def parse(text: str):
        try:
            return (parse_moment(text, what=what, none_means=none_means),)  # a 1-tuple: (None,) is not "not given"
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    return parse


def _mathjax_url(text: str) -> str:
    """argparse type: where feedback pages load MathJax from."""
    from .feedback import checked_mathjax_url

    try:
        return checked_mathjax_url(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _student_id(text: str) -> str:
    """argparse type: a student id as collect files it (Unicode's composed form, at most 128 characters)."""
    import unicodedata

    from .collect import MAX_ID_BYTES, MAX_ID_CHARS, STUDENT_ID, sanitize_id

    text = unicodedata.normalize("NFC", text)
    if not STUDENT_ID.fullmatch(text):
        filed = sanitize_id(text)  # a folder's name, say: collect files "O'Brien, Pat/" as O_Brien_Pat
        as_filed = f" (collect files a folder of that name as {filed})" if filed else ""
        raise argparse.ArgumentTypeError(f"expected a student id (letters, digits, . _ @ -), got {text!r}{as_filed}")
    if len(text) > MAX_ID_CHARS:
        raise argparse.ArgumentTypeError(f"expected a student id of at most {MAX_ID_CHARS} characters (nbgrader's "
                                         f"limit), got {len(text)}")
    if len(text.encode("utf-8")) > MAX_ID_BYTES:
        raise argparse.ArgumentTypeError(f"expected a student id of at most {MAX_ID_BYTES} bytes of UTF-8 (it names "
                                         f"folders), got {len(text.encode('utf-8'))}")
    return text


def _add_grading_options(parser: argparse.ArgumentParser) -> None:
    """Options shared by grade and demo."""
    parser.add_argument("--workers", type=_positive_int, default=os.cpu_count() or 1,
                        help="submissions graded in parallel (default: the number of cores, %(default)s here); "
                             "the next one's sandbox starts early beside them")
    parser.add_argument("--cell-timeout", type=_positive_seconds, default=None, metavar="SECONDS",
                        help="a cell running longer is interrupted and scored as failed "
                             f"({_defaults(DEFAULT_CELL_TIMEOUT, DEMO_CELL_TIMEOUT)})")
    parser.add_argument("--notebook-timeout", type=_positive_seconds, default=None, metavar="SECONDS",
                        help="time budget of one notebook; cells after it are not run "
                             f"({_defaults(DEFAULT_NOTEBOOK_TIMEOUT, DEMO_NOTEBOOK_TIMEOUT)})")
    parser.add_argument("--no-sandbox", action="store_true",
                        help="run student code WITHOUT the bubblewrap sandbox (only for trusted code)")


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of every command."""
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--build", type=_folder_path, default=None, metavar="DIR",
                        help="build folder (default: $PART_II_BUILD or build/); the course lives in DIR/course "
                             "(the demo's in DIR/demo/course)")
    parser = argparse.ArgumentParser(prog="python -m autograder", description=__doc__.split("\n\n")[0],
                                     epilog=__doc__[__doc__.index("exit codes:"):], formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", metavar="command", required=True)

    p = sub.add_parser("release", parents=[common], help="student version of part-ii + the zip students download",
                       description="Run the source notebooks to check that every model answer passes its own tests "
                                   "(once per version of each notebook; grade reuses what this records), generate the "
                                   "student version of part-ii (nbgrader generate_assignment), check that it leaks no "
                                   "solution or hidden test, and write the student zip (release notebooks + "
                                   "code/part-ii + data/part-ii).")
    p.add_argument("--due-date", type=_moment("due date", "no due date"), default=None, metavar="WHEN",
                   help="record the assignment's due date, e.g. '2026-03-01 23:59 Asia/Shanghai' ('none' removes it; "
                        "default: keep the one recorded); export then says who handed in late and by how much")
    p.add_argument("--no-source-check", action="store_true",
                   help="do not run the source notebooks first (make lab's student preview uses it); a release whose "
                        "test cells changed since the last one runs them anyway; otherwise the first grade does")
    p.add_argument("--revert-tests", action="store_true",
                   help="release test cells that are an earlier release's (refused otherwise once students have "
                        "handed in: a checkout that lacks a later fix would undo it and grade everyone again)")

    p = sub.add_parser("collect", parents=[common], help="file an LMS download (folder or zip) as nbgrader submissions",
                       description="File student notebooks from a folder or zip as nbgrader submissions.",
                       epilog=_collect_epilog(), formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("path", type=_download_path, help="a folder or .zip file as downloaded from the LMS")
    p.add_argument("--student", type=_student_id, metavar="ID",
                   help="every file of the download is this student's (for one student's files whose folders "
                        "do not say whose they are)")
    p.add_argument("--replace-older", action="store_true",
                   help="file every notebook of the download, also one whose file is older than the one collected "
                        "before (by default that one is rejected, so an old download cannot put back an earlier "
                        "version); its file time becomes the hand-in time")

    p = sub.add_parser("grade", parents=[common], help="autograde every collected submission, in parallel, resumable",
                       description="Autograde every collected submission with nbgrader, N at a time, each in its own "
                                   "process and sandbox. Already graded submissions are skipped unless --force; an "
                                   "interrupted run resumes where it stopped.")
    _add_grading_options(p)
    p.add_argument("--force", action="store_true",
                   help="grade again submissions that are already graded; each one's grades stand until its new ones "
                        "are in, and a forced run stopped early is finished by running grade again")
    p.add_argument("--student", type=_student_id, action="append", metavar="ID",
                   help="grade only this student (repeatable)")

    p = sub.add_parser("extend", parents=[common], help="a later due date for one student (or list the extensions)",
                       description="Give students their own due date (an extension), remove it with --until none, "
                                   "or, without options, list the extensions. The assignment needs a due date "
                                   "(release --due-date WHEN). export and feedback then count lateness from the "
                                   "student's own date; it stays where it is when the due date is moved.")
    p.add_argument("--student", type=_student_id, action="append", metavar="ID",
                   help="the student to extend (repeatable; with --until)")
    p.add_argument("--until", type=_moment("end of the extension", "removes the extension"), default=None, metavar="WHEN",
                   help="the student's own due date, in the forms of release --due-date, e.g. "
                        "'2026-03-04 23:59 Asia/Shanghai' ('none' removes the extension)")

    p = sub.add_parser("drop", parents=[common], help="take a student out of the course (their files kept), or back in with --undo",
                       description="Take a student out of the course: one who left the class, or an id collected by "
                                   "mistake (a typo in a folder name). Their files (hand-ins, earlier hand-ins, graded "
                                   "copies, feedback pages, grading log) move to <course>/dropped/ID/<time>/ with a "
                                   "record of their names, scores, hand scores, comments and extension; they leave the "
                                   "gradebook and collect's report, so export and feedback leave them out, and collect "
                                   "files nothing of theirs. --undo takes them back (hand-in, names, and extension "
                                   "unless one was granted since); the next grade grades them again, and hand scores "
                                   "given before the drop are to be given again (the record lists them). A drop or undo "
                                   "cut short is finished by running it again.")
    p.add_argument("--student", type=_student_id, required=True, metavar="ID", help="the student to drop")
    p.add_argument("--undo", action="store_true", help="take the student back in instead")

    p = sub.add_parser("feedback", parents=[common], help="one HTML report per student and notebook (hidden tests never shown)",
                       description="Write one HTML feedback file per student and notebook: points per cell, "
                                   "passed/failed and why, the student's code and written answers, and notes on what "
                                   "grading did. Cell outputs and hidden tests are never shown (either could carry "
                                   "hidden inputs); a notebook not graded gets a page saying why.")
    p.add_argument("--student", type=_student_id, action="append", metavar="ID", help="only this student (repeatable)")
    p.add_argument("--workers", type=_positive_int, default=os.cpu_count() or 1,
                   help="students rendered in parallel (default: the number of cores, %(default)s here)")
    p.add_argument("--mathjax-url", type=_mathjax_url, metavar="URL",
                   help="where the pages load MathJax 2.7 (the formulas) from: an http(s) address, e.g. a mirror your "
                        "students can reach, or a path relative to the pages (default: nbconvert's, on cdnjs)")

    p = sub.add_parser("export", parents=[common], help="grades as CSV: per student and per cell",
                       description="Write the grades as CSV (UTF-8) into <course>/reports: grades.csv (one row per "
                                   "student: nbgrader's columns, a score per notebook, status and reasons) and "
                                   "grades-per-cell.csv.")
    p.add_argument("--bom", action="store_true",
                   help="start the CSVs with a UTF-8 byte-order mark, so that Excel opened by a double click reads "
                        "Chinese names right (a script or LMS import that does not expect one may then see it in the "
                        "first column's name)")
    p.add_argument("--final", action="store_true",
                   help="the export to hand in: exit 1 also when cells still wait for a grader in formgrader (their "
                        "students' scores can still change), not only when scores are left empty")

    p = sub.add_parser("check", help="a student's self-check: run the notebook, print a table per exercise",
                       description="Run a notebook from top to bottom in a fresh kernel and print, per exercise, "
                                   "whether its visible tests pass and the points at stake. Exits 1 when a test fails, a "
                                   "test cell was edited or deleted, a written-answer cell was deleted, the course's "
                                   "code/ or data/ files were changed, a cell or the notebook ran out of time, a cell stopped the "
                                   "kernel, copies of a graded cell differ, or the file name would "
                                   "not be graded as this notebook; 2 when the file is not a notebook of this course.")
    p.add_argument("notebook", type=_notebook_path, help="the .ipynb file to check")
    p.add_argument("--timeout", type=_positive_seconds, default=DEFAULT_CELL_TIMEOUT, metavar="SECONDS",
                   help="a cell running longer is interrupted and reported, as grading does (default %(default)g, "
                        "grading's default cell timeout)")
    p.add_argument("--notebook-timeout", type=_positive_seconds, default=DEFAULT_NOTEBOOK_TIMEOUT, metavar="SECONDS",
                   help="once the notebook has run this long, the cells after are not run and fail, as grading does "
                        "(default %(default)g, grading's default notebook budget)")

    p = sub.add_parser("demo", parents=[common], help="the whole cycle on a generated sample class",
                       description="Release, generate a sample class (perfect, blank, partial, broken file, edited "
                                   "test cell, infinite loop), collect, grade with progress, write feedback and CSV, "
                                   "plot the totals and print a summary. Uses DIR/demo (default build/demo), wiped "
                                   "first, with a SQLite gradebook.")
    _add_grading_options(p)
    for command in sub.choices.values():  # main reports an argument the command does not know with its usage
        command.set_defaults(command_parser=command)
    return parser


def _collect_epilog() -> str:
    """The accepted LMS layouts, from collect's documentation."""
    from . import collect

    return collect.LAYOUTS_HELP


def _run(args: argparse.Namespace) -> int:
    """Dispatch one parsed command; return its exit code."""
    if args.command == "check":
        from .check import check

        return check(args.notebook, timeout=args.timeout, notebook_timeout=args.notebook_timeout)
    if args.command == "demo":
        from .demo import demo

        return demo(build=args.build, workers=args.workers, cell_timeout=args.cell_timeout,
                    notebook_timeout=args.notebook_timeout, no_sandbox=args.no_sandbox)
    if args.command == "extend" and (args.student is None) != (args.until is None):
        raise AutograderError("--student ID and --until WHEN go together (without either, extend lists "
                              "the extensions)")
    course = Course.load(args.build, create=args.command == "release")  # the others need a released course
    if args.command == "extend":
        from .extensions import NOT_IN_GRADEBOOK, collected_students, describe, extensions, gradebook_students, grant
        from .release import as_given, naive_utc

        if args.student is None:
            shown = extensions(course)
            if not shown:
                print(f"no extensions (`python -m autograder extend --student ID --until WHEN{build_option(course)}` "
                      "gives one)")
        else:
            named = list(dict.fromkeys(args.student))
            until = args.until[0]
            with course.lock("extend"):  # not while grade reads the extensions into the gradebook
                had = {ext.student for ext in extensions(course)}
                now = {ext.student: ext for ext in grant(course, named, None if until is None else naive_utc(until))}
            shown = [now[s] for s in named if s in now]  # empty after --until none
            from .collect import dropped_note, load_collect_log

            if until is not None and (note := dropped_note(load_collect_log(course), named)):
                print(f"note: {note[2:]}; the extension counts once they are back")
            if until is None:
                known = gradebook_students(course)
                unknown = [s for s in named if s not in had and s not in known]
                seen = collected_students(course)
                for student in named:
                    print(f"{student}: no extension (the assignment's due date applies)" +
                          ("; it had none" if student not in had else "") +
                          (f"; {NOT_IN_GRADEBOOK}" if student in unknown and student in seen else
                           "; not in the gradebook either (no hand-in of theirs collected): is the id right?"
                           if student in unknown else ""))
                print_after_extend(course, [s for s in named if s in had])
                return 1 if unknown else 0  # nothing removed for an id no hand-in has: a typo?
        for ext in shown:
            print(describe(ext, as_given(args.until[0]) if args.student else "", build_option(course)))
        if args.student:
            print_after_extend(course, named)
        return 1 if any(not ext.known for ext in shown) else 0  # an id no hand-in has: a typo?
    if args.command == "drop":
        from .drop import drop, print_drop, undo_drop

        print_drop(course, (undo_drop if args.undo else drop)(course, args.student))
        return 0
    if args.command == "release":
        from .release import KEEP, as_given, naive_utc, release

        given = KEEP if args.due_date is None else args.due_date[0]
        first = not course.release_dir.is_dir()  # a new course: a mistyped --build makes one too (a TA's walkthrough)
        result = release(course, due_date=given if given is KEEP or given is None else naive_utc(given),
                         check_sources=not args.no_source_check, revert_tests=args.revert_tests)
        n = len(result.notebooks)
        if first:
            print(f"a new course in {course.root}: its first release, with a gradebook of its own (if you meant to "
                  "release an existing course again, check --build or $PART_II_BUILD)")
        print(f"released {n} {'notebook' if n == 1 else 'notebooks'} to {course.release_dir}")
        print(f"student zip: {result.zip_path}")
        print(f"marking guides for graders (each hand-graded question, its model answer and marking note; not in the "
              f"zip): {result.marking_guides}")
        print(f"due date: {result.due_date:%Y-%m-%d %H:%M:%S} UTC{as_given(None if given is KEEP else given)}"
              if result.due_date else
              "no due date (release --due-date WHEN records one; export then says who handed in late)")
        if result.answer_points:
            from .grade import listed_cells

            print(f"points of hand-graded answers changed since the last release: {listed_cells(result.answer_points)}; "
                  f"{result.flagged} hand {'score' if result.flagged == 1 else 'scores'} given under the old points "
                  f"{'is' if result.flagged == 1 else 'are'} flagged for review in formgrader (until changed, a score "
                  "counts as given, even above the new maximum)")
        if result.stated_points:
            print(f"WARNING: the notebooks' text states other points than their cells hold "
                  f"({per_notebook(result.stated_points)}). Students read the text, the gradebook counts the cells' "
                  "points: correct the text (or the points) and release again")
        if result.given_changed:
            print(f"WARNING: code cells that are no exercise changed or were added since the last release "
                  f"({per_notebook(result.given_changed)}). Students keep the copies they started from (without new "
                  "cells), and grading runs theirs, while the hidden tests' expected values come from the new sources: "
                  "a right answer computed from an old cell, or a test using a new one, can fail. Revert the change, or "
                  "have every student copy the new cells in before handing in")
        if result.changed:
            from .grade import listed_cells

            n = len(result.regrade)
            again = (f"the next `grade` grades again the {n} {'submission' if n == 1 else 'submissions'} graded under "
                     "the old cells" if n else "no submission was graded under the old cells")
            print(f"test cells changed since the last release: {listed_cells(result.changed)}; {again}")
        print_next_step(course)
        return 0
    if args.command == "collect":
        from .collect import collect, print_report

        report = collect(course, args.path, student=args.student, replace_older=args.replace_older)
        print_report(report)
        unfiled = any(r.unfiled for r in report.students.values())
        print_next_step(course, rejected=bool(report.rejected), unfiled=unfiled)
        return 1 if report.rejected or unfiled else 0
    if args.command == "grade":
        from .grade import GradeOptions, grade

        options = GradeOptions(workers=args.workers, force=args.force, students=args.student,
                               cell_timeout=args.cell_timeout, notebook_timeout=args.notebook_timeout,
                               no_sandbox=args.no_sandbox)
        return grade(course, options).exit_code
    if args.command == "feedback":
        from .feedback import feedback, print_feedback

        with course.lock("feedback"):  # not from a gradebook that grade is still writing
            result = feedback(course, students=args.student, workers=args.workers, mathjax_url=args.mathjax_url)
        print_feedback(result)
        return 1 if result.errors else 0
    if args.command == "export":
        from .collect import NOT_FILED, load_collect_log, nobodys_files, shown
        from .export import export, hand_scores_outside, not_graded, waiting_for_a_grader

        with course.lock("export"):
            written = export(course, bom=args.bom)
        for path in written:
            print(f"wrote {path}")
        if nobodys := nobodys_files(load_collect_log(course)):
            n = len(nobodys)
            print(f"{n} rejected {'file is' if n == 1 else 'files are'} no student's, so grades.csv has no row for "
                  f"{'it' if n == 1 else 'them'} (see {course.reports_dir / 'collect.json'}; copies in "
                  f"{course.rejected_dir}):")
            for r in nobodys[:10]:
                print(f"  {shown(r['file'])}: {shown(r['reason'])}")
            if n > 10:
                print(f"  … and {n - 10} more")
        waiting = waiting_for_a_grader(written[0])
        code = 0
        if waiting:
            cells, students = sum(waiting.values()), len(waiting)
            print(f"{cells} {'cell' if cells == 1 else 'cells'} of {students} {'student' if students == 1 else 'students'} "
                  f"{'waits' if cells == 1 else 'wait'} for a grader in formgrader "
                  "(not graded yet, or flagged for review by a regrade): see needs_manual_grading; "
                  "run export again after grading them" + (f" (--final: {'its' if students == 1 else 'their'} scores "
                                                           "can still change)" if args.final else ""))
            code = 1 if args.final else 0
        if outside := hand_scores_outside(written[0]):
            n = len(outside)
            print(f"{n} {'student has' if n == 1 else 'students have'} a hand score below 0 or above its cell's points "
                  f"({listed(outside)}; the notes name the cells): correct {'it' if n == 1 else 'them'} in formgrader "
                  "(points beyond the maximum are extra credit), then export again")
            code = 1
        if pending := not_graded(written[0]):
            n = len(pending)
            print(f"{n} {'student is' if n == 1 else 'students are'} not graded yet ({listed(pending)}): "
                  f"{'its scores are' if n == 1 else 'their scores are'} left empty; run `python -m autograder grade"
                  f"{build_option(course)}`, then export again")
            code = 1
        if unfiled := not_graded(written[0], NOT_FILED):
            n = len(unfiled)
            print(f"{n} {'student' if n == 1 else 'students'} could not be filed by the last collect ({listed(unfiled)}): "
                  f"{'its scores are' if n == 1 else 'their scores are'} left empty and the notes say why; collect "
                  f"the download again (`python -m autograder collect PATH{build_option(course)}`), grade, then "
                  "export again")
            code = 1
        if failed := not_graded(written[0], "error"):
            n = len(failed)
            print(f"{n} {'student' if n == 1 else 'students'} could not be graded ({listed(failed)}): "
                  f"{'its scores are' if n == 1 else 'their scores are'} left empty and the notes say why; "
                  f"`python -m autograder grade{build_option(course)}` tries again, then export again")
            code = 1
        return code
    raise AssertionError(args.command)


def per_notebook(notes: dict[str, list[str]]) -> str:
    """'01-…: a, b; 06-…: c' for a notebook -> notes mapping (notes may hold parentheses, unlike grade.listed_cells')."""
    return "; ".join(f"{nb}: {', '.join(items)}" for nb, items in sorted(notes.items()))


def awaiting_a_grader(course: Course) -> list[str]:
    """Graded students with answers waiting for a grader in formgrader (not graded by hand yet, or flagged for review
    by a regrade), by id."""
    with course.gradebook() as gb:
        return sorted(s.student.id for s in gb.assignment_submissions(ASSIGNMENT) if s.needs_manual_grade)


def print_after_extend(course: Course, changed: list[str]) -> None:
    """After extend: of the students whose due date changed, the graded ones' pages and grades.csv still show the
    lateness they were written with, so name the commands that write them again."""
    from .grade import STANDING, grading_stale, job_rows

    jobs = job_rows(course.db_url)
    again = grading_stale(course, jobs)  # feedback refuses them until they are graded again
    if graded := [s for s in changed if jobs.get(s, {}).get("state") in STANDING and s not in again]:
        build = build_option(course)
        students = " ".join(f"--student {shlex.quote(s)}" for s in graded)
        print(f"next: `python -m autograder feedback {students}{build}` and `python -m autograder export{build}` write "
              "the new lateness into the pages and grades.csv (those written before still show the old)")


def print_next_step(course: Course, rejected: bool = False, unfiled: bool = False) -> None:
    """After release or collect: the command to run next (grade; collect before any hand-in; feedback and export once
    every hand-in is graded);
    rejected: the collect just run turned files away (so a course with no hand-in yet needs them again, not a zip);
    unfiled: it could not write some (the same download, collected again, files them)."""
    from .grade import job_rows, to_grade

    build = build_option(course)
    if waiting := to_grade(course):
        jobs = job_rows(course.db_url)
        again = sum(1 for s in waiting if jobs.get(s, {}).get("commits"))  # graded before: new tests or new files
        new = len(waiting) - again
        parts = ([f"{new} {'student is' if new == 1 else 'students are'} collected and not graded yet"] if new else []) \
            + ([f"{again} {'student is' if again == 1 else 'students are'} to be graded again"] if again else [])
        print(f"next: `python -m autograder grade{build}` ({'; '.join(parts)})")
    elif course.submitted_students():
        if hand := awaiting_a_grader(course):
            n = len(hand)
            print(f"next: nothing to grade (every collected hand-in is graded); answers of {n} "
                  f"{'student' if n == 1 else 'students'} ({listed(hand)}) wait for a grader in formgrader (JupyterLab "
                  f"started in {course.root}: Nbgrader > Formgrader > Manual Grading), then `python -m autograder "
                  f"feedback{build}` and `python -m autograder export{build}` write the pages and grades.csv")
            return
        print(f"next: nothing to grade (every collected hand-in is graded); `python -m autograder feedback{build}` and "
              f"`python -m autograder export{build}` write the pages and grades.csv, `python -m autograder collect "
              f"PATH{build}` files new hand-ins")
    elif unfiled:
        print(f"next: nothing is filed yet; once what stopped the filing (above) is put right, the same "
              f"`python -m autograder collect PATH{build}` files the download")
    elif rejected:
        print(f"next: nothing is filed yet; once the rejected files above are handed in again or put right, "
              f"`python -m autograder collect PATH{build}` files them")
    else:
        print(f"next: hand out the student zip; `python -m autograder collect PATH{build}` files the LMS download "
              "(PATH: its folder or zip)")


def _gradebook_url(args: argparse.Namespace) -> str:
    """The gradebook URL of the command's course (the configured one; '?' when even that cannot be read)."""
    try:
        return load_config(getattr(args, "build", None)).CourseDirectory.db_url
    except Exception:  # noqa: BLE001 - only for the message of an error already being reported
        return os.environ.get("PART_II_DB_URL", "?")


def _build_flag(args: argparse.Namespace) -> str:
    """' --build DIR' of the command's course for a suggested command ('' for the default build/ or when unreadable)."""
    try:
        return build_flag(Path(load_config(getattr(args, "build", None)).CourseDirectory.root).parent)
    except Exception:  # noqa: BLE001 - only for the message of an error already being reported
        return ""


REFUSALS = (errno.EROFS, errno.EACCES, errno.EPERM, errno.ENOSPC, errno.EDQUOT)


def file_system_error(exc: OSError) -> str:
    """What the file system refused, and what to do: for an OSError that reached the command's top."""
    where = f" ({exc.filename})" if exc.filename else ""
    what = exc.strerror or str(exc)
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        hint = "free some disk space"
    else:
        hint = "the build folder and everything in it must be writable by this user"
    return (f"the file system refused: {what}{where}; {hint}, then run the command again "
            "(grade resumes where it stopped; collect files again what it had not filed)")


def unrecognized(command: str, command_parser: argparse.ArgumentParser, extra: list[str],
                 argv: list[str] | None = None) -> str:
    """The error for arguments the command does not take: the unknown options by name, with the command's own.

    An unknown option's value can be taken for the command's positional argument (check
    --build DIR X.ipynb reads DIR as the notebook), which leaves the real positional among the
    leftovers: naming only the options says what to remove.
    """
    argv = sys.argv[1:] if argv is None else argv
    positional = set(argv[argv.index("--") + 1:]) if "--" in argv else set()  # after '--' nothing is an option
    options = [arg.split("=", 1)[0] for arg in extra
               if re.match(r"-[A-Za-z]|--[A-Za-z]", arg) and arg not in positional]
    if not options and command == "check":
        return f"check takes one notebook at a time: run it once for each ({' '.join(extra)} left over)"
    if not options:
        return f"unrecognized arguments: {' '.join(extra)}"
    known = [f"{a.option_strings[-1]} {a.metavar or a.dest.upper()}" if a.nargs != 0 else a.option_strings[-1]
             for a in command_parser._actions if a.option_strings and a.dest != "help"]
    takes = f"its options are {', '.join(known)}" if known else "it takes no options"
    return f"{command} does not take {', '.join(options)}: {takes} (see --help)"


def main(argv: list[str] | None = None) -> int:
    """Parse argv, run the command, turn known errors into a message and an exit code."""
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    if extra:  # said by the command's own parser, so the usage shown is the command's
        args.command_parser.error(unrecognized(args.command, args.command_parser, extra, argv))
    try:
        return _run(args)
    except AutograderError as exc:
        print(f"{parser.prog} {args.command}: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except OSError as exc:  # the file system refused: read-only, no permission, disk full
        if exc.errno not in REFUSALS:  # a broken pipe, a timeout, a bug: the traceback says more
            raise
        print(f"{parser.prog} {args.command}: error: {file_system_error(exc)}", file=sys.stderr)
        return 2
    except Exception as exc:
        from nbgrader.api import MissingEntry
        from sqlalchemy.exc import DBAPIError

        if isinstance(exc, DBAPIError):  # the database refused: unreachable, not a database, read-only...
            message = gradebook_error(_gradebook_url(args), exc)
        elif isinstance(exc, MissingEntry) and "assignment" in str(exc):
            message = (f"the gradebook {_gradebook_url(args)} does not know the assignment ({exc}): it was replaced "
                       f"or emptied after the release; run `python -m autograder release{_build_flag(args)}` first")
        else:
            raise
        print(f"{parser.prog} {args.command}: error: {message}", file=sys.stderr)
        return 2
    except (KeyboardInterrupt, asyncio.CancelledError):  # Ctrl-C inside asyncio.run (nbclient) arrives as the latter
        # grade says itself what an interrupted run left (its jobs resume); the others finish when run again
        again = "" if args.command == "grade" else "; run the same command again to finish"
        print(f"{parser.prog} {args.command}: interrupted{again}", file=sys.stderr)
        return 130
