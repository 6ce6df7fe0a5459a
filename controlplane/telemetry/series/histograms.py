"""Histograms: the observation count per point, or a quantile estimated from summed buckets.

Raw rows and rollup rows keep the same three columns (layout, per-bucket counts, sum), so one
query sums counts bucket by bucket over any table: a percentile over an hour or a month is
computed from the summed counts, never averaged from shorter percentiles.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from datetime import datetime, timedelta

from agents.protocol import Metric
from controlplane.telemetry.models import HistogramLayout
from controlplane.telemetry.schema import TABLES as RAW
from controlplane.telemetry.series.plan import Stretch, stretch_from
from controlplane.telemetry.series.sqlbits import (
    EPOCH_OF,
    by_entity,
    fetch,
    key_filter,
    per_entity,
    positions,
)

Point = tuple[float, object]


class HistogramReader:
    def __init__(self, metric: Metric, quantile: float | None) -> None:
        self.metric = metric
        self.quantile = quantile
        self.table = RAW[metric.entity]
        self.layout, self.counts = f"{metric.key}_layout", f"{metric.key}_counts"
        self.stored = self.counts  # the raw column holding the values

    def raw_rows(self, keys: list[tuple], lo: datetime, hi: datetime,
                 limit: int) -> dict[tuple, list[Point]]:
        src, match, params = per_entity(self.table, keys)
        rows_from, rows_params = stretch_from(self.metric.entity, "raw", lo, hi,
                                              [self.layout, self.counts])
        rows = fetch(
            f"SELECT e.*, r.* FROM {src} CROSS JOIN LATERAL (SELECT {EPOCH_OF.format('t.ts')}, "
            f"t.{self.layout}, t.{self.counts} FROM {rows_from} WHERE {match} "
            f"AND t.ts >= %s AND t.ts < %s AND t.{self.counts} IS NOT NULL ORDER BY t.ts "
            f"LIMIT %s) r", [*params, *rows_params, lo, hi, limit])
        found = by_entity(rows, len(self.table.keys), set(keys))
        bounds = _bounds(r[1] for rs in found.values() for r in rs)
        return {k: [(ts, self._value({lay: [c or 0 for c in cs]}, bounds))
                    for ts, lay, cs in rs] for k, rs in found.items()}

    def bucketed(self, keys: list[tuple], stretch: Stretch, origin: datetime,
                 step: int) -> dict[tuple, list[Point]]:
        width = len(self.table.keys)
        where, params = key_filter(self.table, keys)
        head = ", ".join(f"t.{k.name}" for k in self.table.keys)
        group = positions(width + 3)
        name, name_params = stretch_from(self.metric.entity, stretch.resolution, stretch.lo,
                                         stretch.hi, [self.layout, self.counts])
        rows = fetch(
            f"SELECT {head}, {EPOCH_OF.format('date_bin(%s, t.ts, %s)')}, t.{self.layout}, "
            f"u.i, sum(u.c)::int8 FROM {name} "
            f"CROSS JOIN LATERAL unnest(t.{self.counts}) WITH ORDINALITY AS u(c, i) "
            f"WHERE {where} AND t.ts >= %s AND t.ts < %s AND t.{self.counts} IS NOT NULL "
            f"GROUP BY {group} ORDER BY {group}",
            [timedelta(seconds=step), origin, *name_params, *params, stretch.lo, stretch.hi])
        found = by_entity(rows, width, set(keys))
        bounds = _bounds(r[1] for rs in found.values() for r in rs)
        return {k: self._points(rs, bounds) for k, rs in found.items()}

    def _points(self, rows: list[tuple], bounds: dict[int, list[float]]) -> list[Point]:
        """(ts, layout, i, count) rows in order -> one point per ts."""
        per_ts: dict[float, dict[int, list[int]]] = {}
        for ts, lay, _, total in rows:
            per_ts.setdefault(ts, defaultdict(list))[lay].append(int(total or 0))
        return [(ts, self._value(by_layout, bounds)) for ts, by_layout in per_ts.items()]

    def _value(self, by_layout: dict[int, list[int]], bounds: dict[int, list[float]]):
        if self.quantile is None:
            return sum(sum(counts) for counts in by_layout.values())
        # Buckets of different layouts cannot be added: when the layout changed inside one
        # time bucket, the layout holding the most observations speaks for it.
        lay, counts = max(by_layout.items(), key=lambda item: sum(item[1]))
        return histogram_quantile(self.quantile, bounds.get(lay, []), counts)


def _bounds(layout_ids: Iterable[int]) -> dict[int, list[float]]:
    return dict(HistogramLayout.objects.filter(id__in=set(layout_ids)).values_list("id", "bounds"))


def bucket_sums(counts: str, buckets: int) -> str:
    """An aggregate: histogram count arrays summed position by position, cut to their length.
    ``buckets``: the most any layout has (``max_buckets``). One sum per position over the rows,
    not a row per bucket and sample to sort and group."""
    sums = ", ".join(f"sum({counts}[{i}])::int8" for i in range(1, buckets + 1))
    return f"(ARRAY[{sums}])[1:max(cardinality({counts}))]"


def max_buckets(cursor) -> int:
    """The most counts a histogram layout has: its bounds and +Inf."""
    cursor.execute(f"SELECT coalesce(max(cardinality(bounds)), 0) + 1 "
                   f"FROM {HistogramLayout._meta.db_table}")
    return cursor.fetchone()[0]


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


def histogram_fraction(upper: float, bounds: Sequence[float],
                       counts: Sequence[int]) -> float | None:
    """The share of observations at or under ``upper``, as Prometheus's ``histogram_fraction``
    estimates it: whole buckets below, linear interpolation inside the bucket ``upper`` falls
    in (from 0 for the first). Observations in +Inf count as above any finite ``upper``.

    What objective attainment is: the share of requests whose TTFT (or ITL) met the objective.
    None without observations or with counts that do not fit ``bounds``.
    """
    total = sum(counts)
    if total <= 0 or not bounds or len(counts) != len(bounds) + 1:
        return None
    under, lower = 0.0, 0.0
    for i, bound in enumerate(bounds):
        if upper >= bound:
            under += counts[i]
        else:
            if bound > lower and upper > lower:
                under += counts[i] * (upper - lower) / (bound - lower)
            break
        lower = bound
    return under / total


def engine_buckets(key: str, engine_ids: list[int], lo: datetime, hi: datetime,
                   per_minute: bool = False) -> dict[datetime | None, dict[int, list[int]]]:
    """The engines' raw ``key`` histogram ("ttft_seconds") summed bucket by bucket, per
    layout: over (lo, hi] under None, or per minute of [lo, hi) (whole minutes, keyed by the
    minute's start)."""
    from django.db import connection

    minute = "date_trunc('minute', t.ts)" if per_minute else "NULL::timestamptz"
    span = ("t.ts >= %(lo)s AND t.ts < %(hi)s" if per_minute
            else "t.ts > %(lo)s AND t.ts <= %(hi)s")
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT {minute}, t.{key}_layout, u.i, sum(u.c)::int8 FROM {RAW['engine'].name} t "
            f"CROSS JOIN LATERAL unnest(t.{key}_counts) WITH ORDINALITY AS u(c, i) "
            f"WHERE t.engine_id = ANY(%(ids)s) AND {span} AND t.{key}_counts IS NOT NULL "
            f"AND t.up = 1 GROUP BY 1, 2, 3 ORDER BY 1, 2, 3",
            {"ids": engine_ids, "lo": lo, "hi": hi})
        rows = cursor.fetchall()
    out: dict[datetime | None, dict[int, list[int]]] = defaultdict(lambda: defaultdict(list))
    for at, layout, _, count in rows:
        out[at][layout].append(int(count or 0))
    return out


def dominant_layout(by_layout: dict[int, list[int]]) -> tuple[int, list[int]]:
    """A layout change inside a span: the layout holding the most observations speaks."""
    return max(by_layout.items(), key=lambda item: sum(item[1]))
