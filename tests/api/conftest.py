"""A small fleet: hosts online, offline and never seen; GPUs and engines in each state."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

import pytest
from django.conf import settings
from django.utils import timezone

from controlplane.fleet.models import Engine, Gpu, Host
from tests.alerts.transports.conftest import allow_private, receiver  # noqa: F401 -- fixtures
from tests.api.alerting import carol, staff  # noqa: F401 -- fixtures of the alerting tests
from tests.api.deploying import gpu_host  # noqa: F401 -- fixture of the deployment tests


@dataclass
class Fleet:
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
def fleet(db) -> Fleet:
    now = timezone.now()
    online = Host.objects.create(
        hostname="gpu-node-1", last_seen=now, cpu_model="AMD EPYC 9654", cpu_count=192,
        mem_total_bytes=1_622_000_000_000, numa_nodes=[{"id": 0, "cpus": [0, 1]}],
        agent_version="0.1.0", driver_version="570.86.15", spool_evicted_batches=2,
        spool_evicted_samples=16)
    offline = Host.objects.create(hostname="sim-node-2", simulated=True, last_seen=stale())
    unseen = Host.objects.create(hostname="new-node-3")
    return Fleet(
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
