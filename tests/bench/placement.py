"""Placing a service's replicas over a large simulated fleet (controlplane/fleet/placement.py).
No database: ``place`` is pure, and the fleet is built in memory.

    python -m tests.bench.placement [--hosts 1000] [--replicas 100] [--runs 7]

The fleet: ``--hosts`` hosts of 8 GPUs on two NUMA nodes (16 CPUs each), in 8 zones, a third
labelled pool=batch and the rest pool=online; a fifth mix H100 and A100 hosts; about a tenth of
the GPUs held by deployments, one in fifty holding 20-40 GiB of another process, one in five
hundred lost; a quarter of the hosts with the model in their Hugging Face cache, a twentieth
offline, a few with their port range full. Three needs: 1-GPU replicas, 2-GPU replicas on
H100 in pool=online, 8-GPU replicas of a 140 GB model (weights too big for some GPUs' share).
Prints the wall time and CPU seconds of one ``place`` call (median of ``--runs``), how many
replicas were placed, and a few reasons; results also go to var/bench/placement.json.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import time
from pathlib import Path

import django

# Django's settings only (placement imports the fleet's models): no database is opened.
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "controlplane.settings")
os.environ.setdefault("SECRET_KEY", "bench-placement-no-database")
django.setup()

from controlplane.fleet.placement import GIB, GpuView, HostView, Need, place  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
MODEL = "meta-llama/Llama-3.1-8B-Instruct"
BIG = "meta-llama/Llama-3.1-70B-Instruct"
GPU_NAMES = ("NVIDIA H100 80GB HBM3", "NVIDIA A100-SXM4-40GB")


def fleet(hosts: int, seed: int) -> list[HostView]:
    rng = random.Random(seed)
    return [_host(i, rng) for i in range(hosts)]


def _host(i: int, rng: random.Random) -> HostView:
    name = GPU_NAMES[1] if i % 5 == 0 else GPU_NAMES[0]
    total = (40 if "40GB" in name else 80) * GIB
    gpus = tuple(GpuView(index=g, name=name, mem_total=total,
                         mem_foreign=rng.randint(20, 40) * GIB if rng.random() < 0.02 else 0,
                         numa_node=g // 4, present=True, lost=rng.random() < 0.002)
                 for g in range(8))
    taken = frozenset(g for g in range(8) if rng.random() < 0.1)
    cached = {MODEL: 16_060_522_496} if rng.random() < 0.25 else {}
    if rng.random() < 0.1:
        cached[BIG] = 141_107_412_992
    ports = (8000, 8003) if i % 97 == 0 else (8000, 8999)
    return HostView(
        id=i + 1, hostname=f"gpu-{i:04d}", online=rng.random() >= 0.05,
        labels={"zone": f"rack-{i % 8}", "pool": "batch" if i % 3 == 0 else "online"},
        gpus=gpus, taken_gpus=taken, taken_ports=frozenset(range(8000, 8000 + len(taken))),
        port_range=ports, node_cpus={0: list(range(16)), 1: list(range(16, 32))},
        taken_cpus=frozenset(range(4 * len(taken))), cached_models=cached, cpu_only=False)


NEEDS = {
    "1 GPU x 100, any host": Need(model=MODEL, gpus=1, mem_per_gpu=None, selector={},
                                  gpu_model="", count=100),
    "2 GPU x 100, H100 in pool=online": Need(
        model=MODEL, gpus=2, mem_per_gpu=10 * GIB, selector={"pool": "online"},
        gpu_model="H100", count=100),
    "8 GPU x 100, 140 GB weights": Need(model=BIG, gpus=8, mem_per_gpu=int(141e9 / 8 * 1.2),
                                        selector={}, gpu_model="", count=100),
}


def measure(need: Need, hosts: list[HostView], runs: int) -> dict:
    walls, cpus, result = [], [], None
    for _ in range(runs):
        wall, cpu = time.perf_counter(), time.process_time()
        result = place(need, hosts)
        walls.append(time.perf_counter() - wall)
        cpus.append(time.process_time() - cpu)
    assert result is not None
    return {"wall_s": statistics.median(walls), "cpu_s": statistics.median(cpus),
            "wall_max_s": max(walls), "placed": len(result.slots),
            "unplaced": result.unplaced, "skipped_hosts": len(result.skipped),
            "reasons": [s.reason for s in result.slots[:2]],
            "skipped": dict(sorted(result.skipped.items())[:3])}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", type=int, default=1000)
    parser.add_argument("--replicas", type=int, default=100)
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--out", type=Path, default=ROOT / "var/bench/placement.json")
    args = parser.parse_args()
    hosts = fleet(args.hosts, args.seed)
    print(f"{args.hosts} hosts x 8 GPUs, {args.replicas} replicas a placement, median of "
          f"{args.runs} runs")
    results = {}
    for label, need in NEEDS.items():
        need = Need(**{**need.__dict__, "count": args.replicas})
        row = measure(need, hosts, args.runs)
        results[label] = row
        print(f"\n{label}: {row['wall_s'] * 1e3:.1f} ms wall, {row['cpu_s'] * 1e3:.1f} ms CPU "
              f"(max {row['wall_max_s'] * 1e3:.1f} ms); placed {row['placed']}, unplaced "
              f"{row['unplaced']}, {row['skipped_hosts']} hosts skipped")
        for reason in row["reasons"]:
            print(f"  slot: {reason}")
        for hostname, why in row["skipped"].items():
            print(f"  skipped {hostname}: {why}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"hosts": args.hosts, "replicas": args.replicas,
                                    "runs": args.runs, "results": results}, indent=2))
    print(f"\nwritten: {args.out}")


if __name__ == "__main__":
    main()
