"""Facts as the diagnoses see them, built by hand: a healthy baseline and a change per test."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

from controlplane.fleet import deployments
from controlplane.fleet.models import Deployment, Gpu, Host
from controlplane.tuning.facts import EngineMinute, Facts

END = datetime(2026, 12, 3, 12, 0, tzinfo=UTC)
GIB = 1 << 30
H200 = 143771156480


def host(**changes) -> Host:
    fields = {"hostname": "h200-node-1", "cpu_count": 32, "mem_total_bytes": 512 * 10**9,
              "numa_nodes": [{"id": 0, "cpus": list(range(16))},
                             {"id": 1, "cpus": list(range(16, 32))}]}
    made, _ = Host.objects.update_or_create(hostname=fields["hostname"],
                                            defaults={**fields, **changes})
    return made


def gpus(h: Host, count: int = 1, mem: int = H200, node: int = 0) -> list[Gpu]:
    return [Gpu.objects.get_or_create(host=h, index=i, defaults={
        "uuid": f"GPU-{h.hostname}-{i}", "mem_total_bytes": mem, "numa_node": node})[0]
            for i in range(count)]


def deployment(h: Host, **changes) -> Deployment:
    fields = {"name": "llama-8b", "model": "meta-llama/Llama-3.1-8B-Instruct", "port": 8000,
              "gpu_indices": [0], "vllm_version": "0.33.0",
              "args": {"max_num_seqs": 128, "gpu_memory_utilization": 0.9}, "cpus": None}
    fields.update(changes)
    name = fields.pop("name")
    d = Deployment.objects.filter(host=h, name=name).first() or Deployment(host=h, name=name)
    for key, value in fields.items():
        setattr(d, key, value)
    deployments.save(d)  # checked and versioned, as the API does it
    return d


# A healthy engine's minute: 8 requests/s (480 a minute), 60 running, a queue that forms and
# goes (0.02 s a request), most of TTFT (0.30 s on average) in the prefill (0.25 s); 2,000
# steps of 300 tokens on average.
HEALTHY_MINUTE = EngineMinute(
    running_max=90, running_avg=60, waiting_avg=0.1, waiting_max=2, kv_max=0.7,
    queue_s=0.02 * 480, queue_n=480, prefill_s=0.25 * 480, prefill_n=480, ttft_s=0.30 * 480,
    ttft_n=480, step_tokens=300 * 2000, steps=2000)


def minutes(count: int = 10, **changes) -> list[EngineMinute]:
    """``count`` minutes of the healthy engine, each with ``changes``."""
    return [replace(HEALTHY_MINUTE, **changes)] * count


def healthy(**changes) -> Facts:
    """Ten minutes of a well-configured deployment under moderate load."""
    h = host()
    [gpu] = gpus(h)
    d = deployment(h)
    facts = Facts(d, h, [gpu], {}, END - timedelta(minutes=10), END, [101], minutes=10,
                  kv_avg=0.55, kv_max=0.7, preemptions_per_s=0.0, preempting_share=0.0,
                  waiting_avg=0.1, running_avg=60, running_max=90,
                  generation_tps=2400, prompt_tps=9000, finished_per_s=8, ttft_p99=0.6,
                  itl_p99=0.03, gpu_util={gpu.id: 93.0}, gpu_mem_used={gpu.id: 0.9 * H200},
                  proc_cpu={4242: 55.0, 4243: 30.0}, throttled_pct=0.0,
                  proc_cpus=set(range(8)), engine_minutes=minutes())
    return replace(facts, **changes)
