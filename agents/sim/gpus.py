"""Simulated GPUs: a stand-in for the ``pynvml`` module on hosts (and tests) without NVIDIA GPUs.

``SimNvml`` implements the part of the pynvml API that ``NvmlCollector`` calls, with pynvml's
semantics and units (mW, KB/s, bytes), its structs and its error classes; constants and error
classes are pynvml's own (importing pynvml is safe: it loads the driver only in nvmlInit, which
the simulation never calls). GPU memory and utilisation follow the simulated vLLM engines'
state (see sim_nvml_state); power, clocks and temperature follow utilisation (sim_nvml_model);
energy, NVLink and error counters follow both (sim_nvml_counters, queried in sim_nvml_health),
as far as the board has them (sim_nvml_caps). ``fall_off_bus`` takes a GPU off the bus.
"""

from __future__ import annotations

import random
import time
import uuid
from collections.abc import Callable, Iterable
from types import SimpleNamespace
from typing import Any

import pynvml

from agents.sim.sim_nvml_caps import caps_for
from agents.sim.sim_nvml_counters import Counters
from agents.sim.sim_nvml_events import NO_INSTANCE, EventHub, EventSet
from agents.sim.sim_nvml_health import HealthApi
from agents.sim.sim_nvml_model import (
    CUDA_CONTEXT_BYTES,
    MEM_CLOCK_MHZ,
    POWER_LIMIT_MW,
    RESERVED_BYTES,
    Claim,
    GpuModel,
    Reading,
    claims_from_state,
)
from agents.sim.sim_nvml_state import StateSource, http_state_source

__all__ = ["FALL_OFF_FORMS", "SimNvml", "StateSource", "http_state_source", "sim_uuid"]

DRIVER_VERSION = "550.127.08"
H100_SXM_PCI_ID = 0x233010DE
HGX_BUSES = (0x18, 0x2A, 0x3A, 0x5D, 0x9A, 0xAB, 0xBA, 0xDB)  # an 8-GPU HGX board's layout
_UUID_NAMESPACE = uuid.UUID("5b1e0c7e-3f0a-4c59-9d8e-0d4f1c6b2a10")
XID_FALLEN_OFF_THE_BUS = 79
# How a GPU that fell off the bus answers: "lost" (every query on it NVML_ERROR_GPU_IS_LOST,
# and XID 79), "unknown" (every query NVML_ERROR_UNKNOWN), "vanished" (NVML lists it no more:
# nvmlDeviceGetCount drops it, the others are renumbered; an old handle answers GPU_IS_LOST).
FALL_OFF_FORMS = ("lost", "unknown", "vanished")
_FALLEN_ERRORS = {"lost": pynvml.NVML_ERROR_GPU_IS_LOST, "unknown": pynvml.NVML_ERROR_UNKNOWN,
                  "vanished": pynvml.NVML_ERROR_GPU_IS_LOST}


def sim_uuid(hostname: str, index: int) -> str:
    """Stable across runs and agents: the same host and index always name the same GPU."""
    return f"GPU-{uuid.uuid5(_UUID_NAMESPACE, f'{hostname}/{index}')}"


def _error(code: int) -> pynvml.NVMLError:
    return pynvml.NVMLError(code)  # becomes the matching subclass, e.g. NVMLError_NotSupported


class _Handle:
    def __init__(self, owner: SimNvml, index: int) -> None:
        self.owner, self.index = owner, index

    def __repr__(self) -> str:
        return f"<sim GPU {self.index}>"


