"""The writer's group commit: a batch is flushed ``flush_ms`` after it arrived, even when it
arrived during a slower flush (it used to wait a whole window more after that flush)."""

from __future__ import annotations

import asyncio
import time
import uuid

from controlplane.telemetry.ingest.writer import Work, Writer

WINDOW_S, FLUSH_S = 0.4, 0.6  # a flush slower than the window, as under load


class SlowWriter(Writer):
    """The real scheduling; the flush itself only takes time (no database)."""

    def __init__(self) -> None:
        super().__init__("", flush_rows=10_000, flush_ms=int(WINDOW_S * 1000))
        self.flushes: list[tuple[float, float]] = []

    async def _flush_and_answer(self, work: list[Work]) -> None:
        started = time.monotonic()
        await asyncio.sleep(FLUSH_S)
        self.flushes.append((started, time.monotonic()))
        for item in work:
            item.future.set_result(True)


def _work() -> Work:
    return Work(host_id=1, boot_id=uuid.uuid4(), seq=1, agent_version="", rows={}, days=set())


async def _two_batches() -> list[tuple[float, float]]:
    writer = SlowWriter()
    await writer.start()
    first = asyncio.create_task(writer.submit([_work()]))
    await asyncio.sleep(WINDOW_S + 0.1)  # the first flush is under way
    second = asyncio.create_task(writer.submit([_work()]))
    assert await asyncio.gather(first, second) == [[True], [True]]
    await writer.stop()
    return writer.flushes


def test_a_batch_that_arrives_during_a_slow_flush_is_flushed_right_after_it():
    (_, first_end), (second_start, _) = asyncio.run(_two_batches())

    # Due WINDOW_S after it arrived, i.e. before the first flush ended: no second wait.
    assert second_start - first_end < WINDOW_S / 2
