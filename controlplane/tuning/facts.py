"""What the diagnoses read: each vLLM server's telemetry over a window, set-based.

A server is the engines (one per data-parallel rank) an agent reports on one host and port:
a deployment's, or one Pitwall only watches (started by systemd, Kubernetes, a script; no
deployment at that port). One query per table for every server at once, over the 1-minute
rollups (a 10-minute window of 1,000 servers is ~10 k engine rows and ~80 k GPU rows, where
the raw tables hold 60× that): engine gauges and rates, TTFT and ITL p99 from the summed
histogram buckets (``bucket_sums`` and ``histogram_quantile`` of telemetry's series
histograms), the server's GPUs (a deployment's own, else those its engines report),
its vLLM processes, and the host's cgroup throttling. Beside the window's aggregates, each
engine's minutes one by one (``EngineMinute``): where a request's time to first token went
(queue and prefill time from vLLM's histograms) and whether the queue was there, minute by
minute, is read from them (queueing.py). The CPUs the processes
may run on are an attribute, not a series: the newest raw process rows carry them.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.db import connection

from controlplane.fleet.models import Deployment, Engine, Gpu, Host, engine_port
from controlplane.telemetry.models import HistogramLayout
from controlplane.telemetry.packing.read import source as packed_source
from controlplane.telemetry.rollups.refresh import floor
from controlplane.telemetry.rollups.schema import TABLES as ROLLUPS
from controlplane.telemetry.series.histograms import bucket_sums, histogram_quantile, max_buckets

AFFINITY_LOOKBACK = timedelta(minutes=2)


def minute(at: datetime) -> datetime:
    """The start of the 1-minute rollup bucket holding ``at``."""
    return floor(at, 60)


@dataclass(frozen=True)
class Server:
    """What a pass diagnoses: the vLLM server at ``port`` of a host; ``deployment`` where
    Pitwall runs it, None where it only watches it."""

    host_id: int
    port: int
    deployment: Deployment | None = None

    @property
    def key(self) -> tuple[int, int]:
        return (self.host_id, self.port)

    @classmethod
    def of(cls, d: Deployment) -> Server:
        return cls(d.host_id, d.port, d)


@dataclass(frozen=True)
class EngineMinute:
    """One engine's 1-minute rollup, as the queue analysis reads it. The histogram figures
    are sums and counts of the requests whose phase ended in the minute (None: no such
    histogram reported)."""

    running_max: float | None
    running_avg: float | None
    waiting_avg: float | None
    waiting_max: float | None
    kv_max: float | None
    queue_s: float | None  # seconds waited, summed over the requests scheduled in the minute
    queue_n: int
    prefill_s: float | None
    prefill_n: int
    ttft_s: float | None
    ttft_n: int
    step_tokens: float | None = None  # tokens over the engine steps of the minute
    steps: int = 0


@dataclass
class Facts:
    """One server over [start, end); None where nothing was reported."""

    deployment: Deployment | None  # None: an engine Pitwall does not run
    host: Host
    gpus: list[Gpu]
    engine_config: dict
    start: datetime
    end: datetime
    engine_ids: list[int] = field(default_factory=list)  # one per data-parallel rank
    minutes: int = 0  # 1-min buckets with engine data
    kv_avg: float | None = None
    kv_max: float | None = None
    preemptions_per_s: float | None = None
    preempting_share: float | None = None  # of minutes with preemptions
    waiting_avg: float | None = None
    running_avg: float | None = None
    running_max: float | None = None
    generation_tps: float | None = None
    prompt_tps: float | None = None
    finished_per_s: float | None = None
    ttft_p99: float | None = None
    itl_p99: float | None = None
    gpu_util: dict[int, float] = field(default_factory=dict)  # gpu id -> avg %
    gpu_mem_used: dict[int, float] = field(default_factory=dict)  # gpu id -> avg bytes
    proc_cpu: dict[int, float] = field(default_factory=dict)  # pid -> avg % (100 = a core)
    throttled_pct: float | None = None
    proc_cpus: set[int] = field(default_factory=set)  # CPUs the processes may run on
    proc_cpu_wait: dict[int, float] = field(default_factory=dict)  # pid -> avg % waiting
    engine_minutes: list[EngineMinute] = field(default_factory=list)  # every rank's minutes
    engine: Engine | None = None  # the server's first engine (rank 0), where reported

    @property
    def args(self) -> dict:
        """The vLLM arguments Pitwall set: none for a server it does not run."""
        return (self.deployment.args or {}) if self.deployment is not None else {}

    @property
    def vllm_version(self) -> str | None:
        """The deployment's; an engine's where it reports one (else unknown: None)."""
        if self.deployment is not None:
            return self.deployment.vllm_version
        value = self.engine_config.get("vllm_version") or self.engine_config.get("version")
        return value if isinstance(value, str) and value else None

    @property
    def gpu_util_avg(self) -> float | None:
        return sum(self.gpu_util.values()) / len(self.gpu_util) if self.gpu_util else None

    @property
    def busiest_process_pct(self) -> float | None:
        return max(self.proc_cpu.values()) if self.proc_cpu else None

    @property
    def cpu_wait_pct(self) -> float | None:
        """The longest a vLLM process's threads waited for a CPU (100 = one thread always)."""
        return max(self.proc_cpu_wait.values()) if self.proc_cpu_wait else None


