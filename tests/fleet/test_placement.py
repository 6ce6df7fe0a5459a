"""Placement's rules, through the pure ``place(need, hosts)``: memory beside other processes,
NUMA nodes and their CPUs, labels, GPU models, spreading, cached weights, ports, CPU hosts,
and the reason each host gave no replica. No database."""

from __future__ import annotations

from dataclasses import replace

import pytest

from controlplane.fleet.placement import (
    GIB,
    GpuView,
    HostView,
    Need,
    need_for,
    place,
)

H100 = "NVIDIA H100 80GB HBM3"
MODEL = "meta-llama/Llama-3.1-8B-Instruct"


def gpu(index: int, *, node: int | None = 0, name: str = H100, total: int | None = 80 * GIB,
        foreign: int = 0, present: bool = True, lost: bool = False) -> GpuView:
    return GpuView(index=index, name=name, mem_total=total, mem_foreign=foreign,
                   numa_node=node, present=present, lost=lost)


def host(hid: int, name: str, gpus: int = 8, *, labels: dict | None = None,
         online: bool = True, taken_gpus=(), taken_ports=(), taken_cpus=(),
         port_range=(8000, 8999), cached: dict | None = None, per_node: int = 4,
         gpu_views: tuple[GpuView, ...] | None = None, cpus_per_node: int = 16) -> HostView:
    views = gpu_views if gpu_views is not None else tuple(
        gpu(i, node=i // per_node) for i in range(gpus))
    nodes = sorted({g.numa_node for g in views if g.numa_node is not None})
    return HostView(
        id=hid, hostname=name, online=online, labels=labels or {}, gpus=views,
        taken_gpus=frozenset(taken_gpus), taken_ports=frozenset(taken_ports),
        port_range=port_range,
        node_cpus={n: list(range(n * cpus_per_node, (n + 1) * cpus_per_node)) for n in nodes},
        taken_cpus=frozenset(taken_cpus), cached_models=cached or {}, cpu_only=not views)


def need(count: int = 1, gpus: int = 1, **changes) -> Need:
    return replace(Need(model=MODEL, gpus=gpus, mem_per_gpu=None, selector={}, gpu_model="",
                        count=count), **changes)


def test_a_replica_takes_the_lowest_free_gpu_port_and_its_share_of_the_nodes_cpus():
    result = place(need(), [host(1, "a", taken_gpus={0}, taken_ports={8000},
                                 taken_cpus={0, 1, 2, 3})])
    [slot] = result.slots
    assert (slot.hostname, slot.gpu_indices, slot.numa_node, slot.port) == ("a", [1], 0, 8001)
    # Node 0: 16 CPUs for 4 GPUs, so 4 per GPU, from those another deployment leaves free.
    assert slot.cpus == [4, 5, 6, 7]
    assert slot.reason == ("host a: 1 free H100 on NUMA 0 (GPU 1), CPUs 4-7, port 8001, "
                           "weights not cached")
    assert result.unplaced == 0 and result.skipped == {}


def test_too_little_memory_for_the_weights_is_refused_with_the_figures():
    small = host(1, "small", gpu_views=(gpu(0, total=24 * GIB),))
    result = place(need(mem_per_gpu=40 * GIB), [small])
    assert result.slots == [] and result.unplaced == 1
    assert result.skipped == {"small": "0 free GPUs, needs 1: GPU 0: 0.9 of 24 GiB (21.6 GiB) "
                                       "cannot hold 40.0 GiB of weights per GPU"}
    # The same weights fit a GPU whose vLLM share holds them.
    assert place(need(mem_per_gpu=40 * GIB), [host(2, "big")]).slots[0].hostname == "big"


def test_memory_another_process_holds_leaves_no_room_for_vllms_share():
    busy = host(1, "busy", gpu_views=(gpu(0, foreign=20 * GIB), gpu(1)))
    [slot] = place(need(), [busy]).slots
    assert slot.gpu_indices == [1]
    result = place(need(gpus=2), [busy])
    assert result.skipped["busy"] == ("1 free GPU, needs 2: GPU 0 holds 20.0 GiB of another "
                                      "process: 0.9 of 80 GiB does not fit beside it")
    # A smaller share fits beside it: 0.7 x 80 = 56 GiB <= 80 - 20.
    assert place(need(gpus=2, gpu_memory_utilization=0.7), [busy]).slots[0].gpu_indices == [0, 1]


def test_memory_unknown_means_any_free_gpu_fits():
    blind = host(1, "blind", gpu_views=(gpu(0, total=None, foreign=0),))
    assert place(need(mem_per_gpu=500 * GIB), [blind]).slots[0].gpu_indices == [0]


def test_a_replica_stays_on_one_numa_node_the_fullest_that_fits():
    # Node 0 has GPUs 0 and 3 free, node 1 all four: two GPUs go to node 0, keeping node 1
    # whole for a replica of four.
    a = host(1, "a", taken_gpus={1, 2}, taken_cpus=set(range(8)))
    [slot] = place(need(gpus=2), [a]).slots
    assert (slot.gpu_indices, slot.numa_node) == ([0, 3], 0)
    assert slot.cpus == list(range(8, 16))  # 16 CPUs x 2 of the node's 4 GPUs, free ones
    [four] = place(need(gpus=4), [a]).slots
    assert (four.gpu_indices, four.numa_node, four.cpus) == ([4, 5, 6, 7], 1, list(range(16, 32)))


def test_a_replica_spans_nodes_only_when_no_node_has_enough_with_each_nodes_share():
    a = host(1, "a", taken_gpus={0, 1, 4, 5}, taken_cpus=set(range(8)))
    [slot] = place(need(gpus=4), [a]).slots
    assert (slot.gpu_indices, slot.numa_node) == ([2, 3, 6, 7], None)
    assert slot.cpus == [*range(8, 16), *range(16, 24)]
    assert "across NUMA nodes (GPUs 2-3,6-7), CPUs 8-23" in slot.reason
    # No layout for a GPU's node: unbound.
    blind = host(2, "blind", gpu_views=(gpu(0, node=None), gpu(1, node=None)))
    [unbound] = place(need(gpus=2), [blind]).slots
    assert (unbound.numa_node, unbound.cpus) == (None, None)
    assert "no NUMA node reported" in unbound.reason and "CPUs unbound" in unbound.reason


def test_never_part_of_a_replicas_gpus():
    result = place(need(count=2, gpus=4), [host(1, "a", taken_gpus={0, 1, 2, 3, 4})])
    assert result.slots == [] and result.unplaced == 2
    assert result.skipped["a"] == "3 free GPUs, needs 4: GPUs 0-4 in use"


def test_each_replica_sees_the_gpus_the_ones_before_it_took():
    result = place(need(count=3, gpus=4), [host(1, "a")])
    assert [s.gpu_indices for s in result.slots] == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert [s.port for s in result.slots] == [8000, 8001]
    assert result.unplaced == 1
    assert result.skipped["a"].startswith("0 free GPUs, needs 4: GPUs 0-7 taken by this "
                                          "placement")


def test_the_selector_matches_labels_and_names_what_differs():
    hosts = [host(1, "batch", labels={"pool": "batch"}), host(2, "bare"),
             host(3, "online", labels={"pool": "online", "zone": "r1"})]
    result = place(need(selector={"pool": "online"}), hosts)
    assert [s.hostname for s in result.slots] == ["online"]
    assert result.skipped == {"batch": "labels: pool=batch, not pool=online",
                              "bare": "labels: no pool, not pool=online"}


def test_gpu_model_is_a_case_insensitive_part_of_the_gpus_name():
    a100 = host(1, "a100", gpu_views=tuple(gpu(i, name="NVIDIA A100-SXM4-80GB")
                                           for i in range(2)))
    result = place(need(gpu_model="h100"), [a100, host(2, "h100")])
    assert [s.hostname for s in result.slots] == ["h100"]
    assert result.skipped["a100"] == "no GPU named like 'h100' (it has 2 A100-SXM4-80GB)"


def test_mixed_gpu_models_on_one_host_take_only_the_named_ones():
    mixed = host(1, "mixed", gpu_views=(gpu(0, name="NVIDIA L4"), gpu(1)))
    [slot] = place(need(gpu_model="H100"), [mixed]).slots
    assert slot.gpu_indices == [1]
    assert place(need(gpus=2, gpu_model="H100"), [mixed]).skipped["mixed"] == (
        "1 free GPU, needs 2: GPU 0 is a L4, not H100")


def test_replicas_spread_over_hosts_then_zones():
    hosts = [host(1, "a1", labels={"zone": "a"}), host(2, "a2", labels={"zone": "a"}),
             host(3, "a3", labels={"zone": "a"}), host(4, "b1", labels={"zone": "b"})]
    two = place(need(count=2), hosts)
    assert [s.hostname for s in two.slots] == ["a1", "b1"]
    four = place(need(count=4), hosts)
    assert sorted(s.hostname for s in four.slots) == ["a1", "a2", "a3", "b1"]
    # The service's other replicas count: one on a1 already sends the next to zone b.
    assert place(need(already=(1,)), hosts).slots[0].hostname == "b1"
    five = place(need(count=5), hosts)
    assert "1 other replica of the service here" in five.slots[-1].reason


def test_hosts_with_the_weights_cached_are_preferred():
    hosts = [host(1, "a"), host(2, "b", cached={MODEL: 16_060_522_496})]
    [slot] = place(need(), hosts).slots
    assert slot.hostname == "b"
    assert slot.reason.endswith("weights cached (16.1 GB)")


def test_spreading_comes_before_cached_weights():
    hosts = [host(1, "a"), host(2, "b", cached={MODEL: 10**9})]
    assert sorted(s.hostname for s in place(need(count=2), hosts).slots) == ["a", "b"]


def test_unplaced_replicas_come_with_every_hosts_reason():
    online = {"pool": "online"}
    hosts = [host(1, "a", online=False, labels=online),
             host(2, "b", taken_gpus=set(range(8)), labels=online),
             host(3, "c", labels={"pool": "batch"}), host(4, "d", gpus=1, labels=online)]
    result = place(need(count=3, selector=online), hosts)
    assert [s.hostname for s in result.slots] == ["d"]
    assert result.unplaced == 2
    assert result.skipped == {
        "a": "offline", "b": "0 free GPUs, needs 1: GPUs 0-7 in use",
        "c": "labels: pool=batch, not pool=online",
        "d": "0 free GPUs, needs 1: GPU 0 taken by this placement"}
    assert result.summary() == (
        "unplaced: 2 of 3 replicas: host a: offline; host b: 0 free GPUs, needs 1: GPUs 0-7 in "
        "use; host c: labels: pool=batch, not pool=online; and 1 more host")
    stored = result.as_json()
    assert (stored["wanted"], stored["placed"], stored["unplaced"]) == (3, 1, 2)
    assert stored["slots"][0]["hostname"] == "d" and stored["skipped"] == result.skipped


def test_a_full_placement_names_only_the_hosts_that_could_take_none():
    result = place(need(count=2), [host(1, "a", online=False), host(2, "b"), host(3, "c")])
    assert result.skipped == {"a": "offline"}
    assert result.summary() == "placed 2 of 2 replicas: b, c"


def test_lost_and_gone_gpus_are_never_taken():
    sick = host(1, "sick", gpu_views=(gpu(0, lost=True), gpu(1, present=False), gpu(2)))
    [slot] = place(need(), [sick]).slots
    assert slot.gpu_indices == [2]
    assert place(need(gpus=2), [sick]).skipped["sick"] == (
        "1 free GPU, needs 2: GPU 0 lost (NVML: fallen off the bus); GPU 1 gone from the "
        "inventory")


def test_ports_come_from_the_hosts_range_and_a_full_range_refuses():
    full = host(1, "full", port_range=(9000, 9001), taken_ports={9000, 9001})
    result = place(need(), [full, host(2, "ok", port_range=(9100, 9199),
                                       taken_ports={9100})])
    assert result.slots[0].port == 9101
    assert result.skipped["full"] == "no free port in 9000-9001"


def test_avoided_hosts_take_nothing():
    result = place(need(avoid_hosts=frozenset({1})), [host(1, "a"), host(2, "b")])
    assert [s.hostname for s in result.slots] == ["b"]
    assert result.skipped["a"] == "avoided: the replica being replaced was here"


def test_cpu_hosts_take_a_service_whose_selector_admits_no_gpu_host():
    cpu = host(1, "cpu", gpus=0)
    result = place(need(count=2), [cpu])
    assert [(s.hostname, s.gpu_indices, s.cpus, s.port) for s in result.slots] == [
        ("cpu", [], None, 8000), ("cpu", [], None, 8001)]
    assert "no GPUs (vLLM's CPU build)" in result.slots[0].reason
    assert "1 other replica of the service here" in result.slots[1].reason


def test_a_gpu_service_never_spills_onto_cpu_hosts():
    hosts = [host(1, "cpu", gpus=0, labels={"pool": "cpu"}), host(2, "gpu", gpus=1)]
    result = place(need(count=2), hosts)
    assert [s.hostname for s in result.slots] == ["gpu"]
    assert result.skipped["cpu"].startswith("no GPUs (vLLM's CPU build)")
    # A selector naming the CPU pool makes it a CPU service.
    cpu_only = place(need(count=2, selector={"pool": "cpu"}), hosts)
    assert [s.hostname for s in cpu_only.slots] == ["cpu", "cpu"]


def test_several_cpu_hosts_share_replicas_evenly():
    hosts = [host(i, f"cpu{i}", gpus=0) for i in range(1, 4)]
    result = place(need(count=4), hosts)
    assert sorted(s.hostname for s in result.slots) == ["cpu1", "cpu1", "cpu2", "cpu3"]


@pytest.mark.parametrize(("args", "expected"), [
    ({}, (1, 16_000_000_000 * 1.2)),
    ({"tensor_parallel_size": 2}, (2, 8_000_000_000 * 1.2)),
    ({"tensor_parallel_size": 2, "pipeline_parallel_size": 2, "data_parallel_size": 2},
     (8, 4_000_000_000 * 1.2)),
])
def test_a_services_need_comes_from_its_arguments_and_the_cached_weights(args, expected):
    class Service:
        model, selector, gpu_model = MODEL, {"pool": "online"}, "H100"

    Service.args = {**args, "gpu_memory_utilization": 0.8}
    hosts = [host(1, "a"), host(2, "b", cached={MODEL: 16_000_000_000})]
    made = need_for(Service, hosts, 3, already=[2], avoid_hosts=[1])
    assert (made.gpus, made.mem_per_gpu) == (expected[0], pytest.approx(expected[1], abs=1))
    assert (made.count, made.already, made.avoid_hosts) == (3, (2,), frozenset({1}))
    assert (made.gpu_memory_utilization, made.selector, made.gpu_model) == (
        0.8, {"pool": "online"}, "H100")
    Service.model = "not/cached"
    assert need_for(Service, hosts, 1).mem_per_gpu is None
