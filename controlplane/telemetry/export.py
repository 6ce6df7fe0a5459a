"""The fleet's newest values, for the Prometheus exposition (``GET /api/v1/export/prometheus``).

What a scrape reads, and only that: the hosts seen lately, then one statement per entity table,
each joined to its fleet table for the labels. Gauges and rates are each entity's newest raw
row, one backward probe of the primary key ``(entity, ts)`` bounded below by the online window
(an entity without a row in the window is offline and left out) and above by the clock skew
ingest allows. Histograms come, by default, from each engine's newest row of the 1-minute
rollups (one probe of that table's primary key: a minute already summed, 1.5-2.5 minutes old);
asked for a window, they are the per-interval bucket deltas of each engine's raw rows in the
last ``window_s`` seconds, summed bucket by bucket in PostgreSQL, which costs the scrape about
as much again as everything else (BENCHMARKS.md). No statement scans history: the bounds prune
the daily partitions to the newest one or two (EXPLAINs in tests/bench/export_prometheus.py).

Values travel as PostgreSQL's text (``::text``): its shortest exact form of a float4 ("45.7",
not the 45.70000076293945 a float4 widened to a Python float prints) is what the exposition
writes, with no Python conversion per value. Array metrics (a host's per-core CPU) and the
processes are not read: see docs/prometheus.md.
"""

from __future__ import annotations

import zlib
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone

from agents.protocol import Entity, Metric, metrics_of
from controlplane.telemetry.rollups.schema import TABLES as ROLLUPS
from controlplane.telemetry.schema import TABLES, column_for
from controlplane.telemetry.series.sqlbits import fetch

# Ingest refreshes a host's last_seen at most every few seconds, so the fleet rows are
# preselected with this much slack; the raw rows decide what is online.
LAST_SEEN_SLACK = timedelta(seconds=60)
MAX_SHARDS = 1024


def scalar_metrics(entity: Entity) -> tuple[Metric, ...]:
    """The metrics exported as one gauge per entity: gauges and rates, not arrays."""
    return tuple(m for m in metrics_of(entity) if m.kind != "histogram" and not m.array)


def histogram_metrics(entity: Entity) -> tuple[Metric, ...]:
    return tuple(m for m in metrics_of(entity) if m.kind == "histogram")


def shard_of(hostname: str, shards: int) -> int:
    """A host's shard of ``shards``: CRC-32 of its UTF-8 hostname, modulo. Stable across
    processes and releases (Python's hash() is salted per process)."""
    return zlib.crc32(hostname.encode()) % shards


@dataclass(frozen=True)
class Selection:
    """Which hosts and engines a scrape covers. ``hostname``: a predicate on the hostname (the
    caller compiles the glob); ``model``/``deployment``: engines serving that model or run for
    that deployment, their hosts, and the GPUs those engines use; ``shard``: (i, n)."""

    hostname: Callable[[str], bool] | None = None
    model: str | None = None
    deployment: str | None = None
    shard: tuple[int, int] | None = None


@dataclass
class Values:
    """The newest gauges and rates of one entity kind: per entity its labels and one text
    value per metric of ``metrics`` (None: absent in its newest row)."""

    entity: Entity
    metrics: tuple[Metric, ...]
    labels: list[dict[str, str]] = field(default_factory=list)
    rows: list[tuple[str | None, ...]] = field(default_factory=list)


@dataclass
class Histogram:
    """One engine's histogram over the window: per-bucket counts (not cumulative, the last one
    for +Inf), their bounds, and the sum of observations."""

    labels: dict[str, str]
    bounds: tuple[float, ...]
    counts: list[int]
    sum: float


@dataclass(frozen=True)
class HistogramSource:
    """Where a scrape's histograms come from: ``minute``, each engine's newest minute of the
    1-minute rollups; ``window``, its raw rows of the last ``window_s`` seconds; ``none``."""

    kind: str = "minute"
    window_s: int = 0

    @property
    def over(self) -> str:
        """What the histograms cover, for their HELP."""
        if self.kind == "window":
            return f"the last {self.window_s} s of observations"
        return "the observations of the newest minute the 1-minute rollups hold (1.5-2.5 min ago)"


MINUTE = HistogramSource()
# The newest rolled-up minute older than this is left out: its engine stopped, or the rollups.
MINUTE_STALE = timedelta(minutes=5)


