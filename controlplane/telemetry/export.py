"""The fleet's newest values, for the Prometheus exposition (``GET /api/v1/export/prometheus``).

What a scrape reads, and only that: the fleet tables of the selected hosts, then one statement
per entity table. Gauges and rates are each entity's newest raw row, one backward probe of the
primary key ``(entity, ts)`` bounded below by the online window (an entity without a row in the
window is offline and left out); histograms are the per-interval bucket deltas of each engine's
raw rows in the last ``window_s`` seconds, summed bucket by bucket in PostgreSQL (a range of
the same primary key). No statement scans history: the bounds prune the daily partitions to
the newest one or two and the keys are probed one entity at a time.

Values travel as PostgreSQL's text (``::text``): its shortest exact form of a float4 ("45.7",
not the 45.70000076293945 a float4 widened to a Python float prints) is what the exposition
writes, with no Python conversion per value. Array metrics (a host's per-core CPU) and the
processes are not read: see docs/prometheus.md.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.conf import settings
from django.db import connection
from django.utils import timezone

from agents.protocol import Entity, Metric, metrics_of
from controlplane.telemetry.schema import TABLES, column_for

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
    bounds: list[float]
    counts: list[int]
    sum: float


@dataclass
class Snapshot:
    values: list[Values]
    histograms: dict[Metric, list[Histogram]]
    window_s: int


@dataclass
class _Engine:
    id: int
    host_id: int
    labels: dict[str, str]
    gpu_uuids: list[str]


def snapshot(selection: Selection, window_s: int, now: datetime | None = None) -> Snapshot:
    now = now or timezone.now()
    online = now - timedelta(seconds=settings.PITWALL["ONLINE_WINDOW_S"])
    hosts = _hosts(selection, online - LAST_SEEN_SLACK)
    engines = _engines(hosts)
    if selection.model is not None:
        engines = [e for e in engines if e.labels.get("model") == selection.model]
    if selection.deployment is not None:
        engines = [e for e in engines if e.labels.get("deployment") == selection.deployment]
    gpus = _gpus(hosts)
    if selection.model is not None or selection.deployment is not None:
        hosts = {h: name for h, name in hosts.items() if h in {e.host_id for e in engines}}
        gpus = _gpus_of(engines, gpus)
    host_labels = {h: {"hostname": name} for h, name in hosts.items()}
    gpu_labels = {g: {"hostname": hosts[h], "gpu_uuid": uuid, "gpu_index": str(index)}
                  for g, h, uuid, index in gpus}
    engine_labels = {e.id: e.labels for e in engines}
    values = [_latest("host", host_labels, online), _latest("gpu", gpu_labels, online),
              _latest("engine", engine_labels, online)]
    return Snapshot(values, _histograms(engine_labels, now - timedelta(seconds=window_s), now),
                    window_s)


def _rows(sql: str, params: list) -> list[tuple]:
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return cursor.fetchall()


def _hosts(selection: Selection, seen_since: datetime) -> dict[int, str]:
    rows = _rows("SELECT id, hostname FROM fleet_host WHERE last_seen >= %s", [seen_since])
    if selection.hostname is not None:
        rows = [(i, name) for i, name in rows if selection.hostname(name)]
    if selection.shard is not None:
        index, shards = selection.shard
        rows = [(i, name) for i, name in rows if shard_of(name, shards) == index]
    return dict(rows)


def _gpus(hosts: dict[int, str]) -> list[tuple[int, int, str, int]]:
    return _rows('SELECT id, host_id, uuid, "index" FROM fleet_gpu WHERE host_id = ANY(%s)',
                 [list(hosts)])


def _engines(hosts: dict[int, str]) -> list[_Engine]:
    """The engines of ``hosts`` with their model and, when Pitwall runs them, the deployment:
    the agent names a deployment's engines ``vllm:<port>/<rank>`` (Deployment.engine_name)."""
    rows = _rows(
        "SELECT e.id, e.host_id, e.name, coalesce(nullif(e.model, ''), d.model, ''), "
        "d.name, ARRAY(SELECT jsonb_array_elements_text(e.gpu_uuids)) "
        "FROM fleet_engine e LEFT JOIN fleet_deployment d "
        "ON d.host_id = e.host_id AND e.name LIKE 'vllm:' || d.port || '/%%' "
        "WHERE e.host_id = ANY(%s)", [list(hosts)])
    out = []
    for engine_id, host_id, name, model, deployment, gpu_uuids in rows:
        labels = {"hostname": hosts[host_id], "engine": name}
        if model:
            labels["model"] = model
        if deployment:
            labels["deployment"] = deployment
        out.append(_Engine(engine_id, host_id, labels, gpu_uuids))
    return out


