"""Named rule kinds: compound conditions with their own SQL, each set-based over all targets.

Each function returns the (rule, target) pairs whose condition holds now, like the threshold
queries. ``rule.window_s`` is the window (for no-data kinds: the silence that counts);
``rule.op``/``rule.threshold`` compare the value each kind documents; ``rule.params`` holds
the second threshold of a compound condition.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta

from controlplane.alerts.models import AlertRule, RuleKind
from controlplane.alerts.queries import SQL_OP, Hit, fetch
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
# vLLM's default when an engine's config does not say (the flag was not given).
DEFAULT_GPU_MEMORY_UTILIZATION = 0.9
_SHARE = (
    "CASE WHEN e.config->>'gpu_memory_utilization' ~ '^[0-9]*\\.?[0-9]+$' "
    "THEN (e.config->>'gpu_memory_utilization')::float8 ELSE %s END")
# The GPUs an engine runs on: its reported gpu_uuids, on its own host.
_ENGINE_GPUS = "JOIN fleet_gpu g ON g.host_id = e.host_id AND g.present AND e.gpu_uuids ? g.uuid"


def _hits(sql: str, params: list) -> list[Hit]:
    return [Hit(*row) for row in fetch(sql, params)]


def host_no_data(rule: AlertRule, now: datetime, shard: Shard) -> list[Hit]:
    """Agents silent for window_s; value: seconds since the host last reported."""
    return _hits(
        f"SELECT 'host:' || h.id, h.id, NULL::int, NULL::int, "
        f"       extract(epoch FROM %s - coalesce(h.last_seen, h.created_at))::float8 "
        f"FROM fleet_host h WHERE coalesce(h.last_seen, h.created_at) < %s "
        f"AND {shard.hosts('h.id')}",
        [now, now - timedelta(seconds=rule.window_s)])


def engine_down(rule: AlertRule, now: datetime, shard: Shard) -> list[Hit]:
    """Engines whose last engine.up in the window is 0, or that sent nothing in it, while
    their host reports (a silent host is the agent-offline rule's). value: last engine.up."""
    lo = window_start(now, rule.window_s)
    return _hits(
        f"SELECT 'engine:' || e.id, e.host_id, e.id, NULL::int, coalesce(u.up, 0)::float8 "
        f"FROM fleet_engine e JOIN fleet_host h ON h.id = e.host_id "
        f"LEFT JOIN (SELECT s.engine_id, {newest('up')}[2] AS up "
        f"           FROM {ENGINES} s WHERE s.ts >= %s AND {shard.slices('s')} "
        f"           GROUP BY 1) u ON u.engine_id = e.id "
        f"WHERE e.present AND h.last_seen > %s AND coalesce(u.up, 0) = 0 "
        f"AND {shard.hosts('h.id')}",
        [lo, lo, now - timedelta(seconds=rule.window_s)])


def kv_pressure(rule: AlertRule, now: datetime, shard: Shard) -> list[Hit]:
    """avg KV-cache usage op threshold while avg requests waiting > params.waiting_above."""
    lo = window_start(now, rule.window_s)
    return _hits(
        f"SELECT 'engine:' || a.engine_id, e.host_id, a.engine_id, NULL::int, a.kv "
        f"FROM (SELECT s.engine_id, {average('kv_cache_usage')} AS kv, "
        f"             {average('requests_waiting')} AS waiting "
        f"      FROM {ENGINES} s WHERE s.ts >= %s AND {shard.slices('s')} "
        f"      GROUP BY 1) a "
        f"JOIN fleet_engine e ON e.id = a.engine_id "
        f"WHERE a.kv {SQL_OP[rule.op]} %s AND a.waiting > %s",
        [*[lo] * 5, rule.threshold, float(rule.params.get("waiting_above", 0))])


def memory_beyond_share(rule: AlertRule, now: datetime, shard: Shard) -> list[Hit]:
    """Per GPU an engine runs on: (avg mem used - share x total) / total, where share sums the
    gpu_memory_utilization of the engines on that GPU. vLLM reserves its share at start, so a
    healthy engine sits near 0; a positive excess is another process or a leak (OOM risk)."""
    lo = window_start(now, rule.window_s)
    return _hits(
        f"WITH share AS ("
        f"  SELECT g.id AS gpu_id, g.host_id, g.mem_total_bytes, min(e.id) AS engine_id, "
        f"         sum({_SHARE}) AS share "
        f"  FROM fleet_engine e {_ENGINE_GPUS} WHERE e.present AND {shard.hosts('e.host_id')} "
        f"  GROUP BY g.id), "
        f"used AS ("
        f"  SELECT s.gpu_id, {average('mem_used_bytes')} AS used, "
        f"         max(s.mem_total_bytes_max) AS total "
        f"  FROM {GPUS} s WHERE s.ts >= %s AND {shard.slices('s')} GROUP BY 1), "
        f"v AS ("
        f"  SELECT s.gpu_id, s.host_id, s.engine_id, "
        f"         (u.used - s.share * coalesce(s.mem_total_bytes, u.total)) "
        f"         / NULLIF(coalesce(s.mem_total_bytes, u.total), 0) AS excess "
        f"  FROM share s JOIN used u ON u.gpu_id = s.gpu_id) "
        f"SELECT 'gpu:' || v.gpu_id, v.host_id, v.engine_id, v.gpu_id, v.excess FROM v "
        f"WHERE v.excess {SQL_OP[rule.op]} %s",
        [DEFAULT_GPU_MEMORY_UTILIZATION, lo, lo, lo, rule.threshold])


def cpu_bound_engine(rule: AlertRule, now: datetime, shard: Shard) -> list[Hit]:
    """An engine's busiest process (avg proc.cpu_pct over the window) op threshold while the
    avg gpu.util_pct of its GPUs is below params.gpu_util_below. value: that process's CPU %."""
    lo = window_start(now, rule.window_s)
    return _hits(
        f"WITH p AS ("
        f"  SELECT x.engine_id, max(x.cpu) AS cpu FROM ("
        f"    SELECT s.engine_id, s.pid, {average('cpu_pct')} AS cpu FROM {PROCS} s "
        f"    WHERE s.ts >= %s AND s.engine_id IS NOT NULL AND {shard.slices('s')} "
        f"    GROUP BY 1, 2) x "
        f"  GROUP BY 1), "
        f"gu AS ("
        f"  SELECT e.id AS engine_id, {average('util_pct')} AS util "
        f"  FROM fleet_engine e {_ENGINE_GPUS} "
        f"  JOIN {GPUS} s ON s.gpu_id = g.id AND s.ts >= %s AND {shard.slices('s')} "
        f"  WHERE e.present AND {shard.hosts('e.host_id')} GROUP BY 1) "
        f"SELECT 'engine:' || e.id, e.host_id, e.id, NULL::int, p.cpu "
        f"FROM p JOIN gu ON gu.engine_id = p.engine_id JOIN fleet_engine e ON e.id = p.engine_id "
        f"WHERE p.cpu {SQL_OP[rule.op]} %s AND gu.util < %s",
        [lo, lo, lo, lo, lo, lo, rule.threshold, float(rule.params.get("gpu_util_below", 85))])


NAMED: dict[str, Callable[[AlertRule, datetime, Shard], list[Hit]]] = {
    RuleKind.HOST_NO_DATA: host_no_data,
    RuleKind.ENGINE_DOWN: engine_down,
    RuleKind.KV_PRESSURE: kv_pressure,
    RuleKind.MEMORY_BEYOND_SHARE: memory_beyond_share,
    RuleKind.CPU_BOUND_ENGINE: cpu_bound_engine,
}
