"""The packing job: move sealed days' raw rows into the packed tables (a Celery task).

A day is *sealed* once it ended ``PACK_AFTER_S`` ago (default two hours: the alert evaluator
reads at most the last hour of raw rows, and every chart of a recent range stays on the raw
table). Whole days, not a sliding window, because the raw partition being written must stay
append-only: rows deleted from it would leave space that new rows refill out of time order
(the BRIN index on ts would then point every recent-window scan at old pages), and deleted
rows give no space back until the partition is emptied. So per raw table and sealed day:

1. **pack**: chunks of minutes in time order, one transaction each, read the raw rows and
   merge them into the packed minutes (merge.py); ``PackProgress.upto`` records how far. A
   chunk is sized from the last to take about ``CHUNK_TARGET_S``. Only minutes the 1-minute
   rollups have built are packed (their watermark), so rollups normally read raw rows.
2. **seal**: in one transaction with the day's four raw partitions locked (``NOWAIT``: a
   reader or writer holding one makes it wait for the next run instead of queueing ingest
   behind it): claim the day's ``PackDirty`` minutes, merge their raw rows again, and
   ``TRUNCATE`` the partitions, which gives their heap and index space back at once.

Late rows: ingest marks every sample older than the read horizon (read.py) in
``PackDirty``, in the transaction that stores it (rollups/late.py). A row that reached a day
after its minute was packed therefore has its mark until a seal claims it, and the seal merges
it before the truncate; a sealed day that gets marks is sealed again by the next run. The
1-minute rollups of those minutes are recomputed from raw and packed rows alike (rollups read
``read.source``).

Every transaction first takes ``pg_try_advisory_xact_lock``: a second worker stops instead of
waiting. Retention drops packed partitions with the raw ones (maintenance.py).
"""

from __future__ import annotations

import logging
import time
from datetime import UTC, date, datetime, timedelta

from django.conf import settings
from django.db import OperationalError, connection, transaction
from django.utils import timezone

from controlplane.telemetry import partitions
from controlplane.telemetry.models import PackProgress
from controlplane.telemetry.packing import merge
from controlplane.telemetry.packing.read import seal_horizon
from controlplane.telemetry.packing.schema import NAMES, TABLES, PackedTable

log = logging.getLogger(__name__)

LOCK_SQL = "SELECT pg_try_advisory_xact_lock(hashtext('pitwall.packing'))"
CHUNK_MINUTES = (2, 1, 240)  # first, fewest, most
CHUNK_TARGET_S = 5.0
LOCK_NOT_AVAILABLE = "55P03"
CLAIM_SQL = ("DELETE FROM telemetry_packdirty WHERE bucket >= %s AND bucket < %s "
             "RETURNING host_id, bucket")
MARKED_DAYS_SQL = ("SELECT DISTINCT (bucket AT TIME ZONE 'UTC')::date FROM telemetry_packdirty "
                   "WHERE bucket < %s")


class Busy(Exception):
    """Another worker holds the packing lock, or a partition to truncate is in use."""


def run(now: datetime | None = None, budget_s: float | None = None) -> dict:
    """Pack and seal what is due; stops starting chunks once ``budget_s`` is spent."""
    now = now or timezone.now()
    deadline = None if budget_s is None else time.monotonic() + budget_s
    report: dict = {"rows": 0, "minutes": 0, "chunks": 0, "sealed": [], "late_minutes": 0}
    limit = _rollup_limit()
    if limit is None:
        report["waiting"] = "the 1-minute rollups have not been built yet"
        return report
    try:
        for day in _due_days(now):
            if _spent(deadline):
                break
            done = [_pack_day(t, day, limit, deadline, report) for t in TABLES.values()]
            if all(done):
                _seal(day, report)
    except Busy as busy:
        report["busy"] = str(busy)
    return report


def _due_days(now: datetime) -> list[date]:
    """Sealed days within retention with an unsealed raw partition or marks, oldest first."""
    horizon = seal_horizon(now)
    oldest = now.date() - timedelta(days=settings.PITWALL["RAW_RETENTION_DAYS"])
    with connection.cursor() as cursor:
        days = {d for t in TABLES.values() for d, _ in partitions.existing(cursor, t.raw.name)}
        cursor.execute(MARKED_DAYS_SQL, [horizon])
        marked = {row[0] for row in cursor.fetchall()}
    sealed = {(p.table_name, p.day) for p in PackProgress.objects.filter(sealed=True)}
    due = [d for d in days if _midnight(d + timedelta(days=1)) <= horizon and d >= oldest]
    return sorted(d for d in due if d in marked or any(
        (t.raw.name, d) not in sealed for t in TABLES.values()))


