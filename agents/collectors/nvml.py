"""GPU inventory and per-interval GPU metrics from NVML.

The NVML module is injected: ``pynvml`` (nvidia-ml-py) on a real host, ``agents.sim.gpus.SimNvml``
on a simulated one, a small fake in tests. NVML is initialised once, here, not per sample.
A field NVML reports as not supported (or not permitted, or missing from an older pynvml) is
absent from the sample and not asked again (``dropped`` keeps what it answered, for
``agents.gpu_check``); any other NVML error is a one-line warning.

A GPU that NVML reports lost (``NVMLError_GpuIsLost``, or ``NVMLError_Unknown`` from every
read several intervals in a row) or that vanished from ``nvmlDeviceGetCount`` is still
reported, as ``{"uuid", "lost": 1}``: the one thing the server can learn about it. A vanished
GPU also leaves the inventory, so the server marks it absent; a lost one NVML still lists stays.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from agents.collectors.base import Warn, WarnOnce, stderr_warn
from agents.collectors.nvml_fields import FIELDS, Reader
from agents.collectors.nvml_signals import COUNTERS
from agents.collectors.nvml_xid import MigIds, XidWatcher, same_device

SOURCE = "nvml"
_UNSUPPORTED = ("NVMLError_NotSupported", "NVMLError_NoPermission", "NVMLError_FunctionNotFound")
# Intervals in a row in which every read of a GPU failed with NVMLError_Unknown before it is
# reported lost: one such interval can be a driver hiccup, several are a GPU off the bus.
UNKNOWN_STREAK = 3


@dataclass
class _Device:
    uuid: str
    handle: Any
    info: dict[str, Any]  # the inventory entry
    # Per field: index of the reader in use; len(readers) once every reader is unsupported.
    reader: dict[str, int] = field(default_factory=dict)
    # Per field: each reader dropped as unsupported and what it answered (``dropped()``).
    dropped: dict[str, list[tuple[Reader, BaseException]]] = field(default_factory=dict)
    counters: dict[str, tuple[int, float]] = field(default_factory=dict)  # key -> (value, when)
    unknown: bool = False  # a read answered NVMLError_Unknown in this interval
    unknown_streak: int = 0  # intervals in a row where every read answered it
    vanished: bool = False  # no longer listed by nvmlDeviceGetCount / its handles

    @property
    def physical_uuid(self) -> str:
        return self.info["mig"]["parent_uuid"] if self.mig_device else self.uuid

    @property
    def mig_parent(self) -> bool:
        return self.info["mig"] == {"mode": "enabled"}

    @property
    def mig_device(self) -> bool:
        return bool(self.info["mig"]) and "parent_uuid" in self.info["mig"]


def _text(value: Any) -> str:
    # pynvml returns str since 11.x; older releases (and raw structs) gave bytes.
    return value.decode() if isinstance(value, bytes) else str(value)


class NvmlCollector:
    def __init__(self, nvml: Any = None, warn: Warn = stderr_warn,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._warn = WarnOnce(warn)
        self._clock = clock
        self._devices: list[_Device] = []
        self._count: int | None = None  # nvmlDeviceGetCount at the last look
        self._xid: XidWatcher | None = None
        self._driver: str | None = None
        self.available = False
        self.init_error: BaseException | None = None  # why nvmlInit failed, if it did
        self._nvml = nvml if nvml is not None else self._import_pynvml()
        self.simulated = bool(getattr(self._nvml, "SIMULATED", False))
        self._unsupported: tuple[type[BaseException], ...] = (AttributeError,) + tuple(
            getattr(self._nvml, name) for name in _UNSUPPORTED if hasattr(self._nvml, name)
        )
        self._lost = getattr(self._nvml, "NVMLError_GpuIsLost", ())
        self._unknown_error = getattr(self._nvml, "NVMLError_Unknown", ())
        if self._nvml is None:
            return
        try:
            self._nvml.nvmlInit()
        except self._nvml.NVMLError as exc:  # no driver, no GPU: the host runs without GPU metrics
            self.init_error = exc
            self._warn.fail(SOURCE, f"init failed: {exc}")
            return
        self.available = True
        self._driver = self._optional(lambda: _text(self._nvml.nvmlSystemGetDriverVersion()))
        self._devices = self._discover()
        self._xid = XidWatcher(
            self._nvml,
            [(dev.uuid, dev.handle) for dev in self._devices if not dev.mig_device],
            self._mig_ids(),
            self._warn,
            self._unsupported,
        )

    def _import_pynvml(self) -> Any:
        try:
            import pynvml
        except ImportError:
            self._warn.fail(SOURCE, "pynvml (nvidia-ml-py) is not installed")
            return None
        return pynvml

    @property
    def nvml(self) -> Any:
        """The NVML module in use (pynvml, or the simulation a scenario drives)."""
        return self._nvml

    # -- inventory ------------------------------------------------------------------------

    def inventory(self) -> list[dict[str, Any]]:
        return [dict(dev.info) for dev in self._devices if not dev.vanished]

    def driver_version(self) -> str | None:
        return self._driver

    @property
    def watches_xid(self) -> bool:
        """Whether XID events are registered on at least one GPU (else xid_last never comes)."""
        return self._xid is not None and self._xid.watching

    def dropped(self, uuid: str) -> dict[str, list[tuple[Reader, BaseException]]]:
        """Per field of one device: the readers dropped as unsupported, each with its answer
        (NVMLError_NotSupported, a function missing from pynvml, ...). A field whose every
        reader is here is absent from every sample of that device."""
        dev = next((d for d in self._devices if d.uuid == uuid), None)
        return {name: list(answers) for name, answers in dev.dropped.items()} if dev else {}

    def _optional(self, read: Any) -> Any:
        """A value that may be unavailable on this device or driver: None then."""
        try:
            return read()
        except (*self._unsupported, self._nvml.NVMLError):
            return None

    def _discover(self) -> list[_Device]:
        count = self._optional(lambda: self._nvml.nvmlDeviceGetCount()) or 0
        self._count = count
        devices: list[_Device] = []
        for index in range(count):
            try:
                devices.extend(self._discover_gpu(index))
            except self._nvml.NVMLError as exc:
                self._warn.fail(f"{SOURCE} gpu {index}", f"{exc}; skipped")
        return devices

    def _discover_gpu(self, index: int) -> list[_Device]:
        nvml = self._nvml
        handle = nvml.nvmlDeviceGetHandleByIndex(index)
        pci = self._optional(lambda: _text(nvml.nvmlDeviceGetPciInfo(handle).busId))
        gpu = self._describe(handle, index, pci)
        mode = self._optional(lambda: nvml.nvmlDeviceGetMigMode(handle)[0])
        if mode != getattr(nvml, "NVML_DEVICE_MIG_ENABLE", 1):
            return [gpu]
        gpu.info["mig"] = {"mode": "enabled"}
        return [gpu, *self._discover_mig(gpu)]

    def _discover_mig(self, parent: _Device) -> list[_Device]:
        nvml = self._nvml
        devices = []
        try:
            for slot in range(nvml.nvmlDeviceGetMaxMigDeviceCount(parent.handle)):
                try:
                    handle = nvml.nvmlDeviceGetMigDeviceHandleByIndex(parent.handle, slot)
                except nvml.NVMLError_NotFound:  # an empty slot
                    continue
                dev = self._describe(handle, parent.info["index"], parent.info["pci_bus_id"])
                dev.info["mig"] = {
                    "parent_uuid": parent.uuid,
                    "gpu_instance_id": nvml.nvmlDeviceGetGpuInstanceId(handle),
                    "compute_instance_id": nvml.nvmlDeviceGetComputeInstanceId(handle),
                }
                devices.append(dev)
        except nvml.NVMLError as exc:
            self._warn.fail(f"{SOURCE} {parent.uuid} mig", f"listing MIG devices failed: {exc}")
        return devices

    def _describe(self, handle: Any, index: int, pci_bus_id: str | None) -> _Device:
        nvml = self._nvml
        uuid = _text(nvml.nvmlDeviceGetUUID(handle))
        info = {
            "uuid": uuid,
            "index": index,
            "name": _text(nvml.nvmlDeviceGetName(handle)),
            "mem_total_bytes": self._optional(lambda: nvml.nvmlDeviceGetMemoryInfo(handle).total),
            "pci_bus_id": pci_bus_id,
            "numa_node": None,  # filled by the agent loop from sysfs
            "mig": None,
            "simulated": self.simulated,
        }
        return _Device(uuid, handle, info)

    def _mig_ids(self) -> MigIds:
        ids: MigIds = {}
        for dev in self._devices:
            if dev.mig_device:
                mig = dev.info["mig"]
                key = (mig["parent_uuid"], mig["gpu_instance_id"], mig["compute_instance_id"])
                ids[key] = dev.uuid
        return ids

    # -- samples ----------------------------------------------------------------------------

    def collect(self) -> list[dict[str, Any]]:
        if not self.available:
            return []
        self._look_for_vanished()
        xids = self._xid.drain() if self._xid is not None else {}
        now = self._clock()
        samples = []
        for dev in self._devices:
            sample = {"uuid": dev.uuid, "lost": 1} if dev.vanished else self._sample(dev, now)
            if dev.uuid in xids:
                # An XID (79: fallen off the bus) is what explains a lost GPU.
                sample["xid_last"] = xids[dev.uuid]
            samples.append(sample)
        return samples

    def _sample(self, dev: _Device, now: float) -> dict[str, Any]:
        sample: dict[str, Any] = {"uuid": dev.uuid}
        dev.unknown = False
        try:
            for name, readers in FIELDS:
                sample.update(self._read(dev, name, readers) or {})
        except self._lost as exc:
            self._warn.fail(f"{SOURCE} {dev.uuid}", f"{exc}; reported lost")
            return {"uuid": dev.uuid, "lost": 1}
        self._rates(dev, sample, now)
        unreachable = dev.unknown and len(sample) == 1  # nothing read, and not for "unsupported"
        dev.unknown_streak = dev.unknown_streak + 1 if unreachable else 0
        if dev.unknown_streak >= UNKNOWN_STREAK:
            self._warn.fail(f"{SOURCE} {dev.uuid}", f"every read failed {UNKNOWN_STREAK} "
                            "intervals in a row (NVML: Unknown Error); reported lost")
            return {"uuid": dev.uuid, "lost": 1}
        if not unreachable:  # until the streak decides, whether it is lost is unknown: absent
            self._warn.ok(f"{SOURCE} {dev.uuid}")
            sample["lost"] = 0
        return sample

    @staticmethod
    def _rates(dev: _Device, sample: dict[str, Any], now: float) -> None:
        """Cumulative counters (NVLink KiB) -> per-second rates from the previous reading.

        The first reading, and one below the last (the driver reloaded), give no rate."""
        for key, (rate_key, scale) in COUNTERS.items():
            if key not in sample:
                continue
            value = sample.pop(key)
            last = dev.counters.get(key)
            dev.counters[key] = (value, now)
            if last is not None and now > last[1] and value >= last[0]:
                sample[rate_key] = (value - last[0]) * scale / (now - last[1])

    # -- a GPU that left the bus ------------------------------------------------------------

    def _look_for_vanished(self) -> None:
        """When nvmlDeviceGetCount changes, find which GPUs NVML still lists (by UUID)."""
        count = self._optional(lambda: self._nvml.nvmlDeviceGetCount())
        if count is None or count == self._count:
            return
        self._count = count
        listed = self._listed(count)
        for dev in self._devices:
            found = listed.get(dev.physical_uuid)
            if found is None:
                if not dev.vanished:
                    self._warn.fail(f"{SOURCE} {dev.uuid} vanished", "NVML no longer lists "
                                    "this GPU; reported lost and left out of the inventory")
                dev.vanished = True
            else:  # listed (again): NVML may have renumbered the GPUs
                index, handle = found
                dev.info["index"], dev.vanished = index, False
                if not dev.mig_device:
                    dev.handle = handle

    def _listed(self, count: int) -> dict[str, tuple[int, Any]]:
        """UUID -> (index, handle) of each GPU NVML lists now."""
        listed = {}
        for index in range(count):
            try:
                handle = self._nvml.nvmlDeviceGetHandleByIndex(index)
            except (*self._unsupported, self._nvml.NVMLError):
                continue
            uuid = self._optional(lambda h=handle: _text(self._nvml.nvmlDeviceGetUUID(h)))
            if uuid is None:  # a lost GPU no longer tells its UUID, but NVML still lists it
                uuid = next((dev.uuid for dev in self._devices if not dev.mig_device
                             and same_device(dev.handle, handle)), None)
            if uuid is not None:
                listed[uuid] = (index, handle)
        return listed

    def _read(self, dev: _Device, name: str, readers: tuple[Reader, ...]) -> Any:
        """The first supported reader's answer, or None. Lets GpuIsLost through."""
        while (i := dev.reader.get(name, 0)) < len(readers):
            try:
                values = readers[i](self._nvml, dev.handle)
            except self._lost:
                raise
            except self._unsupported as exc:
                dev.reader[name] = i + 1
                # Its traceback dropped: kept for the device's lifetime, it would pin frames.
                dev.dropped.setdefault(name, []).append((readers[i], exc.with_traceback(None)))
                continue
            except self._nvml.NVMLError as exc:
                dev.unknown = dev.unknown or isinstance(exc, self._unknown_error)
                self._warn.fail(f"{SOURCE} {dev.uuid} {name}", str(exc))
                return None
            self._warn.ok(f"{SOURCE} {dev.uuid} {name}")
            return values
        return None

    def process_gpu_memory(self) -> dict[int, dict[str, int]]:
        """pid -> {gpu uuid: bytes} for compute processes (the vLLM workers)."""
        readers = (_compute_processes,)
        result: dict[int, dict[str, int]] = {}
        for dev in self._devices:
            if dev.mig_parent or dev.vanished:  # MIG devices list their own processes
                continue
            try:
                processes = self._read(dev, "processes", readers) or []
            except self._lost:
                continue  # collect() warns about it
            for proc in processes:
                if proc.usedGpuMemory is None:  # not available (e.g. WDDM), not zero
                    continue
                per_gpu = result.setdefault(int(proc.pid), {})
                per_gpu[dev.uuid] = per_gpu.get(dev.uuid, 0) + int(proc.usedGpuMemory)
        return result

    def close(self) -> None:
        """Release NVML; collect() answers nothing afterwards. Safe to call twice."""
        if not self.available:
            return
        self.available = False
        self._devices = []
        if self._xid is not None:
            self._xid.close()
        self._optional(lambda: self._nvml.nvmlShutdown())


def _compute_processes(nvml: Any, handle: Any) -> Any:
    return nvml.nvmlDeviceGetComputeRunningProcesses(handle)
