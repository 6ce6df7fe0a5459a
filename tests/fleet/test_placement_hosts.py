"""``placement.hosts_for``: the fleet as placement sees it, read from the database (hosts,
GPUs, deployments, routers, the GPUs' newest samples), in as many queries for six hosts as
for two."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from controlplane.fleet import deployments, placement
from controlplane.fleet.models import Deployment, Engine, Gpu, Host, Service
from tests.api.helpers import insert_samples

GIB = placement.GIB


def make_host(name: str, gpus: int = 2, *, online: bool = True, **inventory) -> Host:
    host = Host.objects.create(
        hostname=name, cpu_count=16, last_seen=timezone.now() if online else None,
        numa_nodes=[{"id": 0, "cpus": list(range(8))}, {"id": 1, "cpus": list(range(8, 16))}],
        inventory=inventory, labels={"pool": "online"})
    for i in range(gpus):
        Gpu.objects.create(uuid=f"GPU-{name}-{i}", host=host, index=i, name="NVIDIA H100",
                           mem_total_bytes=80 * GIB, numa_node=i % 2)
    return host


def deploy(host: Host, name: str, gpus: list[int], port: int, *, enabled: bool = True,
           cpus: list[int] | None = None) -> Deployment:
    d = Deployment(host=host, name=name, model="m", port=port, gpu_indices=gpus,
                   vllm_version="0.11.0", cpus=cpus, enabled=enabled,
                   args={"tensor_parallel_size": len(gpus)} if len(gpus) > 1 else {})
    deployments.save(d)
    return d


def view(name: str, **kwargs) -> placement.HostView:
    return next(h for h in placement.hosts_for(None, **kwargs) if h.hostname == name)


@pytest.mark.django_db
def test_what_deployments_and_routers_hold_is_taken():
    a = make_host("a", gpus=4, port_range=[8100, 8199], roles=["router"],
                  hf_models=[{"repo": "org/m", "bytes": 123}, {"repo": "bad"}],
                  labels={"zone": "r1"})
    deploy(a, "one", [0], 8100, cpus=[0, 1])
    deploy(a, "off", [1], 8101, enabled=False)
    Service.objects.create(name="svc", model="m", vllm_version="0.11.0", router_host=a,
                           router_port=9000)
    seen = view("a")
    assert seen.taken_gpus == {0}  # a disabled deployment holds no GPU
    assert seen.taken_ports == {8100, 8101, 9000}  # every row holds its port; the router too
    assert seen.taken_cpus == {0, 1}
    assert seen.port_range == (8100, 8199)
    assert seen.cached_models == {"org/m": 123}
    assert seen.labels == {"zone": "r1", "pool": "online"}
    assert seen.node_cpus == {0: list(range(8)), 1: list(range(8, 16))}
    assert (seen.online, seen.cpu_only) == (True, False)
    assert [(g.index, g.numa_node, g.mem_total) for g in seen.gpus] == [
        (0, 0, 80 * GIB), (1, 1, 80 * GIB), (2, 0, 80 * GIB), (3, 1, 80 * GIB)]
    assert placement.roles(Host.objects.get(pk=a.pk).inventory) == ["router"]


@pytest.mark.django_db
def test_defaults_offline_and_hosts_without_gpus():
    make_host("quiet", gpus=0, online=False, port_range="junk")
    seen = view("quiet")
    assert (seen.online, seen.cpu_only, seen.port_range) == (False, True, (8000, 8999))
    assert seen.gpus == () and seen.cached_models == {}


@pytest.mark.django_db
def test_foreign_memory_and_lost_gpus_come_from_the_newest_gpu_samples():
    a = make_host("a", gpus=3)
    deploy(a, "ours", [2], 8000)
    gpus = {g.index: g for g in Gpu.objects.filter(host=a)}
    now = timezone.now()
    insert_samples("gpu", [
        {"gpu_id": gpus[0].id, "ts": now - timedelta(seconds=30), "mem_used_bytes": 40 * GIB},
        {"gpu_id": gpus[0].id, "ts": now, "mem_used_bytes": 20 * GIB},  # the newest counts
        {"gpu_id": gpus[1].id, "ts": now, "mem_used_bytes": 0, "lost": 1},
        {"gpu_id": gpus[2].id, "ts": now, "mem_used_bytes": 70 * GIB}])
    seen = {g.index: g for g in view("a").gpus}
    assert (seen[0].mem_foreign, seen[0].lost) == (20 * GIB, False)
    assert (seen[1].mem_foreign, seen[1].lost) == (0, True)
    assert seen[2].mem_foreign == 0  # our deployment's GPU: its memory is not foreign
    result = placement.place(placement.Need(model="m", gpus=1, mem_per_gpu=None, selector={},
                                            gpu_model="", count=1), [view("a")])
    assert result.skipped["a"] == (
        "0 free GPUs, needs 1: GPU 2 in use; GPU 0 holds 20.0 GiB of another process: 0.9 of "
        "80 GiB does not fit beside it; GPU 1 lost (NVML: fallen off the bus)")


@pytest.mark.django_db
def test_an_excluded_deployment_frees_its_gpus_port_cpus_and_its_engines_memory():
    a = make_host("a", gpus=2)
    moving = deploy(a, "moving", [0, 1], 8000, cpus=[0, 1, 2])
    engine = Engine.objects.create(host=a, name="vllm:8000/0", model="m",
                                   gpu_uuids=["GPU-a-0", "GPU-a-1"])
    gpus = {g.index: g for g in Gpu.objects.filter(host=a)}
    now = timezone.now()
    # 70 GiB used on each GPU, of which the engine's process holds 2 x 60 GiB: 10 GiB foreign.
    insert_samples("gpu", [{"gpu_id": gpus[i].id, "ts": now, "mem_used_bytes": 70 * GIB}
                           for i in (0, 1)])
    insert_samples("proc", [{"host_id": a.id, "pid": 4242, "ts": now, "engine_id": engine.id,
                             "gpu_mem_bytes": 120 * GIB}])
    held = view("a")
    assert held.taken_gpus == {0, 1} and 8000 in held.taken_ports
    freed = view("a", exclude_deployments=[moving])
    assert freed.taken_gpus == set() and freed.taken_ports == set() and freed.taken_cpus == set()
    assert [g.mem_foreign for g in freed.gpus] == [10 * GIB, 10 * GIB]


@pytest.mark.django_db
def test_the_queries_do_not_grow_with_the_fleet():
    def count() -> int:
        from django.db import connection
        from django.test.utils import CaptureQueriesContext

        with CaptureQueriesContext(connection) as queries:
            placement.hosts_for(None)
        return len(queries)

    for i in range(2):
        deploy(make_host(f"small-{i}"), f"d{i}", [0], 8000)
    small = count()
    for i in range(4):
        deploy(make_host(f"more-{i}", gpus=4), f"e{i}", [0, 1], 8000)
    assert count() == small
