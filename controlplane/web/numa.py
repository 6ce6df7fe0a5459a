"""The NUMA panel of the host page: each node's CPUs, the GPUs attached to it, and the vLLM
processes allowed to run on it, with a warning where a process's CPUs and its GPUs sit on
different nodes (every host-device copy then crosses the socket interconnect)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from agents.collectors.numa import format_cpulist
from controlplane.fleet.models import Engine, Gpu, Host


@dataclass
class ProcPlacement:
    pid: int
    engine: Engine | None
    cpus: str  # compact ranges, "0-15,32-47"
    nodes: list[int]
    gpu_nodes: list[int]  # NUMA nodes of the GPUs its engine uses

    @property
    def cross_numa(self) -> bool:
        return bool(self.gpu_nodes) and bool(self.nodes) and not set(self.gpu_nodes) <= set(
            self.nodes)


@dataclass
class NumaNode:
    id: int
    cpus: str
    cpu_count: int
    gpus: list[Gpu] = field(default_factory=list)
    procs: list[ProcPlacement] = field(default_factory=list)


def placements(procs: Sequence[dict], engines: dict[int, Engine],
               gpus_by_uuid: dict[str, Gpu]) -> list[ProcPlacement]:
    result = []
    for proc in procs:
        engine = engines.get(proc.get("engine_id"))
        gpu_nodes = sorted({g.numa_node for u in (engine.gpu_uuids if engine else [])
                            if (g := gpus_by_uuid.get(u)) and g.numa_node is not None})
        result.append(ProcPlacement(
            pid=proc["pid"], engine=engine, cpus=format_cpulist(proc.get("cpu_affinity") or []),
            nodes=sorted(proc.get("numa_nodes") or []), gpu_nodes=gpu_nodes))
    return result


def numa_panel(host: Host, gpus: Sequence[Gpu], engines: Sequence[Engine],
               procs: Sequence[dict]) -> list[NumaNode]:
    nodes = {node: NumaNode(node, format_cpulist(cpus), len(cpus))
             for node, cpus in host.node_cpus().items()}
    for gpu in gpus:
        if gpu.numa_node is not None:
            nodes.setdefault(gpu.numa_node, NumaNode(gpu.numa_node, "", 0)).gpus.append(gpu)
    by_uuid = {g.uuid: g for g in gpus}
    for placement in placements(procs, {e.id: e for e in engines}, by_uuid):
        for node in placement.nodes:
            nodes.setdefault(node, NumaNode(node, "", 0)).procs.append(placement)
    return [nodes[k] for k in sorted(nodes)]
