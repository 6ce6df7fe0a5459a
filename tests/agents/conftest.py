"""The agent tests' fake ingest server (tests/agents/fake_ingest.py), started per test."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.agents.fake_ingest import FakeIngest


@pytest.fixture
def fake_ingest() -> Iterator[FakeIngest]:
    with FakeIngest() as ingest:
        yield ingest
