"""Delete the answer cell of exercise 2.1 (stable_softmax) from a solved notebook.

Grading puts deleted test cells back, but not a deleted code answer (the student may have
answered in a cell of their own): its test fails, and the page and the export say why
("Answer cell deleted.") instead of leaving only a NameError.
"""


def transform(nb):
    """Remove the ex_stable_softmax cell."""
    nb.cells = [c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") != "ex_stable_softmax"]
    return nb