class SimNvml(HealthApi):
    SIMULATED = True

    def __init__(
        self,
        count: int = 8,
        hostname: str = "sim-host",
        model: str = "NVIDIA H100 80GB HBM3",
        mem_total_bytes: int = 80 * 1024**3,
        state_sources: Iterable[StateSource] = (),
        seed: int | None = None,
        refresh_s: float = 0.5,  # sensors change at most this often: one interval reads one state
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.hostname, self.model, self.mem_total = hostname, model, mem_total_bytes
        self.state_sources = list(state_sources)
        self.refresh_s = refresh_s
        self._clock = clock
        self._handles = [_Handle(self, i) for i in range(count)]
        seeds = random.Random(seed)  # one seed makes the whole host reproducible
        self.caps = caps_for(model)
        self._models = [
            GpuModel(mem_total_bytes, random.Random(seeds.random()), self.caps,
                     random.Random(f"{seed}/counters/{i}") if seed is not None else None)
            for i in range(count)
        ]
        self._refreshed_at: float | None = None
        self._inits = 0
        self._hub = EventHub()
        self._fallen: dict[int, str] = {}  # GPU index (as at start) -> how it fell off the bus

    @classmethod
    def for_host(cls, hostname: str, count: int, engine_urls: Iterable[str], **kw: Any) -> SimNvml:
        sources = [http_state_source(url) for url in engine_urls]
        return cls(count=count, hostname=hostname, state_sources=sources, **kw)

    def __getattr__(self, name: str) -> Any:
        # Constants and error classes are pynvml's own; functions we do not simulate stay
        # missing, as they would in an older pynvml.
        value = getattr(pynvml, name)
        if callable(value) and not (isinstance(value, type) and issubclass(value, Exception)):
            raise AttributeError(f"SimNvml does not simulate {name}")
        return value

    # -- test and scenario hooks ----------------------------------------------------------

    def inject_xid(self, index: int, code: int) -> None:
        """Deliver an XID critical error on GPU ``index`` to every event set watching it."""
        self._hub.inject(index, self._handles[index], code)

    def fall_off_bus(self, index: int, form: str = "lost") -> None:
        """GPU ``index`` (numbered as at start) falls off the bus, in one of FALL_OFF_FORMS."""
        if form not in FALL_OFF_FORMS:
            raise ValueError(f"form must be one of {', '.join(FALL_OFF_FORMS)}, not {form!r}")
        if form == "lost":
            self.inject_xid(index, XID_FALLEN_OFF_THE_BUS)  # what the driver logs when it happens
        self._fallen[index] = form

    @property
    def fallen(self) -> dict[int, str]:
        """GPU index -> how it fell off the bus."""
        return dict(self._fallen)

    def _listed(self) -> list[_Handle]:
        return [h for h in self._handles if self._fallen.get(h.index) != "vanished"]

    # -- plumbing -------------------------------------------------------------------------

    def _check_init(self) -> None:
        if self._inits == 0:  # as NVML: nothing answers before nvmlInit or after nvmlShutdown
            raise _error(pynvml.NVML_ERROR_UNINITIALIZED)

    def _index(self, handle: Any) -> int:
        self._check_init()
        if not isinstance(handle, _Handle) or handle.owner is not self:
            raise _error(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        if handle.index in self._fallen:
            raise _error(_FALLEN_ERRORS[self._fallen[handle.index]])
        return handle.index

    def _read(self, handle: Any) -> Reading:
        index = self._index(handle)
        now = self._clock()
        if self._refreshed_at is None or now - self._refreshed_at >= self.refresh_s:
            self._refresh(now)
        return self._models[index].reading

    def _counters_of(self, handle: Any) -> Counters:
        self._read(handle)  # brings the counters up to now
        return self._models[handle.index].counters.now

    def _refresh(self, now: float) -> None:
        self._refreshed_at = now
        per_gpu: dict[int, list[Claim]] = {}
        for source in self.state_sources:
            try:
                state = source()
            except Exception:  # a broken source is an unreachable engine, not a broken GPU
                state = None
            for index, claim in claims_from_state(state or {}, self.mem_total).items():
                per_gpu.setdefault(index, []).append(claim)
        for index, model in enumerate(self._models):
            model.update(per_gpu.get(index, []), now)

    # -- pynvml API: library and inventory ---------------------------------------------------

    def nvmlInit(self) -> None:
        self._inits += 1

    def nvmlShutdown(self) -> None:
        self._check_init()
        self._inits -= 1

    def nvmlSystemGetDriverVersion(self) -> str:
        self._check_init()
        return DRIVER_VERSION

    def nvmlDeviceGetCount(self) -> int:
        self._check_init()
        return len(self._listed())

    def nvmlDeviceGetHandleByIndex(self, index: int) -> _Handle:
        if not 0 <= index < self.nvmlDeviceGetCount():
            raise _error(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return self._listed()[index]

    def nvmlDeviceGetUUID(self, handle: Any) -> str:
        return sim_uuid(self.hostname, self._index(handle))

    def nvmlDeviceGetName(self, handle: Any) -> str:
        self._index(handle)
        return self.model

    def nvmlDeviceGetIndex(self, handle: Any) -> int:
        self._index(handle)
        return self._listed().index(handle)

    def nvmlDeviceGetPciInfo(self, handle: Any) -> pynvml.nvmlPciInfo_t:
        index = self._index(handle)
        bus = HGX_BUSES[index] if index < len(HGX_BUSES) else (0x20 + 0x10 * index) % 0x100
        return pynvml.nvmlPciInfo_t(
            busIdLegacy=f"0000:{bus:02x}:00.0".encode(), domain=0, bus=bus, device=0,
            pciDeviceId=H100_SXM_PCI_ID, pciSubSystemId=0x16C110DE,
            busId=f"00000000:{bus:02X}:00.0".encode(),
        )

    def nvmlDeviceGetMigMode(self, handle: Any) -> list[int]:
        self._index(handle)
        return [pynvml.NVML_DEVICE_MIG_DISABLE, pynvml.NVML_DEVICE_MIG_DISABLE]

    # -- pynvml API: sensors -------------------------------------------------------------------

    def nvmlDeviceGetMemoryInfo(self, handle: Any, version: int | None = None) -> Any:
        used = self._read(handle).used_bytes
        free = self.mem_total - RESERVED_BYTES - used
        if not version:  # v1 counts the driver-reserved memory as used
            v1_used = used + RESERVED_BYTES
            return pynvml.c_nvmlMemory_t(total=self.mem_total, free=free, used=v1_used)
        if version != pynvml.nvmlMemory_v2:
            raise _error(pynvml.NVML_ERROR_ARGUMENT_VERSION_MISMATCH)
        return pynvml.c_nvmlMemory_v2_t(
            version=version, total=self.mem_total, reserved=RESERVED_BYTES, free=free, used=used
        )

    def nvmlDeviceGetUtilizationRates(self, handle: Any) -> pynvml.c_nvmlUtilization_t:
        reading = self._read(handle)
        return pynvml.c_nvmlUtilization_t(gpu=reading.util, memory=reading.mem_util)

    def nvmlDeviceGetTemperatureV(self, handle: Any, sensor: int, version: int = 0) -> int:
        return self.nvmlDeviceGetTemperature(handle, sensor)

    def nvmlDeviceGetTemperature(self, handle: Any, sensor: int) -> int:
        reading = self._read(handle)
        if sensor != pynvml.NVML_TEMPERATURE_GPU:
            raise _error(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return int(round(reading.temp_c))

    def nvmlDeviceGetPowerUsage(self, handle: Any) -> int:
        return self._read(handle).power_mw

    def nvmlDeviceGetEnforcedPowerLimit(self, handle: Any) -> int:
        self._index(handle)
        return POWER_LIMIT_MW

    def nvmlDeviceGetClockInfo(self, handle: Any, clock_type: int) -> int:
        reading = self._read(handle)
        if clock_type in (pynvml.NVML_CLOCK_GRAPHICS, pynvml.NVML_CLOCK_SM):
            return reading.sm_mhz
        if clock_type == pynvml.NVML_CLOCK_MEM:
            return MEM_CLOCK_MHZ
        raise _error(pynvml.NVML_ERROR_INVALID_ARGUMENT)

    def nvmlDeviceGetPcieThroughput(self, handle: Any, counter: int) -> int:
        reading = self._read(handle)
        if counter == pynvml.NVML_PCIE_UTIL_TX_BYTES:
            return reading.tx_kbs
        if counter == pynvml.NVML_PCIE_UTIL_RX_BYTES:
            return reading.rx_kbs
        raise _error(pynvml.NVML_ERROR_INVALID_ARGUMENT)

    def nvmlDeviceGetCurrentClocksEventReasons(self, handle: Any) -> int:
        return self._read(handle).reasons

    def nvmlDeviceGetCurrentClocksThrottleReasons(self, handle: Any) -> int:
        return self._read(handle).reasons

    def nvmlDeviceGetFanSpeed(self, handle: Any) -> int:
        reading = self._read(handle)
        if not self.caps.fan:
            raise _error(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return int(min(100.0, max(30.0, 30 + 1.5 * (reading.temp_c - 35))))

    def nvmlDeviceGetComputeRunningProcesses(self, handle: Any) -> list[Any]:
        return [
            pynvml.nvmlFriendlyObject({
                "pid": claim.pid, "usedGpuMemory": claim.mem_bytes + CUDA_CONTEXT_BYTES,
                "gpuInstanceId": NO_INSTANCE, "computeInstanceId": NO_INSTANCE,
            })
            for claim in self._read(handle).processes
        ]

    # -- pynvml API: events ---------------------------------------------------------------------

    def nvmlEventSetCreate(self) -> EventSet:
        self._check_init()
        return self._hub.create()

    def nvmlDeviceRegisterEvents(self, handle: Any, event_types: int, events: EventSet) -> None:
        self._hub.register(self._index(handle), event_types, events)

    def nvmlEventSetWait(self, events: EventSet, timeoutms: int) -> SimpleNamespace:
        self._check_init()
        return self._hub.wait(events, timeoutms)

    def nvmlEventSetFree(self, events: EventSet) -> None:
        self._hub.free(events)
