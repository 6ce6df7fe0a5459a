"""The real ingest app on a real event loop, on real PostgreSQL, and an agent's token.

A pytest plugin (tests/conftest.py lists it in ``pytest_plugins``): ``ingest`` and
``host_token`` are available to every test. The app writes on its own connection, so the
tests that use it are transactional (``empty_samples``).
"""

from __future__ import annotations

import pytest

from controlplane.fleet.tokens import issue_agent_token
from tests.support.asgi import AsgiClient


@pytest.fixture
def ingest(empty_samples, monkeypatch):
    """Writes each request at once (flush_ms 0): a test posts one batch after another, and
    each would otherwise wait out the group commit's 100 ms for companions that never come.
    The group commit itself is tested on the writer (test_ingest_writer_schedule.py)."""
    from django.conf import settings

    from controlplane.telemetry.ingest.app import IngestApp

    monkeypatch.setitem(settings.PITWALL, "INGEST_FLUSH_MS", 0)
    client = AsgiClient(IngestApp())
    yield client
    client.close()


@pytest.fixture
def host_token(transactional_db) -> str:
    token, _ = issue_agent_token("gpu-node-1")
    return token
