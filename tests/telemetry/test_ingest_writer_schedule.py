"""The writer's group commit: a batch is flushed ``flush_ms`` after it arrived, even when it
arrived during a slower flush (it used to wait a whole window more after that flush).

The writer's clock is the test's: the window is an hour, and the hour passes while the first
flush is held, so the second batch is flushed at once when the first flush ends or, as before
the fix, an hour later (the guard below fails the test instead).
"""

from __future__ import annotations

import asyncio
import uuid

from controlplane.telemetry.ingest.writer import REPLAY_GROUP_BATCHES, Work, Writer

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
    replay = [_work() for _ in range(REPLAY_GROUP_BATCHES)]
    first = asyncio.create_task(writer.submit(replay))  # a replay's group: flushed at once
    await asyncio.wait_for(writer.flushing.wait(), WAIT_S)
    second = asyncio.create_task(writer.submit([_work()]))
    await asyncio.sleep(0)  # the second batch is waiting now
    clock.now += WINDOW_S + 1  # its window passes while the first flush still runs
    writer.release.set()
    outcomes = await asyncio.wait_for(asyncio.gather(first, second), WAIT_S)
    assert outcomes == [[True] * REPLAY_GROUP_BATCHES, [True]]
    await writer.stop()
    return writer.flushed


def test_a_batch_whose_window_passed_during_a_slow_flush_is_flushed_right_after_it():
    assert asyncio.run(_a_batch_during_a_slow_flush()) == [REPLAY_GROUP_BATCHES, 1]


async def _a_few_batches_then_a_replay() -> tuple[bool, list[int]]:
    writer = HeldWriter(ManualClock())
    await writer.start()
    few = asyncio.create_task(writer.submit([_work(), _work()]))
    for _ in range(20):  # the writer's task runs as often as it would
        await asyncio.sleep(0)
    waited = not writer.flushing.is_set()
    replay = asyncio.create_task(writer.submit(
        [_work() for _ in range(REPLAY_GROUP_BATCHES)]))
    await asyncio.wait_for(writer.flushing.wait(), WAIT_S)
    writer.release.set()
    await asyncio.wait_for(asyncio.gather(few, replay), WAIT_S)
    await writer.stop()
    return waited, writer.flushed


def test_a_request_of_a_few_batches_joins_the_group_commit_and_a_replay_flushes_at_once():
    # two batches wait for the window (an hour here) like one; a replay's group flushes them
    # with it, at once
    waited, flushed = asyncio.run(_a_few_batches_then_a_replay())
    assert waited
    assert flushed == [2 + REPLAY_GROUP_BATCHES]
