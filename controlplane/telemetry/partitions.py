"""Daily partitions of the sample tables: create ahead, create on demand, drop past retention."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, date, datetime, timedelta

from controlplane.telemetry.schema import TABLES

# Serialises partition DDL between ingest workers, migrations and Celery.
ADVISORY_LOCK_SQL = "SELECT pg_advisory_xact_lock(hashtext('pitwall.partitions'))"

EXISTING_SQL = """
SELECT parent.relname, child.relname
FROM pg_inherits
JOIN pg_class parent ON parent.oid = pg_inherits.inhparent
JOIN pg_class child ON child.oid = pg_inherits.inhrelid
WHERE parent.relname = ANY(%s)
"""


def day_of(ts: float) -> date:
    return datetime.fromtimestamp(ts, UTC).date()


def partition_name(table: str, day: date) -> str:
    return f"{table}_p{day:%Y%m%d}"


def create_sql(table: str, day: date) -> str:
    start, end = day, day + timedelta(days=1)
    return (
        f"CREATE TABLE IF NOT EXISTS {partition_name(table, day)} PARTITION OF {table} "
        f"FOR VALUES FROM ('{start.isoformat()} 00:00:00+00') TO ('{end.isoformat()} 00:00:00+00')"
    )


def create_all_sql(days: Iterable[date]) -> list[str]:
    return [create_sql(t.name, d) for d in sorted(set(days)) for t in TABLES.values()]


def days_around(today: date, behind: int, ahead: int) -> list[date]:
    return [today + timedelta(days=n) for n in range(-behind, ahead + 1)]


def parse_day(partition: str) -> date | None:
    suffix = partition.rsplit("_p", 1)[-1]
    try:
        return datetime.strptime(suffix, "%Y%m%d").date()
    except ValueError:
        return None


def ensure(cursor, days: Iterable[date]) -> None:
    """Create the partitions for these days if missing (sync cursor, inside a transaction)."""
    cursor.execute(ADVISORY_LOCK_SQL)
    for stmt in create_all_sql(days):
        cursor.execute(stmt)


def drop_before(cursor, table: str, cutoff: date) -> list[str]:
    """Drop the whole daily partitions of ``table`` that end on or before ``cutoff``."""
    cursor.execute(ADVISORY_LOCK_SQL)
    cursor.execute(EXISTING_SQL, [[table]])
    dropped = []
    for _, child in cursor.fetchall():
        day = parse_day(child)
        if day is not None and day + timedelta(days=1) <= cutoff:
            cursor.execute(f"DROP TABLE IF EXISTS {child}")
            dropped.append(child)
    return dropped
