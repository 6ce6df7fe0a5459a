"""NVML event sets for the simulated GPUs: XID critical errors, injected by tests and scenarios.

Semantics follow NVML: an event reaches only the sets that registered its type on its GPU,
and waiting on an empty set raises NVMLError_Timeout once ``timeoutms`` has passed.
"""

from __future__ import annotations

import threading
from collections import deque
from types import SimpleNamespace
from typing import Any

import pynvml

NO_INSTANCE = 0xFFFFFFFF  # gpuInstanceId / computeInstanceId outside MIG
XID = pynvml.nvmlEventTypeXidCriticalError


class EventSet:
    def __init__(self) -> None:
        self.types: dict[int, int] = {}  # GPU index -> registered event type mask
        self.pending: deque[SimpleNamespace] = deque()
        self.freed = False


class EventHub:
    def __init__(self) -> None:
        self._sets: list[EventSet] = []
        self._cond = threading.Condition()  # injection may come from another thread

    def create(self) -> EventSet:
        events = EventSet()
        with self._cond:
            self._sets.append(events)
        return events

    def register(self, index: int, event_types: int, events: EventSet) -> None:
        if event_types & ~XID:  # the only kind simulated
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
        with self._cond:
            events.types[index] = events.types.get(index, 0) | event_types

    def inject(self, index: int, handle: Any, code: int) -> None:
        event = SimpleNamespace(
            device=handle, eventType=XID, eventData=code,
            gpuInstanceId=NO_INSTANCE, computeInstanceId=NO_INSTANCE,
        )
        with self._cond:
            for events in self._sets:
                if events.types.get(index, 0) & XID:
                    events.pending.append(event)
            self._cond.notify_all()

    def wait(self, events: EventSet, timeoutms: int) -> SimpleNamespace:
        with self._cond:
            if events.freed:
                raise pynvml.NVMLError(pynvml.NVML_ERROR_INVALID_ARGUMENT)
            if not self._cond.wait_for(lambda: events.pending, timeout=timeoutms / 1000):
                raise pynvml.NVMLError(pynvml.NVML_ERROR_TIMEOUT)
            return events.pending.popleft()

    def free(self, events: EventSet) -> None:
        with self._cond:
            events.freed = True
            if events in self._sets:
                self._sets.remove(events)
