"""Whether the standby is current enough to read from, measured at most once every
``STANDBY_CHECK_INTERVAL_S`` per process on two connections of the watch's own.

The lag is the age of the oldest primary WAL position the standby has not replayed: each check
reads the primary's ``pg_current_wal_flush_lsn()`` (only flushed WAL is sent) and keeps it with
the time it was read, and the standby's ``pg_last_wal_replay_lsn()`` retires every position it
has reached. An idle primary writes no WAL, so nothing waits and the lag is 0, where ``now() -
pg_last_xact_replay_timestamp()`` alone would grow for as long as nobody writes. A position
read by this very check has no age yet: while it is the oldest one waiting, the lag is at most
the time since the standby was last seen caught up, and at most the age of the last
transaction it replayed (whatever it lacks was written after both); the smaller stands in. Both
ages but the last are this process's clock's: the two servers' clocks need not agree.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache

import psycopg
from django.conf import settings
from psycopg.conninfo import make_conninfo

from controlplane.lib.standby.metrics import LAG, SKIPS, USABLE

log = logging.getLogger(__name__)

PRIMARY_SQL = "SELECT (pg_current_wal_flush_lsn() - '0/0'::pg_lsn)::bigint"
STANDBY_SQL = ("SELECT pg_is_in_recovery(), (pg_last_wal_replay_lsn() - '0/0'::pg_lsn)::bigint,"
               " extract(epoch FROM now() - pg_last_xact_replay_timestamp())::float8")
# Keys of a DATABASES entry's OPTIONS that are Django's, not libpq's.
DJANGO_OPTIONS = frozenset({"pool", "isolation_level", "server_side_binding", "assume_role",
                            "cursor_factory"})
# A check must not hold a request long: a server that does not answer is "down".
CHECK_TIMEOUT_S = 2
# Positions the standby has not reached, one per check: an hour's at one check a second. Past
# that the oldest are forgotten and the lag reads as an hour, still far past any limit.
MAX_WAITING = 3600


def conninfo(database: dict) -> str:
    """A libpq connection string for a Django DATABASES entry."""
    params = {"dbname": database["NAME"], "user": database.get("USER"),
              "password": database.get("PASSWORD"), "host": database.get("HOST"),
              "port": database.get("PORT")}
    params.update({k: v for k, v in database.get("OPTIONS", {}).items()
                   if k not in DJANGO_OPTIONS})
    return make_conninfo(**{k: v for k, v in params.items() if v not in (None, "")})


@dataclass(frozen=True)
class Verdict:
    usable: bool
    lag_s: float | None  # None: not measured (down, promoted, not checked yet)
    reason: str = ""  # why not usable: behind, down, promoted, unchecked
    detail: str = ""


class Backlog:
    """The primary's WAL positions, as read at each check, that the standby has not replayed."""

    def __init__(self) -> None:
        self._waiting: deque[tuple[float, int]] = deque(maxlen=MAX_WAITING)
        self._caught_up_at = -math.inf

    def lag(self, now: float, primary_lsn: int, replayed: int | None,
            replay_age: float | None) -> float:
        """Seconds the standby is behind, given the primary's position read at ``now``, the
        standby's replayed position (None: it has replayed nothing) and the age of the last
        transaction it replayed (None: none since it started)."""
        self._waiting.append((now, primary_lsn))
        while self._waiting and replayed is not None and self._waiting[0][1] <= replayed:
            self._waiting.popleft()
        if not self._waiting:
            self._caught_up_at = now
            return 0.0
        read_at = self._waiting[0][0]
        if read_at < now:
            return now - read_at
        # Only this check's position waits: it has no age of ours yet.
        since_caught_up = now - self._caught_up_at
        return min(since_caught_up, math.inf if replay_age is None else max(0.0, replay_age))


