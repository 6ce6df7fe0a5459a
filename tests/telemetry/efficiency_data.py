"""Known loads posted through the real ingest app, so the efficiency figures can be checked by
hand: GPUs at a fixed power (and an energy counter rising at that power), engines at a fixed
generation rate, and TTFT and ITL histograms with a known share under the objectives.

The default settings' objectives: TTFT 2000 ms, ITL 100 ms. The TTFT layout's bound 2.0 and
the ITL layout's 0.1 sit exactly on them, so the share under is whole buckets, no estimate.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field

HOSTNAME = "gpu-node-1"  # the ``host_token`` fixture's host
MODEL = "meta-llama/Llama-3.1-8B-Instruct"
WATTS = 300.0
TTFT_BOUNDS = [0.5, 2.0, 5.0]
TTFT_COUNTS = [10, 9, 1, 0]  # per histogram sample: 19 of 20 under 2 s
ITL_BOUNDS = [0.025, 0.05, 0.1, 0.2]  # one bucket more than TTFT's: read in one statement
ITL_COUNTS = [50, 40, 9, 1, 0]  # 99 of 100 under 0.1 s
HISTOGRAM_EVERY = 120  # samples: one histogram delta every two minutes at 1 s


@dataclass
class EngineLoad:
    name: str
    gpus: list[int]  # GPU indices on the host
    tokens_per_s: float
    model: str = MODEL


@dataclass
class Load:
    """``seconds`` samples one second apart from ``t0``."""

    t0: float
    seconds: int
    engines: list[EngineLoad]
    gpus: int = 2
    energy_counter: bool = True  # every GPU reports gpu.energy_j
    counter_gpus: set[int] | None = None  # only these GPUs do (None: all, when energy_counter)
    counter_reset_at: int | None = None  # the counters restart from 100 J at this sample
    boot_id: str = field(default_factory=lambda: str(uuid.uuid4()))

    def uuid(self, index: int) -> str:
        return f"GPU-{HOSTNAME}-{index}"

    def has_counter(self, index: int) -> bool:
        return self.energy_counter and (self.counter_gpus is None or index in self.counter_gpus)


def inventory(load: Load) -> dict:
    return {
        "hostname": HOSTNAME, "cpu_model": "Test CPU", "cpu_count": 16,
        "mem_total_bytes": 64 * 2**30, "numa_nodes": [{"id": 0, "cpus": list(range(16))}],
        "gpus": [{"uuid": load.uuid(i), "index": i, "name": "NVIDIA H100 80GB HBM3",
                  "mem_total_bytes": 80 * 2**30, "pci_bus_id": f"00000000:{i:02x}:00.0",
                  "numa_node": 0, "mig": None} for i in range(load.gpus)],
        "engines": [{"name": e.name, "url": "http://127.0.0.1:8000/metrics", "model": e.model,
                     "gpu_uuids": [load.uuid(i) for i in e.gpus], "config": {}}
                    for e in load.engines],
    }


def sample(load: Load, i: int) -> dict:
    ts = load.t0 + i
    gpus = []
    for g in range(load.gpus):
        gpu = {"uuid": load.uuid(g), "power_w": WATTS, "util_pct": 90.0}
        if load.has_counter(g):
            # Joules since the driver loaded: rising at WATTS from an arbitrary start.
            reset = load.counter_reset_at
            gpu["energy_j"] = (100.0 + WATTS * (i - reset) if reset is not None and i >= reset
                               else 1_000_000.0 * (g + 1) + WATTS * i)
        gpus.append(gpu)
    engines = []
    for e in load.engines:
        engine = {"name": e.name, "up": 1, "generation_tokens_per_s": e.tokens_per_s}
        if i % HISTOGRAM_EVERY == 0:
            engine["ttft_seconds"] = {"le": TTFT_BOUNDS, "counts": TTFT_COUNTS, "sum": 10.0}
            engine["itl_seconds"] = {"le": ITL_BOUNDS, "counts": ITL_COUNTS, "sum": 5.0}
        engines.append(engine)
    return {"ts": ts, "host": {"cpu_pct": 10.0}, "gpus": gpus, "engines": engines}


def post(ingest, token: str, load: Load) -> None:
    """The load as one batch (the first of its boot: it carries the inventory)."""
    body = {"protocol": 1, "agent": {"version": "test", "boot_id": load.boot_id, "seq": 1},
            "host": inventory(load),
            "samples": [sample(load, i) for i in range(load.seconds)]}
    code, reply = ingest.post(body, token)
    assert code == 200, reply
    assert reply["accepted"] == load.seconds, reply
