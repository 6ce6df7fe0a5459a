"""Threshold rules as set-based SQL: one query per entity for every rule on it.

All the rules on one entity share one scan of its slices (windows/: 10-s partial aggregates
of the raw rows) over the longest aggregate window among them, folded into bands and the bands
into each window (``windows.sql``); ``last`` and ``rate`` read their slices by primary key. The
comparison happens in SQL too: per target every rule's value is computed once, and only the
(rule, target) pairs whose condition holds come back. Histogram quantiles sum the slices'
bucket counts per engine in SQL and interpolate per engine in Python (``histogram_quantile``),
one query per (metric, window).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime

from django.db import connection

from agents.protocol import Metric
from controlplane.alerts.models import Aggregation, AlertRule, Op
from controlplane.alerts.rules import rule_metric
from controlplane.alerts.shards import WHOLE, Shard
from controlplane.alerts.windows.schema import SLICES
from controlplane.alerts.windows.slices import window_start
from controlplane.alerts.windows.sql import (
    POINTS,
    bucket_sums,
    combined,
    max_buckets,
    partials,
    point,
)
from controlplane.telemetry.models import HistogramLayout
from controlplane.telemetry.schema import column_for
from controlplane.telemetry.series.histograms import histogram_quantile

SQL_OP = {Op.GT: ">", Op.GE: ">=", Op.LT: "<", Op.LE: "<=", Op.EQ: "=", Op.NE: "<>"}
PY_OP = {
    Op.GT: lambda a, b: a > b, Op.GE: lambda a, b: a >= b, Op.LT: lambda a, b: a < b,
    Op.LE: lambda a, b: a <= b, Op.EQ: lambda a, b: a == b, Op.NE: lambda a, b: a != b,
}


@dataclass(frozen=True)
class _Targets:
    """Where an entity's targets come from (alias ``t``, with the slice key columns) and the
    hit columns made of them: target, host_id, engine_id, gpu_id."""

    keys: tuple[str, ...]
    rows: str | None  # the fleet table's rows; None: the targets with slices in the window
    cols: str


_TARGETS = {
    "host": _Targets(("host_id",), "SELECT id AS host_id FROM fleet_host",
                     "'host:' || t.host_id, t.host_id, NULL::int, NULL::int"),
    "gpu": _Targets(("gpu_id",), "SELECT id AS gpu_id, host_id FROM fleet_gpu",
                    "'gpu:' || t.gpu_id, t.host_id, NULL::int, t.gpu_id"),
    "engine": _Targets(("engine_id",), "SELECT id AS engine_id, host_id FROM fleet_engine",
                       "'engine:' || t.engine_id, t.host_id, t.engine_id, NULL::int"),
    # processes have no fleet table: the ones with slices, and the engine each served last
    "proc": _Targets(("host_id", "pid"), None,
                     "'proc:' || t.host_id || ':' || t.pid, t.host_id, t.engine_id, NULL::int"),
}


@dataclass(frozen=True)
class Hit:
    """A target on which a rule's condition holds now, and the value it was judged on."""

    target: str
    host_id: int | None
    engine_id: int | None
    gpu_id: int | None
    value: float | None


Hits = dict[int, list[Hit]]  # rule id -> targets whose condition holds
# A statement and its named parameters: every statement the evaluator builds uses %(name)s
# placeholders, and tests/alerts/snapshots/ holds what each builder produces.
Statement = tuple[str, dict[str, object]]


def fetch(sql: str, params: dict[str, object]) -> list[tuple]:
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return cursor.fetchall()


def threshold_hits(rules: list[AlertRule], now: datetime, shard: Shard = WHOLE) -> Hits:
    by_entity: dict[str, list[tuple[AlertRule, Metric]]] = defaultdict(list)
    quantiles: dict[tuple[str, int], list[AlertRule]] = defaultdict(list)
    for rule in rules:
        metric = rule_metric(rule)
        if rule.aggregation == Aggregation.QUANTILE:
            quantiles[(metric.name, rule.window_s)].append(rule)
        else:
            by_entity[metric.entity].append((rule, metric))
    hits: Hits = defaultdict(list)
    for entity, group in by_entity.items():
        for i, *row in fetch(*entity_query(entity, group, now, shard)):
            hits[group[i - 1][0].id].append(Hit(*row))
    if quantiles:
        with connection.cursor() as cursor:
            buckets = max_buckets(cursor)
    for group in quantiles.values():
        for rule_id, found in _quantile_hits(group, now, shard, buckets).items():
            hits[rule_id] += found
    return hits


