"""The hold: the server's replies ask the agent to hold its samples (``hold_s``) and send those
of one hold as one batch in one request, each sample at once while a page watches the host;
``--send-interval`` caps the hold. The agent's real loop and shipper against a real HTTP server
(the fake ingest), stepped by hand: no wall-clock waits."""

from __future__ import annotations

import threading

import pytest

from agents.batch import BatchBuilder
from agents.cli import samples_per_batch
from agents.config import ConfigError
from agents.loop import Loop
from agents.spool import Spool
from agents.transport import IngestClient, Shipper, asked_hold
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


def agent(url: str, spool_dir, config=None) -> tuple[Loop, Shipper]:
    """The loop and shipper as ``agents.cli`` wires them: the batch size follows the replies."""
    config = config or parse(*RUN)
    spool = Spool(spool_dir, 10**9, warn=lambda _: None)
    shipper = Shipper(IngestClient(url, TOKEN, timeout=5.0), spool, warn=lambda _: None)
    loop = Loop(CountingSampler(), BatchBuilder(), shipper.submit,  # type: ignore[arg-type]
                config.interval, samples_per_batch=lambda: samples_per_batch(
                    config, shipper.hold_s))
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


def test_a_server_that_asks_for_no_hold_gets_each_sample_as_it_is_taken(server, tmp_path):
    loop, shipper = agent(server.url, tmp_path)  # the fake says no hold_s: an older server

    take(loop, shipper, 5)

    assert [r.seqs for r in server.requests] == [[1], [2], [3], [4], [5]]
    assert sample_counts(server) == [[1]] * 5


def test_a_hold_of_five_seconds_sends_one_batch_of_five_samples_per_request(server, tmp_path):
    server.hold_s = 5.0
    loop, shipper = agent(server.url, tmp_path)

    take(loop, shipper, 11)

    # The first sample goes at once (no reply has asked for a hold yet), then five a batch.
    assert [r.seqs for r in server.requests] == [[1], [2], [3]]
    assert sample_counts(server) == [[1], [5], [5]]
    assert "ts" in server.requests[-1].batches[0]  # v2 once the server has said so
    second = server.requests[1].batches[0]
    assert times(second)[1] - times(second)[0] == 1.0  # each sample keeps its own time
    assert "host" in server.requests[0].batches[0]  # the inventory rides on the first batch
    assert shipper.delivered_batches == 3 and len(shipper.spool) == 0


def test_the_send_interval_caps_the_hold_the_server_asks_for(server, tmp_path):
    server.hold_s = 5.0
    loop, shipper = agent(server.url, tmp_path, parse(*RUN, "--send-interval", "2"))

    take(loop, shipper, 5)

    assert sample_counts(server) == [[1], [2], [2]]


def test_when_a_page_starts_watching_the_held_samples_go_at_the_next_tick(server, tmp_path):
    server.hold_s = 5.0
    loop, shipper = agent(server.url, tmp_path)
    take(loop, shipper, 9)  # 1, then 5, then 3 held
    server.hold_s = 0.0  # someone opened the host's page: the next reply asks for no hold
    loop.flush()  # as a stop would: the held three go now, and their reply says 0
    while shipper.step():
        pass

    take(loop, shipper, 2)

    assert sample_counts(server) == [[1], [5], [3], [1], [1]]
    assert [r.seqs for r in server.requests] == [[1], [2], [3], [4], [5]]


def test_held_samples_go_at_the_first_tick_after_the_hold_shrinks(server, tmp_path):
    server.hold_s = 5.0
    loop, shipper = agent(server.url, tmp_path)
    take(loop, shipper, 3)  # the first alone; two held of the next five
    shipper.hold_s = 0.0  # a reply (of a spool replay, say) asked for no hold meanwhile

    take(loop, shipper, 1)

    assert sample_counts(server) == [[1], [3]]


def test_samples_taken_when_the_agent_stops_are_spooled_not_lost(server, tmp_path):
    server.hold_s = 5.0
    loop, shipper = agent(server.url, tmp_path)
    take(loop, shipper, 1)  # the first sample is sent; its reply asks for a hold
    stop = threading.Event()
    waits = []

    def wait(seconds: float) -> bool:  # the loop's wait between ticks; stops after the 3rd
        waits.append(seconds)
        if len(waits) == 3:
            stop.set()
        return stop.is_set()

    loop.run(stop, wait)
    shipper.close()

    assert sample_counts(server) == [[1]]  # 3 of the next 5 samples: no batch was complete
    [spooled] = shipper.spool.peek()
    assert len(times(spooled.batch)) == 3 and spooled.batch["agent"]["seq"] == 2


@pytest.mark.parametrize(("flags", "hold", "expected"), [
    ((), 0.0, 1), ((), 5.0, 5), ((), 2.4, 2), (("--interval", "2"), 5.0, 2),
    (("--send-interval", "1"), 5.0, 1), (("--send-interval", "3"), 5.0, 3),
    (("--interval", "0.5"), 5.0, 10), (("--interval", "10"), 5.0, 1),
    (("--interval", "0.5", "--send-interval", "2"), 0.0, 1)])
def test_a_batch_holds_the_samples_of_the_hold_asked_for_at_most_the_send_interval(
        flags, hold, expected):
    assert samples_per_batch(parse(*RUN, *flags), hold) == expected


@pytest.mark.parametrize(("flags", "expected"), [
    ((), 5.0), (("--interval", "2"), 5.0), (("--send-interval", "1"), 1.0),
    (("--interval", "0.5", "--send-interval", "2"), 2.0), (("--interval", "10"), 10.0)])
def test_the_send_interval_defaults_to_five_seconds_or_the_interval_if_longer(flags, expected):
    assert parse(*RUN, *flags).send_interval == expected


@pytest.mark.parametrize("body", [
    {}, {"hold_s": None}, {"hold_s": "5"}, {"hold_s": True}, {"hold_s": -1},
    {"hold_s": float("nan")}, {"hold_s": float("inf")}, {"hold_s": [5]}])
def test_a_reply_that_does_not_ask_for_a_usable_hold_gets_each_sample_at_once(body):
    assert asked_hold(body) == 0.0


def test_a_reply_asking_for_a_hold_is_read_as_seconds():
    assert (asked_hold({"hold_s": 5}), asked_hold({"hold_s": 2.5})) == (5.0, 2.5)


@pytest.mark.parametrize("flags", [("--send-interval", "0.5"),
                                   ("--interval", "3", "--send-interval", "2"),
                                   ("--send-interval", "5.5")])
def test_a_send_interval_below_the_interval_or_above_five_seconds_is_refused(flags):
    with pytest.raises(ConfigError, match="--send-interval"):
        parse(*RUN, *flags)
