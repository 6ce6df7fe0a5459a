"""What the server's replies ask of the sender beyond success or failure: Retry-After on a 503 or
a 429, and a refusal for a timestamp ahead of the server's clock (400, reason "clock"), which
keeps the batch instead of dropping it (docs/protocol.md, docs/agent.md)."""

from __future__ import annotations

import re
import time
from email.utils import formatdate

import pytest

from agents.transport import RETRY_AFTER_CAP_S
from tests.agents.harness import Harness

SHED = {"error": "overloaded: queue, retry after 5 s", "reason": "overloaded", "shed": "queue"}


def batch(seq: int, ts: float | None = None) -> dict:
    return {"protocol": 1, "agent": {"version": "0.1.0", "boot_id": "boot-a", "seq": seq},
            "samples": [{"ts": time.time() + seq if ts is None else ts, "host": {"load1": 0.5}}]}


@pytest.mark.parametrize("status", [503, 429])
@pytest.mark.parametrize(("jitter", "expected"), [(0.0, 5.0), (1.0, 10.0)])
def test_the_next_attempt_waits_at_least_retry_after_plus_jitter(fake_ingest, tmp_path, status,
                                                                  jitter, expected):
    fake_ingest.script = [(status, SHED, {"Retry-After": "5"})]
    h = Harness(fake_ingest.url, tmp_path, jitter=jitter)

    h.shipper.submit(batch(1))
    h.drain()

    # The floor is Retry-After; the jitter adds up to max(Retry-After, the backoff window).
    assert h.sleeps == [expected]
    assert [r.seqs for r in fake_ingest.requests] == [[1], [1]]
    assert h.shipper.delivered_batches == 1 and h.shipper.dropped_batches == 0


def test_backoff_keeps_growing_above_the_retry_after_floor(fake_ingest, tmp_path):
    fake_ingest.script = [(503, SHED, {"Retry-After": "5"})] * 6
    h = Harness(fake_ingest.url, tmp_path, jitter=1.0)

    h.shipper.submit(batch(1))
    h.drain()

    # Windows 0.5, 1, 2, 4, 8, 16: the jitter's range is the larger of 5 and the window.
    assert h.sleeps == [10.0, 10.0, 10.0, 10.0, 13.0, 21.0]


def test_a_retry_after_date_is_read_against_the_servers_own_clock(fake_ingest, tmp_path):
    fake_ingest.clock_offset = -600  # the server's clock is ten minutes behind ours
    when = formatdate(fake_ingest.now() + 20, usegmt=True)
    fake_ingest.script = [(503, SHED, {"Retry-After": when})]
    h = Harness(fake_ingest.url, tmp_path, jitter=0.0)

    h.shipper.submit(batch(1))
    h.drain()

    [sleep] = h.sleeps
    assert 18 <= sleep <= 21  # the Date header has whole seconds


def test_an_absurd_retry_after_is_capped(fake_ingest, tmp_path):
    fake_ingest.script = [(503, SHED, {"Retry-After": "86400"})]
    h = Harness(fake_ingest.url, tmp_path, jitter=0.0)

    h.shipper.submit(batch(1))
    h.drain()

    assert h.sleeps == [RETRY_AFTER_CAP_S]


def test_a_clock_refusal_keeps_the_batch_spooled_and_says_the_skew_once(fake_ingest, tmp_path):
    fake_ingest.clock_offset = -600
    fake_ingest.max_skew = 300
    h = Harness(fake_ingest.url, tmp_path)

    for seq in (1, 2, 3):
        h.shipper.submit(batch(seq))
        h.shipper.step()

    assert h.shipper.dropped_batches == 0 and h.shipper.delivered_batches == 0
    assert len(h.spool) == 3  # kept, in order, for when the server's clock gets there
    [line] = h.warnings
    assert line.startswith("clock: the server refuses samples as too far in the future")
    assert re.search(r"this host's clock is about (599|600|601) s ahead of the server's", line)
    assert len(h.sleeps) == 3  # backing off, not hammering the server

    fake_ingest.clock_offset = 0  # the server's clock is fixed (or reached the samples)
    h.drain()

    assert [s for r in fake_ingest.requests[3:] for s in r.seqs] == [1, 2, 3]
    assert h.shipper.delivered_batches == 3 and len(h.spool) == 0
    assert h.shipper.dropped_batches == 0
    # Recovered once a group goes through that no clock refusal preceded.
    h.shipper.submit(batch(4))
    h.drain()
    assert h.warnings[1:] == ["clock: recovered"]


def test_a_replay_sends_at_once_the_batches_before_the_one_refused_for_its_clock(fake_ingest,
                                                                                 tmp_path):
    fake_ingest.max_skew = 300
    h = Harness(fake_ingest.url, tmp_path)
    now = time.time()
    for seq, ahead in enumerate([0, 1, 2, 900, 901], start=1):
        h.spool.append(batch(seq, ts=now + ahead))

    h.shipper.step()  # the group of 5 is refused at batches[3]
    h.shipper.step()  # the first 3 go at once
    h.shipper.step()  # the rest is refused again: now the sender backs off

    assert [r.seqs for r in fake_ingest.requests] == [[1, 2, 3, 4, 5], [1, 2, 3], [4, 5]]
    assert len(h.sleeps) == 1
    assert h.shipper.delivered_batches == 3 and h.shipper.dropped_batches == 0
    assert [s.batch["agent"]["seq"] for s in h.spool.peek()] == [4, 5]


def test_a_sample_older_than_retention_is_still_dropped_for_good(fake_ingest, tmp_path):
    fake_ingest.script = [(400, {"error": "ts is 40.0 days old", "field": "samples[0].ts",
                                 "reason": "retention"})]
    h = Harness(fake_ingest.url, tmp_path)

    h.shipper.submit(batch(1))
    h.drain()

    assert h.shipper.dropped_batches == 1 and len(h.spool) == 0
    assert h.sleeps == []


def test_a_host_behind_the_server_is_told_once_and_its_samples_are_sent(fake_ingest, tmp_path):
    fake_ingest.clock_offset = 600  # the server is ten minutes ahead: this host is behind
    fake_ingest.max_skew = 300
    h = Harness(fake_ingest.url, tmp_path)

    for seq in (1, 2, 3):
        h.shipper.submit(batch(seq))
        h.drain()

    assert h.shipper.delivered_batches == 3 and h.sleeps == []
    [line] = h.warnings
    assert line.startswith("clock: this host's clock is about 60")
    assert "behind the server's; samples are stored at this host's times" in line

    fake_ingest.clock_offset = 0
    h.shipper.submit(batch(4))
    h.drain()
    assert h.warnings[1:] == ["clock: recovered"]


def test_batches_held_from_before_the_clock_was_fixed_are_said_so(fake_ingest, tmp_path):
    fake_ingest.max_skew = 300
    h = Harness(fake_ingest.url, tmp_path)
    h.spool.append(batch(1, ts=time.time() + 900))  # made while this host's clock was ahead

    h.shipper.step()

    [line] = h.warnings
    assert "they were made while this host's clock was ahead (it now agrees" in line
    assert len(h.spool) == 1 and h.shipper.dropped_batches == 0
