"""The ingest side of late data: mark the minutes that late samples reached as dirty.

An agent replaying its spool after an outage sends samples minutes or hours old, into
minutes the rollup task may already have built. Inside its flush transaction the ingest
writer records ("1m", host, minute) for such samples; the rollup task recomputes those
minutes and their hour (refresh.py). A sample is late when its minute ended more than half
``ROLLUP_SETTLE_S`` ago: live samples (a second or two old) never are, so a live flush costs
one ``min()`` over its timestamps and no query. The rollup task waits the whole
``ROLLUP_SETTLE_S``, so a flush would have to take longer than the other half, clock skew
between ingest and Celery nodes included, for a sample to slip between the two.

Late samples older than the packing read horizon (a day that ended an hour ago or more) are
also marked for the packing job, which merges them into the packed minutes (packing/job.py).
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from datetime import UTC, datetime

from django.conf import settings

from controlplane.telemetry.packing.read import read_horizon

MINUTE = 60

MARK_SQL = """
INSERT INTO telemetry_rollupdirty (resolution, host_id, bucket)
SELECT '1m', h, to_timestamp(b) FROM unnest(%s::int4[], %s::float8[]) AS v(h, b)
ORDER BY h, b ON CONFLICT DO NOTHING
"""
PACK_MARK_SQL = """
INSERT INTO telemetry_packdirty (host_id, bucket)
SELECT h, to_timestamp(b) FROM unnest(%s::int4[], %s::float8[]) AS v(h, b)
ORDER BY h, b ON CONFLICT DO NOTHING
"""


def late_minutes(items: Iterable, now: float | None = None) -> list[tuple[int, float]]:
    """Sorted (host id, minute start) of the samples in these Work items that are late."""
    cutoff = (now or time.time()) - settings.PITWALL["ROLLUP_SETTLE_S"] / 2
    boundary = cutoff // MINUTE * MINUTE  # samples before it are in a minute that ended
    found: set[tuple[int, float]] = set()
    for item in items:
        for table in item.tables.values():
            times = table.ts
            if table.length and min(times) < boundary:
                found.update((item.host_id, t // MINUTE * MINUTE)
                             for t in times if t < boundary)
    return sorted(found)


def pack_marks(marks: list[tuple[int, float]], now: float | None = None
               ) -> list[tuple[int, float]]:
    """The late minutes old enough that their day may be packed or being packed: the packing
    job merges them before it empties the day's raw partition (packing/job.py)."""
    horizon = read_horizon(datetime.fromtimestamp(now or time.time(), UTC)).timestamp()
    return [(h, m) for h, m in marks if m < horizon]


async def record(conn, items: Iterable) -> None:
    """Mark the late minutes of these Work items dirty, on the flush's connection."""
    marks = late_minutes(items)
    if marks:
        old = pack_marks(marks)
        async with conn.cursor() as cur:
            await cur.execute(MARK_SQL, ([h for h, _ in marks], [m for _, m in marks]))
            if old:
                await cur.execute(PACK_MARK_SQL, ([h for h, _ in old], [m for _, m in old]))
