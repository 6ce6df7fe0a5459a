"""The statements behind the efficiency figures: per entity totals over a list of stretches.

Each stretch is one table (raw rows, read with the packed minutes as one, or a rollup tier);
every value travels as a parameter and every name comes from the schema modules. Figures are
exact sums where the tables keep sums (histogram counts), and sample-weighted otherwise: a
rollup row's average counts for its ``n`` raw rows, as the 1-hour tier itself weighs minutes.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta

from agents.protocol import METRICS, Entity, Metric
from controlplane.telemetry.efficiency.figures import add_counts
from controlplane.telemetry.rollups.schema import TABLES as ROLLUPS
from controlplane.telemetry.schema import TABLES as RAW
from controlplane.telemetry.schema import column_for
from controlplane.telemetry.series.plan import WIDTH, Stretch, stretch_from
from controlplane.telemetry.series.sqlbits import fetch

ENERGY_METRIC = "gpu.energy_j"
# The newest rows of an entity that show its sampling interval, per tier.
_INTERVAL_ROWS = {"raw": 61, "1m": 60, "1h": 24}
# Where the newest raw rows almost always are: probed first, it prunes a 30-day range's raw
# partitions to the newest one or two (8,000 GPUs probed over every day's partition took
# 0.56 s, BENCHMARKS.md).
RECENT = timedelta(hours=1)


@dataclass
class Totals:
    """One entity's samples of one gauge or rate over the stretches read, and of a counter."""

    samples: int = 0  # rows of the entity, with the metric or not
    rows: int = 0  # samples holding the metric
    total: float = 0.0  # the sum of their values
    counter_rows: int = 0  # samples holding the counter
    counter_rise: float = 0.0  # how much it rose, scaled to the samples' intervals (below)


def energy_metric() -> Metric | None:
    """The GPUs' total energy counter, joules since the driver loaded, when the catalog has it."""
    return METRICS.get(ENERGY_METRIC)


def _key(entity: Entity) -> str:
    return RAW[entity].keys[0].name


def value_totals(metric: Metric, ids: list[int], stretches: list[Stretch],
                 counter: Metric | None = None) -> dict[int, Totals]:
    """Per entity id: how many samples it has, how many hold ``metric`` and their sum; with
    ``counter`` (a monotonic counter of the same entity: ``gpu.energy_j``), how much it rose.

    A counter's rise between the first and the last of n samples covers n - 1 sampling
    intervals where n rate samples cover n, so each bucket's rise (its last value over its
    lowest: a reset inside it counts from the restart) is scaled by n / (n - 1): for a steady
    draw, exactly the energy of the intervals the samples stand for, and never the energy of a
    gap without samples. Raw rows are one bucket per stretch, their rise the sum of the steps
    up (a step down is a reset: the step is lost)."""
    out: dict[int, Totals] = defaultdict(Totals)
    if not ids:
        return {}
    key, col = _key(metric.entity), column_for(metric).name
    for s in stretches:
        if s.resolution == "raw":
            src, params = stretch_from(metric.entity, "raw", s.lo, s.hi, [col])
            counts = f"count(*), count(t.{col}), sum(t.{col}::float8), 0, 0.0"
        else:
            table = ROLLUPS[s.resolution][metric.entity]
            src, params = f"{table.name} t", []
            avg = table.column(metric, "avg").name
            counts = (f"sum(t.n), sum(t.n) FILTER (WHERE t.{avg} IS NOT NULL), "
                      f"sum(t.{avg}::float8 * t.n), {_bucket_rise(table, counter)}")
        rows = fetch(f"SELECT t.{key}, {counts} FROM {src} WHERE t.{key} = ANY(%s) "
                     f"AND t.ts >= %s AND t.ts < %s GROUP BY 1", [*params, ids, s.lo, s.hi])
        for k, samples, count, total, counted, rise in rows:
            t = out[k]
            t.samples += int(samples or 0)
            t.rows += int(count or 0)
            t.total += total or 0.0
            t.counter_rows += int(counted or 0)
            t.counter_rise += rise or 0.0
        if counter is not None and s.resolution == "raw":
            for k, counted, rise in _raw_rise(counter, ids, s):
                if counted:
                    out[k].counter_rows += counted
                    out[k].counter_rise += (rise or 0.0) * counted / max(1, counted - 1)
    return dict(out)


def _bucket_rise(table, counter: Metric | None) -> str:
    """(samples with the counter, its rise scaled per bucket) as two SQL aggregates."""
    if counter is None:
        return "0, 0.0"
    low, last = table.column(counter, "min").name, table.column(counter, "last").name
    return (f"sum(t.n) FILTER (WHERE t.{last} IS NOT NULL), "
            f"sum((t.{last}::float8 - t.{low}::float8) * t.n / (t.n - 1)) "
            f"FILTER (WHERE t.{last} IS NOT NULL AND t.n > 1)")


def _raw_rise(counter: Metric, ids: list[int], s: Stretch) -> list[tuple]:
    key, col = _key(counter.entity), column_for(counter).name
    src, params = stretch_from(counter.entity, "raw", s.lo, s.hi, [col])
    return fetch(
        f"SELECT k, count(*), sum(CASE WHEN v >= prev THEN v - prev ELSE 0 END) FROM ("
        f"SELECT t.{key} AS k, t.{col}::float8 AS v, "
        f"lag(t.{col}::float8) OVER (PARTITION BY t.{key} ORDER BY t.ts) AS prev FROM {src} "
        f"WHERE t.{key} = ANY(%s) AND t.ts >= %s AND t.ts < %s AND t.{col} IS NOT NULL) w "
        f"GROUP BY k", [*params, ids, s.lo, s.hi])


