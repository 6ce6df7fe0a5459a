"""Fixtures shared by the API tests: the users and the clients acting as them.

The pattern: ``api`` is an active user (alice) with a user API token; ``bob_session`` is a
second user signed in with a session; ``anonymous`` sends nothing; ``agent_client`` sends an
agent token, which may write telemetry but must never read the API.
"""

from __future__ import annotations

import pytest
from django.db import connection
from rest_framework.test import APIClient

from controlplane.alerts.windows.schema import all_names as slice_tables
from controlplane.fleet.tokens import issue_agent_token, issue_api_token
from controlplane.telemetry.rollups.schema import all_tables as rollup_tables
from controlplane.telemetry.schema import TABLES
from tests.support.roles import user_with_role


def bearer_client(token: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    return client


@pytest.fixture
def alice(db):
    return user_with_role("alice", "operator")


@pytest.fixture
def alice_token(alice) -> str:
    return issue_api_token("alice", name="tests")


@pytest.fixture
def api(alice_token) -> APIClient:
    return bearer_client(alice_token)


@pytest.fixture
def bob(db):
    return user_with_role("bob", "operator")


@pytest.fixture
def bob_session(bob) -> APIClient:
    client = APIClient()
    client.force_login(bob)
    return client


@pytest.fixture
def anonymous() -> APIClient:
    return APIClient()


@pytest.fixture
def agent_client(db) -> APIClient:
    token, _ = issue_agent_token("agent-only-host")
    return bearer_client(token)


def truncate_samples() -> None:
    names = [t.name for t in TABLES.values()] + [t.name for t in rollup_tables()] \
        + slice_tables()
    with connection.cursor() as cursor:
        cursor.execute("TRUNCATE " + ", ".join(names))


@pytest.fixture
def empty_samples(transactional_db):
    """Sample and rollup tables are raw SQL, outside Django's flush between tests: empty them
    here (watermarks and dirty marks are models: the flush empties those)."""
    truncate_samples()
    yield
    truncate_samples()
