"""Time partitions of the telemetry tables: create ahead, create on demand, drop past retention.

Raw samples and 1-minute rollups are cut by day (``<table>_p20260302``), 1-hour rollups by
month (``<table>_p202603``): a partition then holds a few million rows in either case, and
retention drops whole partitions instead of deleting rows. Functions take the period ("day"
or "month"); without one they work on the raw sample tables by day, as ingest needs.

Partitions asked for by incoming data (the ingest writer) go through ``create_on_demand_sql``,
which refuses any day outside ``raw_days``: older than the raw retention (maintenance would drop
it within the hour) or further ahead than the partitions made in advance. Without that guard, one
agent token sending samples of many past days made four tables per day.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from datetime import UTC, date, datetime, timedelta
from typing import Literal

from django.conf import settings

from controlplane.telemetry.packing.schema import NAMES as PACKED_TABLES
from controlplane.telemetry.packing.schema import PARTITION_OPTIONS as PACKED_OPTIONS
from controlplane.telemetry.schema import TABLES

Period = Literal["day", "month"]
RAW_TABLES = tuple(t.name for t in TABLES.values())

# Serialises partition DDL between ingest workers, migrations and Celery.
ADVISORY_LOCK_SQL = "SELECT pg_advisory_xact_lock(hashtext('pitwall.partitions'))"

EXISTING_SQL = """
SELECT parent.relname, child.relname
FROM pg_inherits
JOIN pg_class parent ON parent.oid = pg_inherits.inhparent
JOIN pg_class child ON child.oid = pg_inherits.inhrelid
WHERE parent.relname = ANY(%s)
"""

_SUFFIX = {"day": "%Y%m%d", "month": "%Y%m"}
DAY_S = 86400.0


class OutsideRetention(ValueError):
    """A raw partition was asked for a day outside the retained range (``raw_days``)."""


def day_of(ts: float) -> date:
    return datetime.fromtimestamp(ts, UTC).date()


def period_start(day: date, period: Period = "day") -> date:
    return day.replace(day=1) if period == "month" else day


def period_end(start: date, period: Period = "day") -> date:
    if period == "month":
        return (start.replace(day=28) + timedelta(days=4)).replace(day=1)
    return start + timedelta(days=1)


def partition_name(table: str, day: date, period: Period = "day") -> str:
    return f"{table}_p{period_start(day, period).strftime(_SUFFIX[period])}"


def create_sql(table: str, day: date, period: Period = "day") -> str:
    start = period_start(day, period)
    end = period_end(start, period)
    # Storage parameters are per partition: a partitioned table takes none.
    options = f" WITH ({PACKED_OPTIONS})" if table in PACKED_TABLES else ""
    return (
        f"CREATE TABLE IF NOT EXISTS {partition_name(table, start, period)} PARTITION OF {table} "
        f"FOR VALUES FROM ('{start.isoformat()} 00:00:00+00') TO ('{end.isoformat()} 00:00:00+00')"
        f"{options}"
    )


def create_all_sql(days: Iterable[date], tables: Iterable[str] = RAW_TABLES,
                   period: Period = "day") -> list[str]:
    starts = sorted({period_start(d, period) for d in days})
    return [create_sql(t, s, period) for s in starts for t in tables]


def raw_ts_range(now: float | None = None) -> tuple[float, float]:
    """The unix seconds ingest accepts: no older than ``RAW_RETENTION_DAYS`` (older samples
    would be dropped by the next maintenance run), no further ahead than ``MAX_CLOCK_SKEW_S``."""
    conf = settings.PITWALL
    now = time.time() if now is None else now
    return now - conf["RAW_RETENTION_DAYS"] * DAY_S, now + conf["MAX_CLOCK_SKEW_S"]


def raw_days(now: float | None = None) -> tuple[date, date]:
    """The first and last day whose raw partitions may be created on demand.

    From the day of the oldest sample ``raw_ts_range`` accepts (the oldest day maintenance
    keeps) to ``PARTITIONS_AHEAD_DAYS`` ahead, or the day of the latest accepted sample if a
    large ``MAX_CLOCK_SKEW_S`` reaches further.
    """
    now = time.time() if now is None else now
    oldest, newest = raw_ts_range(now)
    ahead = day_of(now) + timedelta(days=settings.PITWALL["PARTITIONS_AHEAD_DAYS"])
    return day_of(oldest), max(ahead, day_of(newest))


def outside_raw_days(days: Iterable[date], now: float | None = None) -> list[date]:
    first, last = raw_days(now)
    return sorted(d for d in days if not first <= d <= last)


def create_on_demand_sql(days: Iterable[date], now: float | None = None) -> list[str]:
    """``create_all_sql`` for the raw tables, for days that incoming data asks for.

    Raises ``OutsideRetention`` (and creates nothing) if any day is outside ``raw_days``.
    """
    days = set(days)
    outside = outside_raw_days(days, now)
    if outside:
        first, last = raw_days(now)
        raise OutsideRetention(
            f"no raw partition for {outside[0].isoformat()}: only {first.isoformat()} to "
            f"{last.isoformat()} are retained")
    return create_all_sql(days)


def days_around(today: date, behind: int, ahead: int) -> list[date]:
    return [today + timedelta(days=n) for n in range(-behind, ahead + 1)]


def parse_start(partition: str, period: Period = "day") -> date | None:
    suffix = partition.rsplit("_p", 1)[-1]
    try:
        return datetime.strptime(suffix, _SUFFIX[period]).date()
    except ValueError:
        return None


def ensure(cursor, days: Iterable[date], tables: Iterable[str] = RAW_TABLES,
           period: Period = "day") -> None:
    """Create the partitions holding these days if missing (sync cursor, in a transaction).

    For explicit callers (maintenance, migrations, backfills, tests) that choose the days
    themselves; days asked for by incoming data go through ``create_on_demand_sql``.
    """
    cursor.execute(ADVISORY_LOCK_SQL)
    for stmt in create_all_sql(days, tables, period):
        cursor.execute(stmt)


def existing(cursor, table: str, period: Period = "day") -> list[tuple[date, str]]:
    """(start, name) of the partitions of ``table`` whose names follow this module's scheme."""
    cursor.execute(EXISTING_SQL, [[table]])
    found = [(parse_start(child, period), child) for _, child in cursor.fetchall()]
    return sorted((start, child) for start, child in found if start is not None)


def drop_before(cursor, table: str, cutoff: date, period: Period = "day") -> list[str]:
    """Drop the whole partitions of ``table`` that end on or before ``cutoff``."""
    cursor.execute(ADVISORY_LOCK_SQL)
    dropped = []
    for start, child in existing(cursor, table, period):
        if period_end(start, period) <= cutoff:
            cursor.execute(f"DROP TABLE IF EXISTS {child}")
            dropped.append(child)
    return dropped
