"""XID critical-error events from NVML, read without blocking once per interval.

One event set is created and registered once; each interval drains what arrived since the last
one with timeout 0, so the agent loop never waits on the driver.
"""

from __future__ import annotations

import contextlib
import ctypes
from collections.abc import Iterable
from typing import Any

from agents.collectors.base import WarnOnce

SOURCE = "nvml xid"
# Bound on events read per interval, so an event storm cannot stall the agent loop.
MAX_EVENTS_PER_INTERVAL = 256

MigIds = dict[tuple[str, int, int], str]  # (parent uuid, GPU instance, compute instance) -> uuid


class XidWatcher:
    def __init__(
        self,
        nvml: Any,
        gpus: Iterable[tuple[str, Any]],  # (uuid, handle) of the physical GPUs
        mig_ids: MigIds,
        warn: WarnOnce,
        unsupported: tuple[type[BaseException], ...],
    ) -> None:
        self._nvml = nvml
        self._mig_ids = mig_ids
        self._warn = warn
        self._gpus = list(gpus)
        self._events = self._register(self._gpus, unsupported)

    @property
    def watching(self) -> bool:
        return self._events is not None

    def _register(self, gpus: Iterable[tuple[str, Any]], unsupported: tuple) -> Any:
        nvml = self._nvml
        try:
            events = nvml.nvmlEventSetCreate()
        except (*unsupported, nvml.NVMLError):
            return None
        registered = 0
        for uuid, handle in gpus:
            try:
                nvml.nvmlDeviceRegisterEvents(handle, nvml.nvmlEventTypeXidCriticalError, events)
                registered += 1
            except unsupported:
                pass
            except nvml.NVMLError as exc:
                self._warn.fail(f"{SOURCE} {uuid}", f"cannot watch XID events: {exc}")
        if registered:
            return events
        self._free(events)
        return None

    def drain(self) -> dict[str, int]:
        """uuid -> the last XID code seen since the previous call (timeout 0: never blocks)."""
        nvml = self._nvml
        latest: dict[str, int] = {}
        if self._events is None:
            return latest
        for _ in range(MAX_EVENTS_PER_INTERVAL):
            try:
                data = nvml.nvmlEventSetWait(self._events, 0)
            except nvml.NVMLError_Timeout:  # nothing (more) pending
                break
            except nvml.NVMLError as exc:
                self._warn.fail(SOURCE, str(exc))
                break
            if data.eventType & nvml.nvmlEventTypeXidCriticalError:
                uuid = self._uuid_of(data)
                if uuid is not None:
                    latest[uuid] = int(data.eventData)  # events arrive in order: last one wins
        return latest

    def _uuid_of(self, data: Any) -> str | None:
        try:
            parent = self._nvml.nvmlDeviceGetUUID(data.device)
        except self._nvml.NVMLError:
            # A GPU that fell off the bus (XID 79) no longer tells its UUID: the handle does.
            return next((uuid for uuid, handle in self._gpus
                         if same_device(handle, data.device)), None)
        parent = parent.decode() if isinstance(parent, bytes) else parent
        # The event names a MIG instance when its ids match one; otherwise the whole GPU.
        key = (parent, getattr(data, "gpuInstanceId", -1), getattr(data, "computeInstanceId", -1))
        return self._mig_ids.get(key, parent)

    def close(self) -> None:
        if self._events is not None:
            self._free(self._events)
            self._events = None

    def _free(self, events: Any) -> None:
        with contextlib.suppress(self._nvml.NVMLError):
            self._nvml.nvmlEventSetFree(events)


def same_device(a: Any, b: Any) -> bool:
    """pynvml hands out a new pointer object per call: compare the addresses they hold."""
    if a is b:
        return True
    try:
        address = ctypes.cast(a, ctypes.c_void_p).value
        return address is not None and address == ctypes.cast(b, ctypes.c_void_p).value
    except (ctypes.ArgumentError, TypeError):
        return False
