"""Time partitions of the telemetry tables: create ahead, create on demand, drop past retention.

Raw samples and 1-minute rollups are cut by day (``<table>_p20260302``), 1-hour rollups by
month (``<table>_p202603``): a partition then holds a few million rows in either case, and
retention drops whole partitions instead of deleting rows. Functions take the period ("day"
or "month"); without one they work on the raw sample tables by day, as ingest needs.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, date, datetime, timedelta
from typing import Literal

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
    return (
        f"CREATE TABLE IF NOT EXISTS {partition_name(table, start, period)} PARTITION OF {table} "
        f"FOR VALUES FROM ('{start.isoformat()} 00:00:00+00') TO ('{end.isoformat()} 00:00:00+00')"
    )


def create_all_sql(days: Iterable[date], tables: Iterable[str] = RAW_TABLES,
                   period: Period = "day") -> list[str]:
    starts = sorted({period_start(d, period) for d in days})
    return [create_sql(t, s, period) for s in starts for t in tables]


def days_around(today: date, behind: int, ahead: int) -> list[date]:
    return [today + timedelta(days=n) for n in range(-behind, ahead + 1)]


def parse_start(partition: str, period: Period = "day") -> date | None:
    suffix = partition.rsplit("_p", 1)[-1]
    try:
        return datetime.strptime(suffix, _SUFFIX[period]).date()
    except ValueError:
        return None


def parse_day(partition: str) -> date | None:
    return parse_start(partition, "day")


def ensure(cursor, days: Iterable[date], tables: Iterable[str] = RAW_TABLES,
           period: Period = "day") -> None:
    """Create the partitions holding these days if missing (sync cursor, in a transaction)."""
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
