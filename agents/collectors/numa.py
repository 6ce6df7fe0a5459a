"""NUMA topology from sysfs: which CPUs belong to which node, and which node a PCI device sits on.

Plain file reads, no psutil: the host inventory, the process collector (to say which nodes a
vLLM process may run on) and the NVML collector (a GPU's node) share these helpers.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path

_NODE_DIR = re.compile(r"node(\d+)")


def parse_cpulist(text: str) -> list[int]:
    """Parse the kernel's cpulist syntax ("0-3,8-11", "", "5") into a sorted list of CPU ids."""
    cpus: set[int] = set()
    for part in text.strip().split(","):
        if not part:
            continue
        first, _, last = part.partition("-")
        # A stride ("0-15:2") is legal in cpulist syntax but sysfs never writes one; refuse it
        # loudly (ValueError) rather than count the wrong CPUs.
        cpus.update(range(int(first), int(last or first) + 1))
    return sorted(cpus)


def format_cpulist(cpus: Iterable[int]) -> str:
    """The cpulist syntax of ``cpus`` ([8, 0, 1, 2, 3, 10, 11] -> "0-3,8,10-11"): what
    parse_cpulist reads, numactl's --physcpubind and taskset -c take, and pages show."""
    out: list[str] = []
    ordered = sorted(set(cpus))
    start = prev = None
    for cpu in [*ordered, None]:
        if cpu is not None and prev is not None and cpu == prev + 1:
            prev = cpu
            continue
        if start is not None:
            out.append(str(start) if start == prev else f"{start}-{prev}")
        start = prev = cpu
    return ",".join(out)


def cpu_nodes(sys_root: str = "/sys") -> dict[int, list[int]]:
    """Node id -> its CPUs. Empty when the kernel exposes no NUMA nodes (no such directory)."""
    base = Path(sys_root, "devices/system/node")
    nodes: dict[int, list[int]] = {}
    try:
        entries = list(base.iterdir())
    except OSError:
        return nodes
    for entry in entries:
        match = _NODE_DIR.fullmatch(entry.name)
        if not match:
            continue  # "has_cpu", "online", "power", ... live beside the node directories
        try:
            nodes[int(match.group(1))] = parse_cpulist((entry / "cpulist").read_text())
        except (OSError, ValueError):
            continue
    return dict(sorted(nodes.items()))


def online_cpus(sys_root: str = "/sys") -> list[int] | None:
    """CPUs the kernel has online, or None when sysfs does not say."""
    try:
        return parse_cpulist(Path(sys_root, "devices/system/cpu/online").read_text())
    except (OSError, ValueError):
        return None


def node_map(sys_root: str, cpu_count: int) -> dict[int, list[int]]:
    """cpu_nodes(), or a single node 0 holding every CPU on a kernel without NUMA support.

    A machine without /sys/devices/system/node is one memory domain, so "node 0" is the truth,
    and it keeps `numa_nodes` meaningful for the readers that group by node.
    """
    nodes = cpu_nodes(sys_root)
    if nodes:
        return nodes
    return {0: online_cpus(sys_root) or list(range(cpu_count))}


def normalise_pci_bus_id(pci_bus_id: str) -> str:
    """NVML's "00000000:18:00.0" -> sysfs's "0000:18:00.0" (lower case, 4+ hex digit domain)."""
    parts = pci_bus_id.strip().lower().split(":")
    if len(parts) == 2:  # "18:00.0": no domain given, the first (and usually only) one is 0
        parts.insert(0, "0")
    if len(parts) != 3:
        raise ValueError(f"not a PCI bus id: {pci_bus_id!r}")
    domain, bus, devfn = parts
    # sysfs prints the domain with %04x, so domains past 0xffff (VMD) keep all their digits.
    return f"{int(domain, 16):04x}:{bus}:{devfn}"


def pci_numa_node(pci_bus_id: str, sys_root: str = "/sys") -> int | None:
    """The NUMA node of a PCI device, or None when unknown (-1, no file, or a bad id)."""
    try:
        path = Path(sys_root, "bus/pci/devices", normalise_pci_bus_id(pci_bus_id), "numa_node")
        node = int(path.read_text().strip())
    except (OSError, ValueError):
        return None
    return node if node >= 0 else None


def nodes_of_cpus(cpus: Iterable[int], cpu_nodes: dict[int, list[int]]) -> list[int]:
    """The sorted NUMA nodes that hold at least one of these CPUs."""
    wanted = set(cpus)
    return sorted(node for node, members in cpu_nodes.items() if wanted.intersection(members))