@dataclass
class Inventory:
    """The hosts, GPUs and engines of some hosts: read once per pass, shared by its
    windows."""

    hosts: dict[int, Host]
    gpus: dict[int, dict[int, Gpu]]  # host id -> GPU index -> GPU
    engines: dict[tuple[int, int], list[Engine]]  # (host id, port) -> its engines, by name

    @classmethod
    def load(cls, host_ids: set[int]) -> Inventory:
        hosts = Host.objects.in_bulk(host_ids)
        gpus: dict[int, dict[int, Gpu]] = defaultdict(dict)
        for gpu in Gpu.objects.filter(host_id__in=hosts, present=True).only(
                "id", "host_id", "index", "uuid", "mem_total_bytes", "numa_node", "name"):
            gpus[gpu.host_id][gpu.index] = gpu
        engines: dict[tuple[int, int], list[Engine]] = defaultdict(list)
        for engine in Engine.objects.filter(host_id__in=hosts, name__startswith="vllm:").only(
                "id", "host_id", "name", "config", "gpu_uuids", "present", "first_seen",
                "model").order_by("name"):
            if (port := engine_port(engine.name)) is not None:
                engines[(engine.host_id, port)].append(engine)
        return cls(hosts, gpus, engines)

    def server_gpus(self, server: Server) -> list[Gpu]:
        """A deployment's GPUs; else the ones its engines report running on."""
        on_host = self.gpus.get(server.host_id, {})
        if server.deployment is not None:
            return [on_host[i] for i in server.deployment.gpu_indices if i in on_host]
        uuids = {u for e in self.engines.get(server.key, []) for u in e.gpu_uuids or []}
        return [g for _, g in sorted(on_host.items()) if g.uuid in uuids]


def gather(servers: list[Server], start: datetime, end: datetime,
           inventory: Inventory | None = None,
           engines_only: bool = False) -> dict[tuple[int, int], Facts]:
    """Facts of each server (by (host id, port)) over the rollup buckets in [start, end);
    ``engines_only``: the engine gauges and rates alone (the long idle window)."""
    inventory = inventory or Inventory.load({s.host_id for s in servers})
    facts, engines, gpus = _start(servers, start, end, inventory)
    if facts:
        _engine_stats(facts, engines)
        if not engines_only:
            _engine_minutes(facts, engines)
            _latencies(facts, engines)
            _gpu_stats(facts, gpus)
            _process_stats(facts, engines)
            _host_stats(facts)
            _affinity(facts, engines)
    return {servers[i].key: f for i, f in facts.items()}


def deployment_facts(d: Deployment, start: datetime, end: datetime) -> Facts:
    return gather([Server.of(d)], start, end)[(d.host_id, d.port)]


