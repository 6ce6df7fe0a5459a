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
def ingest(empty_samples):
    from controlplane.telemetry.ingest.app import IngestApp

    client = AsgiClient(IngestApp())
    yield client
    client.close()


@pytest.fixture
def host_token(transactional_db) -> str:
    token, _ = issue_agent_token("gpu-node-1")
    return token
