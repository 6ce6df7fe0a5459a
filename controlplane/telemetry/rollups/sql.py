"""The statement that builds one rollup table from its source: INSERT … SELECT … GROUP BY.

One statement per table and chunk, set-based: scalar statistics in one GROUP BY over the
source rows; array metrics element by element (``unnest … WITH ORDINALITY``, grouped by
element) and histograms bucket by bucket, each in a sub-select joined on (entity, bucket).
``ON CONFLICT … DO UPDATE`` makes a rerun, or the recompute of a bucket that late samples
reached, replace the row: the task is idempotent.

The 1-minute tier reads raw rows; the 1-hour tier reads 1-minute rows and combines their
statistics (min of mins, max of maxes, averages weighted by ``n``, the last ``_last``, summed
counts). "Last" is ``(array_agg(x ORDER BY ts DESC) FILTER (WHERE x IS NOT NULL))[1]``: the
last value the bucket holds, even when its last row lacks the metric; for an array metric,
the last whole array (``DISTINCT ON``). Measured against
``DISTINCT ON`` (last row only) on 8,000 GPUs x 60 rows: 1.45 s against 0.73 s a minute of
data, on 2 cores; both far inside the minute, and this one is right when a value is absent.

When the histogram layout changed inside a bucket (an engine restarted with other buckets),
counts of different layouts cannot be added: the layout holding the most observations keeps
the bucket, as the series reader does for raw rows.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from datetime import timedelta

from agents.protocol import Metric
from controlplane.telemetry.packing import read as packing
from controlplane.telemetry.rollups.schema import TABLES, RollupColumn, RollupTable
from controlplane.telemetry.schema import TABLES as RAW_TABLES
from controlplane.telemetry.schema import host_rows_join

EPOCH = "TIMESTAMPTZ '2000-01-01 00:00:00+00'"
# The fleet table naming the host of each entity that has no host_id column of its own.
@dataclass(frozen=True)
class Scope:
    """The source rows a statement reads; the source is aliased ``t``."""

    from_sql: str
    where: str
    params: dict = field(default_factory=dict)


def source_name(table: RollupTable) -> str:
    if table.tier.source == "raw":
        return RAW_TABLES[table.entity].name
    return TABLES[table.tier.source][table.entity].name


def _source(table: RollupTable, lo) -> str:
    """The source as a FROM item aliased t, over ``%(lo)s <= ts < %(hi)s``: raw rows are read
    from the raw and the packed tables together (packing/read.py)."""
    if table.tier.source != "raw":
        return f"{source_name(table)} t"
    return packing.source_sql(table.entity, "%(lo)s", "%(hi)s",
                              packed=lo < packing.read_horizon())


def range_scope(table: RollupTable, lo, hi) -> Scope:
    return Scope(_source(table, lo), "t.ts >= %(lo)s AND t.ts < %(hi)s",
                 {"lo": lo, "hi": hi})


def dirty_scope(table: RollupTable, hosts: list[int], buckets: list) -> Scope:
    """Every row of these hosts' entities inside these buckets: (hosts[i], buckets[i]) pairs."""
    lo = min(buckets)
    hi = max(buckets) + timedelta(seconds=table.tier.seconds)
    src = _source(table, lo)
    pairs = "unnest(%(hosts)s::int4[], %(buckets)s::timestamptz[]) AS d(host_id, bucket)"
    span = f"t.ts >= d.bucket AND t.ts < d.bucket + {_width(table)}"
    from_sql = f"{pairs} {host_rows_join(table.entity, src, span)}"
    return Scope(from_sql, "TRUE", {"hosts": hosts, "buckets": buckets, "lo": lo, "hi": hi})


def _width(table: RollupTable) -> str:
    return f"interval '{table.tier.seconds} seconds'"


def _last(x: str) -> str:
    return f"(array_agg({x} ORDER BY t.ts DESC) FILTER (WHERE {x} IS NOT NULL))[1]"


def _weighted_avg(x: str) -> str:
    """The average of the finer tier's averages, each weighing its row count."""
    return f"sum({x}::float8 * t.n) / sum(t.n) FILTER (WHERE {x} IS NOT NULL)"


