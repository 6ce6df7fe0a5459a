"""The writer's group commit: a batch is flushed ``flush_ms`` after it arrived, even when it
arrived during a slower flush (it used to wait a whole window more after that flush).

The writer's clock is the test's: the window is an hour, and the hour passes while the first
flush is held, so the second batch is flushed at once when the first flush ends or, as before
the fix, an hour later (the guard below fails the test instead).
"""

from __future__ import annotations

import asyncio
import uuid

from controlplane.telemetry.ingest.writer import Work, Writer

WINDOW_S = 3600.0
WAIT_S = 30  # only so that a broken build fails instead of hanging; never asserted on


class ManualClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class HeldWriter(Writer):
    """The real scheduling; each flush only waits for the test to let it end (no database)."""

    def __init__(self, clock: ManualClock) -> None:
        super().__init__("", flush_rows=10_000, flush_ms=int(WINDOW_S * 1000), clock=clock)
        self.flushing = asyncio.Event()
        self.release = asyncio.Event()
        self.flushed: list[int] = []  # the batches of each flush

    async def _flush_and_answer(self, work: list[Work]) -> None:
        self.flushing.set()
        await self.release.wait()
        self.flushed.append(len(work))
        for item in work:
            item.future.set_result(True)


def _work() -> Work:
    return Work(host_id=1, boot_id=uuid.uuid4(), seq=1, agent_version="", tables={}, days=set())


async def _a_batch_during_a_slow_flush() -> list[int]:
    clock = ManualClock()
    writer = HeldWriter(clock)
    await writer.start()
    first = asyncio.create_task(writer.submit([_work(), _work()]))  # a group: flushed at once
    await asyncio.wait_for(writer.flushing.wait(), WAIT_S)
    second = asyncio.create_task(writer.submit([_work()]))
    await asyncio.sleep(0)  # the second batch is waiting now
    clock.now += WINDOW_S + 1  # its window passes while the first flush still runs
    writer.release.set()
    outcomes = await asyncio.wait_for(asyncio.gather(first, second), WAIT_S)
    assert outcomes == [[True, True], [True]]
    await writer.stop()
    return writer.flushed


def test_a_batch_whose_window_passed_during_a_slow_flush_is_flushed_right_after_it():
    assert asyncio.run(_a_batch_during_a_slow_flush()) == [2, 1]
