"""Which table answers a series request, with what bucket width, over which stretches.

Resolution: the coarsest of raw (1 s), 1m and 1h whose bucket count over the range is still at
least ``max_points``; a tier whose oldest partition starts after the range does is skipped
toward coarser (retention dropped it, or it was never built that far back), and when no
coarser one reaches back either, toward finer.

Step: points are buckets of ``step`` seconds, a whole number of the tier's width, from the
range start floored to that width, so no more than ``max_points`` of them. Raw rows are given
as they are when each entity has no more than ``max_points`` (the reader decides that).

Stretches: a rollup tier holds whole buckets only up to its watermark; the rest of the range,
from the last step boundary at or before the watermark, is read from the finer tier (1m for
1h, raw for 1m) with the same step, so a week's chart includes the last minute.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta

from agents.protocol import Entity
from controlplane.telemetry import partitions
from controlplane.telemetry.packing import read as packing
from controlplane.telemetry.rollups.schema import TABLES as ROLLUPS
from controlplane.telemetry.rollups.schema import TIERS
from controlplane.telemetry.schema import TABLES as RAW
from controlplane.telemetry.series.sqlbits import fetch

RESOLUTIONS = ("raw", "1m", "1h")  # finest first
WIDTH = {"raw": 1, **{name: tier.seconds for name, tier in TIERS.items()}}
FINER = {name: tier.source for name, tier in TIERS.items()}
PERIOD = {"raw": "day", **{name: tier.period for name, tier in TIERS.items()}}

OLDEST_SQL = """
SELECT parent.relname, min(child.relname::text)
FROM pg_inherits
JOIN pg_class parent ON parent.oid = pg_inherits.inhparent
JOIN pg_class child ON child.oid = pg_inherits.inhrelid
WHERE parent.relname = ANY(%s)
GROUP BY parent.relname
"""


@dataclass(frozen=True)
class Stretch:
    resolution: str  # the table read
    lo: datetime
    hi: datetime


@dataclass(frozen=True)
class Plan:
    resolution: str
    origin: datetime  # buckets start here, every ``step`` seconds
    step: int
    stretches: tuple[Stretch, ...]


def table_name(entity: Entity, resolution: str) -> str:
    return RAW[entity].name if resolution == "raw" else ROLLUPS[resolution][entity].name


def stretch_from(entity: Entity, resolution: str, lo: datetime, hi: datetime,
                 names: list[str] | None = None) -> tuple[str, list]:
    """(FROM item aliased t, its params) for reading ``lo <= ts < hi`` at ``resolution``: raw
    rows come from the raw and the packed tables as one (packing/read.py)."""
    if resolution == "raw":
        return packing.source(entity, lo, hi, names)
    return f"{table_name(entity, resolution)} t", []


def make_plan(entity: Entity, start: datetime, end: datetime, max_points: int) -> Plan:
    resolution = choose((end - start).total_seconds(), max_points,
                        start.astimezone(UTC).date(), oldest_partitions(entity))
    width = WIDTH[resolution]
    origin = floor(start, width)
    buckets = math.ceil((end - origin).total_seconds() / width / max_points)
    step = width * max(1, buckets)
    if resolution == "raw":
        return Plan("raw", origin, step, (Stretch("raw", start, end),))
    stretches = _stretches(resolution, origin, end, step, watermarks())
    return Plan(resolution, origin, step, stretches)


def choose(span: float, max_points: int, first_day: date, oldest: dict[str, date]) -> str:
    """The resolution for ``span`` seconds from ``first_day``; ``oldest``: each resolution's
    first day kept."""
    fits = [r for r in RESOLUTIONS if span / WIDTH[r] >= max_points]
    at = RESOLUTIONS.index(fits[-1]) if fits else 0
    # Coarser first; when none reaches back that far, a finer tier that does (it has more
    # points than asked for, which the step then merges).
    for resolution in (*RESOLUTIONS[at:], *reversed(RESOLUTIONS[:at])):
        first = oldest.get(resolution)
        if first is not None and first <= first_day:
            return resolution
    return RESOLUTIONS[at]


def oldest_partitions(entity: Entity) -> dict[str, date]:
    """The first day each resolution's table of this entity holds, by its partitions (every
    tier's: the efficiency totals read the 1-day tier, which charts do not)."""
    names = {table_name(entity, r): r for r in PERIOD}
    out = {}
    for parent, child in fetch(OLDEST_SQL, [list(names)]):
        resolution = names[parent]
        first = partitions.parse_start(child, PERIOD[resolution])
        if first is not None:
            out[resolution] = first
    return out


def watermarks() -> dict[str, datetime]:
    return dict(fetch("SELECT resolution, upto FROM telemetry_rollupwatermark", []))


def floor(ts: datetime, seconds: int) -> datetime:
    whole = math.floor(ts.timestamp())
    return datetime.fromtimestamp(whole - whole % seconds, UTC)


def _stretches(resolution: str, origin: datetime, end: datetime, step: int,
               built: dict[str, datetime]) -> tuple[Stretch, ...]:
    out, lo = [], origin
    while resolution != "raw" and lo < end:
        upto = built.get(resolution)
        cut = lo if upto is None else min(end, max(lo, _step_floor(upto, origin, step)))
        if cut > lo:
            out.append(Stretch(resolution, lo, cut))
        lo, resolution = cut, FINER[resolution]
    if lo < end:
        out.append(Stretch(resolution, lo, end))
    return tuple(out)


def _step_floor(ts: datetime, origin: datetime, step: int) -> datetime:
    steps = math.floor((ts - origin).total_seconds() / step)
    return origin + timedelta(seconds=steps * step)