def _starts(now: datetime, rules) -> dict[datetime, str]:
    """The first slice of each window these rules read, and its parameter's name: ``start_<w>s``
    after the shortest window ``w`` starting there (windows are rounded out to whole slices, so
    60 s and 65 s may share one)."""
    names: dict[datetime, str] = {}
    for window_s in sorted({rule.window_s for rule in rules}):
        names.setdefault(window_start(now, window_s), f"start_{window_s}s")
    return names


def entity_query(entity: str, group: list[tuple[AlertRule, Metric]], now: datetime,
                 shard: Shard = WHOLE) -> Statement:
    """One query for every rule of the entity: per target, the aggregates of every window
    (``_windows``), the slices ``last`` and ``rate`` read (by primary key), each rule's value,
    and the positions (1-based, in ``group``) of the rules whose condition holds. Parameters:
    each window's first slice (``start_<w>s``), each rule's threshold (``threshold_<i>``)."""
    shape, table = _TARGETS[entity], SLICES[entity].name
    starts = _starts(now, [rule for rule, _ in group])
    params: dict[str, object] = {name: at for at, name in starts.items()}
    aggregates = [(rule, m) for rule, m in group if rule.aggregation not in POINTS]
    value_of_rule, windows_sql = _windows(entity, aggregates, now, shard, starts)
    # one primary-key lookup per target and slice read: the newest slice (l), and the oldest
    # slice of each window a `last` or `rate` reads (f<n>)
    on = " AND ".join([shard.slices("x"), *(f"x.{k} = t.{k}" for k in shape.keys)])
    fetches = [f"LEFT JOIN LATERAL (SELECT * FROM {table} x WHERE {on} ORDER BY x.ts DESC "
               f"LIMIT 1) l ON true"] if len(aggregates) < len(group) else []
    firsts: dict[str, str] = {}
    for rule, metric in group:
        if rule.aggregation in POINTS:
            lo = f"%({starts[window_start(now, rule.window_s)]})s"
            if lo not in firsts:
                firsts[lo] = f"f{len(firsts)}"
                fetches.append(f"LEFT JOIN LATERAL (SELECT * FROM {table} x WHERE {on} "
                               f"AND {_at_or_after(shape.keys, shard, lo)} ORDER BY x.ts LIMIT 1) "
                               f"{firsts[lo]} ON true")
            value_of_rule[rule.id] = point(column_for(metric).name, rule.aggregation,
                                           rule.bitmask, lo, firsts[lo])
    # Every rule's value of a target computed once (a lateral row), the positions of the rules
    # whose condition holds gathered in an array, and only those unnested.
    n = len(group)
    values = ",\n".join(f"    ({value_of_rule[r.id]})::float8 AS v{i}"
                        for i, (r, _) in enumerate(group, start=1))
    checks = ",\n".join(f"    CASE WHEN x.v{i} {SQL_OP[r.op]} %(threshold_{i})s::float8 "
                        f"THEN {i} END" for i, (r, _) in enumerate(group, start=1))
    params.update({f"threshold_{i}": r.threshold for i, (r, _) in enumerate(group, start=1)})
    value_of_hit = f"(ARRAY[{', '.join(f'x.v{i}' for i in range(1, n + 1))}])[r.i]"
    sources = [f"FROM {_target_rows(entity, group, now, shard, starts)}"]
    if windows_sql:
        sources.append(f"LEFT JOIN a ON {' AND '.join(f'a.{k} = t.{k}' for k in shape.keys)}")
        windows_sql = f"WITH {windows_sql}\n"
    lines = [f"{windows_sql}SELECT r.i, {shape.cols}, {value_of_hit}", *sources, *fetches,
             # computed once per target
             f"CROSS JOIN LATERAL (SELECT\n{values}\n  OFFSET 0) x",
             f"CROSS JOIN LATERAL unnest(array_remove(ARRAY[\n{checks}], NULL)) AS r(i)"]
    return "\n".join(lines), params


def _at_or_after(keys: tuple[str, ...], shard: Shard, lo: str) -> str:
    """SQL: slice ``x`` of target ``t`` is at or after ``lo``, as a row comparison in
    primary-key order, which only the primary key can serve. As a plain ``x.ts >= lo`` the
    planner, sure from statistics that lag the newest slices that few rows are that new, walks
    the ``ts`` index instead and filters every slice since ``lo`` for each target: a GPU query
    of 6.4 s instead of ~1 s once the slices lie in time order on disk (BENCHMARKS.md §7)."""
    mine = ", ".join(f"x.{k}" for k in keys)
    theirs = ", ".join(f"t.{k}" for k in keys)
    return f"(x.shard, {mine}, x.ts) >= ({shard.code}, {theirs}, {lo})"


