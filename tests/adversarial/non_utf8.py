"""The solved notebook re-encoded as UTF-16 (not UTF-8) with a Latin-1 byte thrown in."""


def transform(nb):
    """Bytes that are not valid UTF-8."""
    import nbformat

    return b"\xff" + nbformat.writes(nb).encode("utf-16")
