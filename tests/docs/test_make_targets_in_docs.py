"""The README and docs/ against the Makefile: every ``make X`` they show in code is a target,
and every phony target (what a user runs) is shown in the README."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def makefile_targets() -> tuple[set[str], set[str]]:
    """Every target the Makefile defines, and those it declares .PHONY."""
    targets, phony = set(), set()
    text = (ROOT / "Makefile").read_text().replace("\\\n", " ")
    for line in text.splitlines():
        match = re.match(r"([^\s#:=][^:=]*?)\s*:(?![:=])", line)
        if match is None or line.startswith("\t"):
            continue
        names = match.group(1).split()
        if names == [".PHONY"]:
            phony.update(line.split(":", 1)[1].split())
        else:
            targets.update(names)
    return targets, phony


def make_commands(path: Path) -> set[str]:
    """The targets of the ``make`` commands in the document's code: fenced blocks and
    `inline code` (prose such as "make room" is neither)."""
    text = path.read_text()
    fenced = re.findall(r"^```[^\n]*\n(.*?)^```", text, flags=re.M | re.S)
    inline = re.findall(r"`([^`\n]+)`", re.sub(r"^```.*?^```", "", text, flags=re.M | re.S))
    command = r"^(?:[A-Z_]+=\S*\s+)*make ([a-z][\w-]*)"  # PITWALL_REAL_VLLM=1 make run
    return {target for code in fenced + inline
            for target in re.findall(command, code, flags=re.M)}


TARGETS, PHONY = makefile_targets()


def test_the_makefile_is_read():
    assert {"run", "test", "clean"} <= PHONY <= TARGETS


@pytest.mark.parametrize("path", DOCUMENTS, ids=lambda p: str(p.relative_to(ROOT)))
def test_each_make_command_a_document_shows_is_a_target(path):
    assert sorted(make_commands(path) - TARGETS) == []


def test_the_readme_shows_every_phony_target():
    assert sorted(PHONY - make_commands(ROOT / "README.md")) == []


def test_the_readme_names_everything_make_clean_removes():
    makefile = (ROOT / "Makefile").read_text()
    variables = dict(re.findall(r"^(\w+) :?= (\S+)$", makefile, flags=re.M))
    recipe = re.search(r"^clean:.*\n\trm -rf (.+)$", makefile, flags=re.M)
    removed = {re.sub(r"\$\((\w+)\)", lambda m: variables[m.group(1)], word).rstrip("/")
               for word in recipe.group(1).split()}
    said = re.search(r"`make clean` \(removes ([^)]*)\)", (ROOT / "README.md").read_text())
    assert said, "the README should say what make clean removes"
    assert {p.rstrip("/") for p in re.findall(r"`([^`]+)`", said.group(1))} == removed
