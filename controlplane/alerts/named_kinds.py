"""Named rule kinds: compound conditions with their own SQL, each set-based over all targets.

Each function builds the kind's statement and its named parameters (``NAMED`` runs them and
returns the (rule, target) pairs whose condition holds now, like the threshold queries; each
statement's shape is pinned in tests/alerts/snapshots/). ``rule.window_s`` is the window (for
no-data kinds: the silence that counts); ``rule.op``/``rule.threshold`` compare the value each
kind documents; ``rule.params`` holds the second threshold of a compound condition. Every
statement selects target, host_id, engine_id, gpu_id and the value (``Hit``).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta

from agents.vllm_args import serve_default
from controlplane.alerts.models import AlertRule, RuleKind
from controlplane.alerts.queries import SQL_OP, Hit, Statement, fetch
from controlplane.alerts.shards import Shard
from controlplane.alerts.windows.schema import SLICES
from controlplane.alerts.windows.slices import window_start
from controlplane.alerts.windows.sql import average, newest

GPUS, ENGINES, PROCS = (SLICES[e].name for e in ("gpu", "engine", "proc"))
# The entities whose slices each kind reads (host_no_data reads fleet_host only).
READS: dict[str, tuple[str, ...]] = {
    RuleKind.HOST_NO_DATA: (), RuleKind.ENGINE_DOWN: ("engine",),
    RuleKind.KV_PRESSURE: ("engine",), RuleKind.MEMORY_BEYOND_SHARE: ("gpu",),
    RuleKind.CPU_BOUND_ENGINE: ("proc", "gpu"),
}
# vLLM's default when an engine's config does not say (the flag was not given): the catalog's.
DEFAULT_GPU_MEMORY_UTILIZATION = serve_default("gpu_memory_utilization")
_SHARE = (
    "CASE WHEN e.config->>'gpu_memory_utilization' ~ '^[0-9]*\\.?[0-9]+$' "
    "THEN (e.config->>'gpu_memory_utilization')::float8 ELSE %(default_share)s END")
# The GPUs an engine runs on: its reported gpu_uuids, on its own host.
_ENGINE_GPUS = "JOIN fleet_gpu g ON g.host_id = e.host_id AND g.present AND e.gpu_uuids ? g.uuid"


def host_no_data(rule: AlertRule, now: datetime, shard: Shard) -> Statement:
    """Agents silent for window_s; value: seconds since the host last reported."""
    return (
        "SELECT 'host:' || h.id, h.id, NULL::int, NULL::int,\n"
        "  extract(epoch FROM %(now)s - coalesce(h.last_seen, h.created_at))::float8\n"
        "FROM fleet_host h\n"
        f"WHERE coalesce(h.last_seen, h.created_at) < %(silent_since)s AND {shard.hosts('h.id')}",
        {"now": now, "silent_since": now - timedelta(seconds=rule.window_s)})


def engine_down(rule: AlertRule, now: datetime, shard: Shard) -> Statement:
    """Engines whose last engine.up in the window is 0, or that sent nothing in it, while
    their host reports (a silent host is the agent-offline rule's). value: last engine.up."""
    return (
        "SELECT 'engine:' || e.id, e.host_id, e.id, NULL::int, coalesce(u.up, 0)::float8\n"
        "FROM fleet_engine e\n"
        "JOIN fleet_host h ON h.id = e.host_id\n"
        f"LEFT JOIN (\n"
        f"  SELECT s.engine_id, {newest('up')}[2] AS up\n"
        f"  FROM {ENGINES} s\n"
        f"  WHERE s.ts >= %(since)s AND {shard.slices('s')}\n"
        f"  GROUP BY 1) u ON u.engine_id = e.id\n"
        f"WHERE e.present AND h.last_seen > %(reported_since)s AND coalesce(u.up, 0) = 0\n"
        f"  AND {shard.hosts('h.id')}",
        {"since": window_start(now, rule.window_s),
         "reported_since": now - timedelta(seconds=rule.window_s)})


def kv_pressure(rule: AlertRule, now: datetime, shard: Shard) -> Statement:
    """avg KV-cache usage op threshold while avg requests waiting > params.waiting_above."""
    return (
        "SELECT 'engine:' || a.engine_id, e.host_id, a.engine_id, NULL::int, a.kv\n"
        "FROM (\n"
        f"  SELECT s.engine_id,\n"
        f"    {average('kv_cache_usage')} AS kv,\n"
        f"    {average('requests_waiting')} AS waiting\n"
        f"  FROM {ENGINES} s\n"
        f"  WHERE s.ts >= %(since)s AND {shard.slices('s')}\n"
        f"  GROUP BY 1) a\n"
        "JOIN fleet_engine e ON e.id = a.engine_id\n"
        f"WHERE a.kv {SQL_OP[rule.op]} %(threshold)s AND a.waiting > %(waiting_above)s",
        {"since": window_start(now, rule.window_s), "threshold": rule.threshold,
         "waiting_above": float(rule.params.get("waiting_above", 0))})


def memory_beyond_share(rule: AlertRule, now: datetime, shard: Shard) -> Statement:
    """Per GPU an engine runs on: (avg mem used - share x total) / total, where share sums the
    gpu_memory_utilization of the engines on that GPU. vLLM reserves its share at start, so a
    healthy engine sits near 0; a positive excess is another process or a leak (OOM risk)."""
    return (
        "WITH share AS (\n"
        "  SELECT g.id AS gpu_id, g.host_id, g.mem_total_bytes, min(e.id) AS engine_id,\n"
        f"    sum({_SHARE}) AS share\n"
        f"  FROM fleet_engine e {_ENGINE_GPUS}\n"
        f"  WHERE e.present AND {shard.hosts('e.host_id')}\n"
        "  GROUP BY g.id),\n"
        "used AS (\n"
        f"  SELECT s.gpu_id, {average('mem_used_bytes')} AS used,\n"
        "    max(s.mem_total_bytes_max) AS total\n"
        f"  FROM {GPUS} s\n"
        f"  WHERE s.ts >= %(since)s AND {shard.slices('s')}\n"
        "  GROUP BY 1),\n"
        "v AS (\n"
        "  SELECT s.gpu_id, s.host_id, s.engine_id,\n"
        "    (u.used - s.share * coalesce(s.mem_total_bytes, u.total))\n"
        "    / NULLIF(coalesce(s.mem_total_bytes, u.total), 0) AS excess\n"
        "  FROM share s JOIN used u ON u.gpu_id = s.gpu_id)\n"
        "SELECT 'gpu:' || v.gpu_id, v.host_id, v.engine_id, v.gpu_id, v.excess\n"
        "FROM v\n"
        f"WHERE v.excess {SQL_OP[rule.op]} %(threshold)s",
        {"default_share": DEFAULT_GPU_MEMORY_UTILIZATION,
         "since": window_start(now, rule.window_s), "threshold": rule.threshold})


def cpu_bound_engine(rule: AlertRule, now: datetime, shard: Shard) -> Statement:
    """An engine's busiest process (avg proc.cpu_pct over the window) op threshold while the
    avg gpu.util_pct of its GPUs is below params.gpu_util_below. value: that process's CPU %."""
    return (
        "WITH p AS (\n"
        "  SELECT x.engine_id, max(x.cpu) AS cpu\n"
        "  FROM (\n"
        f"    SELECT s.engine_id, s.pid, {average('cpu_pct')} AS cpu\n"
        f"    FROM {PROCS} s\n"
        f"    WHERE s.ts >= %(since)s AND s.engine_id IS NOT NULL AND {shard.slices('s')}\n"
        "    GROUP BY 1, 2) x\n"
        "  GROUP BY 1),\n"
        "gu AS (\n"
        f"  SELECT e.id AS engine_id, {average('util_pct')} AS util\n"
        f"  FROM fleet_engine e {_ENGINE_GPUS}\n"
        f"  JOIN {GPUS} s ON s.gpu_id = g.id AND s.ts >= %(since)s AND {shard.slices('s')}\n"
        f"  WHERE e.present AND {shard.hosts('e.host_id')}\n"
        "  GROUP BY 1)\n"
        "SELECT 'engine:' || e.id, e.host_id, e.id, NULL::int, p.cpu\n"
        "FROM p\n"
        "JOIN gu ON gu.engine_id = p.engine_id\n"
        "JOIN fleet_engine e ON e.id = p.engine_id\n"
        f"WHERE p.cpu {SQL_OP[rule.op]} %(threshold)s AND gu.util < %(gpu_util_below)s",
        {"since": window_start(now, rule.window_s), "threshold": rule.threshold,
         "gpu_util_below": float(rule.params.get("gpu_util_below", 85))})


Query = Callable[[AlertRule, datetime, Shard], Statement]
QUERIES: dict[str, Query] = {
    RuleKind.HOST_NO_DATA: host_no_data,
    RuleKind.ENGINE_DOWN: engine_down,
    RuleKind.KV_PRESSURE: kv_pressure,
    RuleKind.MEMORY_BEYOND_SHARE: memory_beyond_share,
    RuleKind.CPU_BOUND_ENGINE: cpu_bound_engine,
}


def _runs(query: Query) -> Callable[[AlertRule, datetime, Shard], list[Hit]]:
    def hits(rule: AlertRule, now: datetime, shard: Shard) -> list[Hit]:
        return [Hit(*row) for row in fetch(*query(rule, now, shard))]
    return hits


# kind -> (rule, now, shard) -> the targets whose condition holds now
NAMED: dict[str, Callable[[AlertRule, datetime, Shard], list[Hit]]] = {
    kind: _runs(query) for kind, query in QUERIES.items()}
