"""Step 4, feedback: one HTML report per student and notebook, with no hidden test in it.

nbgrader's GenerateFeedback renders the autograded notebook with the points of every
cell. By default it would also show each test cell's full source, hidden tests included
(nbgrader #917, #1363), and tracebacks that quote hidden lines. Here every autograded
test cell is rewritten before rendering: its source keeps only the visible checks, and
its output becomes one short line (passed, or what failed; a failed hidden check says
only that, with the check's own message when it is an AssertionError). As a last guard,
every written file is scanned for hidden-test lines and withheld if one slipped through.
A hidden-test line counts as leaked only where the page shows it more often than the
student's own cells (everything but the test cells) contain it: the student wrote those
before grading, so a line there (e.g. ``with np.errstate(all="ignore"):``, an idiom the
notebooks teach) is theirs, not a leak; any further copy came from the grading run.

Feedback written before the free-text answers are graded in formgrader would show each of
them as 0 / N. Such a page opens with a note that its score is provisional, its score and the
contents entry of each answer still waiting for a grader say so too, and the answer says so under
it; feedback run again after manual grading drops all of it. An answer cell handed in as released
gets nbgrader's automatic comment "No response.", which reads like the grader's silence: the
page says "No answer: ..." instead.

The page's table of contents lists the graded cells under the exercise heading above them, the
heading once (e.g. "练习 2.1（3 分）…" over "comment on your answer" and "test test_stable_softmax"),
where nbgrader's template lists only "Test cell", "Written response" and "Comment"
(autograder/templates/feedback_part_ii).

A notebook that scored 0 without being graded (not handed in, its file rejected by collect,
or not gradable) gets a short page of its own saying why and what to do, so every
student who handed in anything has a page for every notebook. Beside the folder of those pages,
index.html gives the student's total and each notebook's score as export's grades.csv does, each
linked to its page.
"""

from __future__ import annotations

import datetime as dt
import errno
import html
import json
import os
import re
import secrets
import signal
import sys
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import quote

import markupsafe
import nbformat
from jinja2 import pass_context
from mistune import HTMLRenderer
from mistune.util import striptags
from nbconvert.exporters import HTMLExporter
from nbconvert.filters import ansi2html, clean_html
from nbconvert.filters.markdown_mistune import InvalidNotebook, IPythonRenderer, MarkdownWithMath
from nbconvert.filters.strings import files_url_pattern
from nbconvert.preprocessors import CSSHTMLHeaderPreprocessor, Preprocessor
from nbformat.v4 import new_markdown_cell, new_output
from nbgrader.preprocessors import GetGrades, NbGraderPreprocessor
from pygments import highlight
from pygments.formatters import HtmlFormatter
from pygments.lexer import bygroups
from pygments.lexers import PythonLexer
from pygments.token import Keyword, Operator, Text, Whitespace
from traitlets import Dict
from traitlets.config import LoggingConfigurable

from .cells import (BEGIN_HIDDEN, END_HIDDEN, LOST_CELLS, NO_KERNEL, cell_points, cut_at_time_limit, first_line,
                    heading_after, hidden_line_numbers, is_test_cell, nbgrader_meta, not_run_for_time, outcome_message,
                    stopped_for_time, stopped_kernel, visible_source)
from .collect import (DUPLICATE, OLDER, dropped_note, known_students, load_collect_log, match_notebook, moved_files,
                      unfiled_text)
from .course import (ASSIGNMENT, BEIJING, AutograderError, Course, build_option, case_hint, listed,
                     points_text, quiet_nbgrader_logs, run_first)
from .export import (HAND_SCORE_OUTSIDE, after_penalties, after_penalty, deleted_answers, failing_without_answer,
                     hand_scores_out_of_range, late_by, penalty_taken, released_answers, released_test_ids, submitted_cells,
                     tampered_cells)
from .trusted_checks import hidden_outputs

DEFAULT_MATHJAX_URL = HTMLExporter.mathjax_url.default_value
MIN_LEAK_LINE = 12  # shorter hidden lines (e.g. ")") are too common to mean anything
TEMPLATES = Path(__file__).resolve().parent / "templates"
TEMPLATE = "feedback_part_ii"  # nbgrader's feedback template with a table of contents by exercise
TEMPLATE_FILE = "page.html.j2"
REVIEWED_COMMENT = "Given before your notebook was graded again: "  # before a comment on a score to be reviewed
NBGRADER_NO_RESPONSE = "No response."  # nbgrader's automatic comment on an answer cell left as released
UNANSWERED = "No answer: you handed this cell in as it was released."


NOTE_KEY = "autograder_note"  # metadata of the notes feedback puts atop a page, and the render's token in resources


def note_cell(resources: dict, text: str):
    """A note of the grader's atop a feedback page (markdown whose HTML EscapedMarkdown keeps: markdown_literal's
    span). It carries this render's random token, so no cell of a hand-in can pass for one."""
    token = resources.setdefault(NOTE_KEY, secrets.token_hex(16))
    return new_markdown_cell(text, metadata={NOTE_KEY: token})


EXERCISE_NUMBER = re.compile(r"练习\s*\d+(?:\.\d+)*")  # what a heading calls its exercise: 练习 6.4
IMAGE_SIZES = ("width", "height")  # the output metadata an image keeps on a page


class SafeOutputMetadata(Preprocessor):
    """Keep of each output's metadata only an image's numeric width and height.

    nbconvert's templates write those into the <img> tag unquoted (a width of '1 onload=...' adds
    an attribute that runs script in formgrader), 'filenames' into its src, and the sanitizer
    never looks at metadata; every other key only changes how an output is shown.
    """

    def preprocess_cell(self, cell, resources, index):
        """Replace the metadata of the cell's outputs by what is safe of it."""
        for output in cell.get("outputs", []):
            if "metadata" in output:
                output["metadata"] = safe_output_metadata(output["metadata"])
        return cell, resources


def safe_output_metadata(metadata) -> dict:
    """{width, height, <mimetype>: {width, height}} of metadata, numbers only (bools are not sizes)."""
    def sizes(d) -> dict:
        return {k: v for k, v in d.items() if k in IMAGE_SIZES and isinstance(v, (int, float)) and not isinstance(v, bool)}

    if not isinstance(metadata, dict):
        return {}
    kept = sizes(metadata)
    kept.update({mime: s for mime, d in metadata.items() if "/" in mime and isinstance(d, dict) and (s := sizes(d))})
    return kept


class EscapingRenderer(IPythonRenderer):
    """nbconvert's markdown renderer for what a student wrote: raw HTML escaped and javascript: links dropped (the
    arguments EscapedMarkdown gives), and three of nbconvert's ways round that closed."""

    def block_code(self, code: str, info: str | None = None) -> str:
        """A fenced block: highlighted where its language is Python, else the code as written. nbconvert highlights
        with whichever of pygments' 600 lexers the fence names (an audit: hundreds take time superlinear in the
        block's length, C#'s 12 s for 26 KiB), and puts a ```mermaid block into the page unescaped, as HTML."""
        language = (info or "").split(maxsplit=1)
        if language and language[0].lower() in PYTHON_FENCES:
            return python_html(code)
        return HTMLRenderer.block_code(self, code, info)

    def image(self, text: str, url: str, title: str | None = None) -> str:
        """An image; an SVG one kept (mistune drops an SVG data URL, which as an <img> runs no script), and an
        attachment the cell does not hold named in the text (nbconvert fails the whole page)."""
        try:
            src = self._embed_image_or_attachment(url)
        except InvalidNotebook:
            return self.codespan(f"[missing attachment: {url}]")
        if not src.startswith("data:image/svg+xml;"):
            return HTMLRenderer.image(self, text, src, title)
        return "<img" + self.render_attrs({"src": src, "alt": striptags(text), "title": title or None}) + " />"


PYTHON_FENCES = frozenset({"python", "python3", "py", "py3", "ipython", "ipython3"})  # fences highlighted on a page
FORMAT_CELL_CHARS = 10_000  # the course's longest cell has 3,300 characters
FORMAT_PAGE_WORK = 4 * 10**8  # squared characters a page formats; a whole course notebook's cells sum to under 7.3e7
FORMAT_KEY = "autograder_formatted"  # the squared characters formatted so far, in a render's resources