class LagWatch:
    """The standby's verdict for this process, renewed by the first caller past the interval
    (the others keep the last verdict rather than wait for the check)."""

    def __init__(self, primary: dict, standby: dict, *, max_lag_s: float, interval_s: float,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.max_lag_s, self.interval_s, self._clock = max_lag_s, interval_s, clock
        self._conninfo = {"primary": conninfo(primary), "standby": conninfo(standby)}
        self._connections: dict[str, psycopg.Connection] = {}
        self.backlog = Backlog()
        self._lock = threading.Lock()
        self._checked_at = -math.inf
        self.verdict = Verdict(False, None, "unchecked")

    def usable(self, *, now: bool = False) -> bool:
        """The verdict, measured again if the last is an interval old (or ``now``: a request
        just failed on the standby, and waiting for the interval would fail the next ones)."""
        if not (now or self._due()):
            return self.verdict.usable
        if self._lock.acquire(blocking=now, timeout=CHECK_TIMEOUT_S * 2 if now else -1):
            try:
                if now or self._due():
                    self._settle(self.check())
            finally:
                self._lock.release()
        return self.verdict.usable

    def _due(self) -> bool:
        return self._clock() - self._checked_at >= self.interval_s

    def check(self) -> Verdict:
        """Measure now (callers hold the lock, or are the only thread)."""
        try:
            (primary_lsn,) = self._row("primary", PRIMARY_SQL)
            in_recovery, replayed, replay_age = self._row("standby", STANDBY_SQL)
        except psycopg.Error as exc:
            self.close()
            return Verdict(False, None, "down", str(exc).strip().splitlines()[0][:200])
        finally:
            self._checked_at = self._clock()
        if not in_recovery:
            # Promoted: it takes writes of its own and no longer follows the primary.
            return Verdict(False, None, "promoted", "the standby is not in recovery")
        lag = self.backlog.lag(self._clock(), primary_lsn, replayed, replay_age)
        if lag > self.max_lag_s:
            return Verdict(False, lag, "behind", f"{lag:.1f} s behind the primary, over "
                                                 f"the {self.max_lag_s:g} s allowed")
        return Verdict(True, lag)

    def _row(self, server: str, sql: str) -> tuple:
        conn = self._connections.get(server)
        if conn is None or conn.closed:
            conn = psycopg.connect(self._conninfo[server], autocommit=True,
                                   connect_timeout=CHECK_TIMEOUT_S,
                                   application_name="pitwall-standby-watch",
                                   options=f"-c statement_timeout={CHECK_TIMEOUT_S * 1000}")
            self._connections[server] = conn
        row = conn.execute(sql).fetchone()
        assert row is not None  # a SELECT without FROM returns its one row
        return row

    def _settle(self, verdict: Verdict) -> None:
        before, self.verdict = self.verdict, verdict
        USABLE.set(1 if verdict.usable else 0)
        if verdict.lag_s is not None and math.isfinite(verdict.lag_s):
            LAG.set(verdict.lag_s)
        if before.usable and not verdict.usable:
            SKIPS.labels(verdict.reason).inc()
            log.warning("standby skipped, reads go to the primary: %s (%s)", verdict.reason,
                        verdict.detail)
        elif verdict.usable and not before.usable:
            log.warning("reads go to the standby (%.1f s behind the primary)%s", verdict.lag_s,
                        "" if before.reason == "unchecked" else f"; it was {before.reason}")
        elif before.reason == "unchecked" and not verdict.usable:
            SKIPS.labels(verdict.reason).inc()
            log.warning("standby not used yet: %s (%s)", verdict.reason, verdict.detail)

    def close(self) -> None:
        for conn in self._connections.values():
            conn.close()
        self._connections.clear()


@cache
def watch() -> LagWatch:
    """This process's watch, from settings (set only where a standby is configured)."""
    return LagWatch(settings.DATABASES["default"], settings.DATABASES["standby"],
                    max_lag_s=settings.STANDBY_MAX_LAG_S,
                    interval_s=settings.STANDBY_CHECK_INTERVAL_S)
