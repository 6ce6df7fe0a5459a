"""Stand-ins for the host and process collectors in a scenario (agents/sim/scenario.py).

A scenario simulates a host that is not this machine, so /proc and psutil have nothing to
say about it. These answer the same calls as HostCollector and ProcessCollector from the
host's shape and the simulated vLLM's modeled CPU use (its /sim/state).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

GIB = 1 << 30
BASE_MEM_BYTES = 6 * GIB  # the OS, the agent, page cache that does not count as available
ENGINE_RSS_BYTES = 5 * GIB  # a vLLM engine core: CUDA context, pinned buffers, the tokenizer
API_RSS_BYTES = int(1.5 * GIB)  # one API server process
IDLE_CORE_PCT = 1.0  # a CPU nothing in the scenario uses: kernel threads, the agent itself
ENGINE_THREADS = 60


class SimHost:
    """HostCollector's inventory() and collect() for a simulated host."""

    def __init__(self, hostname: str, numa_nodes: list[list[int]], mem_bytes: int,
                 state: Callable[[], dict[str, Any]], contention: float,
                 quota_cores: float | None, api_servers: int) -> None:
        self.hostname, self.numa_nodes, self.mem_bytes = hostname, numa_nodes, mem_bytes
        self.cpu_count = sum(len(cpus) for cpus in numa_nodes)
        self._state, self._contention, self._quota = state, contention, quota_cores
        self._api_servers = api_servers

    def inventory(self) -> dict[str, Any]:
        inv: dict[str, Any] = {
            "hostname": self.hostname, "cpu_count": self.cpu_count,
            "cpu_model": "Simulated x86-64 CPU (pitwall-sim)", "mem_total_bytes": self.mem_bytes,
            "numa_nodes": [{"id": i, "cpus": cpus} for i, cpus in enumerate(self.numa_nodes)]}
        if self._quota is not None:
            inv["cgroup_cpu_limit"] = self._quota
        return inv

    def collect(self) -> dict[str, Any]:
        state = self._state()
        cpus = set(state.get("cpus", ()))
        vllm = sum(p["cpu_pct"] for p in state.get("processes", ()))
        # The instance's CPUs carry its processes' use plus the other work that contends.
        per_cpu = min(100.0, vllm / max(1, len(cpus)) + 100 * self._contention)
        cores = [round(max(IDLE_CORE_PCT, per_cpu) if cpu in cpus else IDLE_CORE_PCT, 2)
                 for cpu in range(self.cpu_count)]
        rss = ENGINE_RSS_BYTES + API_RSS_BYTES * self._api_servers
        out: dict[str, Any] = {
            "cpu_pct": round(sum(cores) / len(cores), 2), "cpu_core_pct": cores,
            "load1": round(sum(cores) / 100, 2),
            "mem_used_bytes": min(self.mem_bytes, BASE_MEM_BYTES + rss),
            "mem_total_bytes": self.mem_bytes, "swap_used_bytes": 0}
        if self._quota is not None:
            out["cpu_throttled_pct"] = float(state.get("cpu_throttled_pct", 0.0))
        return out


class SimProcesses:
    """ProcessCollector's find_engine_pids() and collect() for the simulated vLLM process."""

    def __init__(self, pid: int, cpus: list[int], numa_nodes: list[list[int]],
                 api_servers: int) -> None:
        self.pid, self.cpus = pid, sorted(cpus)
        self.nodes = sorted(i for i, node in enumerate(numa_nodes) if set(node) & set(cpus))
        self._api_servers = api_servers

    def find_engine_pids(self, port: int) -> list[int]:
        return [self.pid]

    def collect(self, engine_pids: dict[str, list[int]],
                gpu_mem: dict[int, dict[str, int]]) -> list[dict[str, Any]]:
        rows = []
        for engine, pids in engine_pids.items():
            for pid in pids:
                row: dict[str, Any] = {"pid": pid, "engine": engine,
                                       "rss_bytes": ENGINE_RSS_BYTES, "threads": ENGINE_THREADS,
                                       "cpu_affinity": self.cpus, "numa_nodes": self.nodes}
                if gpu_mem.get(pid):
                    row["gpu_mem_bytes"] = sum(gpu_mem[pid].values())
                rows.append(row)
        return rows
