"""Scenarios: one simulated host running one vLLM deployment, as the agent would report it.

``simulate(scenario, minutes, end)`` runs the simulated vLLM (engine model, CPU model,
exposition), the simulated GPUs and the agent's own collection code (its vLLM collector and
parser, NVML collector, Sampler and BatchBuilder) on an injected clock, without sleeping, and
returns the protocol-v1 batches an agent would have sent: one sample per ``interval`` seconds,
the last one at ``end`` (unix seconds). Everything is labelled simulated as the running
simulation labels it (inventory ``simulated: true``, /v1/models ``owned_by: pitwall-sim``).

What is not this machine's is stood in for: the host and its processes (sim_host). The
/metrics page is rendered only with the families the agent reads (a 18 KB page instead of
58 KB: rendering is most of a scenario's cost), through the same prometheus_client code.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass, field
from typing import Any

from agents.batch import Batch, BatchBuilder
from agents.collectors.nvml import NvmlCollector
from agents.collectors.vllm import VllmCollector
from agents.collectors.vllm_names import wanted_families
from agents.loop import Sampler, Sources
from agents.sim.engine_model import GIB, EngineConfig
from agents.sim.gpus import SimNvml
from agents.sim.sim_host import SimHost, SimProcesses
from agents.sim.sim_nvml_model import CUDA_CONTEXT_BYTES, RESERVED_BYTES
from agents.sim.vllm_server import SimOptions, SimVllm
from agents.vllm_args import serve_default

ENGINE_PID = 4242  # the simulated vLLM's pid as the scenario's agent sees it
FOREIGN_PID = 7777  # a process that is not vLLM, holding GPU memory
WARMUP_S = 120.0  # simulated before the first sample, so the first minutes are steady
_SUFFIXES = ("", "_total", "_created", "_bucket", "_count", "_sum")


@dataclass(frozen=True)
class HostShape:
    hostname: str = "sim-scenario-01"
    gpus: int = 8
    gpu_mem_bytes: int = 80 * GIB
    gpu_name: str = "NVIDIA H100 80GB HBM3"
    numa_nodes: tuple[tuple[int, ...], ...] = (tuple(range(32)), tuple(range(32, 64)))
    gpu_nodes: tuple[int, ...] = (0, 0, 0, 0, 1, 1, 1, 1)  # NUMA node of each GPU index
    mem_bytes: int = 512 * GIB


_H100 = HostShape()


@dataclass(frozen=True)
class Deployment:
    model: str = "meta-llama/Llama-3.1-8B-Instruct"
    # The deployment sets them, as vLLM would choose them for the default host's GPU.
    max_num_seqs: int = serve_default("max_num_seqs", _H100.gpu_mem_bytes, _H100.gpu_name)
    max_num_batched_tokens: int = serve_default("max_num_batched_tokens", _H100.gpu_mem_bytes,
                                                _H100.gpu_name)
    gpu_memory_utilization: float = serve_default("gpu_memory_utilization")
    tensor_parallel_size: int = 1
    api_server_count: int = 1
    max_model_len: int = 8192
    gpu_indices: tuple[int, ...] = (0,)
    cpus: tuple[int, ...] = tuple(range(8))  # the affinity the supervisor gives vLLM
    port: int = 8000


@dataclass(frozen=True)
class Load:
    rate: float = 4.0  # requests/s, Poisson (an open loop), unless ``clients`` is set
    mix: str = "chat"  # agents/sim/workload.MIXES
    seed: int = 1
    # Clients in a closed loop instead (agents/sim/workload.ClientLoad): each sends its next
    # request ``outside_s`` (the median) after its last one finished.
    clients: int = 0
    outside_s: float = 0.5


@dataclass(frozen=True)
class Perturbations:
    cpu_contention: float = 0.0  # 0-1: the share of the deployment's CPUs other work takes
    cpu_quota: float | None = None  # a cgroup CPU quota on vLLM, in cores
    foreign_gpu_bytes: dict[int, int] = field(default_factory=dict)  # GPU index -> bytes
    # GPU index -> (form, seconds after the first sample): it falls off the bus then, in one of
    # agents/sim/gpus.FALL_OFF_FORMS ("lost", "unknown", "vanished").
    off_bus: dict[int, tuple[str, float]] = field(default_factory=dict)


@dataclass(frozen=True)
class Scenario:
    host: HostShape = HostShape()
    deployment: Deployment = Deployment()
    load: Load = Load()
    perturb: Perturbations = Perturbations()


class _Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def simulate(scenario: Scenario, minutes: float, end: float,
             interval: float = 1.0) -> list[Batch]:
    """The agent's batches for ``minutes`` of simulated time ending at ``end``."""
    count = max(1, round(minutes * 60 / interval))
    first = end - (count - 1) * interval
    clock = _Clock(first - interval - WARMUP_S)
    sim, sampler = _build(scenario, clock, interval)
    builder = BatchBuilder(boot_id=str(uuid.uuid5(uuid.NAMESPACE_URL, f"pitwall-sim/{end}/"
                                                                   f"{scenario.host.hostname}")))
    clock.now = first - interval
    sampler.sample()  # primes rates and histogram deltas, as an agent's first interval does
    batches = []
    for i in range(count):
        clock.now = first + i * interval
        _fall_off_bus(scenario, sampler, clock.now - first)
        batches.append(builder.build([sampler.sample()], sampler.inventory()))
    return batches


