"""PostgreSQL dropped every session (a restart, a failover, pg_terminate_backend): the
connection pool of a process (web, ingest's ORM calls, WebSockets) never hands out one of the
dead connections it still holds (controlplane/lib/postgresql/base.py).

Before, each idle pooled connection cost the next page, API request or token lookup a 500
once PostgreSQL was back. Here the sessions of the test database are really terminated on the
real server, as a restart ends them.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

import psycopg
import pytest
from django.db import connection

from controlplane.fleet.models import Host
from controlplane.lib.postgresql.base import server_hung_up
from controlplane.telemetry.ingest.copy import dsn_from_settings
from tests.support.polling import wait_until

pytestmark = pytest.mark.django_db(transaction=True)

POOLED = 4  # idle connections left in the pool before the sessions are ended


def in_threads(work: Callable[[], object], count: int) -> list[object]:
    """``work`` in ``count`` threads at once, each on a connection of its own (Django's are
    per thread), handed back to the pool at the end; what each returned or raised."""
    results: list[object] = []
    start = threading.Barrier(count)

    def run() -> None:
        start.wait(timeout=30)
        try:
            results.append(work())
        except Exception as exc:  # noqa: BLE001 - the test asserts on what was raised
            results.append(exc)
        finally:
            connection.close()  # back to the pool, as the end of a request does

    threads = [threading.Thread(target=run) for _ in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    return results


def backend_pid() -> int:
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        return cursor.fetchone()[0]


def held_at_once(count: int) -> set[int]:
    """``count`` connections checked out together (the pool grows to hold them), then all
    handed back: the pids of the idle connections the pool now holds."""
    all_connected = threading.Barrier(count)

    def hold() -> int:
        pid = backend_pid()
        all_connected.wait(timeout=30)
        return pid

    return set(in_threads(hold, count))


def end_every_other_session() -> set[int]:
    """pg_terminate_backend on every session of the test database, from a connection outside
    the pool (this thread may hold a pooled one), and wait until they are gone; their pids."""
    with psycopg.connect(dsn_from_settings(connection.settings_dict), autocommit=True) as own:
        pids = set(own.execute(
            "SELECT array_agg(pid) FROM pg_stat_activity "
            "WHERE datname = current_database() AND pid <> pg_backend_pid()").fetchone()[0] or ())
        own.execute("SELECT pg_terminate_backend(pid) FROM unnest(%s::int[]) AS pid",
                    [list(pids)])

        def gone() -> bool:
            return own.execute("SELECT count(*) FROM pg_stat_activity WHERE pid = ANY(%s)",
                               [list(pids)]).fetchone()[0] == 0

        wait_until(gone, 30, lambda: f"sessions {pids} still there")
    return pids


def fill_the_pool_then_end_its_sessions() -> set[int]:
    connection.close()  # this thread's too goes back to the pool, and dies with the others
    pids = held_at_once(POOLED)
    assert len(pids) == POOLED and connection.pool.get_stats()["pool_available"] >= POOLED
    ended = end_every_other_session()
    assert pids <= ended
    return pids


def test_no_query_fails_on_a_connection_the_server_closed():
    dead = fill_the_pool_then_end_its_sessions()
    answered = []
    for _ in range(POOLED + 2):  # one request after another, as a quiet web process gets
        answered.append(backend_pid())
        connection.close()
    assert not dead & set(answered)


def test_requests_at_once_after_the_sessions_ended_all_get_a_live_connection():
    fill_the_pool_then_end_its_sessions()
    results = in_threads(lambda: Host.objects.count(), POOLED * 2)
    assert results == [0] * (POOLED * 2)


def test_a_live_idle_connection_is_kept_and_a_terminated_one_is_seen():
    pool = connection.pool
    pool.open()
    raw = pool.getconn()
    try:
        raw.execute("SELECT 1")
        assert not server_hung_up(raw)  # else every checkout would open a new connection
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_terminate_backend(%s)", [raw.info.backend_pid])
        wait_until(lambda: server_hung_up(raw), 30, lambda: "the terminated one looks alive")
    finally:
        raw.close()
        pool.putconn(raw)
