"""Driving the live socket and the ingest app from one async test body.

``Socket`` is a small WebSocket test client over asgiref's ApplicationCommunicator: Channels'
own ``WebsocketCommunicator`` cannot be imported without daphne, which Pitwall does not use.
"""

from __future__ import annotations

import asyncio
import functools
import itertools
import threading
import time

import orjson
from asgiref.sync import async_to_sync
from asgiref.testing import ApplicationCommunicator
from channels.layers import get_channel_layer
from django.db import connections
from django.test import Client

from controlplane.asgi import application
from tests.support.roles import user_with_role
from tests.telemetry.factories import batch, sample

DEADLINE_S = 10  # only so that a broken build fails instead of hanging; never asserted on


def synchronously(body):
    """Run an async test body to completion from a plain test, and return its result.

    It runs in a thread of its own, so it works whatever the test thread holds (the browser
    tests keep Playwright's event loop running in it for the whole session); that thread's
    database connections are closed at the end.
    """

    @functools.wraps(body)
    def run(*args, **kwargs):
        outcome: dict = {}

        def target() -> None:
            try:
                outcome["value"] = async_to_sync(body)(*args, **kwargs)
            except BaseException as exc:  # noqa: BLE001 - re-raised in the test's thread
                outcome["error"] = exc
            finally:
                connections.close_all()

        thread = threading.Thread(target=target, name=f"scenario-{body.__name__}")
        thread.start()
        thread.join()
        if "error" in outcome:
            raise outcome["error"]
        return outcome["value"]

    return run


class Socket(ApplicationCommunicator):
    def __init__(self, headers: list[tuple[bytes, bytes]], path: str = "/ws/live/") -> None:
        super().__init__(application, {"type": "websocket", "path": path, "query_string": b"",
                                       "headers": headers, "subprotocols": []})

    async def connect(self) -> dict:
        """The server's first answer: websocket.accept, or websocket.close when refused."""
        await self.send_input({"type": "websocket.connect"})
        return await self.receive_output(DEADLINE_S)

    async def send_text(self, text: str) -> None:
        await self.send_input({"type": "websocket.receive", "text": text})

    async def send_json(self, message: dict) -> None:
        await self.send_text(orjson.dumps(message).decode())

    async def receive_json(self) -> dict:
        message = await self.receive_output(DEADLINE_S)
        assert message["type"] == "websocket.send", message
        return orjson.loads(message["text"])

    async def close(self) -> None:
        await self.send_input({"type": "websocket.disconnect", "code": 1000})
        await self.wait(DEADLINE_S)


async def warm_up_layer() -> None:
    """Give the channel layer an open Redis connection on this loop before a consumer starts.

    Python 3.11's ``asyncio.wait_for`` can swallow a cancellation (fixed in 3.12), and
    redis-py sends its connection handshake through it: a socket closed while the consumer's
    first receive is still connecting lingers until that receive times out (5 s). A connection
    already in the pool skips the handshake.
    """
    await get_channel_layer().group_discard("warm-up", "warm-up.none")


async def open_socket(headers: list[tuple[bytes, bytes]]) -> Socket:
    await warm_up_layer()
    socket = Socket(headers)
    assert (await socket.connect())["type"] == "websocket.accept"
    return socket


async def subscribe(socket: Socket, *groups) -> dict:
    await socket.send_json({"type": "subscribe", "groups": list(groups)})
    return await socket.receive_json()


async def on_ingest_loop(ingest, coro):
    """Await a coroutine on the ingest app's own loop without blocking this one."""
    return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(coro, ingest.loop))


async def post(ingest, body: dict, token: str) -> tuple[int, dict]:
    return await on_ingest_loop(ingest, ingest.apost(body, token))


async def refresh_interest(ingest) -> None:
    """Make the publisher re-read interest now, instead of at its next tick."""
    await on_ingest_loop(ingest, ingest.app.listeners[0].refresh())


def session_headers(username: str, role: str | None = "viewer") -> list[tuple[bytes, bytes]]:
    user = user_with_role(username, role)
    browser = Client()
    browser.force_login(user)
    cookie = browser.cookies["sessionid"].value
    return [(b"cookie", f"sessionid={cookie}".encode()), (b"origin", b"http://testserver")]


def redis_layer(url: str, prefix: str) -> dict:
    """A Redis channel layer on ``url`` whose keys start with ``prefix``."""
    return {"default": {"BACKEND": "channels_redis.core.RedisChannelLayer",
                        "CONFIG": {"hosts": [url], "prefix": prefix}}}


_clock = itertools.count()


def body(hostname: str) -> dict:
    """A one-sample batch of ``hostname`` with a timestamp no other batch of the test has."""
    ts = time.time() - 60 + next(_clock) / 10
    return batch(samples=[sample(ts, hostname=hostname)], hostname=hostname)
