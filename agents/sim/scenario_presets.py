"""Named scenarios, one per diagnosis, and a summary of what a scenario's batches show.

Each preset changes the default scenario (one Llama-3.1-8B on GPU 0 of an 8 x H100 host,
8 dedicated CPUs on the GPU's NUMA node, chat traffic) just enough to show one symptom.
``summary()`` reduces batches to the figures the diagnoses read; the numbers each preset gives
are in tests/agents/test_sim_scenario.py and the table of the change that added them.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from agents.sim.engine_model import GIB
from agents.sim.scenario import ENGINE_PID, HostShape, Perturbations, Scenario

_BASE = Scenario()
_D, _L = _BASE.deployment, _BASE.load


def _with(deployment: dict[str, Any] | None = None, load: dict[str, Any] | None = None,
          perturb: Perturbations | None = None, host: HostShape | None = None) -> Scenario:
    return Scenario(host or _BASE.host, replace(_D, **(deployment or {})),
                    replace(_L, **(load or {})), perturb or Perturbations())


PRESETS: dict[str, Scenario] = {
    "healthy": _with(load={"rate": 3.0}),
    # A KV cache of ~38 k tokens (gpu_memory_utilization 0.27 leaves 4.7 GiB after the
    # weights) for traffic that wants more: usage near 100 %, recompute preemptions.
    "kv_pressure": _with({"gpu_memory_utilization": 0.27}, {"rate": 8.0}),
    # 16 sequences at most while KV has room: running = 16, a queue that never drains.
    "concurrency_cap": _with({"max_num_seqs": 16}, {"rate": 6.0}),
    # The same cap under a closed loop of 28 clients, each back 2 s (the median) after its
    # answer: running reaches 16 every minute but averages a little below it, and the queue
    # holds a few requests on average yet empties within every minute, as requests finish and
    # are admitted in bursts (the shape vLLM 0.32 showed under a cap; the open loop above
    # keeps running pinned at the cap and the queue never empty).
    "capped_clients": _with({"max_num_seqs": 16}, {"clients": 28, "outside_s": 2.0}),
    # Long prompts through a 512-token budget: prefill crawls, TTFT p99 of seconds, while
    # decodes (scheduled first) keep ITL low. More batched tokens would help.
    "prefill_starved_ttft": _with({"max_num_batched_tokens": 512, "max_model_len": 16384},
                                  {"rate": 2.5, "mix": "long_prompts"}),
    # A 32 k budget lets whole 6 k-token prompts into one step: every decode in that step
    # waits ~0.25 s, so ITL p99 is high. Fewer batched tokens would help.
    "prefill_interference_itl": _with({"max_num_batched_tokens": 32768, "max_model_len": 32768},
                                      {"rate": 1.5, "mix": "long_prompts"}),
    # A container CPU limit of 750m on a busy engine: the engine core alone wants a core,
    # the group is throttled, steps wait for CPU, the GPU idles and TTFT grows.
    "cpu_starved": _with({"cpus": (0, 1)}, {"rate": 6.0}, Perturbations(cpu_quota=0.75)),
    # vLLM's CPUs on node 1, its GPU on node 0.
    "numa_mismatch": _with({"cpus": tuple(range(32, 40))}),
    # Another process holds 6 GiB on the engine's GPU, beyond vLLM's 90 %.
    "foreign_gpu_memory": _with(perturb=Perturbations(foreign_gpu_bytes={0: 6 * GIB})),
    # A 16 GB GPU, 4 cores, 32 GB of RAM: below the reference host. A 1B model fits.
    "small_host": _with({"model": "meta-llama/Llama-3.2-1B-Instruct", "max_num_seqs": 64,
                         "max_model_len": 4096, "cpus": (0, 1, 2, 3)}, {"rate": 1.0},
                        host=HostShape(hostname="sim-small-01", gpus=1, gpu_mem_bytes=16 * GIB,
                                       gpu_name="NVIDIA T4-16GB (simulated)",
                                       numa_nodes=((0, 1, 2, 3),), gpu_nodes=(0,),
                                       mem_bytes=32 * GIB)),
    # One request every 50 s on a whole H100: idle, KV usage near 0.
    "idle": _with(load={"rate": 0.02}),
    # Not a tuning diagnosis but an alert: a tensor-parallel engine on GPUs 0-1 (NVLink
    # traffic) while two idle GPUs fall off the bus a minute in, GPU 3 as NVML's "GPU is lost"
    # (and XID 79), GPU 5 by vanishing from NVML's list.
    "gpu_off_bus": _with({"tensor_parallel_size": 2, "gpu_indices": (0, 1)}, {"rate": 3.0},
                         Perturbations(off_bus={3: ("lost", 60.0), 5: ("vanished", 60.0)})),
}


def preset(name: str) -> Scenario:
    try:
        return PRESETS[name]
    except KeyError:
        raise ValueError(f"no preset {name!r}; one of {', '.join(PRESETS)}") from None


def summary(batches: list[dict[str, Any]], gpu_uuids: list[str] | None = None) -> dict[str, Any]:
    """Averages over the samples (p99 from the summed histogram deltas), as the rules read."""
    samples = [s for b in batches for s in b["samples"]]
    engines = [e for s in samples for e in s.get("engines", ())]
    uuids = set(gpu_uuids or _engine_gpus(batches))
    gpus = [g for s in samples for g in s.get("gpus", ()) if g["uuid"] in uuids]
    procs = [p for s in samples for p in s.get("processes", ())]
    hosts = [s["host"] for s in samples if "host" in s]
    return {
        "kv_usage": _avg(engines, "kv_cache_usage"),
        "preemptions_per_s": _avg(engines, "preemptions_per_s"),
        "waiting": _avg(engines, "requests_waiting"),
        "running": _avg(engines, "requests_running"),
        "running_max": max((e.get("requests_running", 0) for e in engines), default=0),
        "finished_per_s": _avg(engines, "requests_finished_per_s"),
        "ttft_p99": _p99(engines, "ttft_seconds"), "itl_p99": _p99(engines, "itl_seconds"),
        "gpu_util": _avg(gpus, "util_pct"),
        "engine_core_cpu": _avg([p for p in procs if p["pid"] == ENGINE_PID], "cpu_pct"),
        "busiest_proc_cpu": max((_avg([p for p in procs if p["pid"] == pid], "cpu_pct") or 0
                                 for pid in {p["pid"] for p in procs}), default=None),
        "throttled_pct": _avg(hosts, "cpu_throttled_pct"),
    }


def _engine_gpus(batches: list[dict[str, Any]]) -> list[str]:
    inventory = next(b["host"] for b in reversed(batches) if "host" in b)
    return [u for e in inventory["engines"] for u in e.get("gpu_uuids", ())]


def _avg(items: list[dict[str, Any]], key: str) -> float | None:
    values = [item[key] for item in items if key in item]
    return sum(values) / len(values) if values else None


def _p99(engines: list[dict[str, Any]], key: str) -> float | None:
    hists = [e[key] for e in engines if key in e]
    if not hists:
        return None
    bounds = hists[0]["le"]
    counts = [sum(h["counts"][i] for h in hists) for i in range(len(bounds) + 1)]
    total, seen = sum(counts), 0
    for bound, count in zip([*bounds, float("inf")], counts, strict=True):
        seen += count
        if total and seen >= 0.99 * total:
            return bound
    return None
