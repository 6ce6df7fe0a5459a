"""docs/configuration.md against the code that reads the environment.

Every variable the control plane reads is in one of its tables. For those controlplane/settings.py
reads, the default cell starts with the default the code gives with ``DEBUG`` off (```14```,
```false```, "none" or "empty", "the value of `OTHER`"), says "(`x` with `DEBUG`)" where
``DEBUG`` changes it, and states the bounds the code enforces (", min N" or ", LOW–HIGH") and
no others; a secret names its ``…_FILE`` form. Every documented variable is read somewhere,
the README's short table agrees with the full one, and the table of management commands lists
each command there is.
"""

from __future__ import annotations

import ast
import functools
import re
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "configuration.md"
SETTINGS = ROOT / "controlplane" / "settings.py"
# controlplane/lib/env.py: the helpers settings.py reads every variable with.
READERS = {"envbool", "envint", "envfloat", "envlist", "envstr", "envsecret"}
VARIABLE = re.compile(r"`([A-Z][A-Z0-9_]*)`")


@dataclass(frozen=True)
class Row:
    cells: list[str]

    @property
    def names(self) -> list[str]:
        return [n for n in VARIABLE.findall(self.cells[0]) if not n.endswith("_FILE")]

    @property
    def default(self) -> str:
        return self.cells[1]


@dataclass(frozen=True)
class Read:
    """A variable as a settings.py helper reads it."""

    reader: str
    default: ast.expr | None
    minimum: float | None
    maximum: float | None


def table_rows(path: Path, header: str) -> list[Row]:
    """The rows of every table of ``path`` whose first header cell is ``header``."""
    rows, inside = [], False
    for line in path.read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if not line.startswith("|"):
            inside = False
        elif cells[0] == header:
            inside = True
        elif inside and not set(cells[0]) <= {"-"}:
            rows.append(Row(cells))
    return rows


def documented() -> dict[str, Row]:
    return {name: row for row in table_rows(DOC, "variable") for name in row.names}


def python_files() -> list[Path]:
    return sorted((ROOT / "controlplane").rglob("*.py"))


@functools.cache
def parsed(path: Path) -> ast.Module:
    """Each file parsed once for the whole module (the parametrized tests read them all)."""
    return ast.parse(path.read_text())


def calls(path: Path):
    yield from (n for n in ast.walk(parsed(path)) if isinstance(n, ast.Call))


def helper_reads(path: Path) -> dict[str, Read]:
    reads = {}
    for call in calls(path):
        if getattr(call.func, "id", None) in READERS:
            name, *positional = call.args
            keywords = {k.arg: k.value for k in call.keywords}
            bounds = [keywords.get(b) for b in ("minimum", "maximum")]
            reads[name.value] = Read(call.func.id, positional[0] if positional else None,
                                     *(None if b is None else ast.literal_eval(b) for b in bounds))
    return reads


@functools.cache
def environ_reads() -> dict[str, object]:
    """``os.environ.get("NAME", default)`` anywhere in controlplane/: name -> default (None:
    none given)."""
    reads: dict[str, object] = {}
    for path in python_files():
        for call in calls(path):
            func = call.func
            if (isinstance(func, ast.Attribute) and func.attr == "get"
                    and ast.unparse(func.value) == "os.environ"
                    and isinstance(call.args[0], ast.Constant)):
                reads[call.args[0].value] = (ast.literal_eval(call.args[1])
                                             if len(call.args) > 1 else None)
    return reads


def code_default(read: Read, debug: bool) -> object:
    """The default with DEBUG on or off; another setting's value as ``("the value of", NAME)``."""
    if isinstance(read.default, ast.Name) and read.default.id != "DEBUG":
        return ("the value of", read.default.id)
    expression = ast.Expression(read.default)
    scope = {"__builtins__": {}, "DEBUG": debug, "BASE_DIR": Path(), "str": str}
    return eval(compile(expression, str(SETTINGS), "eval"), scope)  # noqa: S307 - our own file


def words(value: object) -> str:
    """How the tables write a value."""
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, list):
        return ",".join(value)
    return str(value)


def starts_right(cell: str, value: object) -> bool:
    if value in (None, "", []):
        return cell.startswith(("none", "empty"))
    if isinstance(value, tuple):
        return cell.startswith(f"the value of `{value[1]}`")
    return cell.startswith(f"`{words(value)}`")


def bounds(read: Read) -> str:
    if read.minimum is not None and read.maximum is not None:
        return f", {words(read.minimum)}–{words(read.maximum)}"
    if read.minimum is not None:
        return f", min {words(read.minimum)}"
    return ""


SETTINGS_READS = helper_reads(SETTINGS)
DOCUMENTED = documented()


def test_the_tables_document_each_variable_once_in_a_row_of_its_own():
    names = [row.names for row in table_rows(DOC, "variable")]
    assert [n for n in names if len(n) != 1] == []  # a default cell holds one default
    assert len(DOCUMENTED) == len(names) >= len(SETTINGS_READS) > 60


