"""What every test may use: the API's users and clients, empty sample tables, the fixture
plugins of tests/support/ (pytest_plugins), and the order the tests run in.

The users: ``api`` is an active user (alice) with a user API token; ``bob_session`` is a
second user signed in with a session; ``anonymous`` sends nothing; ``agent_client`` sends an
agent token, which may write telemetry but must never read the API.
"""

from __future__ import annotations

from collections import Counter

import pytest
from rest_framework.test import APIClient

from controlplane.fleet.tokens import issue_agent_token, issue_api_token
from tests.support.clients import bearer_client
from tests.support.roles import user_with_role
from tests.support.samples import truncate_samples

# Fixtures that tests in several directories use, defined once (never imported from one
# conftest into another): the loopback receivers and SMTP server, the real ingest app; and
# the one list of suites that run only under their own make target.
pytest_plugins = ["tests.support.receivers", "tests.support.ingest", "tests.support.suites"]


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


@pytest.fixture
def empty_samples(transactional_db):
    """Sample and rollup tables are raw SQL, outside Django's flush between tests: empty them
    here (watermarks and dirty marks are models: the flush empties those)."""
    truncate_samples()
    yield
    truncate_samples()


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The order for parallel runs (`make test`: pytest-xdist, a whole module per worker at a
    time, in this order): the slow tests first, the longest first (``slow(seconds=...)``, an
    estimate), so that the three-minute end-to-end test starts at once beside everything else;
    then the modules with the most tests first, so that no large one is left for the end.

    A module's tests keep pytest-django's order (database tests, transactional ones, then the
    rest). Modules no longer do: a database test may follow another module's transactional
    test, which leaves the database as migrate made it (flush, then post_migrate).
    """
    sizes = Counter(item.path for item in items)

    def order(item: pytest.Item) -> tuple[float, int, str]:
        mark = item.get_closest_marker("slow")
        seconds = float(mark.kwargs.get("seconds", 1)) if mark else 0.0
        return -seconds, -sizes[item.path], str(item.path)

    items.sort(key=order)
