"""Reading the course's pin files (requirements.txt, constraints.txt and the student bundle's copies)."""

from __future__ import annotations

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name


def plain_pins(text: str, source: str = "pin file") -> dict[str, str]:
    """{canonical name: version} of the `name==version` lines of a requirements or constraints text (comments and
    `-c FILE` lines skipped); any other kind of line fails the calling test, named by source."""
    found = {}
    for line in text.splitlines():
        spec = line.split("#", 1)[0].strip()
        if not spec or spec.startswith("-c "):
            continue
        req = Requirement(spec)
        (op, version), = [(s.operator, s.version) for s in req.specifier]
        assert op == "==" and not req.extras and req.marker is None, f"{source}: not a plain pin: {line!r}"
        found[canonicalize_name(req.name)] = version
    return found