def unformatted_because(context, text: str, what: str = "cell") -> str | None:
    """Why a page shows text (a cell's, or what: an output's) as written rather than formatted, or None when it
    formats it, counting len(text)² against the page (context: the template's, whose resources are the render's).

    The markdown parser, the code highlighter and the HTML cleaner take time that grows with the square of a cell's
    length or faster on crafted text (an audit: 5 KiB of indented blank lines took 1.4 s to highlight, 28 KiB of
    nested emphasis 8 s), so a page formats cells of up to FORMAT_CELL_CHARS and FORMAT_PAGE_WORK in all: a page of
    crafted cells then takes seconds, not minutes (bench/feedback_pages.py: every shape of the audit, 20 cells of it,
    at most 4.2 times the page of a whole course notebook)."""
    if len(text) > FORMAT_CELL_CHARS:
        return f"this {what} has {len(text):,} characters; a page formats {what}s of up to {FORMAT_CELL_CHARS:,}"
    resources = context.get("resources")
    page = resources if isinstance(resources, dict) else {}  # outside a render: this text alone
    formatted = page.get(FORMAT_KEY, 0) + len(text) ** 2
    if formatted > FORMAT_PAGE_WORK:
        return "the cells above it took all the formatting one page gets"
    page[FORMAT_KEY] = formatted
    return None


class CellLexer(PythonLexer):
    """pygments' Python lexer with IPython's magic (%, %%), shell (!) and help (?) syntax, each rule reading its text
    once. The IPython lexer, nbconvert's for every code cell, reads a run of names again from each of its characters
    for its help rule (an audit: 16,000 characters of 'a.' took 6 s)."""

    tokens = {**PythonLexer.tokens, "root": [
        (r"^([^\S\n]*)(%%?)(\w+)(.*)$", bygroups(Whitespace, Operator, Keyword, Text)),
        (r"^([^\S\n]*)(!!?)(.*)$", bygroups(Whitespace, Operator, Text)),
        (r"\?\??(?=[^\S\n]*$)", Operator),
        *PythonLexer.tokens["root"]]}


def python_html(code: str, cssclass: str = "highlight") -> str:
    """code highlighted as a notebook's Python (CellLexer), each whitespace-only line emptied, as pygments' HTML in a
    div of the css classes given."""
    return highlight(blank_whitespace_lines(code), CellLexer(), HtmlFormatter(cssclass=cssclass))


def blank_whitespace_lines(code: str) -> str:
    """code with each line of only whitespace made empty, as it looks the same on a page: pygments' Python lexers
    read a run of such lines again from each line of it (an audit: 5 KiB of '    \\n' took 1.4 s to highlight)."""
    lines = code.replace("\r\n", "\n").replace("\r", "\n").split("\n")  # the lexer's own newline rule
    return "\n".join("" if line.isspace() else line for line in lines)


class AsWritten(markupsafe.Markup):
    """HTML that as_written made: a later filter of the same text (a markdown output's clean_html) leaves it as it is,
    where it would show it as written once more. Only this module makes one: no text of a hand-in passes for it."""


def as_written(text: str, why: str, code: bool = False) -> AsWritten:
    """HTML showing text as written, escaped, under a line saying why it is not formatted: code as the highlighter
    shows it, uncoloured; prose with its lines wrapped, as a reader of a written answer expects."""
    box = '<div class="highlight hl-ipython3"><pre>' if code else '<div><pre style="white-space: pre-wrap">'
    return AsWritten(f'<p class="autograder-unformatted"><em>(shown as written: {html.escape(why)})</em></p>'
                     f'{box}{html.escape(text)}</pre></div>')


class ContextFilter(LoggingConfigurable):
    """A filter the exporter registers by name (HTMLExporter.filters in the course config) that Jinja calls with the
    template context first: the cell and the render's resources."""

    jinja_pass_arg = pass_context(lambda: None).jinja_pass_arg


class EscapedMarkdown(ContextFilter):
    """HTMLExporter's markdown2html filter with the markdown's raw HTML shown as text and javascript: links dropped.

    Formgrader and the feedback pages render what a student wrote: an answer cell, or any
    markdown cell of the hand-in (the course text is not locked). Raw HTML there (<script>,
    <img onerror=...>) would run in the grader's Jupyter session. nbconvert's sanitize_html does
    not reach markdown cells in nbgrader's templates, and its cleaner would also escape the
    paragraphs and headings markdown makes, so the markdown is rendered escaping its raw HTML.
    Math is untouched: the renderer keeps it apart from the HTML it escapes. The grader's own
    notes (note_cell) keep their HTML.
    """

    def __call__(self, context, source: str) -> str:
        """The HTML of markdown `source` (a cell's or a text/markdown output's), as the exporter would render it."""
        exporter = self.parent
        cell = context.get("cell", {})
        token = context.get("resources", {}).get(NOTE_KEY)
        ours = bool(token) and cell.get("metadata", {}).get(NOTE_KEY) == token
        if not ours and (why := unformatted_because(context, source)):
            return as_written(source, why)
        renderer = EscapingRenderer(
            escape=not ours, allow_harmful_protocols=False,
            attachments=cell.get("attachments", {}),
            embed_images=getattr(exporter, "embed_images", False),
            path=context.get("resources", {}).get("metadata", {}).get("path", ""),
            anchor_link_text=getattr(exporter, "anchor_link_text", "¶"),
            exclude_anchor_links=getattr(exporter, "exclude_anchor_links", False),
            **getattr(exporter, "lexer_options", {}))
        return MarkdownWithMath(renderer=renderer).render(source)


class PythonHighlight(ContextFilter):
    """HTMLExporter's highlight_code filter, always as Python (python_html), on cells within the bounds of
    unformatted_because: nbconvert picks the lexer from a cell's magics_language or the notebook's language_info,
    both the hand-in's to set, and hundreds of pygments' 600 lexers take time superlinear in a cell's length."""

    def __call__(self, context, source: str, language: str | None = None, metadata=None) -> str:
        """The highlighted HTML of code `source` (language and metadata, the template's, are not used)."""
        if why := unformatted_because(context, source):
            return as_written(source, why, code=True)
        return python_html(source or " ", cssclass=" highlight hl-ipython3")  # nbconvert's classes, as its CSS has them


class BoundedCleanHtml(ContextFilter):
    """nbconvert's clean_html filter (bleach: a raw cell's HTML, or an output's HTML or SVG in formgrader) within the
    bounds of unformatted_because: on crafted HTML it takes time superlinear in the text's length (an audit: 32 KB of
    '<li>' took 10.6 s), and formgrader shows outputs of up to 16 MiB."""

    def __call__(self, context, element) -> str:
        """element cleaned of scripts and unknown markup, or shown as written beyond the bounds."""
        if isinstance(element, AsWritten):  # a markdown output markdown2html already showed as written
            return element
        # an SVG comes as bytes; anything else as clean_html reads it (a kernel's output data may be a JSON object)
        text = element.decode("utf-8", "replace") if isinstance(element, bytes) else str(element)
        cell = context.get("cell") or {}
        what = "cell" if isinstance(cell, dict) and cell.get("cell_type") == "raw" else "output"
        if why := unformatted_because(context, text, what):
            return as_written(text, why)
        return clean_html(text)


ANSI_SEQUENCE = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b")  # a colour code or other CSI sequence, or a lone escape


class BoundedAnsi2Html(ContextFilter):
    """nbconvert's ansi2html filter (an output's colour codes as HTML) within the bounds of unformatted_because: on
    crafted escape sequences it takes time superlinear in the text's length (an audit: 448 KB of '\\x1b[38;5;' took
    4.9 s), and formgrader shows outputs of up to 16 MiB. Beyond the bounds the text is shown without its colours.
    Text without an escape character is escaped as ansi2html would, in linear time, and not counted: a long honest
    output (a printed array) would use up the page's formatting before the student's answers below it."""

    def __call__(self, context, text: str) -> str:
        """HTML of an output's text: coloured, or escaped without its escape sequences beyond the bounds."""
        text = text if isinstance(text, str) else str(text)  # a kernel's output data may be a JSON object
        if "\x1b" not in text:
            return str(markupsafe.escape(text))
        if unformatted_because(context, text, "output"):
            return html.escape(ANSI_SEQUENCE.sub("", text))
        return ansi2html(text)


def strip_files_prefix(text: str) -> str:
    """nbconvert's strip_files_prefix filter on rendered markdown (src="files/a" -> src="a"), without its second
    pattern, which rewrote '[a](files/b)' left as text (code spans) and takes time superlinear in a line's length
    (an audit: 227 s for 20 KiB of '[a](files/')."""
    return files_url_pattern.sub(r"\1=\2", text)


class HideHiddenTests(NbGraderPreprocessor):
    """Rewrite autograded test cells: visible checks only, and a one-line outcome as the only output."""

    def preprocess_cell(self, cell, resources, index):
        """Replace a test cell's source and outputs; leave every other cell as the student left it."""
        if is_test_cell(cell):
            message = outcome_message(cell)
            cell.source = visible_source(cell.source)
            cell.outputs = [new_output("stream", name="stdout", text=message + "\n")]
        return cell, resources


ON_THE_PAGE = "feedback pages show no cell output; run the notebook to see it"  # HideCellOutputs says why


