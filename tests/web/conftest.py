"""The page tests' users and fleet: ``operator_client`` (an operator, signed in) and ``lead``
(an admin, signed in); ``page_fleet``: one online host with two GPUs on two NUMA nodes, an
engine and its vLLM process, and a simulated host that went silent."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

import pytest
from django.conf import settings
from django.test import Client
from django.utils import timezone

from controlplane.fleet.models import Engine, Gpu, Host
from tests.api.helpers import insert_samples
from tests.support.roles import user_with_role


@dataclass
class PageFleet:
    host: Host
    gpu0: Gpu
    gpu1: Gpu
    engine: Engine
    sim_host: Host
    sim_gpu: Gpu
    sim_engine: Engine


@pytest.fixture
def operator(db):
    return user_with_role("ops", "operator", password="correct horse battery")


@pytest.fixture
def lead(db) -> Client:
    """An admin, signed in: may change rules, channels and deployments."""
    user = user_with_role("lead", "admin", password="x")
    client = Client()
    client.force_login(user)
    return client


@pytest.fixture
def operator_client(operator) -> Client:
    client = Client()
    client.force_login(operator)
    return client


@pytest.fixture
def page_fleet(db) -> PageFleet:
    now = timezone.now()
    silent = now - timedelta(seconds=settings.PITWALL["ONLINE_WINDOW_S"] + 60)
    host = Host.objects.create(
        hostname="gpu-node-1", last_seen=now, cpu_model="AMD EPYC 9654", cpu_count=8,
        mem_total_bytes=64 * 2**30, agent_version="0.1.0", driver_version="570.86.15",
        numa_nodes=[{"id": 0, "cpus": [0, 1, 2, 3]}, {"id": 1, "cpus": [4, 5, 6, 7]}])
    gpu0 = Gpu.objects.create(host=host, uuid="GPU-a0", index=0, name="NVIDIA H100 80GB HBM3",
                              mem_total_bytes=80 * 2**30, numa_node=0)
    gpu1 = Gpu.objects.create(host=host, uuid="GPU-a1", index=1, name="NVIDIA H100 80GB HBM3",
                              mem_total_bytes=80 * 2**30, numa_node=1)
    engine = Engine.objects.create(
        host=host, name="vllm:8000/0", model="meta-llama/Llama-3.1-8B-Instruct",
        gpu_uuids=["GPU-a1"], last_seen=now,
        config={"max_num_seqs": 256, "gpu_memory_utilization": 0.9, "block_size": 16})
    sim_host = Host.objects.create(hostname="sim-host-01", simulated=True, last_seen=silent)
    sim_gpu = Gpu.objects.create(host=sim_host, uuid="GPU-sim-0", index=0, simulated=True,
                                 name="Simulated H100")
    sim_engine = Engine.objects.create(host=sim_host, name="vllm:8000/0", simulated=True,
                                       gpu_uuids=["GPU-sim-0"], last_seen=silent)
    return PageFleet(host, gpu0, gpu1, engine, sim_host, sim_gpu, sim_engine)


@pytest.fixture
def latest_samples(page_fleet: PageFleet) -> PageFleet:
    """One fresh sample of each entity of the online host; its process runs on NUMA node 0
    while its engine's GPU sits on node 1."""
    ts = timezone.now() - timedelta(seconds=2)
    h = page_fleet.host.id
    insert_samples("host", [{"host_id": h, "ts": ts, "cpu_pct": 37.5, "cpu_core_pct": [30.0] * 8,
                             "mem_used_bytes": 24 * 2**30, "mem_total_bytes": 64 * 2**30}])
    insert_samples("gpu", [
        {"gpu_id": page_fleet.gpu0.id, "ts": ts, "util_pct": 91.0, "mem_used_bytes": 60 * 2**30,
         "mem_total_bytes": 80 * 2**30, "temp_c": 64.0, "power_w": 512.0,
         "power_limit_w": 700.0, "throttle_reasons": 0x4 | 0x40},
        {"gpu_id": page_fleet.gpu1.id, "ts": ts, "util_pct": 12.0, "mem_used_bytes": 8 * 2**30,
         "mem_total_bytes": 80 * 2**30, "throttle_reasons": 0},
    ])
    insert_samples("engine", [{"engine_id": page_fleet.engine.id, "ts": ts, "up": 1,
                               "requests_running": 7, "requests_waiting": 3,
                               "kv_cache_usage": 0.42}])
    insert_samples("proc", [{"host_id": h, "pid": 4242, "ts": ts, "engine_id": page_fleet.engine.id,
                             "cpu_pct": 99.0, "rss_bytes": 3 * 2**30, "threads": 60,
                             "cpu_affinity": [0, 1, 2, 3], "numa_nodes": [0]}])
    return page_fleet