def _fall_off_bus(scenario: Scenario, sampler: Sampler, elapsed: float) -> None:
    nvml = sampler.sources.gpus.nvml
    for index, (form, after) in scenario.perturb.off_bus.items():
        if elapsed >= after and index not in nvml.fallen:
            nvml.fall_off_bus(index, form)


def _build(s: Scenario, clock: _Clock, interval: float) -> tuple[SimVllm, Sampler]:
    d, h, p = s.deployment, s.host, s.perturb
    _check_foreign_memory(s)
    sim = SimVllm(_options(s, interval), clock)
    sim.tick()  # starts the engines at the clock's time
    foreign = [_foreign_source(index, size, h.gpu_mem_bytes)
               for index, size in p.foreign_gpu_bytes.items()]
    nvml = SimNvml(count=h.gpus, hostname=h.hostname, model=h.gpu_name,
                   mem_total_bytes=h.gpu_mem_bytes, state_sources=[sim.state, *foreign],
                   seed=s.load.seed, refresh_s=interval / 2, clock=clock)
    names = {f + suffix for f in wanted_families() for suffix in _SUFFIXES}
    registry = sim.metrics.registry.restricted_registry(names)
    engine = VllmCollector(f"http://127.0.0.1:{d.port}/metrics", clock=clock,
                           fetch=lambda url, timeout: sim.scrape_families(registry).decode(),
                           models_fetch=lambda url, timeout: json.dumps(sim.models()))
    nodes = [list(node) for node in h.numa_nodes]
    sources = Sources(
        host=SimHost(h.hostname, nodes, h.mem_bytes, sim.state, p.cpu_contention, p.cpu_quota,
                     d.api_server_count),
        gpus=NvmlCollector(nvml, warn=lambda message: None, clock=clock), engines=[engine],
        processes=SimProcesses(ENGINE_PID, list(d.cpus), nodes, d.api_server_count),
        simulated=True, numa_node=_bus_nodes(nvml, h.gpu_nodes), hostname=h.hostname,
        sim_state=lambda collector: sim.state())
    return sim, Sampler(sources, warn=lambda message: None, wall=clock, clock=clock)


def _options(s: Scenario, interval: float) -> SimOptions:
    d, h, p = s.deployment, s.host, s.perturb
    engine = EngineConfig(d.model, d.max_num_seqs, d.max_num_batched_tokens,
                          d.gpu_memory_utilization, d.tensor_parallel_size,
                          max_model_len=d.max_model_len, gpu_mem_bytes=h.gpu_mem_bytes)
    return SimOptions(engine, port=d.port, gpu_indices=list(d.gpu_indices), load=s.load.rate,
                      seed=s.load.seed, api_server_count=d.api_server_count, cpus=list(d.cpus),
                      cpu_quota=p.cpu_quota, cpu_contention=p.cpu_contention,
                      numa_remote=numa_remote(s), cpu_window_s=interval, pid=ENGINE_PID,
                      mix=s.load.mix, clients=s.load.clients,
                      client_outside_s=s.load.outside_s)


def numa_remote(s: Scenario) -> bool:
    """The deployment's CPUs are all on other NUMA nodes than its GPUs."""
    cpu_nodes = {i for i, node in enumerate(s.host.numa_nodes) if set(node) & set(
        s.deployment.cpus)}
    gpu_nodes = {s.host.gpu_nodes[i] for i in s.deployment.gpu_indices}
    return not cpu_nodes & gpu_nodes


def _check_foreign_memory(s: Scenario) -> None:
    """vLLM V1 refuses to start when util x total does not fit in the free memory."""
    total, want = s.host.gpu_mem_bytes, s.deployment.gpu_memory_utilization
    for index, held in s.perturb.foreign_gpu_bytes.items():
        free = total - RESERVED_BYTES - held - CUDA_CONTEXT_BYTES
        if index in s.deployment.gpu_indices and free < want * total:
            raise ValueError(
                f"Free memory on device cuda:{index} ({free / GIB:.2f}/{total / GIB:.2f} GiB) "
                f"on startup is less than desired GPU memory utilization ({want}, "
                f"{want * total / GIB:.2f} GiB). Decrease GPU memory utilization or reduce "
                "GPU memory used by other processes.")


def _foreign_source(index: int, size: int, total: int) -> Any:
    """A non-vLLM process on one GPU, in the shape of a /sim/state: memory, no work."""
    state = {"pid": FOREIGN_PID, "gpu_indices": [index], "gpu_memory_utilization": size / total,
             "busy_fraction": 0.0, "kv_cache_usage": 0.0}
    return lambda: state


def _bus_nodes(nvml: SimNvml, gpu_nodes: tuple[int, ...]) -> Any:
    nvml.nvmlInit()
    by_bus = {}
    for index in range(nvml.nvmlDeviceGetCount()):
        bus = nvml.nvmlDeviceGetPciInfo(nvml.nvmlDeviceGetHandleByIndex(index)).busId
        by_bus[bus.decode() if isinstance(bus, bytes) else bus] = index
    nvml.nvmlShutdown()
    return lambda bus_id: gpu_nodes[by_bus[bus_id]] if by_bus.get(bus_id, 99) < len(
        gpu_nodes) else None