class HideCellOutputs(NbGraderPreprocessor):
    """Show nothing on a feedback page that a student's kernel chose: no code cell's own outputs, only that a cell
    failed and how (test cells keep their outcome); prompt numbers counted here, not the kernel's.

    A submission's notebooks run one after another in one sandbox (one /tmp, one user), so a cell of a later
    notebook could print what an earlier notebook's hidden test cells were, which that notebook's kernel saw
    (review: a pre_run_cell hook wrote them to /tmp, the next notebook printed them encoded; a kernel also sets its
    own execution count, 3,854 digits of it). The student's own notebook has the outputs; formgrader still shows
    them to graders. (A kernel's language_info never reaches the notebook: GradingExecute.)
    """

    def preprocess(self, nb, resources):
        """Every code cell: outputs replaced by what hidden_outputs keeps, prompts renumbered."""
        count = 0
        for cell in nb.cells:
            if cell.get("cell_type") != "code":
                continue
            if cell.get("execution_count") is not None:
                count += 1
                cell.execution_count = count
            if not is_test_cell(cell) and cell.get("outputs"):
                cell.outputs = hidden_outputs(cell.outputs, cell.source, why=ON_THE_PAGE)
        return nb, resources


class LabelGradedCells(NbGraderPreprocessor):
    """Give each graded cell the exercise heading above it (metadata nbgrader.toc_label) for the page's contents: the
    release's heading where the release has the cell, so points changed since the student's copy read as they count
    now (a TA's walkthrough: '练习 2.1（3 分）… (Score: 4.0 / 4.0)'), else the hand-in's."""

    release_labels = Dict(help="{notebook: {grade id: exercise heading above it}} of the release (release_labels())"
                          ).tag(config=True)

    def preprocess(self, nb, resources):
        """Walk the cells once: a heading in a cell the student does not answer labels the graded cells after it."""
        heading = None
        released = self.release_labels.get((resources or {}).get("nbgrader", {}).get("notebook"), {})
        for cell in nb.cells:
            meta = nbgrader_meta(cell)
            if meta.get("grade") or meta.get("solution") or meta.get("task"):
                meta.pop("toc_label", None)  # only this preprocessor labels: not whatever the hand-in's metadata says
                if label := released.get(meta.get("grade_id")) or heading:
                    meta["toc_label"] = label
            heading = heading_after(cell, heading)
        return nb, resources


def graded_cell_labels(nb) -> dict[str, str]:
    """{grade id: the exercise heading above it} of a notebook's graded, answer and task cells (LabelGradedCells' labels)."""
    labels, heading = {}, None
    for cell in nb.cells:
        meta = nbgrader_meta(cell)
        if (meta.get("grade") or meta.get("solution") or meta.get("task")) and heading and meta.get("grade_id"):
            labels[meta["grade_id"]] = heading
        heading = heading_after(cell, heading)
    return labels


def release_labels(course: Course) -> dict[str, dict[str, str]]:
    """{notebook: {grade id: exercise heading}} of the course's released notebooks."""
    return {path.stem: graded_cell_labels(nbformat.read(path, as_version=4))
            for path in sorted(course.release_dir.glob("*.ipynb"))}


def template_config(config) -> None:
    """Point config's HTMLExporter at the course's feedback template (it extends nbgrader's)."""
    import nbgrader

    formgrader = Path(nbgrader.__file__).resolve().parent / "server_extensions" / "formgrader"
    config.HTMLExporter.template_name = TEMPLATE
    config.HTMLExporter.template_file = TEMPLATE_FILE
    config.HTMLExporter.extra_template_basedirs = [str(TEMPLATES), str(formgrader / "templates")]


class GetGradesNotingPending(GetGrades):
    """nbgrader's GetGrades, plus a note wherever a grade still waits for a human grader, and on test cells the
    student changed or deleted (grading ran the released ones)."""

    tampered = Dict(help="{notebook: [grade ids of test cells changed, of those deleted]} of this student"
                    ).tag(config=True)
    rejected_files = Dict(help="{notebook: ['file (why it was not accepted)', ...]} of this student's rejected files"
                          ).tag(config=True)
    deleted_answers = Dict(help="{notebook: {grade id of an answer cell the student deleted: its test ids}} of this "
                                "student").tag(config=True)
    graded_from = Dict(help="{notebook: the student's file it was graded from} where that file is named otherwise"
                       ).tag(config=True)

    def preprocess(self, nb, resources):
        """Scores and comments from the gradebook; notes first: late, graded from which file, then what this hand-in
        did (test cells put back, files not accepted, answer cells deleted, kernel stops, cells stopped at their time
        limit, out of time), then the provisional score and why a test failed, which say the same to every student."""
        resources["nbgrader"]["pending"] = {}
        nb, resources = super().preprocess(nb, resources)
        # GetGrades gives the score less the penalty, which a hand score below the penalty takes below 0: the page
        # gives what export gives (after_penalty), and the penalty as the points it took
        given = resources["nbgrader"]["late_penalty"] or 0
        before = resources["nbgrader"]["score"] + given
        taken = penalty_taken(before, given)
        resources["nbgrader"]["score"], resources["nbgrader"]["late_penalty"] = max(0.0, before - taken), taken
        from nbgrader.api import Gradebook

        notes = []
        with Gradebook(self.db_url) as gb:
            submission = gb.find_submission(self.assignment_id, self.student_id)
            if late := submission.total_seconds_late:
                notes.append(late_note(submission.timestamp, submission.duedate, late, taken,
                                       extended=submission.extension is not None, capped=taken < given))
        if self.notebook_id in self.graded_from:
            notes.append(graded_from_note(self.graded_from[self.notebook_id], self.notebook_id))
        if self.notebook_id in self.tampered:
            notes.append(tampered_note(*self.tampered[self.notebook_id]))
        if self.notebook_id in self.rejected_files:
            notes.append(rejected_files_note(self.rejected_files[self.notebook_id], self.notebook_id))
        if lost := failing_without_answer(self.deleted_answers.get(self.notebook_id, {}), set(failed_tests(nb))):
            notes.append(deleted_answers_note(lost))
        if stopped := kernel_stops(nb):
            notes.append(kernel_stop_note(stopped))
        if slow := [cell_label(cell) for cell in nb.cells if cut_at_time_limit(cell)]:
            notes.append(time_limit_note(slow))
        if unrun := not_run_for_time(nb):
            ran_out_in = stopped_for_time(nb)
            notes.append(budget_note(unrun, None if ran_out_in is None else cell_label(ran_out_in)))
        if pending := resources["nbgrader"]["pending"]:
            notes.append(provisional_note(pending, exercise_names(nb)))
        if failed_tests(nb):
            notes.append(FAILED_CHECKS_NOTE)
        nb.cells[0:0] = [note_cell(resources, note) for note in notes]
        return nb, resources

    def _get_comment(self, cell, resources):
        """The grader's comment, or nbgrader's automatic one; its 'No response.' (answer cell handed in as
        released) is said plainly, as it reads like the grader's silence."""
        comment = self.gradebook.find_comment(cell.metadata.nbgrader["grade_id"], self.notebook_id, self.assignment_id,
                                              self.student_id)
        # formgrader saves an emptied comment box as "": no comment of the grader's either
        unanswered = not comment.manual_comment and comment.auto_comment == NBGRADER_NO_RESPONSE
        cell.metadata.nbgrader["comment"] = UNANSWERED if unanswered else comment.comment

    def _get_score(self, cell, resources):
        """Score and points of a graded cell; a grade waiting for a human grader is noted in its comment."""
        meta = cell.metadata.nbgrader
        grade = self.gradebook.find_grade(meta["grade_id"], self.notebook_id, self.assignment_id, self.student_id)
        meta["score"], meta["points"] = grade.score, grade.max_score
        if grade.needs_manual_grade:
            scored = grade.manual_score is not None  # nbgrader flags a hand-scored cell again after a regrade
            resources["nbgrader"]["pending"][meta["grade_id"]] = (grade.max_score, scored)
            note = (f"To be reviewed: your notebook was graded again after your instructor scored this answer; "
                    f"the {grade.manual_score:g} of {grade.max_score:g} points shown can change." if scored else
                    f"Not graded yet: your instructor grades this answer by hand; until then it counts as 0 of "
                    f"{grade.max_score:g} points.")
            # only answer cells have comments (nbgrader's _get_comment ran on this one just before)
            if scored and meta.get("solution") and meta.get("comment") and self.gradebook.find_comment(
                    meta["grade_id"], self.notebook_id, self.assignment_id, self.student_id).manual_comment:
                # written for the hand-in or points scored then: the answer shown may be another (a TA's walkthrough)
                meta["comment"] = f"{REVIEWED_COMMENT}{meta['comment']}"
            meta["comment"] = f"{meta['comment']}\n\n{note}" if meta.get("comment") else note


