"""Which connection a query takes while a request reads from the standby.

Outside ``reading_from_standby()`` the router has no opinion: everything runs on ``default``,
the primary, exactly as without a standby. Inside it, ``default`` is the standby's connection
for this thread (``django.db.connection``, which the series, pages, export and efficiency
read through with raw SQL, and ``transaction.atomic()`` without ``using``), ORM reads of
telemetry and fleet go to ``standby``, and every other ORM read and every ORM write goes to
``primary``: sign-in, sessions and tokens (a revoked token must stop working at once), alert
state (read where the evaluator writes it), audit.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

from django.db import DEFAULT_DB_ALIAS, connections

STANDBY, PRIMARY = "standby", "primary"
# Apps whose ORM reads may be a few seconds old.
STANDBY_APPS = frozenset({"telemetry", "fleet"})
# Credentials: never read from a copy that may be behind.
PRIMARY_MODELS = frozenset({"fleet.agenttoken", "fleet.apitoken", "fleet.bearertoken"})

_reading: ContextVar[bool] = ContextVar("pitwall_reading_from_standby", default=False)


def reading() -> bool:
    """Whether this context reads from the standby."""
    return _reading.get()


@contextmanager
def reading_from_standby() -> Iterator[None]:
    """The block reads from the standby: its thread's ``default`` connection is the
    standby's until the block ends. Django keeps connections per thread and runs a request's
    synchronous code on one thread, so no other request sees the swap."""
    primary = connections[DEFAULT_DB_ALIAS]
    token = _reading.set(True)
    connections[DEFAULT_DB_ALIAS] = connections[STANDBY]
    try:
        yield
    finally:
        connections[DEFAULT_DB_ALIAS] = primary
        _reading.reset(token)


def reads_from_standby(model) -> bool:
    meta = model._meta
    return meta.app_label in STANDBY_APPS and meta.label_lower not in PRIMARY_MODELS


class StandbyRouter:
    """DATABASE_ROUTERS' entry, set only where a standby is configured."""

    def db_for_read(self, model, **hints) -> str | None:
        if not _reading.get():
            return None
        return STANDBY if reads_from_standby(model) else PRIMARY

    def db_for_write(self, model, **hints) -> str | None:
        return PRIMARY if _reading.get() else None

    def allow_relation(self, obj1, obj2, **hints) -> bool:
        # default, primary and standby are one database under three names.
        return True

    def allow_migrate(self, db: str, app_label: str, model_name=None, **hints) -> bool:
        return db == DEFAULT_DB_ALIAS
