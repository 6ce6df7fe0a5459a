"""The ingest app's ORM calls, made outside Django's request cycle (asgi.py).

Django drops a broken or expired database connection when a request starts and ends (the
``request_started``/``request_finished`` signals). The ingest app is no Django request, so
without the same step a connection PostgreSQL closed (a restart, a failover, an idle timeout)
stayed in its thread and every later call failed with "the connection is closed": ingest
answered 503 until the process was restarted by hand. Each call through ``orm`` does that step
first; it costs an attribute check unless an error occurred on the connection.
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable
from typing import ParamSpec, TypeVar

from asgiref.sync import sync_to_async
from django.db import close_old_connections

P = ParamSpec("P")
R = TypeVar("R")


def orm(fn: Callable[P, R]) -> Callable[P, Awaitable[R]]:
    """``fn`` run in asgiref's ORM thread, on a usable connection."""

    @functools.wraps(fn)
    def on_a_usable_connection(*args: P.args, **kwargs: P.kwargs) -> R:
        close_old_connections()
        return fn(*args, **kwargs)

    return sync_to_async(on_a_usable_connection)