@dataclass
class Snapshot:
    values: list[Values]
    histograms: dict[Metric, list[Histogram]]
    source: HistogramSource


@dataclass
class _Engine:
    id: int
    host_id: int
    labels: dict[str, str]
    gpu_uuids: list[str]
    values: tuple[str | None, ...] | None  # None: no row in the online window


def snapshot(selection: Selection, source: HistogramSource = MINUTE,
             now: datetime | None = None) -> Snapshot:
    """The newest values of the selected online hosts, GPUs and engines, and the engines'
    histograms from ``source``."""
    now = now or timezone.now()
    online = now - timedelta(seconds=settings.PITWALL["ONLINE_WINDOW_S"])
    # Ingest refuses samples further ahead than the clock skew allowed: bounding the probes
    # there too leaves the partitions made ahead of time (empty) out of the plan.
    span = (online, now + timedelta(seconds=settings.PITWALL["MAX_CLOCK_SKEW_S"]))
    hosts = _hosts(selection, online - LAST_SEEN_SLACK)
    engines = _engines(hosts, span)
    if selection.model is not None:
        engines = [e for e in engines if e.labels.get("model") == selection.model]
    if selection.deployment is not None:
        engines = [e for e in engines if e.labels.get("deployment") == selection.deployment]
    narrowed = selection.model is not None or selection.deployment is not None
    if narrowed:
        hosts = {h: name for h, name in hosts.items() if h in {e.host_id for e in engines}}
    summing = {e.id: e.labels for e in engines} if source.kind != "none" else {}
    if source.kind == "window":
        read, bounds = _histograms, (now - timedelta(seconds=source.window_s), now)
    else:
        read, bounds = _minute_histograms, (now - MINUTE_STALE, now)
    # A window's histograms (the costliest statement) are summed on a connection of their own,
    # in a thread, while this one reads the GPUs and hosts: PostgreSQL works on two cores. Only
    # outside a caller's transaction, whose rows another connection would not see.
    apart = source.kind == "window" and bool(summing) and not connection.in_atomic_block
    with ThreadPoolExecutor(1) as pool:
        summed = pool.submit(_on_own_connection, read, summing, *bounds) if apart else None
        gpus = _gpus(hosts, span)
        hosts_read = _host_rows(hosts, span)
        histograms = summed.result() if summed is not None else read(summing, *bounds)
    if narrowed:
        gpus = _used_by(engines, gpus)
    host_values = Values("host", scalar_metrics("host"))
    for host_id, *row in hosts_read:
        host_values.labels.append({"hostname": hosts[host_id]})
        host_values.rows.append(tuple(row))
    gpu_values = Values("gpu", scalar_metrics("gpu"))
    for _, host_id, uuid, index, *row in gpus:
        gpu_values.labels.append({"hostname": hosts[host_id], "gpu_uuid": uuid,
                                  "gpu_index": str(index)})
        gpu_values.rows.append(tuple(row))
    engine_values = Values("engine", scalar_metrics("engine"))
    for engine in engines:
        if engine.values is not None:
            engine_values.labels.append(engine.labels)
            engine_values.rows.append(engine.values)
    return Snapshot([host_values, gpu_values, engine_values], histograms, source)


def _on_own_connection(read, *args):
    try:
        with transaction.atomic(), connection.cursor() as cursor:
            # Beside the main connection's reads, on two cores, parallel workers only add
            # their start-up and hand-over: 10-20 % more CPU for the same wall time.
            cursor.execute("SET LOCAL max_parallel_workers_per_gather = 0")
            return read(*args)
    finally:
        connection.close()  # this thread's connection, back to the pool


def _ids(ids) -> str:
    """An int4[] literal: psycopg's list adapter costs ~1.5 µs an element, this a tenth."""
    return "{" + ",".join(map(str, ids)) + "}"


def _hosts(selection: Selection, seen_since: datetime) -> dict[int, str]:
    rows = fetch("SELECT id, hostname FROM fleet_host WHERE last_seen >= %s", [seen_since])
    if selection.hostname is not None:
        rows = [(i, name) for i, name in rows if selection.hostname(name)]
    if selection.shard is not None:
        index, shards = selection.shard
        rows = [(i, name) for i, name in rows if shard_of(name, shards) == index]
    return dict(rows)