def _pack_day(table: PackedTable, day: date, limit: datetime, deadline: float | None,
              report: dict) -> bool:
    """Pack the day's raw rows up to its end; True once all are packed."""
    end = _midnight(day + timedelta(days=1))
    child = partitions.partition_name(table.raw.name, day)
    progress = PackProgress.objects.filter(table_name=table.raw.name, day=day).first()
    lo = progress.upto if progress else _midnight(day)
    minutes = CHUNK_MINUTES[0]
    if lo < end and not _has_rows(child):
        lo = end  # nothing written that day: no chunks to walk
        _record(table, day, lo)
    while lo < end:
        hi = min(lo + timedelta(minutes=minutes), end, limit)
        if hi <= lo or _spent(deadline):
            return False
        began = time.monotonic()
        with transaction.atomic(), connection.cursor() as cursor:
            _lock(cursor)
            partitions.ensure(cursor, {day}, [table.name])
            cursor.execute(merge.merge_sql(table, merge.range_src(table, child)),
                           {"lo": lo, "hi": hi})
            packed = cursor.rowcount
            _record(table, day, hi)
        elapsed = time.monotonic() - began
        log.info("packed %s %s to %s: %d entity-minutes in %.2f s", table.raw.name,
                 lo.isoformat(), hi.isoformat(), packed, elapsed)
        report["chunks"] += 1
        report["minutes"] += max(packed, 0)
        lo, minutes = hi, _next_size(minutes, elapsed)
    return True


def _seal(day: date, report: dict) -> None:
    """Merge the day's marked minutes and empty its raw partitions, all under their locks."""
    children = [partitions.partition_name(t.raw.name, day) for t in TABLES.values()]
    start = _midnight(day)
    try:
        with transaction.atomic(), connection.cursor() as cursor:
            _lock(cursor)
            cursor.execute(f"LOCK TABLE {', '.join(children)} IN ACCESS EXCLUSIVE MODE NOWAIT")
            cursor.execute(CLAIM_SQL, [start, start + timedelta(days=1)])
            marks = cursor.fetchall()
            if marks:
                partitions.ensure(cursor, {day}, sorted(NAMES))
                params = {"hosts": [h for h, _ in marks], "minutes": [m for _, m in marks]}
                for table, child in zip(TABLES.values(), children, strict=True):
                    cursor.execute(merge.merge_sql(table, merge.marked_src(table, child)), params)
            cursor.execute(f"TRUNCATE {', '.join(children)}")
            for table in TABLES.values():
                _record(table, day, start + timedelta(days=1), sealed=True)
    except OperationalError as exc:
        if getattr(exc.__cause__, "sqlstate", None) == LOCK_NOT_AVAILABLE:
            raise Busy(f"a raw partition of {day.isoformat()} is in use; "
                       "sealing it next run") from exc
        raise
    log.info("sealed %s: %d late minutes merged, raw partitions emptied", day, len(marks))
    report["sealed"].append(day.isoformat())
    report["late_minutes"] += len(marks)


def _record(table: PackedTable, day: date, upto: datetime, sealed: bool = False) -> None:
    PackProgress.objects.update_or_create(table_name=table.raw.name, day=day,
                                          defaults={"upto": upto, "sealed": sealed})


def _has_rows(child: str) -> bool:
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT EXISTS (SELECT 1 FROM {child})")
        return cursor.fetchone()[0]


def _rollup_limit() -> datetime | None:
    """Pack only minutes the 1-minute rollups were built from raw rows."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT upto FROM telemetry_rollupwatermark WHERE resolution = '1m'")
        row = cursor.fetchone()
    return row[0] if row else None


def _next_size(minutes: int, elapsed: float) -> int:
    _, fewest, most = CHUNK_MINUTES
    scaled = int(minutes * min(CHUNK_TARGET_S / max(elapsed, 0.001), 4.0))
    return max(fewest, min(most, scaled))


def _lock(cursor) -> None:
    cursor.execute(LOCK_SQL)
    if not cursor.fetchone()[0]:
        raise Busy("another worker is packing")


def _spent(deadline: float | None) -> bool:
    return deadline is not None and time.monotonic() >= deadline


def _midnight(day: date) -> datetime:
    return datetime(day.year, day.month, day.day, tzinfo=UTC)
