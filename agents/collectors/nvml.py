"""GPU inventory and per-interval GPU metrics from NVML.

The NVML module is injected: ``pynvml`` (nvidia-ml-py) on a real host, ``agents.sim.gpus.SimNvml``
on a simulated one, a small fake in tests. NVML is initialised once, here, not per sample.
A field NVML reports as not supported (or not permitted, or missing from an older pynvml) is
absent from the sample and not asked again; any other NVML error is a one-line warning.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from agents.collectors.base import Warn, WarnOnce, stderr_warn
from agents.collectors.nvml_fields import FIELDS, Reader
from agents.collectors.nvml_xid import MigIds, XidWatcher

SOURCE = "nvml"
_UNSUPPORTED = ("NVMLError_NotSupported", "NVMLError_NoPermission", "NVMLError_FunctionNotFound")


@dataclass
class _Device:
    uuid: str
    handle: Any
    info: dict[str, Any]  # the inventory entry
    # Per field: index of the reader in use; len(readers) once every reader is unsupported.
    reader: dict[str, int] = field(default_factory=dict)

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
    def __init__(self, nvml: Any = None, warn: Warn = stderr_warn) -> None:
        self._warn = WarnOnce(warn)
        self._devices: list[_Device] = []
        self._xid: XidWatcher | None = None
        self._driver: str | None = None
        self.available = False
        self._nvml = nvml if nvml is not None else self._import_pynvml()
        self.simulated = bool(getattr(self._nvml, "SIMULATED", False))
        self._unsupported: tuple[type[BaseException], ...] = (AttributeError,) + tuple(
            getattr(self._nvml, name) for name in _UNSUPPORTED if hasattr(self._nvml, name)
        )
        self._lost = getattr(self._nvml, "NVMLError_GpuIsLost", ())
        if self._nvml is None:
            return
        try:
            self._nvml.nvmlInit()
        except self._nvml.NVMLError as exc:  # no driver, no GPU: the host runs without GPU metrics
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

    # -- inventory ------------------------------------------------------------------------

    def inventory(self) -> list[dict[str, Any]]:
        return [dict(dev.info) for dev in self._devices]

    def driver_version(self) -> str | None:
        return self._driver

    def _optional(self, read: Any) -> Any:
        """A value that may be unavailable on this device or driver: None then."""
        try:
            return read()
        except (*self._unsupported, self._nvml.NVMLError):
            return None

    def _discover(self) -> list[_Device]:
        count = self._optional(lambda: self._nvml.nvmlDeviceGetCount()) or 0
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
        xids = self._xid.drain() if self._xid is not None else {}
        samples = []
        for dev in self._devices:
            sample = self._sample(dev)
            if dev.uuid in xids:
                # An XID (79: fallen off the bus) is the one thing a lost GPU can still tell.
                sample = {**(sample or {"uuid": dev.uuid}), "xid_last": xids[dev.uuid]}
            if sample is not None:
                samples.append(sample)
        return samples

    def _sample(self, dev: _Device) -> dict[str, Any] | None:
        sample: dict[str, Any] = {"uuid": dev.uuid}
        try:
            for name, readers in FIELDS:
                sample.update(self._read(dev, name, readers) or {})
        except self._lost as exc:
            self._warn.fail(f"{SOURCE} {dev.uuid}", f"{exc}; skipped")
            return None
        self._warn.ok(f"{SOURCE} {dev.uuid}")
        return sample

    def _read(self, dev: _Device, name: str, readers: tuple[Reader, ...]) -> Any:
        """The first supported reader's answer, or None. Lets GpuIsLost through."""
        while (i := dev.reader.get(name, 0)) < len(readers):
            try:
                values = readers[i](self._nvml, dev.handle)
            except self._lost:
                raise
            except self._unsupported:
                dev.reader[name] = i + 1
                continue
            except self._nvml.NVMLError as exc:
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
            if dev.mig_parent:  # its MIG devices list their own processes
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
