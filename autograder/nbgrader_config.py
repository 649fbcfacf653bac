"""nbgrader configuration for the Part II course.

The instructor sources stay in ``notebooks/`` (nbgrader accepts a source folder
outside its root); everything nbgrader generates - release, submissions,
autograded copies, feedback and the gradebook - goes under the ignored build
folder. ``PART_II_BUILD`` moves that folder (tests use a temporary one) and
``PART_II_DB_URL`` points the gradebook at another database (e.g. PostgreSQL).
``PART_II_SOURCE`` replaces the notebooks folder (tests of the harness on a small course).
"""

import os
from pathlib import Path

from sqlalchemy.engine import URL

REPO = Path(__file__).resolve().parent.parent
BUILD = Path(os.environ.get("PART_II_BUILD", REPO / "build")).resolve()
COURSE = BUILD / "course"

c = get_config()  # noqa: F821 - injected by traitlets when nbgrader loads this file

c.CourseDirectory.root = str(COURSE)
c.CourseDirectory.source_directory = os.environ.get("PART_II_SOURCE", str(REPO / "notebooks"))
# URL.create escapes ? # % in the path: written plainly, a build folder "a?b" put the gradebook in the file "a"
c.CourseDirectory.db_url = os.environ.get("PART_II_DB_URL",
                                          URL.create("sqlite", database=str(COURSE / "gradebook.db")).render_as_string())
c.CourseDirectory.course_id = "llm-probability-part-ii"
c.CourseDirectory.ignore = [".ipynb_checkpoints", "*.pyc", "__pycache__", "feedback", ".*"]

# formgrader and the feedback pages show what students wrote: its HTML and JavaScript are shown as text, not run in
# the grader's browser session (raw HTML in markdown cells; text/html, JavaScript and widget outputs), and a cell
# crafted to take the parsers minutes is shown as written (autograder.feedback.unformatted_because)
c.HTMLExporter.sanitize_html = True
c.HTMLExporter.filters = {"markdown2html": "autograder.feedback.EscapedMarkdown",
                          "highlight_code": "autograder.feedback.PythonHighlight",
                          "clean_html": "autograder.feedback.BoundedCleanHtml",
                          "ansi2html": "autograder.feedback.BoundedAnsi2Html",
                          "strip_files_prefix": "autograder.feedback.strip_files_prefix"}
c.HTMLExporter.preprocessors = ["autograder.feedback.SafeOutputMetadata"]  # image sizes are written in unquoted
# an output's plain text before its HTML, markdown or SVG, which the sanitizer shows as escaped tags (a pandas
# table's <thead>); LaTeX (display(Math(...)), sympy) before it, as MathJax sets it from escaped text. Set on the
# filters that read it (HTMLExporter's is WidgetsDataTypeFilter), not on NbConvertBase: nbgrader's preprocessors
# redefine the option without config, so each warned of it on every notebook graded (half a worker's log)
for _filter in ("DataTypeFilter", "WidgetsDataTypeFilter"):
    c[_filter].display_data_priority = ["image/png", "image/jpeg", "text/latex", "text/plain", "image/svg+xml",
                                        "text/html", "text/markdown", "application/javascript",
                                        "application/vnd.jupyter.widget-view+json", "text/vnd.mermaid"]

c.ClearSolutions.code_stub = {"python": "# YOUR CODE HERE\nraise NotImplementedError()"}
c.ClearSolutions.text_stub = "在此写下你的回答。"
