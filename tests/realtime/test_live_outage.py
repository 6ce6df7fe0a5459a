"""Redis down: ingest answers and stores as always, live push pauses, then resumes by itself."""

from __future__ import annotations

import logging

from controlplane.fleet.models import Host
from tests.realtime.helpers import (
    body,
    open_socket,
    post,
    redis_layer,
    refresh_interest,
    subscribe,
    synchronously,
)
from tests.support.live import free_port
from tests.support.polling import await_until
from tests.telemetry.factories import stored_rows

PUBLISHER = "controlplane.realtime.publisher"


def outage_lines(caplog, word: str) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == PUBLISHER and word in r.message]


def errors(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]


def point_the_layer_at_a_closed_port(settings) -> dict:
    """Same prefix, no Redis behind it; returns the working layer to switch back to."""
    working = settings.CHANNEL_LAYERS
    prefix = working["default"]["CONFIG"]["prefix"]
    settings.CHANNEL_LAYERS = redis_layer(f"redis://127.0.0.1:{free_port()}/0", prefix)
    return working


def test_ingest_stores_and_answers_while_redis_is_unreachable(live_settings, make_ingest,
                                                              agents, caplog):
    caplog.set_level(logging.INFO, logger=PUBLISHER)
    point_the_layer_at_a_closed_port(live_settings)
    ingest = make_ingest()
    replies = []
    for _ in range(3):
        replies.append(ingest.post(body("gpu-node-1"), agents["gpu-node-1"]))
        ingest.run(ingest.app.listeners[0].refresh())
    assert [(code, reply["accepted"]) for code, reply in replies] == [(200, 1)] * 3
    assert stored_rows() == {"host": 3, "gpu": 6, "engine": 3, "proc": 3}
    assert len(outage_lines(caplog, "paused")) == 1  # one line per outage, not per batch
    assert errors(caplog) == []


def test_live_push_pauses_when_redis_goes_away_and_resumes_when_it_returns(
        live_settings, live_ingest, agents, session_handshake, caplog):
    caplog.set_level(logging.INFO, logger=PUBLISHER)
    token = agents["gpu-node-1"]
    live_ingest.post(body("gpu-node-1"), token)
    host = Host.objects.get(hostname="gpu-node-1").id
    batches = [body("gpu-node-1") for _ in range(4)]
    publisher = live_ingest.app.listeners[0]  # the live publisher (asgi.ingest_app)

    @synchronously
    async def scenario():
        socket = await open_socket(session_handshake)  # keeps its own connection to the real Redis
        await subscribe(socket, f"host:{host}")
        await refresh_interest(live_ingest)
        assert (await post(live_ingest, batches[0], token))[0] == 200
        before = await socket.receive_json()
        working = point_the_layer_at_a_closed_port(live_settings)
        during = [(await post(live_ingest, b, token))[0] for b in batches[1:3]]
        await await_until(lambda: publisher.down, "the publisher never saw the outage")
        live_settings.CHANNEL_LAYERS = working  # Redis "returns"
        await refresh_interest(live_ingest)
        assert (await post(live_ingest, batches[3], token))[0] == 200
        after = await socket.receive_json()
        await socket.close()
        return before, during, after

    before, during, after = scenario()
    ts = [b["samples"][0]["ts"] for b in batches]
    assert during == [200, 200]
    assert stored_rows()["host"] == 5
    # The events of the outage were dropped, not queued: the next one is the newest batch's.
    assert [before["samples"][0]["ts"], after["samples"][0]["ts"]] == [ts[0], ts[3]]
    assert len(outage_lines(caplog, "paused")) == 1
    assert len(outage_lines(caplog, "resumed")) == 1
    assert errors(caplog) == []
