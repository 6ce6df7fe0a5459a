"""What each of the Makefile's test targets collects, read from the Makefile itself: each
target's pytest command (``make -n``) run with ``--collect-only`` and a plugin that reports
every selected test's markers. A target that drops the deselection of the suites of their
own, or a suite that loses its marker, fails here instead of running for minutes."""

from __future__ import annotations

import functools
import json
import os
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from tests.support.suites import OWN_SUITES

ROOT = Path(__file__).resolve().parent.parent
# Six collections of the whole tree, about 7 s each on 2 cores.
pytestmark = pytest.mark.slow(seconds=50)


def pytest_args(target: str) -> list[str]:
    """The arguments the target gives pytest, as ``make -n`` prints its recipe."""
    env = {**os.environ, "PYTEST_WORKERS": "0"}
    env.pop("MAKEFLAGS", None)
    env.pop("MAKELEVEL", None)
    recipe = subprocess.run(["make", "-n", target], cwd=ROOT, env=env, capture_output=True,
                            text=True, check=True).stdout
    commands = [part for line in recipe.replace("\\\n", " ").splitlines()
                for part in line.split(";")
                if " -m pytest" in part]
    assert len(commands) == 1, f"make {target} should run pytest once: {commands}"
    words = shlex.split(commands[0])
    return words[words.index("pytest") + 1:]


@functools.cache
def collected(*args: str) -> dict[str, frozenset[str]]:
    """Each test the arguments select, with its markers (once per arguments and session)."""
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "collected.json"
        subprocess.run([sys.executable, "-m", "pytest", *args, "--collect-only", "-q",
                        "-p", "no:cacheprovider", "-p", "tests.support.collection_report"],
                       cwd=ROOT, env={**os.environ, "PITWALL_COLLECTION_REPORT": str(report)},
                       capture_output=True, check=True)
        selected = json.loads(report.read_text())
    return {test: frozenset(marks) for test, marks in selected.items()}


def carrying(tests: dict[str, frozenset[str]], *markers: str) -> list[str]:
    return [test for test, marks in tests.items() if marks & set(markers)]


def test_make_test_runs_everything_but_the_suites_of_their_own():
    tests = collected(*pytest_args("test"))
    assert len(tests) > 1000
    assert carrying(tests, *OWN_SUITES) == []
    assert carrying(tests, "slow"), "make test must run the slow tests"


def test_make_test_fast_leaves_out_the_slow_tests_and_every_suite():
    tests = collected(*pytest_args("test-fast"))
    assert len(tests) > 1000
    assert carrying(tests, "slow", *OWN_SUITES) == []
    assert not any(test.startswith(("tests/faults/", "tests/real_vllm/", "tests/e2e/"))
                   for test in tests)


def test_plain_pytest_collects_what_make_test_does():
    assert collected().keys() == collected(*pytest_args("test")).keys()


@pytest.mark.parametrize(("target", "marker", "folder"), [
    ("faults", "faults", "tests/faults/"),
    ("test-real-vllm", "real_vllm", "tests/real_vllm/"),
    ("test-schema", "schema_fuzz", "tests/schema_fuzz/"),
])
def test_each_suite_target_runs_its_own_suite_and_nothing_else(target, marker, folder):
    tests = collected(*pytest_args(target))
    assert tests, f"make {target} collects nothing"
    assert all(marker in marks for marks in tests.values())
    assert all(test.startswith(folder) for test in tests)
