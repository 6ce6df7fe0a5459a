"""The ingest app's ORM calls, made outside Django's request cycle (asgi.py).

Django drops a broken or expired database connection when a request starts and ends (the
``request_started``/``request_finished`` signals). The ingest app is no Django request, so
without the same step a connection PostgreSQL closed (a restart, a failover, an idle timeout)
stayed in its thread and every later call failed with "the connection is closed": ingest
answered 503 until the process was restarted by hand. Each call through ``orm`` does that step
first; it costs an attribute check unless an error occurred on the connection.

Each call is also bounded: a stalled server (it holds the connection open and answers
nothing) would hold a query forever. Neither libpq nor the pool bounds that: connect_timeout
ends only the connecting, the pool's timeout only the wait for a free connection, and
statement_timeout is enforced by the server that is stalled. So the caller stops waiting after
INGEST_FLUSH_TIMEOUT_S and gets a DatabaseError (ingest answers 503). The call itself cannot be
interrupted: asgiref runs every ingest ORM call in one thread, and waits for a running call
even when cancelled, so it is left to end when the server answers again, and until then the
next calls fail at once instead of queueing behind it.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Awaitable, Callable
from typing import ParamSpec, TypeVar

from asgiref.sync import sync_to_async
from django.conf import settings
from django.db import OperationalError, close_old_connections

P = ParamSpec("P")
R = TypeVar("R")
_stuck: set[asyncio.Task] = set()  # calls their callers gave up on, still running


class OrmTimeout(OperationalError):
    """The database did not answer an ingest ORM call in time (a DatabaseError: 503)."""


def orm(fn: Callable[P, R]) -> Callable[P, Awaitable[R]]:
    """``fn`` run in asgiref's ORM thread, on a usable connection, within the timeout."""

    @functools.wraps(fn)
    def on_a_usable_connection(*args: P.args, **kwargs: P.kwargs) -> R:
        close_old_connections()
        return fn(*args, **kwargs)

    in_thread = sync_to_async(on_a_usable_connection)

    @functools.wraps(fn)
    async def bounded(*args: P.args, **kwargs: P.kwargs) -> R:
        if _stuck:
            raise OrmTimeout("the database has not answered an earlier query yet")
        timeout = settings.PITWALL["INGEST_FLUSH_TIMEOUT_S"]
        call = asyncio.ensure_future(in_thread(*args, **kwargs))
        call.add_done_callback(_forget)
        done, _ = await asyncio.wait({call}, timeout=timeout)
        if call in done:
            return call.result()
        _stuck.add(call)  # not cancelled: asgiref would wait for the thread anyway
        raise OrmTimeout(f"the database did not answer within {timeout} s")

    return bounded


def _forget(call: asyncio.Future) -> None:
    _stuck.discard(call)
    if not call.cancelled():
        call.exception()  # retrieved: a caller that gave up was answered already
