"""A live socket whose user loses the fleet (their role removed) stops receiving it: closed
with 4403 at its next ping or subscribe, and, when the client stops pinging, before the next
event once the last check is PITWALL_LIVE_RECHECK_S old. Real Redis channel layer."""

from __future__ import annotations

from channels.db import database_sync_to_async
from django.contrib.auth import get_user_model

from controlplane.accounts.roles import clear_roles
from controlplane.realtime.channel_layer import publish
from tests.realtime.helpers import (
    DEADLINE_S,
    open_socket,
    session_headers,
    subscribe,
    synchronously,
)


@database_sync_to_async
def remove_role(username: str) -> None:
    clear_roles(get_user_model().objects.get(username=username))


def test_a_user_whose_role_is_removed_is_closed_at_the_next_ping(live_settings,
                                                                 transactional_db):
    headers = session_headers("vera", "viewer")

    @synchronously
    async def scenario():
        socket = await open_socket(headers)
        assert (await subscribe(socket, "fleet"))["groups"] == ["fleet"]
        await remove_role("vera")
        await socket.send_json({"type": "ping"})
        closed = await socket.receive_output(DEADLINE_S)
        await socket.close()
        return closed

    assert scenario() == {"type": "websocket.close", "code": 4403}


def test_nor_may_it_subscribe_again(live_settings, transactional_db):
    headers = session_headers("vera", "viewer")

    @synchronously
    async def scenario():
        socket = await open_socket(headers)
        await remove_role("vera")
        await socket.send_json({"type": "subscribe", "groups": ["fleet"]})
        closed = await socket.receive_output(DEADLINE_S)
        await socket.close()
        return closed

    assert scenario() == {"type": "websocket.close", "code": 4403}


def test_a_client_that_stops_pinging_gets_no_event_after_losing_its_role(live_settings,
                                                                         transactional_db):
    live_settings.PITWALL = {**live_settings.PITWALL, "LIVE_RECHECK_S": 0}
    headers = session_headers("vera", "viewer")

    @synchronously
    async def scenario():
        socket = await open_socket(headers)
        await subscribe(socket, "fleet")
        await publish("fleet", '{"type": "fleet", "n": 1}')
        first = await socket.receive_json()
        await remove_role("vera")
        await publish("fleet", '{"type": "fleet", "n": 2}')
        after = await socket.receive_output(DEADLINE_S)
        await socket.close()
        return first, after

    first, after = scenario()
    assert first == {"type": "fleet", "n": 1}
    assert after == {"type": "websocket.close", "code": 4403}


def test_a_user_who_keeps_the_role_keeps_the_events(live_settings, transactional_db):
    live_settings.PITWALL = {**live_settings.PITWALL, "LIVE_RECHECK_S": 0}
    headers = session_headers("vera", "viewer")

    @synchronously
    async def scenario():
        socket = await open_socket(headers)
        await subscribe(socket, "fleet")
        received = []
        for n in range(3):
            await publish("fleet", f'{{"type": "fleet", "n": {n}}}')
            received.append((await socket.receive_json())["n"])
        await socket.send_json({"type": "ping"})
        pong = await socket.receive_json()
        await socket.close()
        return received, pong["type"]

    assert scenario() == ([0, 1, 2], "pong")