class _Builder:
    def __init__(self, table: RollupTable, scope: Scope) -> None:
        self.table = table
        self.scope = scope
        self.raw = table.tier.source == "raw"
        self.keys = [k.name for k in table.keys]
        self.bucket = f"date_bin({_width(table)}, t.ts, {EPOCH})"
        self.group = ", ".join(str(i) for i in range(1, len(self.keys) + 2))

    def select_head(self) -> str:
        return ", ".join([*(f"t.{k} AS {k}" for k in self.keys), f"{self.bucket} AS b"])

    def source(self, extra: str = "", where: str = "") -> str:
        cond = " AND ".join(c for c in (self.scope.where, where) if c)
        return f"FROM {self.scope.from_sql} {extra} WHERE {cond}"

    def scalar(self, c: RollupColumn) -> str:
        x = f"t.{c.source.name}" if self.raw else f"t.{c.name}"
        bitmask = c.metric is not None and c.metric.unit == "bitmask"
        if c.stat == "min":
            expr = f"bit_and({x})" if bitmask else f"min({x})"
        elif c.stat == "max":
            expr = f"bit_or({x})" if bitmask else f"max({x})"
        elif c.stat == "avg":
            expr = f"avg({x})" if self.raw else _weighted_avg(x)
        else:
            expr = _last(x)
        return f"({expr})::{c.sql_type} AS {c.name}"

    def scalars(self, columns: list[RollupColumn]) -> str:
        n = "count(*)" if self.raw else "sum(t.n)"
        aggs = ", ".join([f"({n})::int4 AS n", *(self.scalar(c) for c in columns)])
        return f"SELECT {self.select_head()}, {aggs} {self.source()} GROUP BY {self.group}"

    def array(self, metric: Metric, columns: list[RollupColumn]) -> str:
        """min, max and avg element by element: core 3 with core 3."""
        if self.raw:
            unnest = f"unnest(t.{metric.key}) WITH ORDINALITY AS u(v, i)"
            parts = {"min": "min(u.v)", "max": "max(u.v)", "avg": "avg(u.v)"}
        else:
            names = ", ".join(f"t.{metric.key}_{s}" for s in ("min", "max", "avg"))
            unnest = f"unnest({names}) WITH ORDINALITY AS u(mn, mx, av, i)"
            parts = {"min": "min(u.mn)", "max": "max(u.mx)", "avg": _weighted_avg("u.av")}
        inner = ", ".join(f"{parts[c.stat]} AS {c.stat}" for c in columns)
        outer = ", ".join(f"array_agg(e.{c.stat} ORDER BY e.i)::{c.sql_type} AS {c.name}"
                          for c in columns)
        return (f"SELECT {self._keys('e')}, {outer} FROM (SELECT {self.select_head()}, u.i, "
                f"{inner} {self.source(f'CROSS JOIN LATERAL {unnest}')} "
                f"GROUP BY {self.group}, u.i) e GROUP BY {self._keys('e')}")

    def last_array(self, metric: Metric, column: RollupColumn) -> str:
        """The last whole array of the bucket: an ordered aggregate per element would cost
        five times the rest of the array work (measured on 128 cores)."""
        x = f"t.{metric.key}" if self.raw else f"t.{column.name}"
        keys = ", ".join([*self.keys, "b"])
        return (f"SELECT DISTINCT ON ({keys}) {keys}, v AS {column.name} FROM (SELECT "
                f"{self.select_head()}, t.ts, {x} AS v {self.source(where=f'{x} IS NOT NULL')}"
                f") l ORDER BY {keys}, l.ts DESC")

    def histogram(self, metric: Metric, columns: dict[str, RollupColumn]) -> str:
        """Counts summed bucket by bucket, within the layout holding the most observations."""
        k, width = metric.key, len(self.keys)
        unnest = f"CROSS JOIN LATERAL unnest(t.{k}_counts) WITH ORDINALITY AS u(c, i)"
        per_element = (
            f"SELECT {self.select_head()}, t.{k}_layout AS lay, u.i, sum(u.c)::int8 AS c, "
            f"sum(t.{k}_sum) FILTER (WHERE u.i = 1) AS s "  # each row's sum counted once
            f"{self.source(unnest, f't.{k}_layout IS NOT NULL')} "
            f"GROUP BY {self.group}, {width + 2}, {width + 3}")
        per_layout = (
            f"SELECT {self._keys('e')}, e.lay, array_agg(e.c ORDER BY e.i) AS counts, "
            f"sum(e.c) AS obs, sum(e.s) AS total FROM ({per_element}) e "
            f"GROUP BY {self._keys('e')}, e.lay")
        keys = self._keys("l")
        return (
            f"SELECT DISTINCT ON ({keys}) {keys}, l.lay AS {columns['layout'].name}, "
            f"l.counts::{columns['counts'].sql_type} AS {columns['counts'].name}, "
            f"l.total::float8 AS {columns['sum'].name} FROM ({per_layout}) l "
            f"ORDER BY {keys}, l.obs DESC, l.lay DESC")

    def _keys(self, alias: str) -> str:
        return ", ".join(f"{alias}.{k}" for k in [*self.keys, "b"])


def _groups(table: RollupTable):
    scalars: list[RollupColumn] = []
    arrays: dict[Metric, list[RollupColumn]] = defaultdict(list)
    histograms: dict[Metric, dict[str, RollupColumn]] = defaultdict(dict)
    for c in table.columns:
        if c.stat in ("layout", "counts", "sum"):
            histograms[c.metric][c.stat] = c
        elif c.metric is not None and c.metric.array:
            arrays[c.metric].append(c)
        else:
            scalars.append(c)
    return scalars, arrays, histograms


def upsert_sql(table: RollupTable, scope: Scope) -> str:
    """INSERT … SELECT the rollup rows of ``scope``'s source rows; ON CONFLICT replace them."""
    build = _Builder(table, scope)
    scalars, arrays, histograms = _groups(table)
    using = ", ".join([*build.keys, "b"])
    joins, names = [], ["n", *(c.name for c in scalars)]
    subs = []
    for metric, cols in arrays.items():
        last = next(c for c in cols if c.stat == "last")
        rest = [c for c in cols if c.stat != "last"]
        subs += [(metric, build.array(metric, rest), [c.name for c in rest]),
                 (metric, build.last_array(metric, last), [last.name])]
    subs += [(m, build.histogram(m, cols), [c.name for c in cols.values()])
             for m, cols in histograms.items()]
    for i, (_, sub, cols) in enumerate(subs):
        joins.append(f"LEFT JOIN ({sub}) j{i} USING ({using})")
        names += cols
    insert = [*build.keys, "ts", *names]
    select = [*(f"s.{k}" for k in build.keys), "s.b", *names]
    pk = ", ".join(table.primary_key)
    updates = ", ".join(f"{c} = EXCLUDED.{c}" for c in names)
    return (f"INSERT INTO {table.name} ({', '.join(insert)}) "
            f"SELECT {', '.join(select)} FROM ({build.scalars(scalars)}) s {' '.join(joins)} "
            f"ON CONFLICT ({pk}) DO UPDATE SET {updates}")
