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
    # With ``newest_since``: the 1-hour rows of the window that ends the stretches, and the
    # most raw rows one of them summarises (its fullest bucket).
    newest_rows: int = 0
    fullest: int = 0


def energy_metric() -> Metric | None:
    """The GPUs' total energy counter, joules since the driver loaded, when the catalog has it."""
    return METRICS.get(ENERGY_METRIC)


def _key(entity: Entity) -> str:
    return RAW[entity].keys[0].name


def value_totals(metric: Metric, ids: list[int], stretches: list[Stretch],
                 counter: Metric | None = None,
                 newest_since: datetime | None = None) -> dict[int, Totals]:
    """Per entity id: how many samples it has, how many hold ``metric`` and their sum; with
    ``counter`` (a monotonic counter of the same entity: ``gpu.energy_j``), how much it rose.

    ``newest_since``: where the stretches end with 1-hour rows, the same statement also counts
    each entity's 1-hour rows from ``newest_since`` to the end and the most samples one holds
    (``Totals.newest_rows``, ``Totals.fullest``; ``newest_intervals`` reads them), reading the
    hours before the stretch for that alone: the sampling interval in the pass that sums.

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
    last = stretches[-1] if stretches else None
    for s in stretches:
        newest = newest_since if s is last and s.resolution == "1h" else None
        if s.resolution == "raw":
            src, params = stretch_from(metric.entity, "raw", s.lo, s.hi, [col])
            counts = f"count(*), count(t.{col}), sum(t.{col}::float8), 0, 0.0, 0, 0"
            lo = s.lo
        else:
            table = ROLLUPS[s.resolution][metric.entity]
            src = f"{table.name} t"
            counts, params, lo = _rollup_sums(table, metric, counter, s, newest)
        rows = fetch(f"SELECT t.{key}, {counts} FROM {src} WHERE t.{key} = ANY(%s) "
                     f"AND t.ts >= %s AND t.ts < %s GROUP BY 1", [*params, ids, lo, s.hi])
        for k, samples, count, total, counted, rise, newest_rows, fullest in rows:
            if not samples:  # rows only in the hours before the stretch, read for the window
                continue
            t = out[k]
            t.samples += int(samples)
            t.rows += int(count or 0)
            t.total += total or 0.0
            t.counter_rows += int(counted or 0)
            t.counter_rise += rise or 0.0
            if newest is not None:
                t.newest_rows, t.fullest = int(newest_rows or 0), int(fullest or 0)
        if counter is not None and s.resolution == "raw":
            for k, counted, rise in _raw_rise(counter, ids, s):
                if counted:
                    out[k].counter_rows += counted
                    out[k].counter_rise += (rise or 0.0) * counted / max(1, counted - 1)
    return dict(out)


def _rollup_sums(table, metric: Metric, counter: Metric | None, s: Stretch,
                 newest: datetime | None) -> tuple[str, list, datetime]:
    """(the aggregates of one rollup stretch, their parameters, where its read starts). With
    ``newest`` before the stretch, the read starts there and the sums count only the stretch's
    rows; the last two aggregates are the rows from ``newest`` on and their most samples (else
    0, 0)."""
    avg = table.column(metric, "avg").name
    since = newest if newest is not None and newest < s.lo else None
    inside, params = ("t.ts >= %s AND ", [s.lo]) if since is not None else ("", [])
    sums = (f"sum(t.n){_where(inside)}, "
            f"sum(t.n) FILTER (WHERE {inside}t.{avg} IS NOT NULL), "
            f"sum(t.{avg}::float8 * t.n){_where(inside)}, ")
    params = params * 3
    rise, rise_params = _bucket_rise(table, counter, inside, params[:1])
    if newest is None:
        return f"{sums}{rise}, 0, 0", [*params, *rise_params], s.lo
    window = "count(*) FILTER (WHERE t.ts >= %s), max(t.n) FILTER (WHERE t.ts >= %s)"
    return (f"{sums}{rise}, {window}", [*params, *rise_params, newest, newest],
            since or s.lo)


def _where(inside: str) -> str:
    """A FILTER clause for ``inside`` (a condition ending in AND, or empty: every row)."""
    return f" FILTER (WHERE {inside.removesuffix(' AND ')})" if inside else ""


def _bucket_rise(table, counter: Metric | None, inside: str = "",
                 params: list | None = None) -> tuple[str, list]:
    """(samples with the counter, its rise scaled per bucket) as two SQL aggregates over the
    rows ``inside`` holds for (empty, or a condition taking ``params`` and ending in AND),
    and their parameters."""
    if counter is None:
        return "0, 0.0", []
    low, last = table.column(counter, "min").name, table.column(counter, "last").name
    return (f"sum(t.n) FILTER (WHERE {inside}t.{last} IS NOT NULL), "
            f"sum((t.{last}::float8 - t.{low}::float8) * t.n / (t.n - 1)) "
            f"FILTER (WHERE {inside}t.{last} IS NOT NULL AND t.n > 1)",
            [*(params or []), *(params or [])])


def _raw_rise(counter: Metric, ids: list[int], s: Stretch) -> list[tuple]:
    key, col = _key(counter.entity), column_for(counter).name
    src, params = stretch_from(counter.entity, "raw", s.lo, s.hi, [col])
    return fetch(
        f"SELECT k, count(*), sum(CASE WHEN v >= prev THEN v - prev ELSE 0 END) FROM ("
        f"SELECT t.{key} AS k, t.{col}::float8 AS v, "
        f"lag(t.{col}::float8) OVER (PARTITION BY t.{key} ORDER BY t.ts) AS prev FROM {src} "
        f"WHERE t.{key} = ANY(%s) AND t.ts >= %s AND t.ts < %s AND t.{col} IS NOT NULL) w "
        f"GROUP BY k", [*params, ids, s.lo, s.hi])


def newest_window(start: datetime, stretches: list[Stretch]) -> datetime | None:
    """Where the window of the hourly rows ``sample_intervals`` probes first starts, when
    ``value_totals`` can count them in the pass that sums (``newest_since``): the stretches
    end with 1-hour rows and the range holds the whole window; else None."""
    if not stretches or stretches[-1].resolution != "1h":
        return None
    since = stretches[-1].hi - timedelta(seconds=WIDTH["1h"] * _INTERVAL_ROWS["1h"])
    return since if since >= start else None


def newest_intervals(totals: dict[int, Totals]) -> dict[int, float]:
    """The sampling interval of each entity with a 1-hour row in every hour of the window
    ``value_totals`` counted (``newest_since``): those are its newest rows, the very rows
    ``sample_intervals`` would probe first, so the same interval. The others are absent: the
    probe answers them."""
    return {k: WIDTH["1h"] / t.fullest for k, t in totals.items()
            if t.newest_rows == _INTERVAL_ROWS["1h"] and t.fullest}


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


def stretch_counts(metrics: list[Metric], ids: list[int], s: Stretch, buckets: int,
                   value: Metric | None = None) -> list[tuple]:
    """(entity id, each metric's layout, each metric's ``buckets`` sums) per entity and
    layouts in one stretch. With ``value`` (a gauge or rate of the same entity), each row ends
    with the samples of its group, those holding ``value`` and their sum: ``value_totals``'
    figures in the pass over the same wide rows (``value_sums`` adds the groups up)."""
    entity = metrics[0].entity
    key = _key(entity)
    layouts = [f"t.{m.key}_layout" for m in metrics]
    sums = [f"sum(t.{m.key}_counts[{i}]::float8)" for m in metrics for i in range(1, buckets + 1)]
    names = [c for m in metrics for c in (f"{m.key}_layout", f"{m.key}_counts")]
    if value is not None:
        col = column_for(value).name
        if s.resolution == "raw":
            names.append(col)
            sums.append(f"count(*), count(t.{col}), sum(t.{col}::float8)")
        else:
            avg = ROLLUPS[s.resolution][entity].column(value, "avg").name
            sums.append(f"sum(t.n), sum(t.n) FILTER (WHERE t.{avg} IS NOT NULL), "
                        f"sum(t.{avg}::float8 * t.n)")
    src, params = stretch_from(entity, s.resolution, s.lo, s.hi, names)
    return fetch(
        f"SELECT t.{key}, {', '.join(layouts)}, {', '.join(sums)} FROM {src} "
        f"WHERE t.{key} = ANY(%s) AND t.ts >= %s AND t.ts < %s "
        f"GROUP BY {', '.join(str(i) for i in range(1, len(metrics) + 2))}",
        [*params, ids, s.lo, s.hi])


def value_sums(rows: list[list[tuple]]) -> dict[int, Totals]:
    """Per entity id, the ``value`` figures of ``stretch_counts`` rows (each row's last three
    columns) added up over its layout groups and stretches: ``value_totals``' figures."""
    out: dict[int, Totals] = defaultdict(Totals)
    for stretch_rows in rows:
        for row in stretch_rows:
            samples, count, total = row[-3:]
            t = out[row[0]]
            t.samples += int(samples or 0)
            t.rows += int(count or 0)
            t.total += total or 0.0
    return dict(out)
