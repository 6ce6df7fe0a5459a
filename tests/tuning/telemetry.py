"""Telemetry of one deployment written as raw rows (every 10 s) and rolled up by the real
rollup builder, so a tuning pass reads what it reads in production."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from django.utils import timezone

from agents.sim.scenario import Scenario
from controlplane.fleet import deployments
from controlplane.fleet.models import Deployment, Engine, Gpu, Host
from controlplane.telemetry.rollups import refresh as build
from tests.api.helpers import insert_samples, layout

TTFT_BOUNDS = [0.1, 0.5, 1.0, 2.5, 5.0, 10.0]
ITL_BOUNDS = [0.01, 0.025, 0.05, 0.1, 0.25, 0.5]
PID = 4242


@dataclass
class Target:
    deployment: Deployment | None  # None: an engine Pitwall does not run
    engine: Engine
    gpus: list[Gpu]


def target(d: Deployment) -> Target:
    engine, _ = Engine.objects.get_or_create(host=d.host, name=f"vllm:{d.port}/0")
    gpus = list(Gpu.objects.filter(host=d.host, index__in=d.gpu_indices))
    return Target(d, engine, gpus)


def watched(h: Host, port: int = 9000, gpu_indices: tuple[int, ...] = (0,),
            config: dict | None = None) -> Target:
    """A vLLM server the agent scrapes but Pitwall does not run (no deployment at its port),
    seen for hours, on those GPUs."""
    gpus = list(Gpu.objects.filter(host=h, index__in=gpu_indices))
    engine, _ = Engine.objects.update_or_create(host=h, name=f"vllm:{port}/0", defaults={
        "gpu_uuids": [g.uuid for g in gpus], "config": config or {}, "present": True,
        "first_seen": timezone.now() - timedelta(hours=2)})
    return Target(None, engine, gpus)


def write(t: Target, start: datetime, minutes: int, engine: dict | None = None,
          gpu: dict | None = None, proc: dict | None = None, host: dict | None = None,
          ttft: list[int] | None = None, itl: list[int] | None = None) -> None:
    """Rows every 10 s over ``minutes`` from ``start``: the values given, healthy otherwise;
    ``ttft``/``itl``: bucket counts per row (6 bounds + Inf)."""
    stamps = [start + timedelta(seconds=10 * i + 5) for i in range(minutes * 6)]
    e = {"up": 1, "requests_running": 60, "requests_waiting": 0, "kv_cache_usage": 0.5,
         "preemptions_per_s": 0.0, "generation_tokens_per_s": 2000.0,
         "prompt_tokens_per_s": 8000.0, "requests_finished_per_s": 6.0, **(engine or {})}
    hist = {"ttft_seconds_layout": layout(TTFT_BOUNDS),
            "ttft_seconds_counts": ttft or [10, 20, 5, 1, 0, 0, 0],
            "itl_seconds_layout": layout(ITL_BOUNDS),
            "itl_seconds_counts": itl or [500, 300, 20, 0, 0, 0, 0]}
    insert_samples("engine", [{"engine_id": t.engine.id, "ts": ts, **e, **hist}
                              for ts in stamps])
    g = {"util_pct": 93.0, "mem_used_bytes": None, **(gpu or {})}
    insert_samples("gpu", [{"gpu_id": x.id, "ts": ts, **g,
                            "mem_used_bytes": g["mem_used_bytes"] or int(0.9 *
                                                                         x.mem_total_bytes)}
                           for x in t.gpus for ts in stamps])
    p = {"cpu_pct": 50.0, "cpu_affinity": list(range(8)), **(proc or {})}
    insert_samples("proc", [{"host_id": t.engine.host_id, "pid": PID, "ts": ts,
                             "engine_id": t.engine.id, **p} for ts in stamps])
    insert_samples("host", [{"host_id": t.engine.host_id, "ts": ts, "cpu_pct": 30.0,
                             **(host or {})} for ts in stamps])


def roll_up() -> None:
    build.catch_up(timezone.now())


def steady(d: Deployment, hours: float = 2) -> Deployment:
    """As if its current revision had run for a while."""
    Deployment.objects.filter(pk=d.pk).update(
        updated_at=timezone.now() - timedelta(hours=hours))
    d.refresh_from_db()
    return d


def declare(host: Host, scenario: Scenario, name: str = "scenario") -> Deployment:
    """The deployment a simulated scenario runs (agents/sim/scenario.py), as an operator
    would have declared it, its revision run for a while."""
    spec = scenario.deployment
    d = Deployment(host=host, name=name, model=spec.model, port=spec.port,
                   gpu_indices=list(spec.gpu_indices), vllm_version="0.33.0",
                   cpus=list(spec.cpus), args={
                       "max_num_seqs": spec.max_num_seqs,
                       "max_num_batched_tokens": spec.max_num_batched_tokens,
                       "gpu_memory_utilization": spec.gpu_memory_utilization,
                       "tensor_parallel_size": spec.tensor_parallel_size,
                       "max_model_len": spec.max_model_len})
    deployments.save(d)
    return steady(d)
