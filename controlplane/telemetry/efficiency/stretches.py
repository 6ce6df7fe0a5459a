"""Which tables a total over ``[start, end)`` reads: the coarsest tier for the whole buckets
inside the range, finer tiers for the edges.

A chart may start its first bucket before the range (the series API floors the start to the
step); a total may not: an hour read whole for a range that starts at its 50th minute would
count ten minutes too many. So the coarse tier serves only the buckets wholly inside the
range and already built (before its watermark), and each edge is read from the tier below,
recursively down to raw rows. A 30-day range reads 1-hour rollups for about 719 hours, the
1-minute rollups for the partial hours at either end and raw rows for the seconds at the edges
and the minute or two the 1-minute tier has not built yet.

The tier is chosen as the series API chooses it (``plan.choose``: coarsest with at least
``MIN_BUCKETS`` buckets, skipping a tier that does not reach back to the start), then, where
that is the 1-hour tier, the 1-day tier the rollup task builds from it when that reaches back
too: a total is the same sum from 24 times fewer rows, and ``split`` reads the partial days at
the edges from the hours. A 30-day range then reads 29 or 30 daily rows per entity and up to
46 hourly ones, where it read about 719 hourly rows.
"""

from __future__ import annotations

import math
from datetime import UTC, date, datetime

from agents.protocol import Entity
from controlplane.telemetry.series.plan import (
    FINER,
    WIDTH,
    Stretch,
    choose,
    oldest_partitions,
    watermarks,
)

# A tier is read when the range holds at least this many of its buckets: 1 h reads 1-minute
# rollups (60 buckets), 24 h and longer the 1-hour ones.
MIN_BUCKETS = 12


# For totals, the tier that sums the chosen one's buckets further, where it reaches back.
COARSER = {"1h": "1d"}


def resolution_for(entity: Entity, start: datetime, end: datetime,
                   oldest: dict[str, date] | None = None) -> str:
    """``oldest``: oldest_partitions(entity), where the caller has read it already."""
    first_day = start.astimezone(UTC).date()
    oldest = oldest_partitions(entity) if oldest is None else oldest
    chosen = choose((end - start).total_seconds(), MIN_BUCKETS, first_day, oldest)
    coarser = COARSER.get(chosen)
    if coarser is not None and oldest.get(coarser) is not None and oldest[coarser] <= first_day:
        return coarser
    return chosen


def plan_stretches(entity: Entity, start: datetime, end: datetime,
                   built: dict[str, datetime] | None = None,
                   oldest: dict[str, date] | None = None) -> tuple[str, list[Stretch]]:
    """(the coarsest tier read, the stretches to read in time order). The tier chosen may
    hold no whole bucket of the range (a day tier not built yet): the tier named is then the
    one that answers. ``built`` (watermarks()) and ``oldest`` (oldest_partitions(entity)):
    where the caller has read them already (a report plans up to three windows)."""
    built = watermarks() if built is None else built
    stretches = split(resolution_for(entity, start, end, oldest), start, end, built)
    read = [s.resolution for s in stretches]
    return max(read, key=WIDTH.__getitem__, default="raw"), stretches


def split(resolution: str, start: datetime, end: datetime,
          built: dict[str, datetime]) -> list[Stretch]:
    """``[start, end)`` as stretches: whole built buckets of ``resolution``, edges finer."""
    if start >= end:
        return []
    if resolution == "raw":
        return [Stretch("raw", start, end)]
    width = WIDTH[resolution]
    finer = FINER[resolution]
    upto = built.get(resolution)
    lo = _ceil(start, width)
    hi = min(_floor(end, width), _floor(upto, width)) if upto is not None else lo
    if hi <= lo:
        return split(finer, start, end, built)
    return [*split(finer, start, lo, built), Stretch(resolution, lo, hi),
            *split(finer, hi, end, built)]


def _floor(ts: datetime, seconds: int) -> datetime:
    whole = math.floor(ts.timestamp())
    floored = whole - whole % seconds
    return datetime.fromtimestamp(floored, UTC)


def _ceil(ts: datetime, seconds: int) -> datetime:
    floored = _floor(ts, seconds)
    return floored if floored.timestamp() == ts.timestamp() else datetime.fromtimestamp(
        floored.timestamp() + seconds, UTC)
