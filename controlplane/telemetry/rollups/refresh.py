"""Builds the rollup tiers incrementally: the work of the rollup Celery task.

Per tier, in order (1 min, then 1 h, which reads 1 min, then 1 d, which reads 1 h):
1. advance: roll up the buckets between the tier's watermark and its limit, a chunk per
   transaction, and move the watermark. The 1-minute limit is the last minute that ended
   ``ROLLUP_SETTLE_S`` ago (samples of a minute arrive within a second or two of its end);
   the 1-hour limit is the last hour the 1-minute tier holds completely, the 1-day limit
   the last day the 1-hour tier holds completely.
2. recompute: claim the dirty (host, bucket) rows that late samples left (late.py), roll
   those buckets up again from their source, and mark their hour dirty in the next tier.

Every chunk takes a transaction-level advisory lock first (``pg_try_advisory_xact_lock``):
a second worker running at the same time stops instead of waiting, so beats never pile up.
Watermarks are read inside the locked transaction and every write is an upsert, so running
twice, or two workers taking turns, builds the same rows.
"""

from __future__ import annotations

import time
from datetime import UTC, date, datetime, timedelta

from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone

from controlplane.telemetry import partitions
from controlplane.telemetry.packing.schema import TABLES as PACKED_TABLES
from controlplane.telemetry.rollups import sql
from controlplane.telemetry.rollups.schema import TABLES, TIERS, Tier
from controlplane.telemetry.schema import TABLES as RAW_TABLES

LOCK_SQL = "SELECT pg_try_advisory_xact_lock(hashtext('pitwall.rollups'))"
# Buckets per chunk (one transaction): the first chunk's size, then sized to take about
# CHUNK_TARGET_S. A fleet of 8,000 GPUs takes ~8 s a minute of data, and its statements
# grow worse than linearly past a few minutes (sorts spill); 64 GPUs take milliseconds, and
# catching up a week a minute at a time would cost more in round trips than in work.
CHUNK_BUCKETS = {"1m": (2, 1, 240), "1h": (1, 1, 48), "1d": (1, 1, 1)}  # first, fewest, most
CHUNK_TARGET_S = 5.0
CLAIM_LIMIT = 2000  # dirty buckets recomputed per transaction

CLAIM_SQL = """
DELETE FROM telemetry_rollupdirty WHERE (resolution, host_id, bucket) IN (
    SELECT resolution, host_id, bucket FROM telemetry_rollupdirty WHERE resolution = %s
    ORDER BY bucket, host_id LIMIT %s FOR UPDATE SKIP LOCKED)
RETURNING host_id, bucket
"""
MARK_SQL = """
INSERT INTO telemetry_rollupdirty (resolution, host_id, bucket)
SELECT %s, h, b FROM unnest(%s::int4[], %s::timestamptz[]) AS v(h, b)
ORDER BY h, b ON CONFLICT DO NOTHING
"""


class Busy(Exception):
    """Another worker holds the rollup lock."""


def run(now: datetime | None = None, budget_s: float | None = None) -> dict:
    """One pass of every tier; stops starting new chunks once ``budget_s`` is spent."""
    now = now or timezone.now()
    deadline = None if budget_s is None else time.monotonic() + budget_s
    report: dict = {}
    try:
        for tier in TIERS.values():
            chunks = advance(tier, now, deadline)
            recomputed = recompute_dirty(tier, now, deadline)
            report[tier.name] = {"chunks": chunks, "recomputed": recomputed,
                                 "upto": _iso(read_watermark(tier))}
    except Busy:
        report["busy"] = True
    return report


def catch_up(now: datetime | None = None) -> dict:
    """Build everything up to now, however long it takes (after an outage, a benchmark)."""
    return run(now, budget_s=None)


def read_watermark(tier: Tier) -> datetime | None:
    with connection.cursor() as cursor:
        return _watermark(cursor, tier.name)


def advance(tier: Tier, now: datetime, deadline: float | None) -> int:
    chunks, buckets = 0, CHUNK_BUCKETS[tier.name][0]
    while not _spent(deadline):
        began = time.monotonic()
        with transaction.atomic(), connection.cursor() as cursor:
            _lock(cursor)
            limit = _limit(cursor, tier, now)
            start = _start(cursor, tier, now, limit)
            if limit is None or start >= limit:
                return chunks
            end = min(start + timedelta(seconds=tier.seconds * buckets), limit,
                      _next_day(start))
            if _source_has_rows(cursor, tier, _day(start)):
                _build(cursor, tier, start, end)
                buckets = _next_size(tier, buckets, time.monotonic() - began)
            else:  # nothing in the source that day: jump to its end
                end = min(_next_day(start), limit)
            _set_watermark(cursor, tier.name, end)
            chunks += 1
    return chunks


def _build(cursor, tier: Tier, start: datetime, end: datetime) -> None:
    _ensure_partitions(cursor, tier, {_day(start)})
    for table in TABLES[tier.name].values():
        scope = sql.range_scope(table, start, end)
        cursor.execute(sql.upsert_sql(table, scope), scope.params)


def _next_size(tier: Tier, buckets: int, elapsed: float) -> int:
    _, fewest, most = CHUNK_BUCKETS[tier.name]
    scaled = int(buckets * min(CHUNK_TARGET_S / max(elapsed, 0.001), 4.0))
    return max(fewest, min(most, scaled))