def _start(servers: list[Server], start: datetime, end: datetime, inv: Inventory):
    """Empty facts per server (by its index in ``servers``: the statements' ``dep``), and its
    (index, engine) and (index, GPU) pairs."""
    facts, engines, gpus = {}, [], []
    for i, server in enumerate(servers):
        mine = inv.engines.get(server.key, [])
        own_gpus = inv.server_gpus(server)
        facts[i] = Facts(server.deployment, inv.hosts[server.host_id], own_gpus,
                         mine[0].config if mine else {}, start, end, [e.id for e in mine],
                         engine=mine[0] if mine else None)
        engines += [(i, e.id) for e in mine]
        gpus += [(i, g.id) for g in own_gpus]
    return facts, engines, gpus


def _query(sql: str, params: list) -> list[tuple]:
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return cursor.fetchall()


def _pairs(pairs: list[tuple[int, int]], name: str) -> tuple[str, list]:
    """A CTE ``m(dep, <name>)`` of (server index, entity id) pairs."""
    return (f"m AS (SELECT * FROM unnest(%s::int8[], %s::int8[]) AS m(dep, {name}))",
            [[p[0] for p in pairs], [p[1] for p in pairs]])


def _window(facts: dict[int, Facts]) -> list[datetime]:
    some = next(iter(facts.values()))
    return [some.start, some.end]


def _rollup_rows(facts: dict[int, Facts], pairs: list[tuple[int, int]], key: str,
                 entity: str, select: str, where: str = "", group: str = "1") -> list[tuple]:
    """``m.dep, <select>`` over the window's 1-min rollups of ``entity`` (alias x), joined to
    the servers by ``key`` (grouped by ``group``; "": row by row); no pairs, no query."""
    if not pairs:
        return []
    cte, params = _pairs(pairs, key)
    return _query(
        f"WITH {cte} SELECT m.dep, {select} FROM {ROLLUPS['1m'][entity].name} x "
        f"JOIN m ON m.{key} = x.{key} WHERE x.ts >= %s AND x.ts < %s {where}"
        + (f" GROUP BY {group}" if group else ""), params + _window(facts))


ENGINE_STATS = {  # Facts attribute -> its aggregate over the engine's 1-min rows
    "minutes": "count(*)", "kv_avg": "avg(x.kv_cache_usage_avg)",
    "kv_max": "max(x.kv_cache_usage_max)", "preemptions_per_s": "avg(x.preemptions_per_s_avg)",
    "preempting_share": "avg((x.preemptions_per_s_avg > 0.05)::int)",
    "waiting_avg": "avg(x.requests_waiting_avg)",
    "running_avg": "avg(x.requests_running_avg)", "running_max": "max(x.requests_running_max)",
    "generation_tps": "avg(x.generation_tokens_per_s_avg)",
    "prompt_tps": "avg(x.prompt_tokens_per_s_avg)",
    "finished_per_s": "avg(x.requests_finished_per_s_avg)",
}


def _engine_stats(facts: dict[int, Facts], engines: list[tuple[int, int]]) -> None:
    rows = _rollup_rows(facts, engines, "engine_id", "engine", ", ".join(ENGINE_STATS.values()),
                        where="AND x.up_max > 0")
    for dep, *values in rows:
        for name, value in zip(ENGINE_STATS, values, strict=True):
            setattr(facts[dep], name, None if value is None else float(value))
        facts[dep].minutes = int(facts[dep].minutes or 0)


def _histogram_parts(key: str) -> str:
    """A 1-min row's sum and observation count of one histogram (NULL sum: not reported)."""
    return (f"x.{key}_sum, coalesce((SELECT sum(c) FROM unnest(x.{key}_counts) c), 0)")


MINUTE_COLUMNS = ("x.requests_running_max, x.requests_running_avg, x.requests_waiting_avg, "
                  "x.requests_waiting_max, x.kv_cache_usage_max, "
                  + ", ".join(_histogram_parts(k) for k in
                              ("queue_seconds", "prefill_seconds", "ttft_seconds",
                               "iteration_tokens")))


def _engine_minutes(facts: dict[int, Facts], engines: list[tuple[int, int]]) -> None:
    rows = _rollup_rows(facts, engines, "engine_id", "engine", MINUTE_COLUMNS,
                        where="AND x.up_max > 0", group="")
    for dep, *values in rows:
        numbers = [None if v is None else float(v) for v in values]
        running_max, running_avg, waiting_avg, waiting_max, kv_max = numbers[:5]
        queue_s, queue_n, prefill_s, prefill_n, ttft_s, ttft_n, tokens, steps = numbers[5:]
        facts[dep].engine_minutes.append(EngineMinute(
            running_max, running_avg, waiting_avg, waiting_max, kv_max,
            queue_s, int(queue_n or 0), prefill_s, int(prefill_n or 0), ttft_s,
            int(ttft_n or 0), tokens, int(steps or 0)))


