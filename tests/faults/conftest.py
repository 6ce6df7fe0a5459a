"""Fixtures of the fault suite (`make faults`): a private PostgreSQL for the whole session (the
test database lives there, so the ORM of this process and the stack's processes share it), and
per test a private Redis, the control plane's processes and a fleet of simulated agents."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from django.db import connections

from tests.faults.harness import Fleet, PrivatePostgres, Stack
from tests.support.live import RedisServer
from tests.support.samples import truncate_samples


@pytest.fixture(scope="session")
def private_pg() -> Iterator[PrivatePostgres]:
    cluster = PrivatePostgres().init()
    cluster.start()
    yield cluster
    cluster.destroy()


@pytest.fixture(scope="session")
def django_db_modify_db_settings(private_pg: PrivatePostgres) -> None:
    """pytest-django makes the test database on the private cluster, never on the shared one."""
    from django.conf import settings

    db = settings.DATABASES["default"]
    db.update(HOST="127.0.0.1", PORT=str(private_pg.port), USER="postgres", PASSWORD="")


@pytest.fixture
def private_redis(tmp_path: Path) -> Iterator[RedisServer]:
    server = RedisServer(tmp_path)
    server.start()
    yield server
    server.stop()


@pytest.fixture
def stack(transactional_db, private_pg, private_redis, tmp_path: Path) -> Iterator[Stack]:
    """The control plane's processes, not started (``stack.start()``). Torn down before the
    database is flushed (it depends on ``transactional_db``), and with the cluster running."""
    truncate_samples()  # raw SQL tables, outside Django's flush: a case starts with none
    control_plane = Stack(tmp_path, private_redis.url)
    yield control_plane
    private_pg.resume()
    if not private_pg.answers():
        private_pg.start()
    control_plane.stop()
    # This process's own connections may predate a restart of the cluster: Django's flush
    # after the test must not get a dead one.
    connections.close_all()


@pytest.fixture
def fleet(stack: Stack, tmp_path: Path) -> Iterator[Fleet]:
    """PITWALL_FAULT_AGENTS agents (20 by default) at 1 Hz for the stack's web port, not started."""
    agents = Fleet(tmp_path, stack.url)
    yield agents
    agents.stop()
