"""Gauges and rates: a number per point (a list for array metrics), by the statistic asked.

Raw rows are aggregated per bucket as asked (avg, min, max, last); rollup rows combine their
stored statistics the same way the 1-hour tier combines 1-minute rows: min of mins, max of
maxes, averages weighted by their row counts, the last ``_last``. An average of a bitmask or
an error code means nothing: for them "avg" reads as max, which for a bitmask is the or of
all bits (set at any time in the bucket) and for a code the highest.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from itertools import groupby
from operator import itemgetter

from agents.protocol import Metric
from controlplane.telemetry.rollups.schema import TABLES as ROLLUPS
from controlplane.telemetry.schema import TABLES as RAW
from controlplane.telemetry.schema import column_for
from controlplane.telemetry.series.plan import Stretch, stretch_from
from controlplane.telemetry.series.sqlbits import (
    EPOCH_OF,
    by_entity,
    fetch,
    key_filter,
    per_entity,
    positions,
    shortest,
)

STATS = ("avg", "min", "max", "last")
_BUCKET = EPOCH_OF.format("date_bin(%s, t.ts, %s)")
_LAST = "(array_agg({} ORDER BY t.ts DESC))[1]"

Point = tuple[float, object]


def effective_stat(metric: Metric, stat: str) -> str:
    return "max" if stat == "avg" and metric.unit in ("bitmask", "code") else stat


class ValueReader:
    def __init__(self, metric: Metric, stat: str) -> None:
        self.metric = metric
        self.stat = effective_stat(metric, stat)
        self.table = RAW[metric.entity]
        self.column = column_for(metric)
        self.stored = self.column.name  # the raw column holding the values
        self.bitmask = metric.unit == "bitmask"

    def raw_rows(self, keys: list[tuple], lo: datetime, hi: datetime,
                 limit: int) -> dict[tuple, list[Point]]:
        """Each entity's first ``limit`` rows, as they are."""
        src, match, params = per_entity(self.table, keys)
        col, width = f"t.{self.column.name}", len(self.table.keys)
        rows_from, rows_params = stretch_from(self.metric.entity, "raw", lo, hi,
                                              [self.column.name])
        rows = fetch(
            f"SELECT e.*, r.* FROM {src} CROSS JOIN LATERAL (SELECT {EPOCH_OF.format('t.ts')}, "
            f"{shortest(col, self.column.sql_type)} FROM {rows_from} WHERE {match} "
            f"AND t.ts >= %s AND t.ts < %s AND {col} IS NOT NULL ORDER BY t.ts LIMIT %s) r",
            [*params, *rows_params, lo, hi, limit])
        return by_entity(rows, width, set(keys))

    def bucketed(self, keys: list[tuple], stretch: Stretch, origin: datetime,
                 step: int) -> dict[tuple, list[Point]]:
        column, value = self._value(stretch.resolution)
        width = len(self.table.keys)
        where, params = key_filter(self.table, keys)
        head = ", ".join(f"t.{k.name}" for k in self.table.keys)
        name, name_params = stretch_from(self.metric.entity, stretch.resolution, stretch.lo,
                                         stretch.hi, [self.column.name])
        bucket = [timedelta(seconds=step), origin]
        if self.metric.array:
            value_sql = f"u.i, {value}"
            join = (f"CROSS JOIN LATERAL unnest({shortest(column, 'float4[]')}) "
                    "WITH ORDINALITY AS u(v, i)")
            group = positions(width + 2)
        else:
            value_sql, join, group = value, "", positions(width + 1)
        rows = fetch(
            f"SELECT {head}, {_BUCKET}, {value_sql} FROM {name} {join} WHERE {where} "
            f"AND t.ts >= %s AND t.ts < %s AND {column} IS NOT NULL "
            f"GROUP BY {group} ORDER BY {group}",
            [*bucket, *name_params, *params, stretch.lo, stretch.hi])
        found = by_entity(rows, width, set(keys))
        if self.metric.array:  # (ts, i, v) rows -> (ts, [v, ...])
            return {k: [(ts, [r[2] for r in g]) for ts, g in groupby(v, key=itemgetter(0))]
                    for k, v in found.items()}
        return found

    def _value(self, resolution: str) -> tuple[str, str]:
        """(the column read, the aggregate of a bucket) for a table of this resolution."""
        if resolution == "raw":
            column, sql_type = f"t.{self.column.name}", self.column.sql_type
            weighted = False
        else:
            stored = ROLLUPS[resolution][self.metric.entity].column(self.metric, self.stat)
            column, sql_type, weighted = f"t.{stored.name}", stored.sql_type, True
        x = "u.v" if self.metric.array else column
        return column, self._aggregate(x, sql_type, weighted)

    def _aggregate(self, x: str, sql_type: str, weighted: bool) -> str:
        # Array elements were made float8 by the unnest already.
        element_type = "float8" if self.metric.array else sql_type
        if self.stat == "avg":
            value = shortest(x, element_type)
            if weighted:
                return f"sum({value} * t.n) / sum(t.n) FILTER (WHERE {x} IS NOT NULL)"
            return f"avg({value})::float8"
        if self.stat == "last":
            return shortest(_LAST.format(x), element_type)
        if self.bitmask:
            return f"bit_and({x})" if self.stat == "min" else f"bit_or({x})"
        return shortest(f"{self.stat}({x})", element_type)