def _summed_buckets(facts: dict[int, Facts], engines: list[tuple[int, int]], key: str,
                    width: int) -> dict[int, tuple[int, list[int]]]:
    """Per server, one histogram's counts summed over the window, with their layout (a layout
    change inside the window: the fuller one)."""
    rows = _rollup_rows(facts, engines, "engine_id", "engine",
                        f"x.{key}_layout, {bucket_sums(f'x.{key}_counts', width)}",
                        where=f"AND x.{key}_counts IS NOT NULL", group="1, 2")
    best: dict[int, tuple[int, list[int]]] = {}
    for dep, layout, counts in rows:
        counts = [int(c or 0) for c in counts]
        if dep not in best or sum(counts) > sum(best[dep][1]):
            best[dep] = (layout, counts)
    return best


def _latencies(facts: dict[int, Facts], engines: list[tuple[int, int]]) -> None:
    if not engines:
        return
    with connection.cursor() as cursor:
        width = max_buckets(cursor)
    bounds = dict(HistogramLayout.objects.values_list("id", "bounds"))
    for key, attr in (("ttft_seconds", "ttft_p99"), ("itl_seconds", "itl_p99")):
        for dep, (layout, counts) in _summed_buckets(facts, engines, key, width).items():
            setattr(facts[dep], attr, histogram_quantile(0.99, bounds.get(layout, []), counts))


def _gpu_stats(facts: dict[int, Facts], gpus: list[tuple[int, int]]) -> None:
    rows = _rollup_rows(facts, gpus, "gpu_id", "gpu",
                        "m.gpu_id, avg(x.util_pct_avg), avg(x.mem_used_bytes_avg)", group="1, 2")
    for dep, gpu_id, util, used in rows:
        if util is not None:
            facts[dep].gpu_util[gpu_id] = float(util)
        if used is not None:
            facts[dep].gpu_mem_used[gpu_id] = float(used)


def _process_stats(facts: dict[int, Facts], engines: list[tuple[int, int]]) -> None:
    rows = _rollup_rows(facts, engines, "engine_id", "proc",
                        "x.pid, avg(x.cpu_pct_avg), avg(x.cpu_wait_pct_avg)", group="1, 2")
    for dep, pid, cpu, wait in rows:
        if cpu is not None:
            facts[dep].proc_cpu[pid] = float(cpu)
        if wait is not None:
            facts[dep].proc_cpu_wait[pid] = float(wait)


def _host_stats(facts: dict[int, Facts]) -> None:
    hosts = sorted({f.host.id for f in facts.values()})
    rows = _query(
        f"SELECT host_id, avg(cpu_throttled_pct_avg) FROM {ROLLUPS['1m']['host'].name} "
        f"WHERE host_id = ANY(%s) AND ts >= %s AND ts < %s GROUP BY 1",
        [hosts, *_window(facts)])
    throttled = {host: float(value) for host, value in rows if value is not None}
    for f in facts.values():
        f.throttled_pct = throttled.get(f.host.id)


def _affinity(facts: dict[int, Facts], engines: list[tuple[int, int]]) -> None:
    if not engines:
        return
    end = _window(facts)[1]
    cte, params = _pairs(engines, "engine_id")
    # raw or packed rows: a window that ended in a sealed day reads its packed minutes
    rows_of, more = packed_source("proc", end - AFFINITY_LOOKBACK, end,
                                  ["engine_id", "cpu_affinity"], alias="p")
    rows = _query(
        f"WITH {cte} SELECT DISTINCT ON (p.host_id, p.pid) m.dep, p.cpu_affinity "
        f"FROM {rows_of} JOIN m ON m.engine_id = p.engine_id "
        f"ORDER BY p.host_id, p.pid, p.ts DESC", params + more)
    for dep, cpus in rows:
        facts[dep].proc_cpus.update(cpus or [])