def after_due_date(seconds: float, due, extended: bool) -> str:
    """'1 h 3 min after your extended due date (… UTC, … Beijing time)': how late, for a student (due naive UTC,
    including the student's extension when extended)."""
    return f"{late_by(seconds)} after {'your extended' if extended else 'the'} due date ({both_clocks(due)})"


def late_note(handed_in, due, seconds: float, penalty: float, extended: bool = False, capped: bool = False) -> str:
    """The note opening a page handed in after the due date (times naive UTC, as nbgrader keeps them; due
    includes the student's extension, when extended; penalty: the points it took, capped: less than the course's
    penalty, which takes at most what the notebook scored) -> markdown."""
    most = ", at most what this notebook scored" if capped else ""
    cost = (f"It costs {points_text(penalty)} (the late penalty{most})." if penalty else
            "The late penalty takes nothing: this notebook scored 0." if capped else
            "No late penalty is taken off the score above; your instructor decides what lateness costs.")
    return (f"**Handed in late.** Your hand-in is dated {both_clocks(handed_in)}, "
            f"{after_due_date(seconds, due, extended)}. {cost}")


def both_clocks(moment) -> str:
    """'2026-03-01 16:03 UTC, 2026-03-02 00:03 Beijing time' for a naive UTC time (the student README's clocks)."""
    utc = moment.replace(tzinfo=dt.timezone.utc)
    return f"{utc:%Y-%m-%d %H:%M} UTC, {utc.astimezone(BEIJING):%Y-%m-%d %H:%M} Beijing time"


def markdown_literal(text: str) -> str:
    """text (a student's file name or code) as markdown that renders it verbatim: no markup, no HTML, no formula
    (the span keeps MathJax off a '$...$' in it); '' for ''."""
    if not text:
        return ""
    one_line = re.sub(r"[\x00-\x1f\x7f]+", " ", text)  # a newline would start a heading, list or code block
    escaped = re.sub(r"([\\`*_{}\[\]()#+\-.!<>|~&$:])", r"\\\1", one_line)
    return f'<span class="tex2jax_ignore">{escaped}</span>'


def graded_from_note(file: str, notebook: str) -> str:
    """The note opening a page graded from a file named otherwise (file: its path in the download) -> markdown."""
    return (f"**Graded from your file {markdown_literal(file)}.** It is named otherwise, but it holds the exercises of "
            f"{notebook}, so this page grades it as {notebook}.ipynb. Next time save it under that name.")


def graded_from_files(student: str, notebooks: list[str], collect_log: dict) -> dict[str, str]:
    """{notebook: file} of the student's filed notebooks whose file (in the download) is named otherwise."""
    filed = collect_log["students"].get(student, {}).get("notebooks", {})
    return {nb: file for file, nb in moved_files(filed, notebooks).items()}


def tampered_note(edited: list[str], deleted: list[str]) -> str:
    """The note opening a page whose hand-in changed or deleted test cells: grading ran the released ones."""
    parts = []
    if edited:
        parts.append(f"You changed the test cell{'s' if len(edited) > 1 else ''} {', '.join(edited)}: grading ran "
                     f"{'them' if len(edited) > 1 else 'it'} as released, so your edits do not count.")
    if deleted:
        parts.append(f"You deleted the test cell{'s' if len(deleted) > 1 else ''} {', '.join(deleted)}: "
                     f"{'they were' if len(deleted) > 1 else 'it was'} put back and run for grading.")
    return f"**Test cells put back.** {' '.join(parts)} The test cells below are the released ones."


def rejected_for(student: str, notebooks: list[str], collect_log: dict) -> dict[str, list[str]]:
    """{notebook: ['file (reason)', ...]} of the student's notebooks that collect rejected (damaged, too large, ...), by
    the notebook their names give; not an older copy or a duplicate that lost to the one filed, nor a non-notebook."""
    found: dict[str, list[str]] = {}
    for r in collect_log["rejected"]:
        if r.get("student") != student or Path(r["file"]).suffix.lower() != ".ipynb" \
                or r["reason"].startswith((DUPLICATE, OLDER)):  # a copy that lost to the newer one graded here
            continue
        if hit := match_notebook(Path(r["file"]).stem, notebooks):
            found.setdefault(hit[0], []).append(f"{r['file']} ({r['reason']})")
    return found


def rejected_files_note(files: list[str], notebook: str) -> str:
    """The note opening a graded page when files of that notebook were not accepted: another copy was graded."""
    one = len(files) == 1
    return (f"**{'A file' if one else 'Files'} of yours {'was' if one else 'were'} not graded.** "
            f"{'This file was' if one else 'These files were'} not accepted when your hand-in was collected: "
            f"{'; '.join(markdown_literal(f) for f in files)}. This page grades the copy of "
            f"{markdown_literal(notebook)}.ipynb that was filed for you instead (an earlier hand-in, or another file of "
            f"the same hand-in). If {'that file' if one else 'one of them'} is the one you meant to hand in, put it right "
            "and ask your instructor to collect it again.")


def deleted_answers_note(deleted: list[str]) -> str:
    """The note opening a page whose hand-in lacks answer cells of the release whose tests then failed."""
    one = len(deleted) == 1
    return (f"**Answer cell{'' if one else 's'} deleted.** Your notebook has no answer cell{'' if one else 's'} "
            f"{', '.join(markdown_literal(g) for g in deleted)}, and the tests of {'that exercise' if one else 'those exercises'} "
            "failed. Grading does not put a deleted answer cell back: the tests ran with whatever your other cells "
            "define, if anything. Write each answer in the cell given for it (a fresh copy of the notebook has it) "
            "and run the tests after it.")


FAILED_CHECKS_NOTE = (
    "**Why a test failed.** Each failed test below says why: the checks of it that failed, by name, or the error that "
    "stopped it. It shows no values, as they could include the hidden tests' inputs. Run the notebook in JupyterLab: "
    "its test cells (the visible checks) print what your code gave and what was expected. The hidden tests check the "
    "same properties on other inputs.")


def failed_tests(nb) -> list[str]:
    """Grade ids of the autograded test cells that scored less than their points (metadata from GetGrades)."""
    return [meta.get("grade_id", "") for cell in nb.cells
            if (meta := nbgrader_meta(cell)).get("grade") and not meta.get("solution")
            and meta.get("points") is not None and (meta.get("score") or 0) < meta["points"]]


def kernel_stops(nb) -> list[str]:
    """The cells of a graded notebook that stopped the kernel: each by its grade id, else by its first line."""
    return [cell_label(cell) for cell in nb.cells if stopped_kernel(cell)]


def quoted_start(cell) -> str | None:
    """What a note quotes of a cell without a grade id (its first line, cut at 60); None for a cell with one."""
    return None if nbgrader_meta(cell).get("grade_id") else first_line(cell.source)[:60]


def cell_label(cell) -> str:
    """A cell as the notes name it (markdown): its grade id, else 'the cell that begins “…”' (quoted_start; the quotes
    mark where the student's code ends and the note goes on)."""
    quoted = quoted_start(cell)
    return markdown_literal(nbgrader_meta(cell)["grade_id"]) if quoted is None else \
        f"the cell that begins “{markdown_literal(quoted)}”"


def budget_note(cells: list[str], stopped: str | None = None) -> str:
    """The note opening a page whose notebook used up its time budget: the test cells not run (grade ids) and the
    cell it ran out in (cell_label), if one -> markdown."""
    one = len(cells) == 1
    fix = (f"It ran out while {stopped} ran, which was stopped: make that cell faster" if stopped else
           "Find the slow cell and make it faster")
    return ("**Out of time.** Grading gives the whole notebook a time budget, and your notebook used it up before it "
            f"reached {'this test' if one else 'these tests'}: {', '.join(markdown_literal(c) for c in cells)}. "
            f"{'It was' if one else 'They were'} not run and count as failed. {fix} (a loop that runs far too often, a "
            "large array, a long wait), and run the whole notebook again before you hand in.")


def time_limit_note(cells: list[str]) -> str:
    """The note opening a page where cells other than tests ran past a cell's time limit and were stopped (cells:
    cell_label) -> markdown."""
    one = len(cells) == 1
    return (f"**A cell ran out of time.** Grading stopped {', '.join(cells)}, which ran longer than a cell may run "
            f"when graded, and went on with the next cell: whatever {'it' if one else 'they'} had not defined by then "
            f"does not exist in later cells, and the time {'it' if one else 'they'} took counts toward the whole "
            f"notebook's time budget. Make {'it' if one else 'them'} faster (a loop that runs far too often, a large "
            "array, a long wait) before you hand in again.")


