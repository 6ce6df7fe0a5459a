"""Time series of one metric of one entity, read from the raw sample tables. No HTTP here.

``SeriesError`` names the request parameter at fault; ``EntityNotFound`` is one too. Table and
column names come from schema.py only; every value travels as a query parameter.

When the raw rows of the window exceed ``max_points``, time is cut into equal buckets of whole
seconds, starting at the window's start, and each bucket gives one point stamped with its start.
"""

from __future__ import annotations

import difflib
import math
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from itertools import groupby
from operator import itemgetter

from django.db import connection

from agents.protocol import METRICS, Metric
from controlplane.fleet.models import Engine, Gpu, Host
from controlplane.telemetry.models import HistogramLayout
from controlplane.telemetry.schema import TABLES, Column, SampleTable

MAX_RAW_RANGE = timedelta(days=31)
DEFAULT_MAX_POINTS = 1000
MAX_POINTS = 10_000
_INT4_MAX = 2**31 - 1

Point = tuple[float, float | int | list]  # (unix seconds, value)


class SeriesError(ValueError):
    """A query the layer refuses; ``param`` names the request parameter at fault."""

    def __init__(self, param: str, message: str) -> None:
        super().__init__(message)
        self.param = param


class EntityNotFound(SeriesError):
    """No entity of the metric's kind has that name."""


@dataclass(frozen=True)
class EntityRef:
    kind: str
    keys: tuple[int, ...]  # values of the sample table's key columns, in their order
    info: dict[str, object]  # what a reply says about the entity


@dataclass(frozen=True)
class Series:
    metric: Metric
    entity: EntityRef
    start: datetime
    end: datetime
    resolution: str  # "raw", or "raw-<aggregate>-<seconds>s" when bucketed
    quantile: float | None
    points: list[Point]


def find_metric(name: str) -> Metric:
    metric = METRICS.get(name)
    if metric is None:
        entity = name.split(".", 1)[0]
        close = (difflib.get_close_matches(name, METRICS, n=5, cutoff=0.6)
                 or [m for m in METRICS if m.startswith(f"{entity}.")] or sorted(METRICS))
        raise SeriesError("metric", f"unknown metric {name!r}; close names: {', '.join(close)}")
    return metric


def check_query(metric: Metric, start: datetime, end: datetime, max_points: int,
                quantile: float | None) -> None:
    if end <= start:
        raise SeriesError("end", f"end ({end.isoformat()}) must be after start "
                                 f"({start.isoformat()})")
    if end - start > MAX_RAW_RANGE:
        raise SeriesError("start", f"start to end spans more than {MAX_RAW_RANGE.days} days, "
                                   "the longest range raw data answers")
    if not 1 <= max_points <= MAX_POINTS:
        raise SeriesError("max_points", f"max_points must be between 1 and {MAX_POINTS}")
    if quantile is not None and metric.kind != "histogram":
        raise SeriesError("quantile", f"quantile applies to histogram metrics only; "
                                      f"{metric.name} is a {metric.kind}")
    if quantile is not None and not 0 <= quantile <= 1:
        raise SeriesError("quantile", "quantile must be between 0 and 1")


def resolve_entity(metric: Metric, text: str) -> EntityRef:
    """The entity of the metric's kind that ``text`` names (see each resolver for the forms)."""
    return _RESOLVERS[metric.entity](text.strip())


def _is_id(text: str) -> bool:
    return text.isascii() and text.isdigit() and int(text) <= _INT4_MAX


def _by_id_or(queryset, text: str, field: str):
    """By id when ``text`` is one, else (or when no id matches) by ``field``."""
    found = queryset.filter(pk=int(text)).first() if _is_id(text) else None
    return found or queryset.filter(**{field: text}).first()


def _host(text: str) -> EntityRef:
    host = _by_id_or(Host.objects.all(), text, "hostname")
    if host is None:
        raise EntityNotFound("entity", f"no host with id or hostname {text!r}")
    return EntityRef("host", (host.id,), {"kind": "host", "id": host.id, "hostname": host.hostname})


def _gpu(text: str) -> EntityRef:
    gpu = _by_id_or(Gpu.objects.select_related("host"), text, "uuid")
    if gpu is None:
        raise EntityNotFound("entity", f"no GPU with id or uuid {text!r}")
    return EntityRef("gpu", (gpu.id,), {
        "kind": "gpu", "id": gpu.id, "uuid": gpu.uuid, "index": gpu.index,
        "host": gpu.host_id, "hostname": gpu.host.hostname})


