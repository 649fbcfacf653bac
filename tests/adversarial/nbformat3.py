"""The solved notebook saved as nbformat 3 (worksheets, no cell ids)."""


def transform(nb):
    """Downgrade to v3 and serialise."""
    import nbformat

    return nbformat.writes(nbformat.convert(nb, 3), version=3).encode("utf-8")