def kernel_stop_note(cells: list[str]) -> str:
    """The note opening a page where cells stopped the kernel: grading went on without them -> markdown."""
    one = len(cells) == 1
    return (f"**The kernel stopped.** The Python kernel stopped, or stopped answering, while {', '.join(cells)} ran "
            "(`exit()`, `quit()`, `os._exit()`, running out of memory or time, or starting too many processes stop "
            "it). Grading started a new kernel, re-ran "
            f"the cells before {'it' if one else 'each'} and went on without {'it' if one else 'them'}, so nothing "
            f"{'it defines' if one else 'they define'} exists in later cells. Remove such calls, or make the cell "
            "lighter, before you hand in again.")


def exercise_names(nb) -> dict[str, str]:
    """{grade id: '练习 6.4'} of the graded cells under an exercise heading: how the notebook names the exercise."""
    names, heading = {}, None
    for cell in nb.cells:
        meta = nbgrader_meta(cell)
        if meta.get("grade_id") and heading and (number := EXERCISE_NUMBER.search(heading)):
            names[meta["grade_id"]] = re.sub(r"\s+", " ", number.group(0))
        heading = heading_after(cell, heading)
    return names


def provisional_note(pending: dict[str, tuple[float, bool]], names: dict[str, str] | None = None) -> str:
    """The note opening a page whose grades are not all in: {grade id: (points, scored before)}, each answer named
    by its exercise where names (exercise_names) gives one -> markdown."""
    def listed(ids):
        return ", ".join(f"{names[g]}: {g}" if g in (names or {}) else g for g in sorted(ids))

    unscored = {g: points for g, (points, scored) in pending.items() if not scored}
    review = sorted(g for g, (_, scored) in pending.items() if scored)
    parts = []
    if unscored:
        one, points = len(unscored) == 1, sum(unscored.values())
        parts.append(f"{len(unscored)} {'answer' if one else 'answers'} worth {points_text(points)} "
                     f"({listed(unscored)}) {'has' if one else 'have'} not been graded yet and "
                     f"{'counts' if one else 'count'} as 0 in the score above.")
    if review:
        one = len(review) == 1
        parts.append(f"{len(review)} hand-scored {'answer' if one else 'answers'} ({listed(review)}) "
                     f"{'is' if one else 'are'} to be reviewed, because the notebook was graded again.")
    outlook = "the score can still change" if review else "the final score can only be higher"
    which = "it" if len(pending) == 1 else "them"
    return f"**Provisional score.** {' '.join(parts)} Your instructor grades {which} by hand; {outlook}."


def scores_out_of_range(course: Course, students: list[str]) -> dict[str, list[str]]:
    """{student: hand_scores_out_of_range()} of the students (of those given) with a hand score outside 0..points."""
    from nbgrader.api import MissingEntry

    found = {}
    with course.gradebook() as gb:
        for student in students:
            try:
                submission = gb.find_submission(ASSIGNMENT, student)
            except MissingEntry:
                continue
            if cells := hand_scores_out_of_range(submission):
                found[student] = cells
    return found


def pending_pages(course: Course, pages: list[Path]) -> list[Path]:
    """The feedback pages whose notebook still has grades waiting for a human grader."""
    with course.gradebook() as gb:
        return [page for page in pages
                if gb.find_submission_notebook(page.stem, course.release_dir.name, page.parent.parent.name).needs_manual_grade]


def hidden_lines(course: Course) -> set[str]:
    """Hidden-test lines of the source notebooks that appear nowhere in the release (the leak signatures)."""
    visible = "\n".join(p.read_text(encoding="utf-8") for p in course.release_dir.glob("*.ipynb"))
    found = set()
    for path in course.source_dir.glob("*.ipynb"):
        for cell in nbformat.read(path, as_version=4).cells:
            lines = cell.source.split("\n")
            for number in hidden_line_numbers(cell.source):
                text = lines[number - 1].strip()
                if len(text) >= MIN_LEAK_LINE and BEGIN_HIDDEN not in text and END_HIDDEN not in text \
                        and json_escaped(text) not in visible:
                    found.add(text)
    return found


def json_escaped(text: str) -> str:
    """How a source line looks inside a .ipynb file (for the 'is it visible anyway' test)."""
    return json.dumps(text)[1:-1]


def page_text(html_text: str) -> str:
    """The text a reader sees in an HTML page (tags removed, entities decoded)."""
    return html.unescape(re.sub(r"<[^>]+>", "", html_text))


def authored_text(notebook: Path) -> str:
    """The sources of a graded notebook's cells the student wrote (every cell but the test cells), and once more what
    the kernel-stop and out-of-time notes quote of them (kernel_stops, stopped_for_time); '' if absent."""
    if not notebook.is_file():
        return ""
    nb = nbformat.read(notebook, as_version=4)
    ran_out_in = stopped_for_time(nb)
    quoted = [cell for cell in nb.cells if stopped_kernel(cell)] + ([] if ran_out_in is None else [ran_out_in])
    return "\n".join([*(cell.source for cell in nb.cells if not is_test_cell(cell)),
                      *(q for cell in quoted if (q := quoted_start(cell)) is not None)])


def find_leaks(path: Path, signatures: set[str], authored: str = "") -> list[str]:
    """Hidden-test lines (or markers) that a feedback file shows more often than the student's own cells hold them."""
    text = page_text(path.read_text(encoding="utf-8"))
    return [s for s in [BEGIN_HIDDEN, END_HIDDEN, *sorted(signatures)] if text.count(s) > authored.count(s)]


@dataclass
class FeedbackResult:
    """Feedback files written, and students without feedback with the reason."""

    written: list[Path] = field(default_factory=list)
    errors: dict[str, str] = field(default_factory=dict)
    explained: list[Path] = field(default_factory=list)  # pages of notebooks that were not graded, saying why
    provisional: list[Path] = field(default_factory=list)  # pages with answers not yet graded by hand
    indexes: list[Path] = field(default_factory=list)  # each student's overview: the total, a link per notebook page
    nothing_collected: list[str] = field(default_factory=list)  # gradebook students (a roster) without a hand-in


def checked_mathjax_url(url: str) -> str:
    """url, if the pages can load MathJax from it: an http(s) address, or a path (relative to the pages or to a web
    server's root), nothing that would end the script tag's attribute, and MathJax's Safe extension in its config
    (a student's formula, \\href{javascript:...}, would otherwise be a live link); else ValueError saying what is
    expected."""
    if not isinstance(url, str):
        raise TypeError(f"the MathJax address must be a str, got {type(url).__name__}")
    scheme = re.match(r"([A-Za-z][A-Za-z0-9+.-]*):", url)
    config = re.search(r"[?&]config=([^&#]*)", url)
    bad = sorted({ch for ch in url if ch in "\"'<>`\\" or ch.isspace() or not ch.isprintable()})
    if bad:
        why = f"it holds {' '.join(repr(ch) for ch in bad)}"
    elif not url:
        why = "it is empty"
    elif url.startswith("//"):
        why = "it starts with //"
    elif scheme and scheme.group(1).lower() not in ("http", "https"):
        why = f"its scheme is {scheme.group(1)!r}"
    elif scheme and not url[scheme.end():].startswith("//"):
        why = f"{scheme.group(0)} is not followed by //"
    elif scheme and not re.match(r"//[^/?#]+", url[scheme.end():]):
        why = f"it names no host after {scheme.group(0)}//"
    elif config is None or "Safe" not in config.group(1).split(","):
        why = ("it does not load MathJax's Safe extension (',Safe' at the end of its config=), which keeps a formula "
               "a student wrote from holding a link or a script")
    else:
        return url
    raise ValueError(f"cannot load MathJax from {url!r}: {why}; expected an http:// or https:// address of MathJax "
                     f"2.7's script with the Safe extension (as nbconvert's default, {DEFAULT_MATHJAX_URL}) or a "
                     "path to it, relative to the feedback pages or to the root of the web server that serves them")


def _feedback_config(course: Course, mathjax_url: str | None = None):
    """The course config with the hidden-test filter and the contents labels in GenerateFeedback, and the course's
    template (loading MathJax from mathjax_url, or nbconvert's default address)."""
    config = course.config.copy()
    config.GenerateFeedback.preprocessors = [GetGradesNotingPending, HideHiddenTests, HideCellOutputs, LabelGradedCells,
                                             CSSHTMLHeaderPreprocessor]
    template_config(config)
    if mathjax_url is not None:
        config.HTMLExporter.mathjax_url = mathjax_url
    if "mathjax_url" in config.HTMLExporter:  # given here or in the course's nbgrader config: the template uses it
        checked_mathjax_url(config.HTMLExporter.mathjax_url)
    return config