@pytest.mark.parametrize("name", sorted(SETTINGS_READS))
def test_each_variable_settings_reads_is_documented_with_its_default(name):
    read, row = SETTINGS_READS[name], DOCUMENTED.get(name)
    assert row is not None, f"{name} is read by settings.py but not in docs/configuration.md"
    production, debug = code_default(read, False), code_default(read, True)
    assert starts_right(row.default, production), \
        f"{name}: the code's default is {production!r}, the table says {row.default!r}"
    if debug != production:
        assert f"(`{words(debug)}` with `DEBUG`)" in row.default, \
            f"{name}: with DEBUG the default is {debug!r}, the table says {row.default!r}"
    else:
        assert "with `DEBUG`" not in row.default, f"{name}: DEBUG does not change it"


@pytest.mark.parametrize("name", sorted(SETTINGS_READS))
def test_each_variable_settings_reads_is_documented_with_its_bounds(name):
    read, row = SETTINGS_READS[name], DOCUMENTED[name]
    for most in re.findall(r"\b[Aa]t most ([\d,.]+\d)\b", " ".join(row.cells)):
        assert read.maximum is not None and float(most.replace(",", "")) == read.maximum, \
            f"{name}: the table says 'at most {most}', the code's maximum is {read.maximum}"
    expected = bounds(read)
    stated = re.findall(r", (?:min [\d.]+|[\d.]+–[\d.]+)", row.default)
    assert stated == ([expected] if expected else []), \
        f"{name}: the code's bounds are {expected or 'none'!r}, the table says {row.default!r}"


@pytest.mark.parametrize("name", sorted(n for n, r in SETTINGS_READS.items()
                                        if r.reader == "envsecret"))
def test_a_secret_is_documented_with_its_file_form(name):
    assert "_FILE`" in DOCUMENTED[name].cells[0]


def test_only_settings_py_reads_the_environment_through_the_helpers():
    """One home per setting: the rest of the code reads django.conf.settings."""
    elsewhere = {str(p.relative_to(ROOT)): sorted(helper_reads(p)) for p in python_files()
                 if p != SETTINGS and p.name != "env.py" and helper_reads(p)}
    assert elsewhere == {}


def test_every_variable_read_outside_settings_py_is_documented():
    missing = sorted(set(environ_reads()) - set(DOCUMENTED))
    assert missing == [], f"read in controlplane/ but not in docs/configuration.md: {missing}"


@pytest.mark.parametrize("name", sorted(set(DOCUMENTED) - set(SETTINGS_READS)))
def test_each_other_documented_variable_is_read_with_the_documented_default(name):
    constants = {node.value for path in python_files() for node in ast.walk(parsed(path))
                 if isinstance(node, ast.Constant)}
    assert name in constants, f"{name} is documented but nothing in controlplane/ reads it"
    reads, cell = environ_reads(), DOCUMENTED[name].default
    if reads.get(name) not in (None, ""):
        assert cell.startswith(f"`{reads[name]}`"), \
            f"{name}: the code's default is {reads[name]!r}, the table says {cell!r}"
    elif name in reads:
        assert not cell.startswith("`"), f"{name} has no default in the code: {cell!r}"


def test_the_readme_table_agrees_with_the_full_one():
    for row in table_rows(ROOT / "README.md", "variable"):
        for name in row.names:
            assert name in DOCUMENTED, f"README documents {name}, docs/configuration.md does not"
        parts = row.default.split(", ") if len(row.names) > 1 else [row.default]
        if len(parts) != len(row.names):
            continue  # one description for them all ("HTTPS-only defaults")
        for name, part in zip(row.names, parts, strict=True):
            full = DOCUMENTED[name].default
            if part.startswith("`"):  # "none", "generated": words, not a value to compare
                first = re.search(r"`([^`]*)`", full)
                assert first and first.group(1) == part.split("`")[1], \
                    f"{name}: README says {part!r}, docs/configuration.md {full!r}"


COMMANDS = {p.stem: p for p in ROOT.glob("controlplane/*/management/commands/*.py")
            if p.stem != "__init__"}


def command_rows() -> dict[str, Row]:
    rows = {}
    for row in table_rows(DOC, "command"):
        match = re.match(r"`manage\.py (\w+)", row.cells[0])
        assert match, f"a command row names no manage.py command: {row.cells[0]}"
        rows[match.group(1)] = row
    return rows


def test_the_command_table_lists_every_management_command():
    assert sorted(command_rows()) == sorted(COMMANDS)


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_each_documented_option_is_one_the_command_has(command):
    row = command_rows().get(command)
    assert row is not None
    for option in re.findall(r"--[a-z][\w-]*", row.cells[0]):
        assert f'"{option}"' in COMMANDS[command].read_text(), f"{command} has no {option}"
