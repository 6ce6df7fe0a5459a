"""The suites of their own: tests that take minutes of real processes, each run by its own
make target, and deselected from every other run (a pytest plugin: tests/conftest.py lists
it in ``pytest_plugins``).

This is the one list. It is not an ``-m`` in pyproject's ``addopts``: pytest keeps only the
last ``-m`` it is given, so a target that passed its own (``make test-fast``) silently dropped
it and ran the fault suite. Here the rule holds whatever ``-m`` says: a test marked with one
of these runs only when the ``-m`` expression names its marker (``-m faults``).
"""

from __future__ import annotations

import re

import pytest

OWN_SUITES = ("real_vllm", "schema_fuzz", "faults")


def named_in(markexpr: str) -> set[str]:
    """The suite markers an ``-m`` expression names."""
    return set(re.findall(r"[A-Za-z_][A-Za-z0-9_]*", markexpr)) & set(OWN_SUITES)


def suite_of(item: pytest.Item) -> str | None:
    return next((name for name in OWN_SUITES if item.get_closest_marker(name)), None)


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    wanted = named_in(config.option.markexpr or "")
    kept, dropped = [], []
    for item in items:
        suite = suite_of(item)
        (dropped if suite is not None and suite not in wanted else kept).append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = kept