def generate_for(course: Course, student: str, mathjax_url: str | None,
                 released_tests: dict[str, set[str]], graded_from: dict[str, str] | None = None,
                 answers_of_release: dict[str, dict[str, tuple[str, ...]]] | None = None,
                 labels: dict[str, dict[str, str]] | None = None) -> list[Path]:
    """Run nbgrader's GenerateFeedback for one student; return the HTML files.
    released_tests, answers_of_release, labels: released_test_ids(course), released_answers(course) and
    release_labels(course), read once for all the students rendered (the last two read here when not given);
    graded_from: graded_from_files() of this student."""
    from nbgrader.converters import GenerateFeedback

    config = _feedback_config(course, mathjax_url)
    handed_in = submitted_cells(course, student)
    config.GetGradesNotingPending.tampered = {nb: [edited, deleted] for nb, (edited, deleted)
                                              in tampered_cells(handed_in, released_tests).items()}
    config.GetGradesNotingPending.graded_from = graded_from or {}
    config.GetGradesNotingPending.rejected_files = rejected_for(student, course.notebook_names(), load_collect_log(course))
    answers = released_answers(course) if answers_of_release is None else answers_of_release
    config.GetGradesNotingPending.deleted_answers = {nb: {a: list(t) for a, t in gone.items()}
                                                     for nb, gone in deleted_answers(handed_in, answers).items()}
    config.LabelGradedCells.release_labels = release_labels(course) if labels is None else labels
    converter = GenerateFeedback(coursedir=course.coursedir(student_id=student), config=config)
    converter.force = True
    converter.start()
    return sorted(course.step_dir("feedback", student).glob("*.html"))


def _start_pages_worker(memory: int) -> None:
    """In a feedback worker: ignore SIGINT, which Ctrl-C sends to the whole process group (`feedback` itself stops
    the run; each worker printed a KeyboardInterrupt traceback), and allow memory more bytes of address space than
    the worker holds now: a crafted markdown cell costs the markdown parser hundreds of MiB per MiB (an audit: 2.5 GiB
    for 4 MiB, some 28 GiB projected for a 50 MiB hand-in), where the time limit would come too late for the
    machine. Past it, that student's pages fail with MemoryError and the others go on."""
    from .worker import address_space, limit_memory

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    limit_memory((address_space() or 0) + memory)


PAGES_MEMORY_BYTES = 4 * 2**30  # one student's pages take some 200 MiB; a crafted notebook must not take the machine


def _generate_safely(course: Course, student: str, mathjax_url: str | None, released_tests: dict[str, set[str]],
                     graded_from: dict[str, str] | None = None,
                     answers_of_release: dict[str, dict[str, tuple[str, ...]]] | None = None,
                     labels: dict[str, dict[str, str]] | None = None) -> tuple[list[Path], str | None]:
    """generate_for in a pool process: (files, None) or ([], the reason it failed), stopped after PAGES_SECONDS."""
    quiet_nbgrader_logs()
    previous = signal.signal(signal.SIGALRM, _pages_took_too_long)
    signal.alarm(PAGES_SECONDS)  # the pool waits for every student: one stuck would hold up the class
    try:
        return generate_for(course, student, mathjax_url, released_tests, graded_from, answers_of_release, labels), None
    except PagesTooSlow:
        return _failed(course, student, f"writing the pages took over {PAGES_SECONDS} s and was stopped (a notebook "
                                        "with very large or unusual content?)")
    except MemoryError:
        return _failed(course, student, "writing the pages ran out of the memory a student's pages may take, and was "
                                        "stopped (a notebook with very large or unusual content?)")
    except OSError as exc:  # a read-only or full disk, a file gone: say which file, without the errno jargon
        where = f" {exc.filename}" if exc.filename else ""
        doing = "cannot write" if exc.errno in (errno.EROFS, errno.ENOSPC, errno.EDQUOT) else "file system error on"
        return _failed(course, student, f"{doing}{where}: {exc.strerror or exc}")
    except Exception as exc:  # noqa: BLE001 - one student's failure must not stop the others
        return _failed(course, student, f"{type(exc).__name__}: {exc}")
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def _failed(course: Course, student: str, reason: str) -> tuple[list[Path], str]:
    """([], reason), with the pages this run wrote for the student before it failed removed: none of them was checked
    for hidden test text (nbgrader removes them on an error of its own, not after the time limit)."""
    try:
        remove_pages(course, student)
    except OSError:
        pass  # the disk that failed the pages: feedback names the student either way
    return [], reason


PAGES_SECONDS = 300  # one student's pages take seconds; a crafted notebook must not hold up everyone's


class PagesTooSlow(BaseException):
    """Raised by the alarm in _generate_safely (a BaseException: code that catches Exception lets it through)."""


def _pages_took_too_long(signum, frame):
    """SIGALRM handler of _generate_safely."""
    raise PagesTooSlow


NOT_GRADED_YET = "collected but not graded yet"  # feedback's reason for a student grade has not graded
HANDED_IN_AGAIN = "handed in again after grading"  # ... for one whose hand-in collect replaced since grading
NOT_HANDED_IN = "Not handed in:"  # how not_graded_reasons begins or words each reason, which not_graded_advice reads
NOT_ACCEPTED = "was not accepted:"
NOT_GRADABLE = "Handed in, but it could not be graded, so it scored 0:"


def not_graded_reasons(student: str, notebooks: list[str], collect_log: dict, job: dict | None) -> dict[str, str]:
    """{notebook: why it scored 0 without being graded} for one student, from collect's report and the job."""
    reasons = {}
    filed = collect_log["students"].get(student, {})
    for nb in filed.get("missing", []):
        reasons[nb] = f"{NOT_HANDED_IN} your hand-in has no notebook named {nb}.ipynb, so it scored 0."
    moved = moved_files(filed.get("notebooks", {}), notebooks)
    for file, nb in sorted(moved.items(), key=lambda item: item[::-1]):  # a file named after a sibling?
        hit = match_notebook(Path(file).stem, notebooks)
        if hit and hit[0] in reasons:
            reasons[hit[0]] = (f"Your file {file} holds the exercises of {nb}, not of {hit[0]}, so it was graded as "
                               f"{nb}. No file you handed in held the exercises of {hit[0]}, so it scored 0.")
    for r in collect_log["rejected"]:
        if r.get("student") != student:
            continue
        hit = match_notebook(Path(r["file"]).stem, notebooks)
        if hit and hit[0] in reasons:
            reasons[hit[0]] = f"Your file {r['file']} {NOT_ACCEPTED} {r['reason']}. The notebook scored 0."
    if unmatched := unmatched_rejections(student, notebooks, collect_log):
        also = f" Files you handed in that were not accepted: {unmatched}."
        reasons = {nb: why + also if why.startswith(NOT_HANDED_IN) else why for nb, why in reasons.items()}
    for nb, r in sorted(json.loads((job or {}).get("notebooks") or "{}").items()):
        if r.get("status") == "error":
            reasons[nb] = f"{NOT_GRADABLE} {error_for_the_page(r.get('error'))}"
    return reasons


def unmatched_rejections(student: str, notebooks: list[str], collect_log: dict) -> str:
    """'notes.txt (why); …': the student's rejected files that no notebook's name gives (notes.txt, 04-mywork.ipynb),
    the first five, or ''."""
    unmatched = [f"{r['file']} ({r['reason']})" for r in collect_log["rejected"]
                 if r.get("student") == student and not match_notebook(Path(r["file"]).stem, notebooks)]
    return "; ".join(unmatched[:5]) + ("; …" if len(unmatched) > 5 else "")


def hand_in_notes(student: str, notebooks: list[str], collect_log: dict) -> list[str]:
    """What a student's overview says of the hand-in itself: notebooks handed in as released (collect's unanswered),
    and files not accepted that no notebook's page names."""
    notes = []
    if unanswered := collect_log["students"].get(student, {}).get("unanswered"):
        notes.append(f"handed in as released, with no answer filled in: {', '.join(unanswered)}; if you meant to hand "
                     "in another file, tell your instructor")
    if unmatched := unmatched_rejections(student, notebooks, collect_log):
        notes.append(f"files you handed in that were not accepted: {unmatched}")
    return notes


def error_for_the_page(error) -> str:
    """What a student's page says of a grading error: the harness's own words (no kernel could start; answer cells
    missing), else a fixed phrase. nbgrader's own errors may quote what the student's kernel sent (a forged
    execution count's text, in a validation error), which could carry another notebook's hidden tests; so may
    jupyter_client's after 'no kernel could start' (a start-up file the student planted forged the kernel's replies'
    signatures, which 'Invalid Signature: ...' quoted in full)."""
    error = str(error or "")
    if started := re.match(rf"(RuntimeError: )?{NO_KERNEL} \(\d+ tries\)", error):
        return started.group(0)
    if error.startswith(LOST_CELLS):
        return error.split(" (nbgrader: ", 1)[0]
    return "grading it stopped with an error (your instructor has the details and can grade it again)"


