"""The collection loop: one sample per interval from every collector, framed into a batch.

Collectors are duck-typed (see agents/collectors/): the loop only calls ``collect()``,
``inventory()`` and the few linking helpers, so tests drive it with small fakes. A collector
that raises is reported in one line and its section is skipped for that interval; the loop
itself never dies from a collector.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from agents.batch import Batch, BatchBuilder
from agents.collectors.base import Warn, WarnOnce, stderr_warn

T = TypeVar("T")

# The host's own inventory (CPU model, memory, NUMA: /proc and /sys reads) hardly ever
# changes, so it is read again at most this often. GPUs and engines are read every interval:
# a lost GPU or a new engine shows in the very next batch.
HOST_INVENTORY_EVERY_S = 60.0


@dataclass
class Sources:
    host: Any | None = None  # HostCollector
    gpus: Any | None = None  # NvmlCollector (real or simulated NVML)
    engines: list[Any] = field(default_factory=list)  # VllmCollector, one per metrics URL
    processes: Any | None = None  # ProcessCollector
    simulated: bool = False  # the GPUs are simulated (--gpu-backend sim)
    numa_node: Callable[[str], int | None] | None = None  # PCI bus id -> NUMA node
    hostname: str | None = None  # overrides the host collector's (--hostname; a sim fleet)
    # A simulated engine's /sim/state (engine collector -> state): its modeled process CPU
    # replaces the simulator process's own. None: read over HTTP from the engine's URL.
    sim_state: Callable[[Any], dict[str, Any] | None] | None = None

    def close(self) -> None:
        if self.gpus is not None:
            self.gpus.close()


class Sampler:
    """Takes samples and describes the host; remembers which engine runs on which GPUs."""

    def __init__(self, sources: Sources, warn: Warn = stderr_warn,
                 wall: Callable[[], float] = time.time,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.sources = sources
        self._state = WarnOnce(warn)
        self._wall = wall
        self._clock = clock
        self._host: dict[str, Any] = {}  # the host inventory last read successfully
        self._host_read_at: float | None = None
        self._engine_gpus: dict[str, list[str]] = {}
        # Inventory parts last read successfully: a failing read must not look like a change.
        self._last: dict[str, Any] = {}
        self._simulated: dict[str, Any] = {}  # engine name -> its simulated engine's collector
        self._sim_sources: dict[str, Callable[[], dict[str, Any] | None]] = {}

    def _call(self, source: str, read: Callable[[], T]) -> T | None:
        try:
            value = read()
        except Exception as exc:  # a collector bug must cost one section, not the agent
            self._state.fail(source, f"{type(exc).__name__}: {exc}; skipped this interval")
            return None
        self._state.ok(source)
        return value

    def sample(self) -> dict[str, Any]:
        src = self.sources
        sample: dict[str, Any] = {"ts": self._wall()}
        if src.host is not None:
            sample["host"] = self._call("host", src.host.collect)
        gpu_mem: dict[int, dict[str, int]] | None = None
        if src.gpus is not None:
            sample["gpus"] = self._call("nvml", src.gpus.collect)
            gpu_mem = self._call("nvml processes", src.gpus.process_gpu_memory)
        sample["engines"], engine_pids = self._engines(gpu_mem)
        if src.processes is not None and engine_pids:
            procs = self._call(
                "processes", lambda: src.processes.collect(engine_pids, gpu_mem or {}))
            sample["processes"] = self._call("sim processes", lambda: self._modeled(procs))
        return {key: value for key, value in sample.items() if value or key == "ts"}

    def _engines(self, gpu_mem: dict[int, dict[str, int]] | None,
                 ) -> tuple[list[dict[str, Any]], dict[str, list[int]]]:
        entries: list[dict[str, Any]] = []
        engine_pids: dict[str, list[int]] = {}
        for engine in self.sources.engines:
            found = self._call(f"vllm {getattr(engine, 'url', '')}".rstrip(), engine.collect)
            names = [entry["name"] for entry in found or () if "name" in entry]
            entries.extend(found or ())
            pids = self._find_pids(engine) if names else []
            if pids:
                self._note_commands(engine)
                # The processes behind one URL serve all its engines; with several (data
                # parallel) they are booked under the first name.
                engine_pids[names[0]] = pids
                if getattr(engine, "simulated", False) is True:
                    self._simulated[names[0]] = engine
            if names and gpu_mem is not None:  # no NVML answer this time: keep the old link
                self._link(names, pids, gpu_mem)
        return entries, engine_pids

    def _modeled(self, procs: list[dict[str, Any]] | None) -> list[dict[str, Any]] | None:
        """Simulated engines only: their modeled per-role CPU (agents/sim/process_roles)."""
        if not procs or not self._simulated:
            return procs
        from agents.sim.process_roles import overlay

        for name, engine in self._simulated.items():
            state = self._sim_state(engine)
            if state is not None:
                procs = overlay(procs, name, state)
        return procs

    def _sim_state(self, engine: Any) -> dict[str, Any] | None:
        if self.sources.sim_state is not None:
            return self.sources.sim_state(engine)
        url = getattr(engine, "url", "")
        if url not in self._sim_sources:
            from agents.sim.sim_nvml_state import http_state_source

            self._sim_sources[url] = http_state_source(url)
        return self._sim_sources[url]()

    def _find_pids(self, engine: Any) -> list[int]:
        procs, port = self.sources.processes, getattr(engine, "port", None)
        if procs is None or port is None:
            return []
        return self._call("processes", lambda: procs.find_engine_pids(port)) or []

    def _note_commands(self, engine: Any) -> None:
        """Hand the engine's collector the command lines of the processes on its port: the
        flags a server the agent does not run was started with (each process read once)."""
        procs, port = self.sources.processes, getattr(engine, "port", None)
        if not hasattr(procs, "listener_commands") or not hasattr(engine, "note_commands"):
            return
        commands = self._call("process commands", lambda: procs.listener_commands(port))
        if commands:
            engine.note_commands(commands)

    def _link(self, names: list[str], pids: list[int],
              gpu_mem: dict[int, dict[str, int]]) -> None:
        """An engine runs on the GPUs where its processes hold memory."""
        uuids = sorted({uuid for pid in pids for uuid in gpu_mem.get(pid, {})})
        for name in names:
            self._engine_gpus[name] = uuids

    def inventory(self) -> dict[str, Any]:
        src = self.sources
        inventory: dict[str, Any] = dict(self._host_inventory())
        if src.hostname:
            inventory["hostname"] = src.hostname
        inventory["simulated"] = src.simulated
        driver = self._part("nvml driver", src.gpus, lambda: None, "driver_version")
        if driver is not None:
            inventory["driver_version"] = driver
        inventory["gpus"] = [self._gpu_info(gpu) for gpu in self._part("nvml inventory",
                                                                         src.gpus, list)]
        inventory["engines"] = [
            {**engine, "gpu_uuids": self._engine_gpus.get(engine.get("name", ""), [])}
            for index, collector in enumerate(src.engines)
            for engine in self._part(f"vllm inventory {index}", collector, list)
        ]
        return inventory

    def _host_inventory(self) -> dict[str, Any]:
        host, now = self.sources.host, self._clock()
        if host is None:
            return {}
        if self._host_read_at is None or now - self._host_read_at >= HOST_INVENTORY_EVERY_S:
            value = self._call("host inventory", host.inventory)
            if value is not None:  # a failed read keeps the last one and is retried next time
                self._host, self._host_read_at = value, now
        return self._host

    def _part(self, source: str, collector: Any, empty: Callable[[], Any],
              method: str = "inventory") -> Any:
        if collector is None:
            return empty()
        value = self._call(source, getattr(collector, method))
        if value is None and source in self._last:
            return self._last[source]
        self._last[source] = value if value is not None else empty()
        return self._last[source]

    def _gpu_info(self, gpu: dict[str, Any]) -> dict[str, Any]:
        info = dict(gpu)
        if self.sources.simulated:
            info["simulated"] = True
        lookup, bus_id = self.sources.numa_node, info.get("pci_bus_id")
        if info.get("numa_node") is None and lookup is not None and bus_id:
            info["numa_node"] = self._call("numa", lambda: lookup(bus_id))
        return info


def samples_in_hold(hold_s: float, cap_s: float, interval: float) -> int:
    """How many samples one batch holds: those taken every ``interval`` over the hold the server
    asks for (``hold_s``), at most ``cap_s`` (``--send-interval``); 1: each sample sent as it
    is taken."""
    return max(1, round(min(hold_s, cap_s) / interval))


class Loop:
    """Ticks on a ``time.monotonic()`` deadline: a slow interval never shifts the next ones.

    Each tick takes a sample; every ``samples_per_batch()`` samples become one batch,
    submitted at once (the samples of the hold the server asks for: one batch, one request,
    per hold). Several samples in one batch cost the server a third less per value than as
    many one-sample batches in one request: the per-batch work (checks, the stream's claim,
    the storage form) is paid once (docs/agent.md). The count is asked at every tick: when
    the server asks for each sample at once (someone watches this host), the samples held so
    far go at the next tick.
    """

    def __init__(self, sampler: Sampler, builder: BatchBuilder, submit: Callable[[Batch], None],
                 interval: float = 1.0, warn: Warn = stderr_warn,
                 clock: Callable[[], float] = time.monotonic,
                 samples_per_batch: int | Callable[[], int] = 1) -> None:
        self.sampler = sampler
        self.builder = builder
        self.submit = submit
        self.interval = interval
        self.samples_per_batch = (samples_per_batch if callable(samples_per_batch)
                                  else lambda: samples_per_batch)
        self._samples: list[dict[str, Any]] = []  # taken, not in a batch yet
        self._overrun = WarnOnce(warn)
        self._clock = clock

    def tick(self) -> Batch | None:
        """Take a sample; the batch submitted if this sample completed one, else None."""
        self._samples.append(self.sampler.sample())
        if len(self._samples) < self.samples_per_batch():
            return None
        return self.flush()

    def flush(self) -> Batch | None:
        """The samples taken since the last batch, built into one and submitted now (None
        when there are none): at shutdown, so that they are spooled, not lost."""
        if not self._samples:
            return None
        samples, self._samples = self._samples, []
        batch = self.builder.build(samples, self.sampler.inventory())
        self.submit(batch)
        return batch

    def run(self, stop: threading.Event, wait: Callable[[float], bool] | None = None) -> None:
        """Tick until ``stop`` is set; ``wait(seconds)`` returns True when stopped early."""
        wait = wait or stop.wait
        deadline = self._clock()
        try:
            self._tick_until(stop, wait, deadline)
        finally:
            self.flush()

    def _tick_until(self, stop: threading.Event, wait: Callable[[float], bool],
                    deadline: float) -> None:
        while not stop.is_set():
            self.tick()
            deadline += self.interval
            now = self._clock()
            if now > deadline:
                # Fell behind (a collector hung): skip the missed ticks instead of bursting.
                # Said once per run: a host that is always slow should not fill the log.
                self._overrun.fail("loop", f"collecting took longer than the {self.interval} s "
                                   "interval; missed ticks are skipped, not made up")
                deadline += math.ceil((now - deadline) / self.interval) * self.interval
            if wait(deadline - now):
                return


def probe(sampler: Sampler, builder: BatchBuilder, interval: float,
          sleep: Callable[[float], object] = time.sleep) -> Batch:
    """One interval's batch: a first sample primes the rates, the second one is kept."""
    sampler.sample()
    sleep(interval)
    return builder.build([sampler.sample()], sampler.inventory())
