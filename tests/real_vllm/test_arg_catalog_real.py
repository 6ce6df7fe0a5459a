"""Pitwall's argument catalog against the installed vLLM's own parser (`vllm serve`'s argparse,
dumped by tests/real_vllm/dump_parser.py run with the real vLLM's Python)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from agents import vllm_args
from agents.vllm_args_catalog import ArgSpec
from tests.real_vllm.engine import VERSION, engine_env

pytestmark = pytest.mark.real_vllm
DUMP = Path(__file__).with_name("dump_parser.py")
# Choices the catalog checks but this release's argparse does not, each with the reason; the
# test fails if argparse starts checking them (the entry is then stale).
CHECKED_AFTER_PARSING = {
    "distributed_executor_backend": "typed str | Literal | an Executor class: argparse takes "
                                    "any string, ParallelConfig checks the literal at start",
}
BOOL_ACTIONS = {"optional": "BooleanOptionalAction", "store_true": "_StoreTrueAction",
                "store_bool": "StoreBoolean"}
TRUTHS = (True, False)  # every boolean entry written true, then false


def run_dump(vllm_install, tmp_path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(vllm_install.venv / "bin" / "python"), str(DUMP), *args],
                          env=engine_env(tmp_path), capture_output=True, text=True,
                          timeout=300, check=False)


@pytest.fixture(scope="module")
def real_dump(vllm_install, tmp_path_factory) -> dict:
    """One run of the dump (each imports vLLM, seconds of CPU): the parser's actions, and the
    command line ``written`` for each of TRUTHS parsed by it; with what it printed to stderr
    (argparse's reason for a command line it refused)."""
    done = run_dump(vllm_install, tmp_path_factory.mktemp("parser"),
                    *(json.dumps(written(truth)[1]) for truth in TRUTHS))
    assert done.returncode == 0, done.stderr[-3000:]
    return {**json.loads(done.stdout), "stderr": done.stderr}


@pytest.fixture(scope="module")
def real_parser(real_dump) -> dict[str, dict]:
    return real_dump["options"]


def catalog() -> dict[str, ArgSpec]:
    return vllm_args.available(VERSION)


def kind_problem(spec: ArgSpec, real: dict) -> str | None:
    """What the real action says that the catalog entry does not, or None."""
    if spec.kind == "bool":
        style = vllm_args._step(spec.bool_style, vllm_args.parse_version(VERSION))
        return None if real["action"] == BOOL_ACTIONS[style] else f"bool {style}: {real}"
    if spec.kind == "strs":
        return None if real["nargs"] in ("+", "*") else f"strs, but nargs {real['nargs']}"
    if spec.kind == "choice" and spec.dest in CHECKED_AFTER_PARSING:
        return None if real["choices"] is None else f"stale exception: {real['choices']}"
    if spec.kind == "choice":
        ours = {str(c) for c in vllm_args._step(spec.choices, vllm_args.parse_version(VERSION))}
        theirs = {str(c) for c in real["choices"] or ()}
        if ours == theirs:
            return None
        return f"choices: only ours {sorted(ours - theirs)}, only vLLM's {sorted(theirs - ours)}"
    typ = real["type"] or "str"
    wanted = {"int": "int", "float": "float", "str": "str"}[spec.kind]
    if wanted == "str":
        return None if real["choices"] is None and "int" not in typ and typ != "float" \
            else f"str, but {real}"
    return None if wanted in typ else f"{spec.kind}, but type {typ}"


def test_every_catalog_argument_exists_in_the_real_parser_as_the_catalog_describes_it(
        real_parser):
    problems = []
    for dest, spec in catalog().items():
        for option in (spec.flag, *spec.aliases):
            real = real_parser.get(option)
            if real is None or real["dest"] != dest:
                problems.append(f"{option}: not in vllm serve {VERSION} (or another dest)")
                continue
            if problem := kind_problem(spec, real):
                problems.append(f"{option}: {problem}")
    assert problems == []


def test_arguments_the_catalog_leaves_out_are_not_its_own_removals(real_parser):
    # A catalog entry marked removed before this release must really be gone from it.
    parsed = vllm_args.parse_version(VERSION)
    gone = [spec.flag for spec in vllm_args.CATALOG.values()
            if spec.removed and parsed >= vllm_args.parse_version(spec.removed)]
    assert gone and [flag for flag in gone if flag in real_parser] == []


def sample(spec: ArgSpec, truth: bool) -> object:
    """A valid value of each kind for the real parser to read back."""
    if spec.kind == "bool":
        return truth
    if spec.kind == "choice":
        return vllm_args._step(spec.choices, vllm_args.parse_version(VERSION))[-1]
    if spec.kind == "int":
        return 32 if spec.dest == "block_size" else 3
    if spec.kind == "float":
        return 0.5
    return ["a", "b"] if spec.kind == "strs" else "x"


def written(truth: bool) -> tuple[dict[str, object], list[str]]:
    """A value of every catalog entry (booleans ``truth``), and the argv to_argv writes."""
    args = {dest: sample(spec, truth) for dest, spec in catalog().items()}
    return args, vllm_args.to_argv(args, VERSION)


@pytest.mark.parametrize("truth", TRUTHS)
def test_the_real_parser_reads_back_what_to_argv_writes(real_dump, truth):
    args, _ = written(truth)
    result = real_dump["parsed"][TRUTHS.index(truth)]
    assert "values" in result, (result, real_dump["stderr"][-2000:])
    parsed = result["values"]
    # A store_true False is written as nothing, so it reads back as the default (False).
    wrong = {dest: (value, parsed.get(dest)) for dest, value in args.items()
             if parsed.get(dest) != value and str(parsed.get(dest)) != str(value)}
    assert wrong == {}