def sample_intervals(entity: Entity, ids: list[int], lo: datetime, hi: datetime,
                     rolled_up: bool = False) -> dict[int, float]:
    """Per entity id: the agent's sampling interval in seconds, as its newest rows in
    ``[lo, hi)`` show it: the median spacing of its raw rows (those of the last ``RECENT``
    when it has two there, else of the range), else a rollup tier's width over the rows of
    its fullest bucket among the newest (a full minute of 1-s samples holds 60). Entities
    without a row are absent. One backward primary-key probe per entity and table.

    ``rolled_up``: the range reads no raw rows (it ends where the 1-hour tier does): the
    rollup tiers answer first, the hourly rows' counts (24 probed rows an entity, where 61 raw
    ones cost 0.55 s for 8,000 GPUs).

    The server does not know the agent's ``--interval``; a rate sample stands for one
    interval, so tokens and joules are the sums of the samples times this."""
    out: dict[int, float] = {}
    for source in ("1h", "1m", "raw") if rolled_up else ("raw", "1m", "1h"):
        missing = [k for k in ids if k not in out]
        if not missing:
            break
        if source == "raw":
            out.update(_raw_intervals(entity, missing, lo, hi))
        else:
            out.update(_rollup_intervals(entity, source, missing, lo, hi))
    return out


def _raw_intervals(entity: Entity, ids: list[int], lo: datetime, hi: datetime) -> dict:
    """The median spacing of each entity's newest raw rows, over the last ``RECENT`` first."""
    key, out = _key(entity), {}
    recent = max(lo, hi - RECENT)
    for since in (recent, lo) if recent > lo else (lo,):
        missing = [k for k in ids if k not in out]
        if not missing:
            break
        rows = fetch(
            f"SELECT e.k, percentile_cont(0.5) WITHIN GROUP (ORDER BY g.gap) "
            f"FROM unnest(%s::int4[]) AS e(k) CROSS JOIN LATERAL ("
            f"SELECT extract(epoch FROM r.ts - lag(r.ts) OVER (ORDER BY r.ts)) AS gap "
            f"FROM (SELECT t.ts FROM {RAW[entity].name} t WHERE t.{key} = e.k AND t.ts >= %s "
            f"AND t.ts < %s ORDER BY t.ts DESC LIMIT %s) r) g GROUP BY e.k",
            [missing, since, hi, _INTERVAL_ROWS["raw"]])
        out.update({k: float(gap) for k, gap in rows if gap})
    return out


def _rollup_intervals(entity: Entity, tier: str, ids: list[int], lo: datetime,
                      hi: datetime) -> dict:
    """A tier's width over the rows of each entity's fullest bucket among its newest."""
    key = _key(entity)
    rows = fetch(
        f"SELECT e.k, max(r.n) FROM unnest(%s::int4[]) AS e(k) CROSS JOIN LATERAL ("
        f"SELECT t.n FROM {ROLLUPS[tier][entity].name} t WHERE t.{key} = e.k "
        f"AND t.ts >= %s AND t.ts < %s ORDER BY t.ts DESC LIMIT %s) r GROUP BY e.k",
        [ids, lo, hi, _INTERVAL_ROWS[tier]])
    return {k: WIDTH[tier] / n for k, n in rows if n}


def histogram_counts(metrics: list[Metric], ids: list[int], stretches: list[Stretch],
                     buckets: int, read: Callable[[Stretch], list[tuple]] | None = None,
                     ) -> dict[str, dict[int, dict[int, list[int]]]]:
    """Per metric name, per entity id, per layout id: the bucket counts summed over the
    stretches. ``buckets``: the most buckets a layout has (its bounds and +Inf). ``read``:
    the rows of one stretch (``stretch_counts``'s), for a caller that reads a stretch shared
    by two windows once.

    All the metrics are read in one pass over each table, a ``sum`` per bucket position
    (positions past a row's layout are NULL and add nothing): three times faster than
    unnesting the arrays, which mattered at 2,000 engines over 30 days of hourly rows."""
    out: dict[str, dict[int, dict[int, list[int]]]] = {m.name: defaultdict(dict) for m in metrics}
    if not ids or not metrics or buckets < 1:
        return {name: {} for name in out}
    for s in stretches:
        rows = read(s) if read is not None else stretch_counts(metrics, ids, s, buckets)
        for row in rows:
            k, lays, counts = row[0], row[1:1 + len(metrics)], row[1 + len(metrics):]
            for j, (metric, lay) in enumerate(zip(metrics, lays, strict=True)):
                if lay is None:
                    continue
                part = counts[j * buckets:(j + 1) * buckets]
                add_counts(out[metric.name][k].setdefault(lay, []),
                           [int(c) for c in part if c is not None])
    return {name: dict(per) for name, per in out.items()}


def stretch_counts(metrics: list[Metric], ids: list[int], s: Stretch,
                   buckets: int) -> list[tuple]:
    """(entity id, each metric's layout, each metric's ``buckets`` sums) per entity and
    layouts in one stretch."""
    entity = metrics[0].entity
    key = _key(entity)
    layouts = [f"t.{m.key}_layout" for m in metrics]
    sums = [f"sum(t.{m.key}_counts[{i}]::float8)" for m in metrics for i in range(1, buckets + 1)]
    names = [c for m in metrics for c in (f"{m.key}_layout", f"{m.key}_counts")]
    src, params = stretch_from(entity, s.resolution, s.lo, s.hi, names)
    return fetch(
        f"SELECT t.{key}, {', '.join(layouts)}, {', '.join(sums)} FROM {src} "
        f"WHERE t.{key} = ANY(%s) AND t.ts >= %s AND t.ts < %s "
        f"GROUP BY {', '.join(str(i) for i in range(1, len(metrics) + 2))}",
        [*params, ids, s.lo, s.hi])
