"""Tamper with test cells: delete one, edit one, re-type one as markdown, raise another's points.

nbgrader restores every test cell (source, type, points) from the gradebook, so the solved
notebook scores exactly its full autograded points.
"""


def transform(nb):
    """Apply the four edits to a solved notebook."""
    def cell(grade_id):
        return next(c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") == grade_id)

    nb.cells.remove(cell("test_stable_softmax"))
    cell("test_masked_mean_loss").source = "pass"
    retyped = cell("test_perplexity_from_loss")
    retyped.cell_type = "markdown"
    retyped.pop("outputs", None)
    retyped.pop("execution_count", None)
    cell("test_kl_with_support").metadata["nbgrader"]["points"] = 100
    return nb