def _engine(text: str) -> EntityRef:
    if not _is_id(text):
        raise SeriesError("entity", f"an engine is named by its id, an integer, not {text!r}")
    engine = Engine.objects.select_related("host").filter(pk=int(text)).first()
    if engine is None:
        raise EntityNotFound("entity", f"no engine with id {text}")
    return EntityRef("engine", (engine.id,), {
        "kind": "engine", "id": engine.id, "name": engine.name,
        "host": engine.host_id, "hostname": engine.host.hostname})


def _proc(text: str) -> EntityRef:
    host_text, sep, pid_text = text.rpartition(":")
    if not sep or not host_text or not _is_id(pid_text):
        raise SeriesError("entity", f"a process is named '<host id or hostname>:<pid>', "
                                    f"not {text!r}")
    host = _host(host_text).info
    keys = (int(host["id"]), int(pid_text))
    # A pid is only known through its samples: none at all means no such process.
    if not _fetch(f"SELECT 1 FROM {TABLES['proc'].name} WHERE host_id = %s AND pid = %s "
                  "LIMIT 1", list(keys)):
        raise EntityNotFound("entity", f"no process {keys[1]} on host {host['hostname']}")
    return EntityRef("proc", keys, {"kind": "proc", "host": keys[0],
                                    "hostname": host["hostname"], "pid": keys[1]})


_RESOLVERS = {"host": _host, "gpu": _gpu, "engine": _engine, "proc": _proc}


def read_series(metric: Metric, entity: EntityRef, start: datetime, end: datetime,
                max_points: int = DEFAULT_MAX_POINTS, quantile: float | None = None) -> Series:
    check_query(metric, start, end, max_points, quantile)
    reader = _HistogramReader(quantile) if metric.kind == "histogram" else _ValueReader()
    window = _Window(TABLES[metric.entity], entity.keys, start, end)
    points = reader.raw(metric, window, max_points + 1)
    resolution = "raw"
    if len(points) > max_points:
        # Bucket starts fall on whole seconds so that bucketed timestamps are integers.
        origin = start.replace(microsecond=0)
        width = max(1, math.ceil((end - origin).total_seconds() / max_points))
        points = reader.bucketed(metric, window, origin, width)
        resolution = f"raw-{reader.aggregate(metric)}-{width}s"
    return Series(metric, entity, start, end, resolution, quantile,
                  [p for p in points if p[1] is not None])


@dataclass(frozen=True)
class _Window:
    table: SampleTable
    keys: tuple[int, ...]
    start: datetime
    end: datetime

    def query(self, select: str, column: str, tail: str, join: str = "",
              before: tuple = (), after: tuple = ()) -> list[tuple]:
        """Rows of this entity in [start, end) where ``column`` is not NULL."""
        keys = " AND ".join(f"{k.name} = %s" for k in self.table.keys)
        return _fetch(f"SELECT {select} FROM {self.table.name} {join} WHERE {keys} AND "
                      f"ts >= %s AND ts < %s AND {column} IS NOT NULL {tail}",
                      [*before, *self.keys, self.start, self.end, *after])


_TS = "extract(epoch FROM ts)::float8"
_BUCKET_TS = "extract(epoch FROM date_bin(%s, ts, %s))::float8"
# How each bucket sums up its rows; a bitmask is or-ed, an error code keeps the highest.
_AGGREGATES = {"avg": "avg({})::float8", "or": "bit_or({})", "max": "max({})"}


def _fetch(sql: str, params: list) -> list[tuple]:
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return cursor.fetchall()


# float4 goes through text, where PostgreSQL writes its shortest exact form: 33.3, where a
# plain cast to float8 would give 33.29999923706055.
_VIA_TEXT = {"float4": "::text::float8", "float4[]": "::text::float8[]"}


def _expr(column: Column) -> str:
    return column.name + _VIA_TEXT.get(column.sql_type, "")


def _column(metric: Metric, part: str = "") -> Column:
    return next(c for c in TABLES[metric.entity].columns if c.metric == metric and c.part == part)


