"""Fixtures for live push: real Redis under a per-test prefix, the real ASGI app, sessions.

Tests are plain functions that drive their async part with ``async_to_sync`` (pytest-asyncio
is not a dependency); the ingest app runs on an event loop of its own, as under a server.
"""

from __future__ import annotations

import uuid

import pytest
import redis

from controlplane.fleet.tokens import issue_agent_token
from tests.realtime.helpers import redis_layer, session_headers
from tests.support.asgi import AsgiClient


@pytest.fixture
def live_settings(settings):
    """A channel layer of this test's own (prefix) and a publisher that the test drives: the
    fleet summary is not throttled and interest is re-read only when the test says so."""
    prefix = f"test-live-{uuid.uuid4().hex[:12]}"
    settings.CHANNEL_LAYERS = redis_layer(settings.REDIS_URL, prefix)
    settings.PITWALL = {**settings.PITWALL, "LIVE_FLEET_INTERVAL_MS": 0,
                        "LIVE_INTEREST_REFRESH_MS": 3_600_000}
    yield settings
    client = redis.Redis.from_url(settings.REDIS_URL)
    keys = list(client.scan_iter(f"{prefix}*"))
    if keys:
        client.delete(*keys)
    client.close()


@pytest.fixture
def make_ingest(live_settings, empty_samples):
    """Builds the real ingest app under the settings of the moment (change them first)."""
    from controlplane.asgi import ingest_app

    clients: list[AsgiClient] = []

    def make() -> AsgiClient:
        clients.append(AsgiClient(ingest_app()))
        return clients[-1]

    yield make
    for client in clients:
        client.close()


@pytest.fixture
def live_ingest(make_ingest):
    return make_ingest()


@pytest.fixture
def agents(transactional_db) -> dict[str, str]:
    """Agent tokens of two hosts, by hostname."""
    return {name: issue_agent_token(name)[0] for name in ("gpu-node-1", "gpu-node-2")}


@pytest.fixture
def session_handshake(transactional_db) -> list[tuple[bytes, bytes]]:
    """Handshake headers of a signed-in browser on this site: session cookie and Origin."""
    return session_headers("olivia")
