"""A time limit on the statements of a read a user starts (a series, a rule preview).

PostgreSQL cancels a statement of the block that runs longer than PITWALL["QUERY_TIMEOUT_S"]
seconds (default 5): the block raises QueryTimeout, which the API answers with a 503 that says
so, instead of a 500 or a worker and a database core held for minutes. The limit is set with
``set_config(…, is_local => true)`` (SET LOCAL) in a transaction of the block's own (a savepoint
inside a caller's) and put back at its end, so nothing after the block inherits it.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from django.conf import settings
from django.db import OperationalError, connection, transaction

QUERY_CANCELED = "57014"  # PostgreSQL's SQLSTATE for a statement cancelled by its timeout


class QueryTimeout(Exception):
    """A statement of ``what`` ran past ``seconds``: PostgreSQL cancelled it."""

    def __init__(self, what: str, seconds: float) -> None:
        super().__init__(f"{what} took longer than {seconds:g} s and was stopped; narrow it "
                         f"(a shorter range, fewer entities or targets) and try again")
        self.what, self.seconds = what, seconds


def timeout_s() -> float:
    """Read at call time: an operator's change (and a test's) applies without a restart."""
    return float(settings.PITWALL["QUERY_TIMEOUT_S"])


@contextmanager
def statement_timeout(what: str, seconds: float | None = None) -> Iterator[None]:
    seconds = timeout_s() if seconds is None else seconds
    limit = f"{max(1, round(seconds * 1000))}ms"
    try:
        with transaction.atomic():
            with connection.cursor() as cursor:
                cursor.execute("SELECT current_setting('statement_timeout'), "
                               "set_config('statement_timeout', %s, true)", [limit])
                before = cursor.fetchone()[0]
            yield
            with connection.cursor() as cursor:
                cursor.execute("SELECT set_config('statement_timeout', %s, true)", [before])
    except OperationalError as exc:
        if getattr(exc.__cause__, "sqlstate", None) == QUERY_CANCELED:
            raise QueryTimeout(what, seconds) from exc
        raise
