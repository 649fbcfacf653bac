"""The environment the README commands build is the locked one: every installed distribution is pinned
(requirements.txt or constraints.txt) at the version installed, so a grading machine set up in mid-term gets
the packages the course was tested with."""

from __future__ import annotations

import sysconfig
from importlib import metadata
from pathlib import Path

from packaging.utils import canonicalize_name

from pins import plain_pins

REPO = Path(__file__).resolve().parents[1]
# what `pip freeze --all` lists and the lock leaves out: not installed by make venv (pip and setuptools are locked)
NOT_FROZEN = {"wheel", "distribute"}


def pins(path: Path) -> dict[str, str]:
    """{canonical name: version} of the `name==version` lines of a requirements or constraints file."""
    return plain_pins(path.read_text(encoding="utf-8"), path.name)


def installed() -> dict[str, str]:
    """{canonical name: version} of every distribution installed in this environment's site-packages (as pip freeze
    lists them: not what a path added at run time shows, such as setuptools' vendored packages)."""
    folders = sorted({sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]})
    return {canonicalize_name(d.metadata["Name"]): d.version for d in metadata.distributions(path=folders)}


def test_every_installed_package_is_pinned_at_its_installed_version():
    direct, locked = pins(REPO / "requirements.txt"), pins(REPO / "constraints.txt")
    have = installed()
    unpinned = sorted(set(have) - set(direct) - set(locked) - NOT_FROZEN)
    assert not unpinned, (f"installed but pinned in neither requirements.txt nor constraints.txt: {unpinned}; "
                          "regenerate constraints.txt as its header says")
    # the local CPU wheel reports 2.13.0+cpu for requirements.txt's torch==2.13.0 (a pin matches any local label)
    drifted = {name: (version, have.get(name)) for name, version in {**locked, **direct}.items()
               if have.get(name, "").split("+")[0] != version}
    assert not drifted, f"pinned version vs installed (None: not installed): {drifted}"


def test_the_lock_agrees_with_the_direct_pins():
    direct, locked = pins(REPO / "requirements.txt"), pins(REPO / "constraints.txt")
    clash = {name: (v, locked[name]) for name, v in direct.items() if name in locked and locked[name] != v}
    assert not clash, f"requirements.txt vs constraints.txt: {clash}"
    assert "torch" not in locked, "torch belongs to requirements.txt only (the +cpu label would not match PyPI's)"