def _gpus_of(engines: list[_Engine], gpus: list[tuple]) -> list[tuple]:
    """The GPUs the selected engines use: those they name, or every GPU of their host when an
    engine names none (an engine the agent could not place)."""
    uuids = {u for e in engines for u in e.gpu_uuids}
    whole_hosts = {e.host_id for e in engines if not e.gpu_uuids}
    return [g for g in gpus if g[1] in whole_hosts or g[2] in uuids]


def _latest(entity: Entity, labels: dict[int, dict[str, str]], since: datetime) -> Values:
    """Each entity's newest raw row at or after ``since``: one backward probe of the primary
    key per entity (the LATERAL's ORDER BY ts DESC LIMIT 1)."""
    metrics = scalar_metrics(entity)
    out = Values(entity, metrics)
    if not labels:
        return out
    table = TABLES[entity]
    key = table.keys[0].name
    cols = ", ".join(f"{column_for(m).name}::text" for m in metrics)
    rows = _rows(
        f"SELECT e.id, s.* FROM unnest(%s::int4[]) AS e(id) CROSS JOIN LATERAL "
        f"(SELECT {cols} FROM {table.name} WHERE {key} = e.id AND ts >= %s "
        f"ORDER BY ts DESC LIMIT 1) s", [list(labels), since])
    for row in rows:
        out.labels.append(labels[row[0]])
        out.rows.append(row[1:])
    return out


def layouts() -> dict[int, list[float]]:
    """Every histogram layout's bounds (a small table: capped per host, shared between hosts)."""
    return dict(_rows("SELECT id, bounds FROM telemetry_histogramlayout", []))


def _histograms(engines: dict[int, dict[str, str]], lo: datetime,
                hi: datetime) -> dict[Metric, list[Histogram]]:
    """Per histogram metric, each engine's bucket counts summed over lo < ts <= hi.

    One statement: the rows of the window grouped by engine and by the layouts of the four
    histograms (a layout seldom changes inside a window), each bucket summed by PostgreSQL
    (``sum(counts[i])``), so only a row per engine comes back. When the layout of a histogram
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
    rows = _rows(
        f"SELECT {', '.join(select)} FROM {TABLES['engine'].name} "
        f"WHERE engine_id = ANY(%s::int4[]) AND ts > %s AND ts <= %s "
        f"GROUP BY {', '.join(group)}", [list(engines), lo, hi])
    n = len(metrics)
    for j, m in enumerate(metrics):
        # engine -> layout -> (summed counts, sum)
        found: dict[int, dict[int, tuple[list[int], float]]] = {}
        for row in rows:
            lay = row[1 + j]
            part = row[1 + n + j * (width + 1):1 + n + (j + 1) * (width + 1)]
            if lay is None or lay not in bounds or part[1] is None:
                continue  # the histogram is absent in these rows
            size = len(bounds[lay]) + 1
            counts = [int(c or 0) for c in part[1:1 + size]]
            per_layout = found.setdefault(row[0], {})
            old, old_sum = per_layout.get(lay, ([0] * size, 0.0))
            per_layout[lay] = ([a + b for a, b in zip(old, counts, strict=True)],
                               old_sum + float(part[0] or 0.0))
        for engine_id, per_layout in found.items():
            lay, (counts, total) = max(per_layout.items(), key=lambda item: sum(item[1][0]))
            out[m].append(Histogram(engines[engine_id], list(bounds[lay]), counts, total))
    return out