def _newest(entity: Entity, key: str) -> str:
    """A LATERAL subquery: the newest raw row of the entity ``key`` names, in the span (two
    parameters), its scalar values as text. One backward probe of the primary key."""
    table = TABLES[entity]
    cols = ", ".join(f"t.{column_for(m).name}::text" for m in scalar_metrics(entity))
    return (f"(SELECT {cols} FROM {table.name} t WHERE t.{table.keys[0].name} = {key} "
            f"AND t.ts >= %s AND t.ts < %s ORDER BY t.ts DESC LIMIT 1)")


def _host_rows(hosts: dict[int, str], span: tuple[datetime, datetime]) -> list[tuple]:
    """(host id, values...) of the hosts with a row in the span."""
    if not hosts:
        return []
    return fetch(f"SELECT h.id, s.* FROM unnest(%s::int4[]) AS h(id) "
                 f"CROSS JOIN LATERAL {_newest('host', 'h.id')} s", [_ids(hosts), *span])


def _gpus(hosts: dict[int, str], span: tuple[datetime, datetime]) -> list[tuple]:
    """(GPU id, host id, uuid, index, values...) of the hosts' GPUs with a row in the span."""
    if not hosts:
        return []
    return fetch(f'SELECT g.id, g.host_id, g.uuid, g."index", s.* FROM fleet_gpu g '
                 f"CROSS JOIN LATERAL {_newest('gpu', 'g.id')} s "
                 f"WHERE g.host_id = ANY(%s::int4[])", [*span, _ids(hosts)])


def _engines(hosts: dict[int, str], span: tuple[datetime, datetime]) -> list[_Engine]:
    """The engines of ``hosts``, with their model, the deployment when Pitwall runs them (the
    agent names a deployment's engines ``vllm:<port>/<rank>``, Deployment.engine_name), the
    GPUs they use and their newest values (None: offline)."""
    if not hosts:
        return []
    rows = fetch(
        "SELECT e.id, e.host_id, e.name, coalesce(nullif(e.model, ''), d.model, ''), d.name, "
        "ARRAY(SELECT jsonb_array_elements_text(e.gpu_uuids)), s.* FROM fleet_engine e "
        "LEFT JOIN fleet_deployment d "
        "ON d.host_id = e.host_id AND e.name LIKE 'vllm:' || d.port || '/%%' "
        f"LEFT JOIN LATERAL (SELECT true AS seen, n.* FROM {_newest('engine', 'e.id')} n) s "
        "ON true WHERE e.host_id = ANY(%s::int4[])", [*span, _ids(hosts)])
    out = []
    for engine_id, host_id, name, model, deployment, gpu_uuids, seen, *values in rows:
        labels = {"hostname": hosts[host_id], "engine": name}
        if model:
            labels["model"] = model
        if deployment:
            labels["deployment"] = deployment
        out.append(_Engine(engine_id, host_id, labels, gpu_uuids,
                           tuple(values) if seen else None))
    return out


def _used_by(engines: list[_Engine], gpus: list[tuple]) -> list[tuple]:
    """The GPUs the selected engines use: those they name, or every GPU of their host when an
    engine names none (an engine the agent could not place). A UUID counts on the engine's own
    host only: one that another host reports is not the engine's GPU."""
    uuids = {(e.host_id, u) for e in engines for u in e.gpu_uuids}
    whole_hosts = {e.host_id for e in engines if not e.gpu_uuids}
    return [g for g in gpus if g[1] in whole_hosts or (g[1], g[2]) in uuids]


def layouts() -> dict[int, tuple[float, ...]]:
    """Every histogram layout's bounds (a small table: capped per host, shared between hosts)."""
    return {i: tuple(b) for i, b in fetch("SELECT id, bounds FROM telemetry_histogramlayout", [])}


