"""Optional timing trace of the ingest path, to find where slow requests spend their time.

Off unless ``PITWALL_INGEST_TRACE`` names a file prefix; then each ingest process records, in
memory, per request the instants it passed each step (read, decoded, queued, flush started,
committed, answered), per flush its phases, every cyclic-GC pass and the event loop's lag,
and writes them as ``<prefix>.<pid>.json`` when it stops. ``time.monotonic`` is one clock for
every process of the machine, so the benchmark lines these up with its own send times,
PostgreSQL's checkpoints and the machine's steal (tests/bench/ingest.py ``--trace``).
Off, the cost is one ``is None`` test per step.
"""

from __future__ import annotations

import asyncio
import gc
import json
import os
import time

LAG_EVERY_S = 0.01  # the loop-lag probe's period


class Trace:
    def __init__(self, prefix: str) -> None:
        self.prefix = prefix
        self.requests: list[tuple] = []
        self.flushes: list[tuple] = []
        self.gcs: list[tuple[float, float, int]] = []
        self.lags: list[tuple[float, float]] = []  # (instant, lag) above 5 ms
        self._gc_start = 0.0
        self._probe: asyncio.Task | None = None

    def start(self) -> None:
        gc.callbacks.append(self._on_gc)
        self._probe = asyncio.get_running_loop().create_task(self._lag_probe())

    def _on_gc(self, phase: str, info: dict) -> None:
        if phase == "start":
            self._gc_start = time.monotonic()
        else:
            self.gcs.append((self._gc_start, time.monotonic() - self._gc_start,
                             info["generation"]))

    async def _lag_probe(self) -> None:
        while True:
            before = time.monotonic()
            await asyncio.sleep(LAG_EVERY_S)
            lag = time.monotonic() - before - LAG_EVERY_S
            if lag > 0.005:
                self.lags.append((before + LAG_EVERY_S, lag))

    def request(self, steps: tuple) -> None:
        """(started, body read, decoded, queued, flush started, committed, answered)."""
        self.requests.append(steps)

    def flush(self, steps: tuple) -> None:
        """(started, batches, rows, claimed, copied, committed, answered)."""
        self.flushes.append(steps)

    def stop(self) -> None:
        if self._probe is not None:
            self._probe.cancel()
        if self._on_gc in gc.callbacks:
            gc.callbacks.remove(self._on_gc)
        with open(f"{self.prefix}.{os.getpid()}.json", "w") as f:
            json.dump({"requests": self.requests, "flushes": self.flushes, "gc": self.gcs,
                       "lag": self.lags}, f)


def from_environment() -> Trace | None:
    prefix = os.environ.get("PITWALL_INGEST_TRACE", "")
    return Trace(prefix) if prefix else None
