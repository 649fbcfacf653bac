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
    first, second = fake, copy.deepcopy(fake)
    first["id"], second["id"] = "duplicate-grade-id-1", "duplicate-grade-id-2"  # distinct cell ids, same grade id
    nb.cells.insert(index, first)
    nb.cells.insert(0, second)
    return nb
