"""The alerting tests' node: one host with two GPUs and an engine, on empty sample tables.
Their helpers are in tests/support/alert_data.py."""

from __future__ import annotations

import pytest

from tests.support.alert_data import Node, make_node


@pytest.fixture
def node(empty_samples) -> Node:
    return make_node()
