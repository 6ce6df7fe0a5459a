"""The /ws/live/ socket: who may open it, what it accepts, ping and pong."""

from __future__ import annotations

from channels.db import database_sync_to_async
from django.contrib.sessions.models import Session

from controlplane.fleet.models import Engine, Host
from controlplane.realtime.groups import MAX_GROUPS
from tests.realtime.helpers import (
    DEADLINE_S,
    Socket,
    open_socket,
    session_headers,
    subscribe,
    synchronously,
)

ANYWHERE = "unknown group; use fleet, host:<id> or engine:<id>"


def test_an_anonymous_socket_is_closed_with_4401(live_settings, transactional_db):
    @synchronously
    async def scenario():
        socket = await open_socket([(b"origin", b"http://testserver")])
        closed = await socket.receive_output(DEADLINE_S)
        await socket.close()
        return closed

    assert scenario() == {"type": "websocket.close", "code": 4401}


def test_a_signed_in_user_without_a_role_is_closed_with_4403(live_settings, transactional_db):
    headers = session_headers("nobody", role=None)

    @synchronously
    async def scenario():
        socket = await open_socket(headers)
        closed = await socket.receive_output(DEADLINE_S)
        await socket.close()
        return closed

    assert scenario() == {"type": "websocket.close", "code": 4403}


def test_a_socket_from_another_site_is_refused(live_settings, session_handshake):
    @synchronously
    async def scenario():
        headers = [h for h in session_handshake if h[0] != b"origin"] + [(b"origin", b"https://evil.io")]
        return await Socket(headers).connect()

    assert scenario()["type"] == "websocket.close"


def test_a_signed_in_socket_subscribes_to_the_fleet_a_host_and_an_engine(live_settings,
                                                                         session_handshake):
    host = Host.objects.create(hostname="gpu-node-1")
    engine = Engine.objects.create(host=host, name="vllm:8000/0")

    @synchronously
    async def scenario():
        socket = await open_socket(session_handshake)
        reply = await subscribe(socket, "fleet", f"host:{host.id}", f"engine:{engine.id}")
        await socket.close()
        return reply

    assert scenario() == {"type": "subscribed", "denied": {},
                          "groups": ["fleet", f"host:{host.id}", f"engine:{engine.id}"]}


def test_unknown_groups_and_missing_hosts_and_engines_are_denied_with_a_reason(
        live_settings, session_handshake):
    host = Host.objects.create(hostname="gpu-node-1")

    @synchronously
    async def scenario():
        socket = await open_socket(session_handshake)
        reply = await subscribe(socket, f"host:{host.id}", "host:999999", "engine:999999",
                                "gpu:1", "host:abc", "everything", 7)
        await socket.close()
        return reply

    reply = scenario()
    assert reply["groups"] == [f"host:{host.id}"]
    assert reply["denied"] == {
        "host:999999": "no such host", "engine:999999": "no such engine",
        "gpu:1": "unknown group kind 'gpu'; use fleet, host:<id> or engine:<id>",
        "host:abc": "host ids are positive integers", "everything": ANYWHERE, "7": ANYWHERE,
    }


def test_a_socket_may_watch_at_most_the_group_limit(live_settings, session_handshake):
    hosts = Host.objects.bulk_create([Host(hostname=f"h{i}") for i in range(MAX_GROUPS + 2)])

    @synchronously
    async def scenario():
        socket = await open_socket(session_handshake)
        reply = await subscribe(socket, *(f"host:{h.id}" for h in hosts))
        await socket.close()
        return reply

    reply = scenario()
    assert len(reply["groups"]) == MAX_GROUPS
    assert set(reply["denied"]) == {f"host:{h.id}" for h in hosts[MAX_GROUPS:]}
    assert set(reply["denied"].values()) == {f"more than {MAX_GROUPS} groups on one socket"}


def test_a_new_subscribe_replaces_the_previous_set(live_settings, session_handshake):
    first, second = (Host.objects.create(hostname=n) for n in ("a", "b"))

    @synchronously
    async def scenario():
        socket = await open_socket(session_handshake)
        await subscribe(socket, "fleet", f"host:{first.id}")
        reply = await subscribe(socket, f"host:{second.id}")
        await socket.close()
        return reply

    assert scenario()["groups"] == [f"host:{second.id}"]


def test_a_ping_is_answered_with_the_server_time(live_settings, session_handshake):
    @synchronously
    async def scenario():
        socket = await open_socket(session_handshake)
        await socket.send_json({"type": "ping"})
        reply = await socket.receive_json()
        await socket.close()
        return reply

    reply = scenario()
    assert reply["type"] == "pong" and reply["server_time"] > 1.7e9


def test_a_message_it_does_not_understand_gets_an_error_and_the_socket_stays_open(
        live_settings, session_handshake):
    @synchronously
    async def scenario():
        socket = await open_socket(session_handshake)
        replies = []
        for text in ("not json", '{"type": "dance"}', '{"type": "subscribe", "groups": "x"}'):
            await socket.send_text(text)
            replies.append(await socket.receive_json())
        await socket.send_json({"type": "ping"})
        replies.append(await socket.receive_json())
        await socket.close()
        return [r.get("error", r["type"]) for r in replies]

    errors = scenario()
    assert errors[0] == errors[1] and "subscribe" in errors[0]
    assert errors[2:] == ["groups must be a list", "pong"]


def test_a_socket_whose_session_ended_is_closed_at_its_next_ping(live_settings, session_handshake):
    sign_out_everyone = database_sync_to_async(lambda: Session.objects.all().delete())

    @synchronously
    async def scenario():
        socket = await open_socket(session_handshake)
        await sign_out_everyone()
        await socket.send_json({"type": "ping"})
        closed = await socket.receive_output(DEADLINE_S)
        await socket.close()
        return closed

    assert scenario()["code"] == 4401


def test_live_clients_counts_allowed_sockets_while_they_are_open(live_settings,
                                                                 session_handshake):
    from prometheus_client import REGISTRY

    def clients() -> float:
        return REGISTRY.get_sample_value("pitwall_live_clients") or 0.0

    before = clients()
    refused = session_headers("nobody", role=None)

    @synchronously
    async def scenario():
        socket = await open_socket(session_handshake)
        await subscribe(socket, "fleet")  # the connect has run to its end
        stranger = await open_socket(refused)
        await stranger.receive_output(DEADLINE_S)  # its 4403
        during = clients()
        await stranger.close()
        await socket.close()
        return during

    assert scenario() - before == 1  # the refused socket is not a client
    assert clients() == before
