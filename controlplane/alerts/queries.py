"""Threshold rules as set-based SQL: one query per entity for every rule on it.

All the rules on one entity share one scan of its slices (windows/: 10-s partial aggregates
of the raw rows) over the longest window among them; each distinct (metric, aggregation, mask,
window) is one aggregate with a FILTER on its own window. The comparison happens in SQL too: a
lateral VALUES list holds one row per rule, and only the (rule, target) pairs whose condition
holds come back. Histogram quantiles sum the
slices' bucket counts per engine in SQL and interpolate per engine in Python
(``histogram_quantile``), one query per (metric, window).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime

from django.db import connection

from agents.protocol import Metric
from controlplane.alerts.models import Aggregation, AlertRule, Op
from controlplane.alerts.rules import rule_metric
from controlplane.alerts.windows.build import window_start
from controlplane.alerts.windows.schema import SLICES
from controlplane.alerts.windows.sql import POINTS, aggregate, point
from controlplane.telemetry.models import HistogramLayout
from controlplane.telemetry.schema import column_for
from controlplane.telemetry.series.histograms import histogram_quantile

SQL_OP = {Op.GT: ">", Op.GE: ">=", Op.LT: "<", Op.LE: "<=", Op.EQ: "=", Op.NE: "<>"}
PY_OP = {
    Op.GT: lambda a, b: a > b, Op.GE: lambda a, b: a >= b, Op.LT: lambda a, b: a < b,
    Op.LE: lambda a, b: a <= b, Op.EQ: lambda a, b: a == b, Op.NE: lambda a, b: a != b,
}

# Per entity: the grouping keys, and the target columns computed from them after grouping
# (target, host_id, engine_id, gpu_id).
_KEYS = {
    "host": ("host_id", "'host:' || a.host_id, a.host_id, NULL::int, NULL::int", ""),
    "gpu": ("gpu_id", "'gpu:' || a.gpu_id, g.host_id, NULL::int, a.gpu_id",
            "JOIN fleet_gpu g ON g.id = a.gpu_id"),
    "engine": ("engine_id", "'engine:' || a.engine_id, e.host_id, a.engine_id, NULL::int",
               "JOIN fleet_engine e ON e.id = a.engine_id"),
    "proc": ("host_id, pid", "'proc:' || a.host_id || ':' || a.pid, a.host_id, a.engine_id, "
             "NULL::int", ""),
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


def fetch(sql: str, params: list) -> list[tuple]:
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return cursor.fetchall()


def threshold_hits(rules: list[AlertRule], now: datetime) -> Hits:
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
        for rule_id, *row in fetch(*_entity_query(entity, group, now)):
            hits[rule_id].append(Hit(*row))
    for group in quantiles.values():
        for rule_id, found in _quantile_hits(group, now).items():
            hits[rule_id] += found
    return hits


def _entity_query(entity: str, group: list[tuple[AlertRule, Metric]],
                  now: datetime) -> tuple[str, list]:
    keys, target_cols, join = _KEYS[entity]
    table = SLICES[entity].name
    aggs: dict[str, str] = {}  # aggregate SQL, window included -> alias in a
    firsts: dict[str, str] = {}  # window start -> alias of the window's oldest slice
    value_of_rule: dict[int, str] = {}
    for rule, metric in group:
        col = column_for(metric).name
        # The window start as a literal, not a parameter: identical aggregate calls (the
        # sums behind two `avg` rules of one window) are then identical expressions, which
        # PostgreSQL computes once per row.
        lo = _literal(window_start(now, rule.window_s))
        if rule.aggregation in POINTS:
            first = firsts.setdefault(lo, f"f{len(firsts)}")
            value_of_rule[rule.id] = point(col, rule.aggregation, rule.bitmask, lo, first)
        else:
            sql = aggregate(col, rule.aggregation, rule.bitmask).replace("%s", lo)
            value_of_rule[rule.id] = f"a.{aggs.setdefault(sql, f'v{len(aggs)}')}"
    select = [f"({sql})::float8 AS {alias}" for sql, alias in aggs.items()]
    select += ["max(s.ts) AS newest"] + [
        f"min(s.ts) FILTER (WHERE s.ts >= {lo}) AS {alias}" for lo, alias in firsts.items()]
    if entity == "proc":
        select.append("max(s.engine_id) AS engine_id")
    points = [("l", "newest")] * bool(firsts) + [(f, f) for f in firsts.values()]
    # one primary-key lookup per target (LATERAL … LIMIT 1 keeps the planner from hashing the
    # whole slice table instead)
    fetches = " ".join(
        f"LEFT JOIN LATERAL (SELECT * FROM {table} x WHERE {_same_target(keys, 'x')} "
        f"AND x.ts = a.{col} LIMIT 1) {alias} ON true" for alias, col in points)
    longest = max(rule.window_s for rule, _ in group)
    # Every rule's value of a target in one array, then the ids of the rules whose condition
    # holds: per target one array built, not a row per rule.
    values = ", ".join(f"({value_of_rule[rule.id]})::float8" for rule, _ in group)
    checks = ", ".join(
        f"CASE WHEN x.v[{i}] {SQL_OP[rule.op]} %s::float8 THEN {int(rule.id)} END"
        for i, (rule, _) in enumerate(group, start=1))
    value_params = [rule.threshold for rule, _ in group]
    sql = (
        f"WITH a AS (SELECT {keys}, {', '.join(select)} FROM {table} s "
        f"WHERE s.ts >= %s GROUP BY {keys}) "
        f"SELECT r.rule_id, {target_cols}, x.v[r.i] FROM a {fetches} {join} "
        f"CROSS JOIN LATERAL (SELECT ARRAY[{values}] AS v OFFSET 0) x "  # computed once
        f"CROSS JOIN LATERAL unnest(ARRAY[{checks}]) WITH ORDINALITY AS r(rule_id, i) "
        f"WHERE r.rule_id IS NOT NULL")
    return sql, [window_start(now, longest), *value_params]


def _same_target(keys: str, alias: str) -> str:
    return " AND ".join(f"{alias}.{k} = a.{k}" for k in (k.strip() for k in keys.split(",")))


def _literal(at: datetime) -> str:
    return f"TIMESTAMPTZ '{at.isoformat()}'"


def _quantile_hits(group: list[AlertRule], now: datetime) -> Hits:
    """Bucket counts summed per (engine, layout) over the window in SQL; the quantile of each
    engine from the layout holding most observations (a layout change inside the window)."""
    metric = rule_metric(group[0])
    layout, counts = f"{metric.key}_layout", f"{metric.key}_counts"
    rows = fetch(
        f"SELECT s.engine_id, e.host_id, s.lay, array_agg(s.total ORDER BY s.i) "
        f"FROM (SELECT t.engine_id, t.{layout} AS lay, u.i, sum(u.c)::int8 AS total "
        f"      FROM {SLICES[metric.entity].name} t "
        f"      CROSS JOIN LATERAL unnest(t.{counts}) WITH ORDINALITY AS u(c, i) "
        f"      WHERE t.ts >= %s AND t.{counts} IS NOT NULL "
        f"      GROUP BY 1, 2, 3) s "
        f"JOIN fleet_engine e ON e.id = s.engine_id GROUP BY 1, 2, 3",
        [window_start(now, group[0].window_s)])
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
