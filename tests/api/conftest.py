"""The API tests' fleet and users. ``mixed_fleet``: hosts online, offline and never seen, GPUs
and engines in each state; ``staff`` (carol, an admin) may change rules and channels;
``gpu_host``: a host with two GPUs on two NUMA nodes and its agent's client."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

import pytest
from django.conf import settings
from django.utils import timezone
from rest_framework.test import APIClient

from controlplane.fleet.models import Engine, Gpu, Host
from controlplane.fleet.tokens import issue_agent_token, issue_api_token
from tests.api.deploying import GpuHost
from tests.support.clients import bearer_client
from tests.support.roles import user_with_role


@dataclass
class MixedFleet:
    online_host: Host
    offline_host: Host
    unseen_host: Host
    gpu: Gpu  # present, on the online host
    removed_gpu: Gpu  # on the online host, no longer present
    sim_gpu: Gpu  # present, on the offline host
    engine: Engine  # reporting
    stale_engine: Engine  # last seen before the online window
    gone_engine: Engine  # no longer present


def stale() -> datetime:
    return timezone.now() - timedelta(seconds=settings.PITWALL["ONLINE_WINDOW_S"] + 60)


@pytest.fixture
def mixed_fleet(db) -> MixedFleet:
    now = timezone.now()
    online = Host.objects.create(
        hostname="gpu-node-1", last_seen=now, cpu_model="AMD EPYC 9654", cpu_count=192,
        mem_total_bytes=1_622_000_000_000, numa_nodes=[{"id": 0, "cpus": [0, 1]}],
        agent_version="0.1.0", driver_version="570.86.15", spool_evicted_batches=2,
        spool_evicted_samples=16)
    offline = Host.objects.create(hostname="sim-node-2", simulated=True, last_seen=stale())
    unseen = Host.objects.create(hostname="new-node-3")
    return MixedFleet(
        online_host=online, offline_host=offline, unseen_host=unseen,
        gpu=Gpu.objects.create(host=online, uuid="GPU-0aaa", index=0, name="NVIDIA H100",
                               mem_total_bytes=80 * 2**30, pci_bus_id="00000000:18:00.0",
                               numa_node=0),
        removed_gpu=Gpu.objects.create(host=online, uuid="GPU-1bbb", index=1, present=False,
                                       removed_at=now),
        sim_gpu=Gpu.objects.create(host=offline, uuid="GPU-2ccc", index=0, simulated=True),
        engine=Engine.objects.create(
            host=online, name="vllm:8000/0", url="http://127.0.0.1:8000/metrics",
            model="meta-llama/Llama-3.1-8B-Instruct", gpu_uuids=["GPU-0aaa"],
            config={"max_num_seqs": 256}, last_seen=now),
        stale_engine=Engine.objects.create(host=offline, name="vllm:8000/0", simulated=True,
                                           last_seen=stale()),
        gone_engine=Engine.objects.create(host=online, name="vllm:8001/0", present=False),
    )


@pytest.fixture
def carol(db):
    return user_with_role("carol", "admin")


@pytest.fixture
def staff(carol) -> APIClient:
    return bearer_client(issue_api_token("carol", name="tests"))


@pytest.fixture
def gpu_host(db) -> GpuHost:
    token, host = issue_agent_token("h200-node-1")
    Host.objects.filter(pk=host.pk).update(
        cpu_count=16, numa_nodes=[{"id": 0, "cpus": list(range(8))},
                                  {"id": 1, "cpus": list(range(8, 16))}])
    host.refresh_from_db()
    for i in range(2):
        Gpu.objects.create(host=host, uuid=f"GPU-h200-{i}", index=i, name="NVIDIA H200",
                           mem_total_bytes=143771156480, numa_node=i)
    return GpuHost(host, bearer_client(token))