class _ValueReader:
    """Gauges and rates: one number per row, or a list of them for an array metric."""

    def aggregate(self, metric: Metric) -> str:
        return {"bitmask": "or", "code": "max"}.get(metric.unit, "avg")

    def raw(self, metric: Metric, window: _Window, limit: int) -> list[Point]:
        col = _column(metric)
        return window.query(f"{_TS}, {_expr(col)}", col.name, "ORDER BY ts LIMIT %s",
                            after=(limit,))

    def bucketed(self, metric: Metric, window: _Window, origin: datetime,
                 width: int) -> list[Point]:
        col, bucket = _column(metric), (timedelta(seconds=width), origin)
        if metric.array:  # element by element: core 3 averages with core 3
            rows = window.query(
                f"{_BUCKET_TS}, u.i, avg(u.v)", col.name, "GROUP BY 1, 2 ORDER BY 1, 2",
                join=f"CROSS JOIN LATERAL unnest({_expr(col)}) WITH ORDINALITY AS u(v, i)",
                before=bucket)
            return [(ts, [r[2] for r in group]) for ts, group in groupby(rows, key=itemgetter(0))]
        agg = _AGGREGATES[self.aggregate(metric)].format(_expr(col))
        return window.query(f"{_BUCKET_TS}, {agg}", col.name, "GROUP BY 1 ORDER BY 1",
                            before=bucket)


@dataclass(frozen=True)
class _HistogramReader:
    """Histograms: the observation count per point, or a quantile estimated from the buckets."""

    quantile: float | None

    def aggregate(self, metric: Metric) -> str:
        return "sum"  # bucket counts are per-interval deltas: they add up

    def raw(self, metric: Metric, window: _Window, limit: int) -> list[Point]:
        layout, counts = _column(metric, "layout").name, _column(metric, "counts").name
        rows = window.query(f"{_TS}, {layout}, {counts}", counts, "ORDER BY ts LIMIT %s",
                            after=(limit,))
        bounds = _bounds(r[1] for r in rows)
        return [(ts, self._value({lay: [c or 0 for c in cs]}, bounds)) for ts, lay, cs in rows]

    def bucketed(self, metric: Metric, window: _Window, origin: datetime,
                 width: int) -> list[Point]:
        layout, counts = _column(metric, "layout").name, _column(metric, "counts").name
        rows = window.query(
            f"{_BUCKET_TS}, {layout}, u.i, sum(u.c)", counts, "GROUP BY 1, 2, 3 ORDER BY 1, 2, 3",
            join=f"CROSS JOIN LATERAL unnest({counts}) WITH ORDINALITY AS u(c, i)",
            before=(timedelta(seconds=width), origin))
        bounds = _bounds(r[1] for r in rows)
        points = []
        for ts, group in groupby(rows, key=itemgetter(0)):
            by_layout: dict[int, list[int]] = defaultdict(list)
            for _, lay, _, total in group:
                by_layout[lay].append(int(total or 0))
            points.append((ts, self._value(by_layout, bounds)))
        return points

    def _value(self, by_layout: dict[int, list[int]], bounds: dict[int, list[float]]):
        if self.quantile is None:
            return sum(sum(counts) for counts in by_layout.values())
        # Buckets of different layouts cannot be added: when the layout changed inside one
        # time bucket, the layout holding the most observations speaks for it.
        lay, counts = max(by_layout.items(), key=lambda item: sum(item[1]))
        return histogram_quantile(self.quantile, bounds.get(lay, []), counts)


def _bounds(layout_ids: Iterable[int]) -> dict[int, list[float]]:
    return dict(HistogramLayout.objects.filter(id__in=set(layout_ids)).values_list("id", "bounds"))


def histogram_quantile(q: float, bounds: Sequence[float], counts: Sequence[int]) -> float | None:
    """Prometheus's estimate: linear interpolation inside the bucket that holds the rank.

    ``counts`` are per bucket, not cumulative: ``len(bounds) + 1`` of them, the last for +Inf.
    A rank in the +Inf bucket gives the highest finite bound. None without observations.
    """
    total = sum(counts)
    if total <= 0 or not bounds or len(counts) != len(bounds) + 1:
        return None
    rank, below = q * total, 0
    for i, upper in enumerate(bounds):
        if counts[i] > 0 and below + counts[i] >= rank:
            if i == 0 and upper <= 0:
                return upper
            lower = bounds[i - 1] if i else 0.0
            return lower + (upper - lower) * (rank - below) / counts[i]
        below += counts[i]
    return bounds[-1]