def _minute_histograms(engines: dict[int, dict[str, str]], lo: datetime,
                       hi: datetime) -> dict[Metric, list[Histogram]]:
    """Per histogram metric, each engine's counts in its newest 1-minute rollup row between
    ``lo`` and ``hi``: one backward probe of the rollup table's primary key per engine, the
    minute's buckets already summed by the rollup task (1,000 rows where a 60-s raw window
    sums 60,000)."""
    metrics = histogram_metrics("engine")
    out: dict[Metric, list[Histogram]] = {m: [] for m in metrics}
    if not engines or not metrics:
        return out
    table = ROLLUPS["1m"]["engine"]
    cols = ", ".join(f"{m.key}_layout, {m.key}_counts, {m.key}_sum" for m in metrics)
    rows = fetch(
        f"SELECT e.id, r.* FROM unnest(%s::int4[]) AS e(id) CROSS JOIN LATERAL "
        f"(SELECT {cols} FROM {table.name} WHERE engine_id = e.id AND ts >= %s AND ts <= %s "
        f"ORDER BY ts DESC LIMIT 1) r", [_ids(engines), lo, hi])
    bounds = layouts()
    for row in rows:
        for j, m in enumerate(metrics):
            layout, counts, total = row[1 + 3 * j:4 + 3 * j]
            lay = bounds.get(layout)
            if lay is not None and counts is not None:
                out[m].append(Histogram(engines[row[0]], lay, counts, total or 0.0))
    return out


def _histograms(engines: dict[int, dict[str, str]], lo: datetime,
                hi: datetime) -> dict[Metric, list[Histogram]]:
    """Per histogram metric, each engine's bucket counts summed over lo < ts <= hi.

    One statement: the rows of the window grouped by engine and by the layouts of the four
    histograms (a layout seldom changes inside a window), each bucket summed by PostgreSQL
    (``sum(counts[i])``), so only a row per engine comes back. Measured at 1,000 engines and
    60 s (60,000 rows, four 16-bucket histograms): 0.08 PostgreSQL CPU-s, where sending each
    group's arrays concatenated (``string_agg(array_send(counts))``) for NumPy to add cost
    0.26 and a 2-D ``array_agg`` 0.16 (and more in Python). When the layout of a histogram
    changed inside the window, buckets of different layouts cannot be added: the layout that
    holds the most observations speaks for the window, as in the series API.
    """
    metrics = histogram_metrics("engine")
    out: dict[Metric, list[Histogram]] = {m: [] for m in metrics}
    if not engines or not metrics:
        return out
    bounds = layouts()
    width = max((len(b) + 1 for b in bounds.values()), default=0)
    if width == 0:
        return out
    select, group = ["engine_id"], ["engine_id"]
    for m in metrics:
        select.append(f"{m.key}_layout")
        group.append(f"{m.key}_layout")
    for m in metrics:
        select.append(f"sum({m.key}_sum)")
        select += [f"sum({m.key}_counts[{i}])" for i in range(1, width + 1)]
    rows = fetch(
        f"SELECT {', '.join(select)} FROM {TABLES['engine'].name} "
        f"WHERE engine_id = ANY(%s::int4[]) AND ts > %s AND ts <= %s "
        f"GROUP BY {', '.join(group)}", [_ids(engines), lo, hi])
    n = len(metrics)
    groups = Counter(row[0] for row in rows)
    for j, m in enumerate(metrics):
        at = 1 + n + j * (width + 1)  # the histogram's sum, then its buckets
        found: list[Histogram] = []
        # engine -> layout -> (summed counts, sum), for the engines of several groups
        several: dict[int, dict[int, tuple[list[int], float]]] = {}
        for row in rows:
            lay = bounds.get(row[1 + j])
            if lay is None or row[at + 1] is None:
                continue  # the histogram is absent in these rows
            counts = [c or 0 for c in row[at + 1:at + 1 + len(lay) + 1]]
            if groups[row[0]] == 1:  # the usual case: one layout per engine over the window
                found.append(Histogram(engines[row[0]], lay, counts, row[at] or 0.0))
                continue
            per_layout = several.setdefault(row[0], {})
            old, old_sum = per_layout.get(row[1 + j], ([0] * len(counts), 0.0))
            per_layout[row[1 + j]] = ([a + b for a, b in zip(old, counts, strict=True)],
                                      old_sum + (row[at] or 0.0))
        for engine_id, per_layout in several.items():
            lay, (counts, total) = max(per_layout.items(), key=lambda item: sum(item[1][0]))
            found.append(Histogram(engines[engine_id], bounds[lay], counts, total))
        out[m] = found
    return out