def _windows(entity: str, aggregates: list[tuple[AlertRule, Metric]], now: datetime,
             shard: Shard, starts: dict[datetime, str]) -> tuple[dict[int, str], str]:
    """The CTEs ``b`` (slices folded into bands) and ``a`` (bands into each window, a row per
    target), and each rule's value as a column of ``a`` (``windows.sql`` says why bands)."""
    if not aggregates:
        return {}, ""
    # The windows' starts, newest first: band i holds the slices from start i to start i - 1.
    bands = sorted({window_start(now, rule.window_s) for rule, _ in aggregates}, reverse=True)
    band_of = {lo: i for i, lo in enumerate(bands)}
    parts: dict[str, str] = {}  # level-1 alias -> SQL over s, per band
    aggs: dict[str, str] = {}  # level-2 SQL over b -> alias in a, per target
    value_of_rule: dict[int, str] = {}
    for rule, metric in aggregates:
        col = column_for(metric).name
        parts.update(partials(col, rule.aggregation, rule.bitmask))
        sql = combined(col, rule.aggregation, rule.bitmask,
                       band_of[window_start(now, rule.window_s)])
        value_of_rule[rule.id] = f"a.{aggs.setdefault(sql, f'v{len(aggs)}')}"
    shape, table = _TARGETS[entity], SLICES[entity].name
    keys = ", ".join(shape.keys)
    band = " ".join(f"WHEN s.ts >= %({starts[lo]})s THEN {i}" for i, lo in enumerate(bands))
    level1 = "".join(f",\n    {sql} AS {alias}" for alias, sql in parts.items())
    level2 = "".join(f",\n    ({sql})::float8 AS {alias}" for sql, alias in aggs.items())
    return value_of_rule, (
        f"b AS (\n"
        f"  SELECT {keys}, CASE {band} END AS band{level1}\n"
        f"  FROM {table} s\n"
        f"  WHERE s.ts >= %({starts[bands[-1]]})s AND {shard.slices('s')}\n"
        f"  GROUP BY {keys}, band),\n"
        f"a AS (\n"
        f"  SELECT {keys}{level2}\n"
        f"  FROM b\n"
        f"  GROUP BY {keys})")


def _target_rows(entity: str, group: list[tuple[AlertRule, Metric]], now: datetime,
                 shard: Shard, starts: dict[datetime, str]) -> str:
    shape, table = _TARGETS[entity], SLICES[entity].name
    if shape.rows is not None:
        return f"(SELECT * FROM ({shape.rows}) r WHERE {shard.hosts('r.host_id')}) t"
    keys = ", ".join(shape.keys)
    lo = starts[window_start(now, max(rule.window_s for rule, _ in group))]
    return (f"(SELECT {keys}, max(engine_id) AS engine_id FROM {table} s "
            f"WHERE ts >= %({lo})s AND {shard.slices('s')} GROUP BY {keys}) t")


def quantile_query(group: list[AlertRule], now: datetime, shard: Shard,
                   buckets: int) -> Statement:
    """The bucket counts of a histogram metric summed per (engine, layout) over the window
    (``%(since)s`` on) of these rules, which share the metric and the window."""
    metric = rule_metric(group[0])
    layout, counts = f"{metric.key}_layout", f"{metric.key}_counts"
    return (
        f"SELECT t.engine_id, e.host_id, t.{layout},\n"
        f"  {bucket_sums(f't.{counts}', buckets)}\n"
        f"FROM {SLICES[metric.entity].name} t\n"
        f"JOIN fleet_engine e ON e.id = t.engine_id\n"
        f"WHERE t.ts >= %(since)s AND t.{counts} IS NOT NULL AND {shard.slices('t')}\n"
        f"GROUP BY 1, 2, 3",
        {"since": window_start(now, group[0].window_s)})


def _quantile_hits(group: list[AlertRule], now: datetime, shard: Shard, buckets: int) -> Hits:
    """Bucket counts summed per (engine, layout) over the window in SQL; the quantile of each
    engine from the layout holding most observations (a layout change inside the window)."""
    rows = fetch(*quantile_query(group, now, shard, buckets))
    best: dict[int, tuple[int, int, list[int]]] = {}
    for engine_id, host_id, lay, totals in rows:
        counts_ = [int(c or 0) for c in totals]
        if engine_id not in best or sum(counts_) > sum(best[engine_id][2]):
            best[engine_id] = (host_id, lay, counts_)
    bounds = dict(HistogramLayout.objects.filter(id__in={b[1] for b in best.values()})
                  .values_list("id", "bounds"))
    hits: Hits = defaultdict(list)
    for engine_id, (host_id, lay, counts_) in best.items():
        for rule in group:
            value = histogram_quantile(rule.quantile or 0.0, bounds.get(lay, []), counts_)
            if value is not None and PY_OP[rule.op](value, rule.threshold):
                hits[rule.id].append(Hit(f"engine:{engine_id}", host_id, engine_id, None, value))
    return hits
