"""A fleet for the service tests (API, pages, browser), made in the database as the agents'
inventories would make it: four online hosts of two H100s (two NUMA nodes each) labelled
pool=online in two zones, one host in the batch pool, one offline host, and a router host
(no GPUs, its agent run with --router). The llama weights are cached on gpu-b only."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from django.conf import settings
from django.utils import timezone

from controlplane.fleet.models import Gpu, Host

H100 = "NVIDIA H100 80GB HBM3"
LLAMA = "meta-llama/Llama-3.1-8B-Instruct"
LLAMA_BYTES = 16_060_522_496


@dataclass
class ServiceFleet:
    online: list[Host]  # gpu-a .. gpu-d, pool=online
    batch: Host  # pool=batch: a selector of pool=online skips it
    offline: Host
    router: Host


def gpu_host(hostname: str, labels: dict[str, str], *, seen_s_ago: float = 1.0,
             port_range: tuple[int, int] = (8000, 8099), cached: bool = False) -> Host:
    inventory = {"labels": labels, "address": f"10.0.0.{ord(hostname[-1]) % 200}",
                 "port_range": list(port_range),
                 "hf_models": [{"repo": LLAMA, "bytes": LLAMA_BYTES}] if cached else []}
    host = Host.objects.create(
        hostname=hostname, last_seen=timezone.now() - timedelta(seconds=seen_s_ago),
        cpu_count=16, numa_nodes=[{"id": 0, "cpus": list(range(8))},
                                  {"id": 1, "cpus": list(range(8, 16))}],
        inventory=inventory)
    for index in range(2):
        Gpu.objects.create(host=host, uuid=f"GPU-{hostname}-{index}", index=index, name=H100,
                           mem_total_bytes=80 * 2**30, numa_node=index)
    return host


def router_host(hostname: str = "router-1") -> Host:
    return Host.objects.create(hostname=hostname, last_seen=timezone.now(),
                               inventory={"roles": ["router"], "address": "10.0.1.1"})


def service_fleet() -> ServiceFleet:
    online = [gpu_host(f"gpu-{c}", {"pool": "online", "zone": f"rack-{1 + i % 2}"},
                       cached=c == "b")
              for i, c in enumerate("abcd")]
    batch = gpu_host("gpu-e", {"pool": "batch", "zone": "rack-1"})
    offline = gpu_host("gpu-f", {"pool": "online", "zone": "rack-2"},
                       seen_s_ago=settings.PITWALL["ONLINE_WINDOW_S"] + 60)
    return ServiceFleet(online, batch, offline, router_host())


def llama_service(router: Host | None, **changes) -> dict:
    """A valid create body: Llama 3.1 8B on 4 replicas of one H100 each, in the online pool."""
    body = {"name": "llama", "model": LLAMA, "vllm_version": "0.33.0",
            "args": {"max_num_seqs": 128, "enable_prefix_caching": True},
            "env": {"VLLM_LOGGING_LEVEL": "INFO"}, "replicas": 4,
            "selector": {"pool": "online"}, "gpu_model": "H100",
            "router_host": router.pk if router is not None else None, "router_port": 9000,
            "reason": "first rollout"}
    return {**body, **changes}
