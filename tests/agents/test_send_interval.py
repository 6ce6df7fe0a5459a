"""--send-interval: the samples of one send interval go as one batch in one request; by default
each sample is its own batch, sent as it is taken. The agent's real loop and shipper against a
real HTTP server (the fake ingest), stepped by hand: no wall-clock waits."""

from __future__ import annotations

import threading

import pytest

from agents.batch import BatchBuilder
from agents.cli import samples_per_batch
from agents.config import ConfigError
from agents.loop import Loop
from agents.spool import Spool
from agents.transport import IngestClient, Shipper
from tests.agents.harness import TOKEN
from tests.agents.test_cli import parse

RUN = ("run", "--server", "http://127.0.0.1:9", "--token", TOKEN)


class CountingSampler:
    """A sample per call, its ts one second after the last."""

    def __init__(self) -> None:
        self.ts = 1_764_676_800.0

    def sample(self) -> dict:
        self.ts += 1.0
        return {"ts": self.ts, "host": {"load1": 0.5}}

    def inventory(self) -> dict:
        return {"hostname": "paced", "gpus": []}


@pytest.fixture
def server(fake_ingest):
    fake_ingest.protocols = "1, 2"  # as the real server: batches travel as protocol v2
    return fake_ingest


def agent(url: str, spool_dir, per_batch: int) -> tuple[Loop, Shipper]:
    spool = Spool(spool_dir, 10**9, warn=lambda _: None)
    shipper = Shipper(IngestClient(url, TOKEN, timeout=5.0), spool, warn=lambda _: None)
    loop = Loop(CountingSampler(), BatchBuilder(), shipper.submit,  # type: ignore[arg-type]
                samples_per_batch=per_batch)
    return loop, shipper


def take(loop: Loop, shipper: Shipper, samples: int) -> None:
    """``samples`` ticks, the shipper stepped after each until it has nothing to send."""
    for _ in range(samples):
        loop.tick()
        while shipper.step():
            pass


def times(batch: dict) -> list[float]:
    """Each sample's ts, in protocol v2 or in v1 (the first request, before the server's
    reply has said it takes v2)."""
    return batch["ts"] if "ts" in batch else [s["ts"] for s in batch["samples"]]


def sample_counts(server) -> list[list[int]]:
    """Per request, the samples each of its batches holds."""
    return [[len(times(b)) for b in r.batches] for r in server.requests]


def test_by_default_each_sample_is_a_batch_sent_as_it_is_taken(server, tmp_path):
    loop, shipper = agent(server.url, tmp_path, samples_per_batch(parse(*RUN)))

    take(loop, shipper, 5)

    assert [r.seqs for r in server.requests] == [[1], [2], [3], [4], [5]]
    assert sample_counts(server) == [[1]] * 5


def test_a_send_interval_of_two_sends_one_batch_of_two_samples_per_request(server,
                                                                          tmp_path):
    config = parse(*RUN, "--interval", "1", "--send-interval", "2")
    loop, shipper = agent(server.url, tmp_path, samples_per_batch(config))

    take(loop, shipper, 6)

    assert [r.seqs for r in server.requests] == [[1], [2], [3]]
    assert sample_counts(server) == [[2]] * 3
    assert "ts" in server.requests[-1].batches[0]  # v2 once the server has said so
    [first] = server.requests[0].batches
    assert times(first)[1] - times(first)[0] == 1.0  # each sample keeps its own time
    assert "host" in first  # the inventory rides on the first batch, as without the flag
    assert shipper.delivered_batches == 3 and len(shipper.spool) == 0


def test_samples_taken_when_the_agent_stops_are_spooled_not_lost(server, tmp_path):
    loop, shipper = agent(server.url, tmp_path, per_batch=5)
    stop = threading.Event()
    waits = []

    def wait(seconds: float) -> bool:  # the loop's wait between ticks; stops after the 3rd
        waits.append(seconds)
        if len(waits) == 3:
            stop.set()
        return stop.is_set()

    loop.run(stop, wait)
    shipper.close()

    assert server.requests == []  # 3 of 5 samples: no batch was complete
    [spooled] = shipper.spool.peek()
    assert len(times(spooled.batch)) == 3 and spooled.batch["agent"]["seq"] == 1


@pytest.mark.parametrize(("flags", "expected"), [
    ((), 1), (("--interval", "2"), 1), (("--send-interval", "5"), 5),
    (("--interval", "0.5", "--send-interval", "5"), 10),
    (("--interval", "2", "--send-interval", "5"), 2)])
def test_a_batch_holds_the_samples_of_one_send_interval(flags, expected):
    assert samples_per_batch(parse(*RUN, *flags)) == expected


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
