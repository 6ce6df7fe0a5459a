"""Time series of one metric for several entities, from raw samples or rollups. No HTTP here.

``read_series`` plans the read (plan.py: which resolution, which bucket width, which stretch
of the range from which table), then reads every stretch with one query for all the
entities (values.py for gauges and rates, histograms.py for histograms). ``SeriesError``
names the request parameter at fault; ``EntityNotFound`` is one too. Table and column names
come from the schema modules only; every value travels as a query parameter.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from datetime import datetime, timedelta

from agents.protocol import METRICS, Metric
from controlplane.fleet.models import Host
from controlplane.telemetry.packing import read as packing
from controlplane.telemetry.series.entities import (
    EntityRef,
    find_host,
    host_entities,
    proc_ref,
    resolve_entities,
    resolve_entity,
)
from controlplane.telemetry.series.errors import EntityNotFound, SeriesError
from controlplane.telemetry.series.histograms import HistogramReader, histogram_quantile
from controlplane.telemetry.series.plan import Plan, make_plan, stretch_from
from controlplane.telemetry.series.sqlbits import fetch
from controlplane.telemetry.series.timeouts import QueryTimeout, statement_timeout
from controlplane.telemetry.series.values import STATS, ValueReader

__all__ = [
    "DEFAULT_MAX_POINTS", "MAX_POINTS", "MAX_RANGE", "STATS", "EntityNotFound", "EntityRef",
    "Line", "QueryTimeout", "SeriesError", "SeriesSet", "find_host", "find_metric",
    "histogram_quantile", "read_series", "resolve_entities", "resolve_entity",
]

MAX_RANGE = timedelta(days=731)  # two years: what the 1-hour tier keeps by default
DEFAULT_MAX_POINTS = 1000
MAX_POINTS = 10_000

Point = tuple[float, object]  # (unix seconds, value)


@dataclass(frozen=True)
class Line:
    entity: EntityRef
    points: list[Point]


@dataclass(frozen=True)
class SeriesSet:
    metric: Metric
    quantile: float | None
    stat: str | None  # None for histograms
    resolution: str  # "raw", "1m" or "1h": the tier chosen for the range
    step: int | None  # bucket width in seconds; None when raw rows are given as they are
    start: datetime
    end: datetime
    series: list[Line]


def find_metric(name: str) -> Metric:
    metric = METRICS.get(name)
    if metric is None:
        entity = name.split(".", 1)[0]
        close = (difflib.get_close_matches(name, METRICS, n=5, cutoff=0.6)
                 or [m for m in METRICS if m.startswith(f"{entity}.")] or sorted(METRICS))
        raise SeriesError("metric", f"unknown metric {name!r}; close names: {', '.join(close)}")
    return metric


def check_query(metric: Metric, start: datetime, end: datetime, max_points: int,
                quantile: float | None, stat: str | None) -> None:
    if end <= start:
        raise SeriesError("end", f"end ({end.isoformat()}) must be after start "
                                 f"({start.isoformat()})")
    if end - start > MAX_RANGE:
        raise SeriesError("start", f"start to end spans more than {MAX_RANGE.days} days, "
                                   "the longest range a series answers")
    if not 1 <= max_points <= MAX_POINTS:
        raise SeriesError("max_points", f"max_points must be between 1 and {MAX_POINTS}")
    if quantile is not None and metric.kind != "histogram":
        raise SeriesError("quantile", f"quantile applies to histogram metrics only; "
                                      f"{metric.name} is a {metric.kind}")
    if quantile is not None and not 0 <= quantile <= 1:
        raise SeriesError("quantile", "quantile must be between 0 and 1")
    if stat is not None and stat not in STATS:
        raise SeriesError("stat", f"stat must be one of {', '.join(STATS)}")
    if stat not in (None, "avg") and metric.kind == "histogram":
        raise SeriesError("stat", "stat applies to gauges and rates; a histogram point is an "
                                  "observation count, or a quantile with quantile=")


def read_series(metric: Metric, start: datetime, end: datetime,
                entity: list[str] | None = None, host: str | None = None,
                max_points: int = DEFAULT_MAX_POINTS, quantile: float | None = None,
                stat: str | None = None) -> SeriesSet:
    """The series of the entities named in ``entity``, or of every entity of the metric's
    kind on ``host`` (an id or hostname). Each statement runs at most
    ``timeouts.timeout_s()``: QueryTimeout past it."""
    check_query(metric, start, end, max_points, quantile, stat)
    with statement_timeout(f"reading {metric.name}"):
        return _read_series(metric, start, end, entity, host, max_points, quantile, stat)


def _read_series(metric: Metric, start: datetime, end: datetime, entity: list[str] | None,
                 host: str | None, max_points: int, quantile: float | None,
                 stat: str | None) -> SeriesSet:
    plan = make_plan(metric.entity, start, end, max_points)
    refs = (resolve_entities(metric, entity or []) if host is None
            else _on_host(metric, find_host(host), plan))
    histogram = metric.kind == "histogram"
    reader = (HistogramReader(metric, quantile) if histogram
              else ValueReader(metric, stat or "avg"))
    points, step = _read(reader, plan, [e.keys for e in refs], start, end, max_points)
    lines = [Line(e, [p for p in points.get(e.keys, []) if p[1] is not None]) for e in refs]
    return SeriesSet(metric, quantile, None if histogram else stat or "avg", plan.resolution,
                     step, start, end, lines)


def _read(reader, plan: Plan, keys: list[tuple], start: datetime, end: datetime,
          max_points: int) -> tuple[dict[tuple, list[Point]], int | None]:
    if not keys:
        return {}, (None if plan.resolution == "raw" else plan.step)
    if plan.resolution == "raw" and not _surely_more(reader, keys, start, end, max_points):
        rows = reader.raw_rows(keys, start, end, max_points + 1)
        if all(len(r) <= max_points for r in rows.values()):
            return rows, None
    points: dict[tuple, list[Point]] = {}
    for stretch in plan.stretches:  # in time order: each bucket comes from one stretch
        for key, found in reader.bucketed(keys, stretch, plan.origin, plan.step).items():
            points.setdefault(key, []).extend(found)
    return points, plan.step


def _surely_more(reader, keys: list[tuple], start: datetime, end: datetime,
                 max_points: int) -> bool:
    """Whether every entity's packed minutes alone hold more rows than ``max_points``: then
    the rows as they are cannot be the answer, and reading them first (every packed minute
    unnested and sorted) would be wasted."""
    found = packing.packed_lower_bound(reader.metric.entity, reader.stored, keys, start, end)
    return all(found.get(key, 0) > max_points for key in keys)


def _on_host(metric: Metric, host: Host, plan: Plan) -> list[EntityRef]:
    if metric.entity != "proc":
        return host_entities(metric, host)
    # Processes are known by their samples: those seen in the stretches read.
    parts, params = [], []
    for s in plan.stretches:
        from_sql, from_params = stretch_from("proc", s.resolution, s.lo, s.hi, [])
        parts.append(f"SELECT t.pid FROM {from_sql} WHERE t.host_id = %s "
                     "AND t.ts >= %s AND t.ts < %s")
        params += [*from_params, host.id, s.lo, s.hi]
    pids = fetch(f"SELECT DISTINCT pid FROM ({' UNION '.join(parts)}) p ORDER BY pid", params)
    return [proc_ref(host, pid) for (pid,) in pids]
