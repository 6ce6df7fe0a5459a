"""--send-interval: the shipper sends live batches at most once per send interval, the batches
taken meanwhile together in one request. Driven on a simulated clock: no wall-clock waits."""

from __future__ import annotations

import pytest

from agents.cli import _pacing
from agents.config import ConfigError
from agents.spool import Spool
from agents.transport import IngestClient, Shipper
from tests.agents.harness import TOKEN
from tests.agents.test_cli import parse
from tests.agents.test_transport import batch

RUN = ("run", "--server", "http://127.0.0.1:9", "--token", TOKEN)


class PacedAgent:
    """A shipper and a collection loop taking one batch per second on a simulated clock; the
    shipper's waits advance that clock, and the loop keeps taking batches meanwhile."""

    def __init__(self, url: str, spool_dir, send_interval: float) -> None:
        self.now = 0.0
        self.next_take = 0.0
        self.seq = 0
        self.sleeps: list[float] = []
        self.on_sleep = lambda: None
        self.spool = Spool(spool_dir, 10**9, warn=lambda _: None)
        self.shipper = Shipper(IngestClient(url, TOKEN, timeout=5.0), self.spool,
                               warn=lambda _: None, sleep=self._sleep, clock=lambda: self.now,
                               send_interval=send_interval)

    def run(self, until: float) -> None:
        """The loop's samples up to ``until``, the shipper stepped after each until idle."""
        while self.next_take < until:
            self.now = self.next_take
            self._take()
            while self.shipper.step():
                pass

    def _take(self) -> None:
        self.seq += 1
        self.shipper.submit(batch(self.seq))
        self.next_take += 1.0

    def _sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.on_sleep()
        end = self.now + seconds
        while self.next_take <= end:
            self.now = self.next_take
            self._take()
        self.now = end


def test_by_default_each_batch_goes_in_its_own_request_without_waiting(fake_ingest, tmp_path):
    agent = PacedAgent(fake_ingest.url, tmp_path, send_interval=_pacing(parse(*RUN)))

    agent.run(until=5)

    assert [r.seqs for r in fake_ingest.requests] == [[1], [2], [3], [4], [5]]
    assert agent.sleeps == []


def test_a_send_interval_of_two_sends_two_one_second_batches_per_request(fake_ingest, tmp_path):
    config = parse(*RUN, "--interval", "1", "--send-interval", "2")
    agent = PacedAgent(fake_ingest.url, tmp_path, send_interval=_pacing(config))

    agent.run(until=7)

    # The first batch goes at once; after it, each request waits out the 2 s since the last.
    assert [r.seqs for r in fake_ingest.requests] == [[1], [2, 3], [4, 5], [6, 7]]
    assert agent.sleeps == [1.0, 1.0, 1.0]
    assert agent.shipper.delivered_batches == 7 and len(agent.spool) == 0


def test_a_shutdown_during_the_wait_spills_the_queued_batches_to_the_spool(fake_ingest,
                                                                         tmp_path):
    agent = PacedAgent(fake_ingest.url, tmp_path, send_interval=2.0)
    agent.on_sleep = agent.shipper.close

    agent.run(until=2)

    assert [r.seqs for r in fake_ingest.requests] == [[1]]
    assert [s.batch["agent"]["seq"] for s in agent.spool.peek()] == [2, 3]


@pytest.mark.parametrize(("flags", "expected"), [
    ((), 1.0), (("--interval", "2"), 2.0), (("--send-interval", "5"), 5.0),
    (("--interval", "0.5", "--send-interval", "5"), 5.0)])
def test_the_send_interval_defaults_to_the_interval(flags, expected):
    assert parse(*RUN, *flags).send_interval == expected


@pytest.mark.parametrize("flags", [("--send-interval", "0.5"),
                                   ("--interval", "3", "--send-interval", "2"),
                                   ("--send-interval", "5.5")])
def test_a_send_interval_below_the_interval_or_above_five_seconds_is_refused(flags):
    with pytest.raises(ConfigError, match="--send-interval"):
        parse(*RUN, *flags)
