"""Named rule kinds: compound conditions over several metrics or the fleet tables.

``NAMED[kind](rule, cycle)`` returns the targets whose condition holds now, like a threshold
rule's; ``add_needs`` says what each kind reads of the slices. ``rule.window_s`` is the window
(for no-data kinds: the silence that counts); ``rule.op``/``rule.threshold`` compare the value
each kind documents; ``rule.params`` holds the second threshold of a compound condition. What
the fleet tables say (which engines run on which GPUs, their memory share) is read in SQL:
``host_no_data`` and the fleet statements are pinned in tests/alerts/snapshots/.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta

import numpy as np

from agents.vllm_args import serve_default
from controlplane.alerts import objectives
from controlplane.alerts.models import AlertRule, RuleKind
from controlplane.alerts.queries import PY_OP, Cycle, Hit, fetch, holding
from controlplane.alerts.windows.aggregate import average, extreme, in_window, newest_present
from controlplane.alerts.windows.needs import Needs

Statement = tuple[str, dict[str, object]]
# vLLM's default when an engine's config does not say (the flag was not given): the catalog's.
DEFAULT_GPU_MEMORY_UTILIZATION = serve_default("gpu_memory_utilization")
# An engine's share as it reported it, where it is one vLLM accepts (0 < share <= 1), else the
# default. The pattern bounds the digits, so the cast can neither overflow nor underflow (a
# 400-digit value once failed the rule for every host), and the range is checked in a CASE of
# its own: PostgreSQL evaluates a CASE's branches in order, an AND's operands in any order.
_REPORTED_SHARE = "(e.config->>'gpu_memory_utilization')"
_SHARE = (
    f"CASE WHEN {_REPORTED_SHARE} ~ '^(0?\\.[0-9]{{1,20}}|[01](\\.[0-9]{{0,20}})?)$' "
    f"THEN CASE WHEN {_REPORTED_SHARE}::float8 > 0 AND {_REPORTED_SHARE}::float8 <= 1 "
    f"THEN {_REPORTED_SHARE}::float8 ELSE %(default_share)s END "
    "ELSE %(default_share)s END")
# The GPUs an engine runs on: its reported gpu_uuids, on its own host.
_ENGINE_GPUS = "JOIN fleet_gpu g ON g.host_id = e.host_id AND g.present AND e.gpu_uuids ? g.uuid"
AVG = ("n", "sum")
# What each kind reads of the slices: (entity, column, parts).
READS: dict[str, tuple[tuple[str, str, tuple[str, ...]], ...]] = {
    RuleKind.HOST_NO_DATA: (),
    RuleKind.ENGINE_DOWN: (("engine", "up", ("last",)),),
    RuleKind.KV_PRESSURE: (("engine", "kv_cache_usage", AVG),
                           ("engine", "requests_waiting", AVG)),
    RuleKind.MEMORY_BEYOND_SHARE: (("gpu", "mem_used_bytes", AVG),
                                   ("gpu", "mem_total_bytes", ("max",))),
    RuleKind.CPU_BOUND_ENGINE: (("proc", "cpu_pct", AVG), ("gpu", "util_pct", AVG)),
    RuleKind.ENGINE_STALLED: (("engine", "up", ("min",)),
                              ("engine", "requests_running", ("min",)),
                              ("engine", "requests_waiting", ("min",)),
                              ("engine", "generation_tokens_per_s", ("max",)),
                              ("engine", "requests_finished_per_s", ("max",))),
    # gpu.lost: NVML answers for the GPU with "GPU is lost" (it fell off the bus)
    RuleKind.GPU_LOST: (("gpu", "lost", ("last",)),),
    RuleKind.SERVICE_DISRUPTED: (),
}


def add_needs(needs: Needs, rule: AlertRule) -> None:
    if rule.kind in objectives.KINDS:
        objectives.add_needs(needs, rule)
        return
    for entity, column, parts in READS[rule.kind]:
        needs.add(entity, rule.window_s, column, parts)


def host_no_data_sql(rule: AlertRule, now: datetime) -> Statement:
    """Agents silent for window_s; value: seconds since the host last reported."""
    return (
        "SELECT 'host:' || h.id, h.id, NULL::int, NULL::int,\n"
        "  extract(epoch FROM %(now)s - coalesce(h.last_seen, h.created_at))::float8\n"
        "FROM fleet_host h\n"
        "WHERE coalesce(h.last_seen, h.created_at) < %(silent_since)s",
        {"now": now, "silent_since": now - timedelta(seconds=rule.window_s)})


def host_no_data(rule: AlertRule, cycle: Cycle) -> list[Hit]:
    return [Hit(*row) for row in fetch(*host_no_data_sql(rule, cycle.now))]


def reporting_engines_sql(rule: AlertRule, now: datetime) -> Statement:
    """The present engines whose host reported within the window, and their hosts."""
    return ("SELECT e.id, e.host_id\n"
            "FROM fleet_engine e\n"
            "JOIN fleet_host h ON h.id = e.host_id\n"
            "WHERE e.present AND h.last_seen > %(reported_since)s",
            {"reported_since": now - timedelta(seconds=rule.window_s)})


def engine_down(rule: AlertRule, cycle: Cycle) -> list[Hit]:
    """Engines whose last engine.up in the window is 0, or that sent nothing in it, while
    their host reports (a silent host is the agent-offline rule's). value: last engine.up."""
    view = cycle.views["engine"]
    up = dict(zip(view.keys.tolist(), newest_present(
        view, "up", cycle.column("engine", rule.window_s)).tolist(), strict=True))
    hits = []
    for engine_id, host_id in fetch(*reporting_engines_sql(rule, cycle.now)):
        value = up.get(engine_id, np.nan)
        value = 0.0 if np.isnan(value) else value
        if value == 0:
            hits.append(Hit(f"engine:{engine_id}", host_id, engine_id, None, value))
    return hits


def kv_pressure(rule: AlertRule, cycle: Cycle) -> list[Hit]:
    """avg KV-cache usage op threshold while avg requests waiting > params.waiting_above."""
    view, j0 = cycle.views["engine"], cycle.column("engine", rule.window_s)
    kv, waiting = average(view, "kv_cache_usage", j0), average(view, "requests_waiting", j0)
    above = float(rule.params.get("waiting_above", 0))
    return cycle.hits("engine", {int(view.keys[u]): kv[u] for u in np.flatnonzero(
        in_window(view, j0)) if _holds(kv[u], rule) and waiting[u] > above})


def _holds(value: float, rule: AlertRule) -> bool:
    return not np.isnan(value) and PY_OP[rule.op](value, rule.threshold)


def gpu_shares_sql() -> Statement:
    """Per GPU that present engines run on: its host, total memory, the first engine, and the
    sum of their gpu_memory_utilization."""
    return ("SELECT g.id, g.host_id, g.mem_total_bytes, min(e.id),\n"
            f"  sum({_SHARE})\n"
            f"FROM fleet_engine e {_ENGINE_GPUS}\n"
            "WHERE e.present\n"
            "GROUP BY g.id",
            {"default_share": DEFAULT_GPU_MEMORY_UTILIZATION})


def memory_beyond_share(rule: AlertRule, cycle: Cycle) -> list[Hit]:
    """Per GPU an engine runs on: (avg mem used - share x total) / total, where share sums the
    gpu_memory_utilization of the engines on that GPU. vLLM reserves its share at start, so a
    healthy engine sits near 0; a positive excess is another process or a leak (OOM risk).
    Array arithmetic over the fleet's GPUs: a Python step per GPU was a tenth of a storm's
    rules phase."""
    view, j0 = cycle.views["gpu"], cycle.column("gpu", rule.window_s)
    rows = fetch(*gpu_shares_sql())
    if not rows or not len(view.keys):
        return []
    gpu_ids, host_ids, totals, engine_ids, shares = zip(*rows, strict=True)
    ids = np.array(gpu_ids, np.int64)
    u = np.minimum(np.searchsorted(view.keys, ids), len(view.keys) - 1)
    seen = (view.keys[u] == ids) & in_window(view, j0)[u]
    used = average(view, "mem_used_bytes", j0)[u]
    total = np.array([np.nan if t is None else t for t in totals], np.float64)
    total = np.where(np.isnan(total), extreme(view, "mem_total_bytes", "max", j0)[u], total)
    ok = seen & ~np.isnan(used) & ~np.isnan(total) & (total != 0)
    with np.errstate(divide="ignore", invalid="ignore"):
        excess = (used - np.array(shares, np.float64) * total) / total
    excess[~ok] = np.nan
    return [Hit(f"gpu:{gpu_ids[i]}", host_ids[i], engine_ids[i], gpu_ids[i], value)
            for i, value in zip(*_holding(excess, rule), strict=True)]


def _holding(values: np.ndarray, rule: AlertRule) -> tuple[list[int], list[float]]:
    """The positions whose value meets the rule's condition, and those values."""
    found = holding(values, rule.op, rule.threshold)
    return found.tolist(), values[found].tolist()


def engine_gpus_sql() -> Statement:
    """The GPUs each present engine runs on."""
    return f"SELECT e.id, g.id\nFROM fleet_engine e {_ENGINE_GPUS}\nWHERE e.present", {}


def cpu_bound_engine(rule: AlertRule, cycle: Cycle) -> list[Hit]:
    """An engine's busiest process (avg proc.cpu_pct over the window) op threshold while the
    avg gpu.util_pct of its GPUs is below params.gpu_util_below. value: that process's CPU %."""
    busiest = _busiest_process(cycle, rule.window_s)
    util = _engine_gpu_util(cycle, rule.window_s)
    below = float(rule.params.get("gpu_util_below", 85))
    return cycle.hits("engine", {engine_id: cpu for engine_id, cpu in busiest.items()
                                 if _holds(cpu, rule) and util.get(engine_id, np.nan) < below})


def _busiest_process(cycle: Cycle, window_s: int) -> dict[int, float]:
    """Per engine: the highest average CPU % among the processes that served it, each
    process's average over its slices in the window that served that engine."""
    view, j0 = cycle.views["proc"], cycle.column("proc", window_s)
    engines = view.engines()[:, j0:]
    sums, counts = view.part("cpu_pct", "sum", j0), view.part("cpu_pct", "n", j0)
    served = engines >= 0
    pid = np.broadcast_to((view.keys & 0xFFFFFFFF)[:, None], engines.shape)[served]
    pairs = np.stack([engines[served], pid], axis=1)
    if not len(pairs):
        return {}
    groups, which = np.unique(pairs, axis=0, return_inverse=True)
    which = which.reshape(-1)
    total = np.bincount(which, weights=np.nan_to_num(sums[served]), minlength=len(groups))
    n = np.bincount(which, weights=counts[served], minlength=len(groups))
    busiest: dict[int, float] = {}
    for (engine_id, _), s, c in zip(groups.tolist(), total, n, strict=True):
        if c > 0:
            busiest[engine_id] = max(busiest.get(engine_id, -np.inf), s / c)
    return busiest


def _engine_gpu_util(cycle: Cycle, window_s: int) -> dict[int, float]:
    """Per engine: gpu.util_pct averaged over the slices of all its GPUs in the window."""
    view, j0 = cycle.views["gpu"], cycle.column("gpu", window_s)
    total = np.nansum(view.part("util_pct", "sum", j0), axis=1)
    n = view.part("util_pct", "n", j0).sum(axis=1)
    seen = in_window(view, j0)
    at = {int(k): u for u, k in enumerate(view.keys.tolist()) if seen[u]}
    sums: dict[int, list[float]] = {}
    for engine_id, gpu_id in fetch(*engine_gpus_sql()):
        u = at.get(gpu_id)
        if u is not None:
            pair = sums.setdefault(engine_id, [0.0, 0.0])
            pair[0] += total[u]
            pair[1] += n[u]
    return {e: s / c for e, (s, c) in sums.items() if c > 0}


def engine_stalled(rule: AlertRule, cycle: Cycle) -> list[Hit]:
    """Engines that hold requests but make no progress: over the whole window (its first
    slice and one of its last two have rows) engine.up stayed 1, requests were running or
    waiting in every sample, and neither a token was generated nor a request finished. vLLM's
    /health and /metrics keep answering while its engine loop is wedged, so engine_down does
    not see it. value: requests in flight (min running + min waiting), compared op threshold.
    A down engine (up 0, no rows) is engine_down's; an idle one (nothing in flight) healthy."""
    view, j0 = cycle.views["engine"], cycle.column("engine", rule.window_s)
    if j0 >= view.width:
        return []
    rows = view.rows()
    covered = (rows[:, j0] > 0) & (rows[:, max(view.width - 2, j0):] > 0).any(axis=1)
    up = extreme(view, "up", "min", j0)
    in_flight = (np.nan_to_num(extreme(view, "requests_running", "min", j0))
                 + np.nan_to_num(extreme(view, "requests_waiting", "min", j0)))
    progress = np.fmax(extreme(view, "generation_tokens_per_s", "max", j0),
                       extreme(view, "requests_finished_per_s", "max", j0))
    stalled = covered & (up == 1) & (in_flight > 0) & (progress == 0)
    return cycle.hits("engine", {int(view.keys[u]): in_flight[u]
                                 for u in np.flatnonzero(stalled) if _holds(in_flight[u], rule)})


# gpu_lost's values: what says the GPU is lost
LOST_BY_NVML, LOST_FROM_INVENTORY = 1.0, 2.0


def absent_gpus_sql(rule: AlertRule, now: datetime) -> Statement:
    """GPUs gone from their host's inventory while that host reported within the window (a
    silent host is the agent-offline rule's), removed within params.removed_within_s (0 or
    absent: no bound)."""
    within = int(rule.params.get("removed_within_s") or 0)
    sql = ("SELECT g.id, g.host_id\n"
           "FROM fleet_gpu g\n"
           "JOIN fleet_host h ON h.id = g.host_id\n"
           "WHERE NOT g.present AND h.last_seen > %(reported_since)s")
    params: dict[str, object] = {"reported_since": now - timedelta(seconds=rule.window_s)}
    if within:
        sql += "\n  AND g.removed_at > %(removed_since)s"
        params["removed_since"] = now - timedelta(seconds=within)
    return sql, params


def gpu_lost(rule: AlertRule, cycle: Cycle) -> list[Hit]:
    """GPUs the inventory had and NVML no longer reports (absent from the host's inventory
    while the host reports: value 2), or whose last gpu.lost in the window is 1 (NVML answers
    "GPU is lost": value 1). Fires regardless of op and threshold, as engine_down does."""
    lost = {gpu_id: Hit(f"gpu:{gpu_id}", host_id, None, gpu_id, LOST_FROM_INVENTORY)
            for gpu_id, host_id in fetch(*absent_gpus_sql(rule, cycle.now))}
    view = cycle.views["gpu"]
    flags = newest_present(view, "lost", cycle.column("gpu", rule.window_s))
    by_nvml = cycle.hits("gpu", {int(view.keys[u]): LOST_BY_NVML
                                 for u in np.flatnonzero(flags == 1)})
    lost.update((hit.gpu_id, hit) for hit in by_nvml if hit.gpu_id not in lost)
    return [lost[k] for k in sorted(lost)]


# What disrupts a service: a rollout rolled back, a replica replaced elsewhere, a replica no
# host could take (ServiceEventKind values; the alerts app does not import the fleet's code).
DISRUPTIONS = ("rolled_back", "healed", "unplaced")


def service_disruptions_sql(rule: AlertRule, now: datetime) -> Statement:
    """Per service: its disruption events within the window, and its router host."""
    return ("SELECT s.id, s.router_host_id, count(*)::float8\n"
            "FROM fleet_serviceevent e\n"
            "JOIN fleet_service s ON s.id = e.service_id\n"
            "WHERE e.kind = ANY(%(kinds)s) AND e.at > %(since)s AND e.at <= %(now)s\n"
            "GROUP BY s.id",
            {"kinds": list(DISRUPTIONS), "since": now - timedelta(seconds=rule.window_s),
             "now": now})


def service_disrupted(rule: AlertRule, cycle: Cycle) -> list[Hit]:
    """Services with a rollout rolled back, a replica healed (replaced on another host) or a
    replica left unplaced within the window. value: how many such events; the target is the
    service (``service:<id>``), its host the router host (None without one). Fires regardless
    of op and threshold, as engine_down does."""
    return [Hit(f"service:{service_id}", host_id, None, None, count)
            for service_id, host_id, count in fetch(*service_disruptions_sql(rule, cycle.now))]


Kind = Callable[[AlertRule, Cycle], list[Hit]]
# kind -> (rule, cycle) -> the targets whose condition holds now
NAMED: dict[str, Kind] = {
    RuleKind.HOST_NO_DATA: host_no_data,
    RuleKind.ENGINE_DOWN: engine_down,
    RuleKind.KV_PRESSURE: kv_pressure,
    RuleKind.MEMORY_BEYOND_SHARE: memory_beyond_share,
    RuleKind.CPU_BOUND_ENGINE: cpu_bound_engine,
    RuleKind.ENGINE_STALLED: engine_stalled,
    RuleKind.GPU_LOST: gpu_lost,
    RuleKind.OBJECTIVE_ATTAINMENT: objectives.objective_attainment,
    RuleKind.ERROR_BUDGET_BURN: objectives.error_budget_burn,
    RuleKind.SERVICE_DISRUPTED: service_disrupted,
}
