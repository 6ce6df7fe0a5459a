"""Ingest's replies ask an agent to hold its samples (``hold_s``) unless a page watches its host:
the real ingest app and live publisher, interest in real Redis, sockets through the real
consumer."""

from __future__ import annotations

import time

import pytest
import redis.asyncio

from controlplane.fleet.models import Engine, Host
from controlplane.realtime import interest
from tests.realtime.helpers import body, open_socket, post, refresh_interest, subscribe
from tests.realtime.helpers import synchronously as run

HOLD_S = 4.0


@pytest.fixture
def holding_ingest(live_settings, make_ingest):
    """The ingest app as production runs it but with a hold of its own (tests ask for 0)."""
    live_settings.PITWALL = {**live_settings.PITWALL, "AGENT_HOLD_S": HOLD_S}
    return make_ingest()


@pytest.fixture
def node(holding_ingest, agents) -> dict:
    """gpu-node-1 has reported once (its inventory: GPUs and an engine); nobody watches."""
    code, reply = holding_ingest.post(body("gpu-node-1"), agents["gpu-node-1"])
    assert code == 200, reply
    return {"host": Host.objects.get(hostname="gpu-node-1").id,
            "engine": Engine.objects.get(host__hostname="gpu-node-1").id}


def asked(ingest, token: str) -> float:
    code, reply = ingest.post(body("gpu-node-1"), token)
    assert code == 200, reply
    return reply["hold_s"]


async def watch(ingest, handshake, *groups: str):
    """A socket subscribed to ``groups``, the publisher having read the interest."""
    socket = await open_socket(handshake)
    await subscribe(socket, *groups)
    await refresh_interest(ingest)
    return socket


def test_an_unwatched_host_is_asked_to_hold_its_samples(holding_ingest, agents, node):
    assert asked(holding_ingest, agents["gpu-node-1"]) == HOLD_S


async def lapse(group: str) -> None:
    """The page left ``interest.TTL_S`` ago: its group's last renewal has expired."""
    url, key = interest._target()
    client = redis.asyncio.Redis.from_url(url)
    await client.zadd(key, {group: time.time() - 1})
    await client.aclose()


@pytest.mark.parametrize("group", ["host", "engine"])
def test_a_watched_host_or_engine_gets_each_sample_at_once_until_the_page_lapses(
        holding_ingest, agents, node, session_handshake, group):
    token = agents["gpu-node-1"]

    @run
    async def scenario():
        socket = await watch(holding_ingest, session_handshake, f"{group}:{node[group]}")
        code, watched = await post(holding_ingest, body("gpu-node-1"), token)
        await socket.close()
        await lapse(f"{group}.{node[group]}")
        await refresh_interest(holding_ingest)
        code_after, left = await post(holding_ingest, body("gpu-node-1"), token)
        return (code, watched["hold_s"]), (code_after, left["hold_s"])

    assert scenario() == ((200, 0.0), (200, HOLD_S))


def test_another_host_watched_or_the_fleet_page_leaves_the_hold(
        holding_ingest, agents, node, session_handshake):
    code, reply = holding_ingest.post(body("gpu-node-2"), agents["gpu-node-2"])
    assert code == 200, reply
    other = Host.objects.get(hostname="gpu-node-2").id

    @run
    async def scenario():
        socket = await watch(holding_ingest, session_handshake, "fleet", f"host:{other}")
        replies = [await post(holding_ingest, body(name), agents[name])
                   for name in ("gpu-node-1", "gpu-node-2")]
        await socket.close()
        return [reply["hold_s"] for _, reply in replies]

    assert scenario() == [HOLD_S, 0.0]


def test_a_server_with_no_hold_asks_for_each_sample_at_once(make_ingest, live_settings, agents):
    live_settings.PITWALL = {**live_settings.PITWALL, "AGENT_HOLD_S": 0.0}
    ingest = make_ingest()
    assert asked(ingest, agents["gpu-node-1"]) == 0.0
