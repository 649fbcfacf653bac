"""Add cells that reuse a test cell's grade id, one of them claiming 50 points.

nbgrader keeps one cell per grade id and restores it from the gradebook: the score is the
notebook's real autograded total.
"""


def transform(nb):
    """Insert two copies of a test cell's metadata with harmless sources."""
    import copy

    test = next(c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") == "test_kl_with_support")
    fake = copy.deepcopy(test)
    fake.source = "pass"
    fake.metadata["nbgrader"]["points"] = 50
    index = nb.cells.index(test)
    nb.cells.insert(index, fake)
    nb.cells.insert(0, copy.deepcopy(fake))
    return nb
