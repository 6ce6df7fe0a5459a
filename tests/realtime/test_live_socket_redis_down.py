"""A real uvicorn server, a real WebSocket client and a private Redis that the test stops.

While the channel layer's Redis is gone, a live socket must end (so live.js shows
"reconnecting…") instead of staying open with nothing coming; a socket opened during the outage
is closed, not left hanging; once Redis is back a new socket subscribes and gets events again.
"""

from __future__ import annotations

import asyncio
import re
import time
import urllib.request

import orjson
import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed

from controlplane.fleet.models import Host
from tests.browser.helpers import Stack
from tests.realtime.helpers import session_headers
from tests.support.live import RedisServer, free_port, server_env, start_server

pytestmark = pytest.mark.slow(seconds=15)

WAIT_S = 30  # only so that a broken build fails instead of hanging; never asserted on


@pytest.fixture
def stack(transactional_db, empty_samples, tmp_path):
    redis_server = RedisServer(tmp_path)
    redis_server.start()
    port = free_port()
    env = {**server_env(), "REDIS_URL": redis_server.url, "PITWALL_METRICS_OPEN": "true"}
    server = start_server(port, tmp_path / "server.log", env)
    yield port, redis_server, server
    server.stop()
    redis_server.stop()


def headers(port: int) -> dict[str, str]:
    cookie = dict(session_headers("olivia"))[b"cookie"].decode()
    return {"Cookie": cookie, "Origin": f"http://127.0.0.1:{port}"}


async def subscribed(port: int, hdrs: dict, group: str):
    socket = await connect(f"ws://127.0.0.1:{port}/ws/live/", additional_headers=hdrs)
    await socket.send(orjson.dumps({"type": "subscribe", "groups": [group]}).decode())
    return socket


async def next_message(socket) -> dict:
    return orjson.loads(await asyncio.wait_for(socket.recv(), WAIT_S))


async def closed_code(socket) -> int | None:
    """Wait for the server to end the socket; its close code."""
    try:
        async with asyncio.timeout(WAIT_S):
            while True:
                await socket.recv()
    except ConnectionClosed as closed:
        return closed.rcvd.code if closed.rcvd else None


def live_clients(port: int) -> float:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=WAIT_S) as reply:
        text = reply.read().decode()
    return float(re.search(r"^pitwall_live_clients (\S+)$", text, re.M).group(1))


async def first_event(socket, agent, kind: str = "host") -> dict:
    """Post a batch every half second until the socket receives an event of ``kind``."""
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        await asyncio.to_thread(agent.send)
        try:
            message = orjson.loads(await asyncio.wait_for(socket.recv(), 0.5))
        except TimeoutError:
            continue
        if message["type"] == kind:
            return message
    raise AssertionError(f"no {kind} event within {WAIT_S} s")


def test_sockets_end_while_redis_is_down_and_live_events_come_again_when_it_returns(stack):
    port, redis_server, server = stack
    agent = Stack(f"http://127.0.0.1:{port}", None, redis_server).agent("redis-down-host")
    agent.send()
    group = f"host:{Host.objects.get(hostname='redis-down-host').id}"
    hdrs = headers(port)

    async def scenario() -> dict:
        seen: dict = {}
        before = await subscribed(port, hdrs, group)
        assert (await next_message(before))["type"] == "subscribed"
        await first_event(before, agent)
        seen["clients while live"] = await asyncio.to_thread(live_clients, port)
        redis_server.stop()
        seen["open socket ends"] = await closed_code(before)
        during = await subscribed(port, hdrs, group)
        seen["new socket ends"] = await closed_code(during)
        seen["ingest while down"] = (await asyncio.to_thread(agent.send))["accepted"]
        seen["clients while down"] = await asyncio.to_thread(live_clients, port)
        redis_server.start()
        after = await subscribed(port, hdrs, group)
        assert (await next_message(after))["type"] == "subscribed"
        seen["event after"] = (await first_event(after, agent))["type"]
        await after.close()
        return seen

    seen = asyncio.run(scenario())
    assert seen == {"clients while live": 1, "open socket ends": 1013, "new socket ends": 1013,
                    "ingest while down": 1, "clients while down": 0, "event after": "host"}
    assert "Exception in ASGI application" not in server.output()
