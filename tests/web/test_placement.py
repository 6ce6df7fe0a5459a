"""The pieces of the host page that need no database: CPU ranges, NUMA placement, throttle
reasons."""

from __future__ import annotations

from agents.collectors.numa import format_cpulist
from agents.nvml_bits import decode
from controlplane.fleet.models import Engine, Gpu
from controlplane.web.numa import placements


def test_cpu_lists_read_as_ranges():
    assert format_cpulist([8, 0, 1, 2, 3, 10, 11]) == "0-3,8,10-11"
    assert format_cpulist([]) == ""
    assert format_cpulist([5]) == "5"


def test_a_process_whose_gpus_sit_on_another_node_is_cross_numa():
    engine = Engine(id=7, name="vllm:8000/0", gpu_uuids=["GPU-x"])
    gpus = {"GPU-x": Gpu(uuid="GPU-x", numa_node=1)}
    far, near, unknown = placements(
        [{"pid": 1, "engine_id": 7, "cpu_affinity": [0, 1], "numa_nodes": [0]},
         {"pid": 2, "engine_id": 7, "cpu_affinity": [4, 5], "numa_nodes": [1]},
         {"pid": 3, "engine_id": None, "cpu_affinity": [0], "numa_nodes": [0]}],
        {7: engine}, gpus)
    assert far.cross_numa and far.gpu_nodes == [1] and far.cpus == "0-1"
    assert not near.cross_numa
    assert not unknown.cross_numa and unknown.engine is None


def test_throttle_reason_bits_decode_to_names():
    assert [r.name for r in decode(0x4 | 0x80)] == ["SW power cap", "HW power brake"]
    assert decode(0) == [] and decode(None) == []
    assert [r.severe for r in decode(0x1 | 0x40)] == [False, True]