def not_graded_advice(why: str, nb: str, past_due: bool = False) -> str | None:
    """What a student whose notebook nb was not graded for reason why (not_graded_reasons) can do, or None when the
    reason says it already (answer cells missing) -> plain text. past_due: their due date (with an extension's end)
    has passed, so whether a hand-in is still collected is the instructor's to say."""
    again = ("and ask your instructor whether they still collect it: your due date has passed." if past_due else
             "and ask your instructor to collect it again.")
    if why.startswith(NOT_HANDED_IN):
        return f"Hand in your work on this notebook, saved as {nb}.ipynb, {again}"
    if f" {NOT_ACCEPTED} " in why:
        return (f"Check that your own copy of {nb}.ipynb opens in Jupyter and runs from top to bottom, put right what is "
                f"said above, save it and hand it in again, {again}")
    if why.startswith(NOT_GRADABLE):
        return None if LOST_CELLS in why else "Ask your instructor: they have the details and can grade it again."
    return f"Save your work on this notebook as {nb}.ipynb, one notebook's exercises per file, hand it in {again}"


def release_points(course: Course, nb: str) -> float | None:
    """The points of the released notebook nb (every graded cell's), or None when it cannot be read."""
    try:
        return sum(cell_points(cell) for cell in nbformat.read(course.release_dir / f"{nb}.ipynb", as_version=4).cells)
    except (OSError, ValueError, AttributeError):
        return None


def due_date_passed(course: Course, student: str, now: dt.datetime | None = None) -> bool:
    """Whether the student's due date (the assignment's, or their extension's end if later; naive UTC) is set and
    before now (default: the present)."""
    from .collect import due_dates

    with course.gradebook() as gb:
        due, ends = due_dates(gb)
    if due is None:
        return False
    own = max(due, ends.get(student, due))
    return (now or dt.datetime.now(dt.timezone.utc).replace(tzinfo=None)) > own


def explain_not_graded(course: Course, student: str, reasons: dict[str, str]) -> list[Path]:
    """Write feedback/<student>/part-ii/<notebook>.html for each notebook in reasons; return the pages."""
    folder = course.step_dir("feedback", student)
    if reasons:
        folder.mkdir(parents=True, exist_ok=True)
    past_due = due_date_passed(course, student) if reasons else False
    pages = []
    for nb, why in sorted(reasons.items()):
        page = folder / f"{nb}.html"
        points = release_points(course, nb)
        score = "0 points" if points is None else f"0 of {points:g} points"
        advice = not_graded_advice(why, nb, past_due)
        todo = "" if advice is None else f"\n<p>What to do: {html.escape(advice)}</p>"
        page.write_text(f"""<!DOCTYPE html>
<html><head><meta charset="utf-8"><title>{html.escape(nb)}: not graded</title></head>
<body style="font-family: sans-serif; max-width: 48em; margin: 2em auto">
<h1>{html.escape(ASSIGNMENT)} / {html.escape(nb)}: not graded ({score})</h1>
<p>Student: {html.escape(student)}</p>
<p>{html.escape(why)}</p>{todo}
</body></html>
""", encoding="utf-8")
        pages.append(page)
    return pages


INDEX = "index.html"  # feedback/<student>/index.html: the student's total and every notebook's score, with links


def index_page(course: Course, student: str) -> Path:
    """Where write_index puts the student's overview: beside the folder of their notebook pages."""
    return course.step_dir("feedback", student).parent / INDEX


def write_index(course: Course, student: str, graded: set[str], explained: set[str],
                hand_in: list[str] = ()) -> Path:
    """Write the student's overview page: the total as export's score column gives it (late penalty taken off), each
    notebook's score and a link to its page (graded, explained: the notebooks with a graded page, with one saying why
    they were not graded); whether answers still wait for a grader; hand_in: notes on the hand-in (hand_in_notes).
    Return its path."""
    from nbgrader.api import MissingEntry

    with course.gradebook() as gb:
        assignment = gb.find_assignment(ASSIGNMENT)
        most, points = assignment.max_score, {nb.name: nb.max_score for nb in assignment.notebooks}
        try:
            submission = gb.find_submission(ASSIGNMENT, student)
        except MissingEntry:
            submission = None
        scored = {nb.name: (nb.score, after_penalty(nb), nb.needs_manual_grade)
                  for nb in (submission.notebooks if submission else [])}
        raw = submission.score if submission else 0.0
        total, penalty = after_penalties(submission) if submission else (0.0, 0.0)
        late = (submission.total_seconds_late or 0) if submission else 0
        lateness = (f"handed in late: {after_due_date(late, submission.duedate, submission.extension is not None)}"
                    if late else None)
    rows, pending = [], False
    for nb in course.notebook_names():
        score, after, waiting = scored.get(nb, (0.0, 0.0, False)) if nb in graded else (0.0, 0.0, False)
        pending = pending or waiting
        most_here = points.get(nb, 0)
        before = f" ({score:g} before the late penalty)" if after != score else ""  # its page gives it after too
        extra = f", with {after - most_here:g} extra credit" if after > most_here else ""
        what = (f"{after:g} / {most_here:g}{extra}{before}{' (provisional)' if waiting else ''}" if nb in graded else
                f"0 / {most_here:g}, not graded" if nb in explained else f"0 / {most_here:g}, no page")
        name = html.escape(nb)
        link = f'<a href="{quote(ASSIGNMENT)}/{quote(nb)}.html">{name}</a>' if nb in graded | explained else name
        rows.append(f"<tr><td>{link}</td><td>{html.escape(what)}</td></tr>")
    notes = [lateness] if lateness else []  # as each notebook's page opens with it
    if penalty:
        notes.append(f"a late penalty of {points_text(penalty)} is taken off the {raw:g} points the notebooks scored")
    if pending:
        notes.append("provisional: answers your instructor grades by hand count as 0 until they are graded, and a "
                     "score given before a regrade counts until it is reviewed")
    notes += hand_in
    page = index_page(course, student)
    page.write_text(f"""<!DOCTYPE html>
<html><head><meta charset="utf-8"><title>{html.escape(ASSIGNMENT)}: feedback for {html.escape(student)}</title></head>
<body style="font-family: sans-serif; max-width: 48em; margin: 2em auto">
<h1>{html.escape(ASSIGNMENT)}: {total:g} of {most:g} points</h1>
<p>Student: {html.escape(student)}</p>
{"".join(f"<p>{html.escape(n[0].upper() + n[1:])}.</p>" for n in notes)}
<table style="border-collapse: collapse" cellpadding="4">
<tr><th style="text-align: left">Notebook (its feedback page)</th><th style="text-align: left">Score</th></tr>
{chr(10).join(rows)}
</table>
</body></html>
""", encoding="utf-8")
    return page


def remove_pages(course: Course, student: str) -> int:
    """Delete the student's feedback pages and overview (a student whose hand-in or grading changed since); return
    how many notebook pages."""
    pages = sorted(course.step_dir("feedback", student).glob("*.html"))
    for page in pages:
        page.unlink()
    index_page(course, student).unlink(missing_ok=True)
    return len(pages)


def graded_names(course: Course, graded: list[str]) -> str:
    """'a, b (handed in again since: grade it again)': the students with an autograded folder, those whose grading no
    longer stands for their hand-in marked, or 'none'."""
    from .grade import job_rows, needs_regrade

    stale = needs_regrade(course, {s: row for s, row in job_rows(course.db_url).items() if s in graded})
    return ", ".join(f"{s} (handed in again since: grade it again)" if s in stale else s for s in graded) or "none"


