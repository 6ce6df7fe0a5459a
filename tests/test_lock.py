"""requirements.lock.txt follows pyproject.toml: every dependency of the extras `make install`
takes is pinned there, at a version its range allows, with hashes. A range edited without
`make lock` fails here instead of installing the old pin in silence."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

ROOT = Path(__file__).resolve().parent.parent
EXTRAS = ("agent", "server", "dev")  # the Makefile's `make lock` and $(STAMP)


def pins() -> list[tuple[Requirement, str]]:
    """Each pin of the lock (``name==version [; marker]``) with the indented lines under it
    (its hashes, uv's ``# via`` notes)."""
    text = (ROOT / "requirements.lock.txt").read_text()
    blocks = [block for block in re.split(r"\n(?=\S)", text) if not block.startswith("#")]
    return [(Requirement(block.splitlines()[0].rstrip(" \\")), block) for block in blocks]


def wanted() -> list[Requirement]:
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"]
    return [Requirement(line) for extra in EXTRAS for line in extras[extra]]


def test_every_dependency_is_pinned_within_its_range_for_this_python():
    here = {canonicalize_name(pin.name): Version(next(iter(pin.specifier)).version)
            for pin, _ in pins() if pin.marker is None or pin.marker.evaluate()}
    pinned = {str(req): here.get(canonicalize_name(req.name)) for req in wanted()}
    out_of_range = {req: str(version) for req, version in pinned.items()
                    if version is None or version not in Requirement(req).specifier}
    assert out_of_range == {}, "run `make lock`"


def test_every_pin_carries_its_hashes():
    found = pins()
    assert len(found) > 50
    assert all(str(pin.specifier).startswith("==") for pin, _ in found)
    assert [pin.name for pin, block in found if "--hash=sha256:" not in block] == []