def recompute_dirty(tier: Tier, now: datetime, deadline: float | None) -> int:
    done = 0
    while not _spent(deadline):
        with transaction.atomic(), connection.cursor() as cursor:
            _lock(cursor)
            built = _watermark(cursor, tier.name)
            cursor.execute(CLAIM_SQL, [tier.name, CLAIM_LIMIT])
            claimed = cursor.fetchall()
            # A tier never built has no buckets to redo: advance() starts it from its oldest
            # source partition, late rows included.
            if not claimed or built is None:
                return done
            # Buckets past the watermark are built by advance() later; those past retention
            # are gone for good.
            cutoff = retention_cutoff(tier, now)
            todo = sorted((h, b) for h, b in claimed if cutoff <= b < built)
            if todo:
                _recompute(cursor, tier, todo)
            done += len(todo)
    return done


def _recompute(cursor, tier: Tier, todo: list[tuple[int, datetime]]) -> None:
    hosts, buckets = [h for h, _ in todo], [b for _, b in todo]
    _ensure_partitions(cursor, tier, {_day(b) for b in buckets})
    for table in TABLES[tier.name].values():
        scope = sql.dirty_scope(table, hosts, buckets)
        cursor.execute(sql.upsert_sql(table, scope), scope.params)
    for coarser in TIERS.values():
        if coarser.source != tier.name:
            continue
        built = _watermark(cursor, coarser.name)
        marks = sorted({(h, floor(b, coarser.seconds)) for h, b in todo})
        marks = [(h, b) for h, b in marks if built is not None and b < built]
        if marks:
            cursor.execute(MARK_SQL, [coarser.name, [h for h, _ in marks], [b for _, b in marks]])


def retention_cutoff(tier: Tier, now: datetime) -> datetime:
    """The oldest bucket a tier keeps: retention drops whole days (or months) before it."""
    days = settings.PITWALL[tier.retention_setting]
    return _midnight(_day(now) - timedelta(days=days))


def floor(ts: datetime, seconds: int) -> datetime:
    return datetime.fromtimestamp(ts.timestamp() // seconds * seconds, UTC)


def _limit(cursor, tier: Tier, now: datetime) -> datetime | None:
    """The end of the last bucket that is complete in the tier's source."""
    if tier.source == "raw":
        return floor(now - timedelta(seconds=settings.PITWALL["ROLLUP_SETTLE_S"]), tier.seconds)
    source_built = _watermark(cursor, tier.source)
    return None if source_built is None else floor(source_built, tier.seconds)


def _start(cursor, tier: Tier, now: datetime, limit: datetime | None) -> datetime:
    """The watermark; a new tier starts with the oldest source partition, within retention."""
    start = _watermark(cursor, tier.name)
    if start is None:
        oldest = _oldest_source_day(cursor, tier)
        start = _midnight(oldest) if oldest else limit or now
    return max(start, retention_cutoff(tier, now))


def _watermark(cursor, resolution: str) -> datetime | None:
    cursor.execute("SELECT upto FROM telemetry_rollupwatermark WHERE resolution = %s",
                   [resolution])
    row = cursor.fetchone()
    return row[0] if row else None


def _set_watermark(cursor, resolution: str, upto: datetime) -> None:
    cursor.execute(
        "INSERT INTO telemetry_rollupwatermark (resolution, upto) VALUES (%s, %s) "
        "ON CONFLICT (resolution) DO UPDATE SET upto = EXCLUDED.upto", [resolution, upto])


def _source_tables(tier: Tier) -> list[str]:
    if tier.source == "raw":  # a sealed day's rows are in the packed tables (packing/)
        return [t.name for t in (*RAW_TABLES.values(), *PACKED_TABLES.values())]
    return [t.name for t in TABLES[tier.source].values()]


def _source_period(tier: Tier) -> partitions.Period:
    return "day" if tier.source == "raw" else TIERS[tier.source].period


def _oldest_source_day(cursor, tier: Tier) -> date | None:
    starts = [start for name in _source_tables(tier)
              for start, _ in partitions.existing(cursor, name, _source_period(tier))]
    return min(starts, default=None)


def _source_has_rows(cursor, tier: Tier, day: date) -> bool:
    """Whether any source partition holding that day has a row (the 1-hour tier's are
    monthly: a month with a row counts for each of its days)."""
    for name in _source_tables(tier):
        child = partitions.partition_name(name, day, _source_period(tier))
        cursor.execute("SELECT to_regclass(%s) IS NOT NULL", [child])
        if cursor.fetchone()[0]:
            cursor.execute(f"SELECT EXISTS (SELECT 1 FROM {child})")
            if cursor.fetchone()[0]:
                return True
    return False


def _ensure_partitions(cursor, tier: Tier, days: set[date]) -> None:
    names = [t.name for t in TABLES[tier.name].values()]
    partitions.ensure(cursor, days, names, tier.period)


def _lock(cursor) -> None:
    cursor.execute(LOCK_SQL)
    if not cursor.fetchone()[0]:
        raise Busy


def _spent(deadline: float | None) -> bool:
    return deadline is not None and time.monotonic() >= deadline


def _day(ts: datetime) -> date:
    return ts.astimezone(UTC).date()


def _next_day(ts: datetime) -> datetime:
    return _midnight(_day(ts) + timedelta(days=1))


def _midnight(day: date) -> datetime:
    return datetime(day.year, day.month, day.day, tzinfo=UTC)


def _iso(ts: datetime | None) -> str | None:
    return ts.isoformat() if ts else None