def feedback(course: Course, students: list[str] | None = None, workers: int | None = None,
             mathjax_url: str | None = None) -> FeedbackResult:
    """Write feedback for every graded student (or the ones named), `workers` students at a time, and check
    each file for leaks; a notebook not graded (not handed in, rejected, not gradable) gets a page saying why.
    mathjax_url: where the graded pages load MathJax from (default: nbconvert's, cdnjs)."""
    try:
        _feedback_config(course, mathjax_url)  # a bad MathJax address (given or configured) stops here, once
    except (TypeError, ValueError) as exc:
        raise AutograderError(str(exc)) from None
    notebooks = course.notebook_names()  # nothing released: say that first
    from .grade import release_drift_warning

    if warning := release_drift_warning(course, notebooks):
        print(warning, file=sys.stderr)
    graded = sorted(p.parent.name for p in (course.root / "autograded").glob(f"*/{course.release_dir.name}")
                    if p.is_dir())
    collect_log = load_collect_log(course)
    known = sorted(set(graded) | set(collect_log["students"]))
    # a roster added with nbgrader db: export scores them 0, and the instructor handing out pages should hear of them
    nothing_collected = [] if students else sorted(known_students(course) - set(known))
    if students:
        unknown = sorted(set(students) - set(known))
        if unknown:
            raise AutograderError(f"no graded or collected submission for {', '.join(unknown)}{case_hint(unknown, known)}"
                                  f"{dropped_note(collect_log, unknown)}; graded: {graded_names(course, graded)}")
        known = [s for s in known if s in students]
        graded = [s for s in graded if s in students]
    if not known:  # nothing collected either: grade would only say to collect first
        step = "grade" if course.submitted_students() else "collect PATH"
        raise AutograderError(f"no graded submissions; {run_first(course, step)}")
    quiet_nbgrader_logs()
    from .extensions import synced

    synced(course)  # the pages read lateness from nbgrader's columns
    signatures = hidden_lines(course)
    result = FeedbackResult(nothing_collected=nothing_collected)
    from .grade import GRADES_GONE, grades_gone, job_rows, needs_regrade

    every_job = job_rows(course.db_url)
    jobs = {s: row for s, row in every_job.items() if s in graded}  # hash only these hand-ins
    collected = set(course.submitted_students())  # what grade would grade
    for student in (s for s in known if s not in graded and s in collected):
        row = every_job.get(student) or {}
        result.errors[student] = (f"grading failed ({row.get('error')}): no feedback written; see `grade`'s summary"
                                  if row.get("state") == "error" else
                                  f"{NOT_GRADED_YET}: no feedback written; {run_first(course, 'grade')}")
    for student in sorted(needs_regrade(course, jobs)):
        result.errors[student] = (f"{HANDED_IN_AGAIN} (collect filed newer files): no feedback written; "
                                  f"{run_first(course, 'grade')}")
        graded.remove(student)
    for student in sorted(grades_gone(course, jobs) - set(result.errors)):  # nbgrader would fail on them, unexplained
        result.errors[student] = f"{GRADES_GONE}: no feedback written; {run_first(course, 'grade')}"
        graded.remove(student)
    for student in sorted(s for s, row in jobs.items() if row["state"] == "error" and s in graded):
        # the pages of an earlier grading would stand for a hand-in whose new grading failed (found by review)
        result.errors[student] = (f"grading failed ({jobs[student].get('error')}): no feedback written; "
                                  f"`python -m autograder grade{build_option(course)}` tries again")
        graded.remove(student)
    for student in sorted(s for s, row in jobs.items() if row["state"] in ("pending", "running") and s in graded):
        result.errors[student] = ("grading pending (a release changed the tests since, or a `grade` run stopped "
                                  f"before grading this hand-in): no feedback written; {run_first(course, 'grade')}")
        graded.remove(student)
    for student in (s for s in known if collect_log["students"].get(s, {}).get("unfiled") and s not in result.errors):
        # collect could not write the last download (a full disk: not the student's doing); pages would show the
        # hand-in before it
        record = collect_log["students"][student]
        result.errors[student] = (f"{unfiled_text(record['unfiled'], record.get('error'))}: no feedback written; "
                                  "collect the download again")
        if student in graded:
            graded.remove(student)
    for student, cells in scores_out_of_range(course, [s for s in graded if s not in result.errors]).items():
        # the page would show '7.0 / 2.0' and a total above the maximum, which export refuses to hand on
        result.errors[student] = (f"{HAND_SCORE_OUTSIDE} ({'; '.join(cells)}): no feedback written; correct it in "
                                  "formgrader (points beyond the maximum are extra credit), then run feedback again")
        graded.remove(student)
    for student in sorted(result.errors):  # their earlier pages show a grading that no longer stands
        if removed := remove_pages(course, student):
            pages = "its earlier page" if removed == 1 else f"the {removed} earlier pages"
            result.errors[student] += (f"; removed {pages} in {course.step_dir('feedback', student)}, "
                                       "of the grading that no longer stands")
    # nbgrader fails on a folder without notebooks (every notebook rejected): such students get only the pages below
    graded = [s for s in graded if any(course.step_dir("autograded", s).glob("*.ipynb"))]
    if graded:
        render(course, graded, signatures, workers, result, mathjax_url,
               {s: graded_from_files(s, notebooks, collect_log) for s in graded})
    for student in (s for s in known if s not in result.errors):  # after nbgrader, which rewrites the folder
        reasons = not_graded_reasons(student, notebooks, collect_log, jobs.get(student))
        rendered = {p.stem for p in result.written if p.parent.parent.name == student}
        for page in explain_not_graded(course, student, {nb: why for nb, why in reasons.items() if nb not in rendered}):
            if find_leaks(page, signatures):
                page.unlink()
                result.errors[student] = f"{page.name} withheld: it would show hidden test text"
            else:
                result.explained.append(page)
    for student in result.errors:  # rendering failed, or a page was withheld: an earlier overview no longer stands
        index_page(course, student).unlink(missing_ok=True)
    for student in sorted({p.parent.parent.name for p in result.written + result.explained} - set(result.errors)):
        graded = {p.stem for p in result.written if p.parent.parent.name == student}
        explained = {p.stem for p in result.explained if p.parent.parent.name == student}
        result.indexes.append(write_index(course, student, graded, explained,
                                          hand_in_notes(student, notebooks, collect_log)))
    result.provisional = pending_pages(course, result.written)
    return result


def render(course: Course, graded: list[str], signatures: set[str], workers: int | None, result: FeedbackResult,
           mathjax_url: str | None = None, graded_from: dict[str, dict[str, str]] | None = None) -> None:
    """nbgrader's feedback pages for the graded students, `workers` at a time, into result (leaky pages withheld);
    graded_from: {student: graded_from_files()}."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    ctx = multiprocessing.get_context("forkserver")  # nbgrader's converters chdir: processes, not threads
    released_tests, answers_of_release = released_test_ids(course), released_answers(course)  # once, not per student
    labels = release_labels(course)
    n = len(graded)
    pool = ProcessPoolExecutor(max_workers=min(workers or os.cpu_count() or 1, n), mp_context=ctx,
                               initializer=_start_pages_worker, initargs=(PAGES_MEMORY_BYTES,))
    try:
        # submit, not map: map's iterator cancels queued futures itself on Ctrl-C, and the pool's manager thread then
        # crashes setting their results (Python 3.11)
        futures = [pool.submit(_generate_safely, course, student, mathjax_url, released_tests,
                               (graded_from or {}).get(student, {}), answers_of_release, labels) for student in graded]
        outcomes = [future.result() for future in futures]
    except BaseException:  # Ctrl-C: stop now (a student's pages take seconds); feedback run again rewrites them all
        pool.shutdown(wait=False, cancel_futures=True)
        for process in multiprocessing.active_children():  # the workers, also one still starting
            process.terminate()
        raise
    pool.shutdown()
    for student, (files, error) in zip(graded, outcomes):
        if error:
            result.errors[student] = error
            continue
        for path in files:
            authored = authored_text(course.step_dir("autograded", student) / f"{path.stem}.ipynb")
            leaks = find_leaks(path, signatures, authored)
            if leaks:
                path.unlink()
                result.errors[student] = f"{path.name} withheld: it would show hidden test text ({len(leaks)} lines)"
            else:
                result.written.append(path)


def print_feedback(result: FeedbackResult) -> None:
    """Where the feedback went, and who has none and why."""
    students = sorted({p.parent.parent.name for p in result.written})
    print(f"wrote {len(result.written)} feedback {'file' if len(result.written) == 1 else 'files'} for "
          f"{len(students)} {'student' if len(students) == 1 else 'students'}")
    if result.written:
        print(f"  e.g. {result.written[0]}")
    if result.explained:
        who = len({p.parent.parent.name for p in result.explained})
        print(f"  and {len(result.explained)} {'page' if len(result.explained) == 1 else 'pages'} for notebooks of {who} "
              f"{'student' if who == 1 else 'students'} that were not graded (not handed in, rejected or not gradable), "
              "each saying why")
    if result.provisional:
        one = len(result.provisional) == 1
        print(f"  {len(result.provisional)} of them {'shows' if one else 'show'} a provisional score: free-text answers not graded yet, or "
              "flagged for review by a regrade (each page says which); grade or resolve them in formgrader, "
              "then run feedback again")
    if result.indexes:
        print(f"  and an overview per student, with the total and a link to each page: {INDEX} beside the pages' "
              f"folder, e.g. {result.indexes[0]}")
    if nobody := result.nothing_collected:
        n = len(nobody)
        print(f"  no pages for {n} {'student' if n == 1 else 'students'} of the gradebook with nothing collected "
              f"({listed(nobody)}): export scores {'it' if n == 1 else 'them'} 0, as 'no submission'")
    for student, reason in sorted(result.errors.items()):
        # a hand-in not graded yet, or handed in again, is the term's routine: grade, then feedback; ERROR is for the rest
        routine = reason.startswith((NOT_GRADED_YET, HANDED_IN_AGAIN))
        print(f"  {student}: {'no pages yet:' if routine else 'ERROR'} {reason}")
