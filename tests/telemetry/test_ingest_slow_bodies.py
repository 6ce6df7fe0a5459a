"""One agent token that opens requests and never sends their bodies cannot shut the other hosts
out: bodies arriving do not count as in flight, a host has few places, and a body has a
deadline. On the real server (uvicorn, real sockets), and on the ingest app for the bounds."""

from __future__ import annotations

import asyncio
import http.client
import socket

import orjson
import pytest

from controlplane.fleet.models import Host
from controlplane.fleet.tokens import issue_agent_token
from tests.support.live import free_port, server_env, start_server
from tests.support.polling import await_until
from tests.telemetry.factories import batch, stored_rows
from tests.telemetry.test_ingest_shedding import Request, assert_shed

SLOW_BODIES = 20  # more than the server's in-flight limit below
IN_FLIGHT = 16


def slow_request(port: int, token: str) -> socket.socket:
    """A request that declares a 1,000,000-byte body and sends one byte of it."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=60)
    sock.sendall(b"POST /api/v1/ingest HTTP/1.1\r\nHost: pitwall\r\n"
                 b"Content-Type: application/json\r\nAuthorization: Bearer "
                 + token.encode() + b"\r\nContent-Length: 1000000\r\n\r\n{")
    return sock


def reply_of(sock: socket.socket) -> tuple[int, dict]:
    """The status and JSON body of the reply on ``sock`` (blocks until it comes)."""
    response = http.client.HTTPResponse(sock)
    response.begin()
    body = orjson.loads(response.read())
    sock.close()
    return response.status, body


def post(port: int, token: str, body: dict) -> tuple[int, dict]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    conn.request("POST", "/api/v1/ingest", orjson.dumps(body),
                 {"Content-Type": "application/json", "Authorization": f"Bearer {token}"})
    response = conn.getresponse()
    reply = response.status, orjson.loads(response.read())
    conn.close()
    return reply


@pytest.mark.slow(seconds=8)
def test_a_host_keeps_getting_200_while_another_token_holds_slow_bodies(empty_samples,
                                                                      tmp_path):
    slow_token, _ = issue_agent_token("slow-host")
    good_token, _ = issue_agent_token("good-host")
    port = free_port()
    server = start_server(port, tmp_path / "server.log", {
        **server_env(), "PITWALL_INGEST_MAX_REQUESTS_IN_FLIGHT": str(IN_FLIGHT),
        "PITWALL_INGEST_BODY_TIMEOUT_S": "2"})
    try:
        slow = [slow_request(port, slow_token) for _ in range(SLOW_BODIES)]
        # The last one is answered at once: the host's places are taken by the first ones.
        status, refusal = reply_of(slow.pop())
        assert (status, refusal["reason"]) == (429, "too_many_requests"), refusal
        assert "INGEST_MAX_REQUESTS_PER_HOST" in refusal["error"]

        assert post(port, good_token, batch(hostname="good-host"))[0] == 200

        replies = [reply_of(sock) for sock in slow]  # the held ones once their time is up
    finally:
        server.stop()
    statuses = sorted({status for status, _ in replies})
    assert statuses == [408, 429]
    timeouts = [body for status, body in replies if status == 408]
    assert len(timeouts) == 4  # the default INGEST_MAX_REQUESTS_PER_HOST
    assert "INGEST_BODY_TIMEOUT_S" in timeouts[0]["error"]
    assert stored_rows()["host"] == 1  # the good host's sample, nothing of the slow host
    assert Host.objects.get(hostname="slow-host").last_seen is None


def test_a_host_past_its_places_is_answered_429_with_retry_after(ingest, host_token):
    app = ingest.app
    app.admission.max_per_host = 2

    async def scenario() -> tuple[list[Request], Request]:
        arriving = asyncio.Event()
        slow = [asyncio.ensure_future(Request(batch(seq=seq), host_token, arriving).send_to(app))
                for seq in (1, 2)]
        await await_until(lambda: app.admission.reading == 2, "the bodies never started", 30)
        third = await Request(batch(seq=3), host_token).send_to(app)
        arriving.set()
        return [await request for request in slow], third

    slow, third = ingest.run(scenario())
    assert third.status == 429 and not third.body_read
    assert third.headers[b"retry-after"] == str(app.retry_after_s).encode()
    assert third.reply["reason"] == "too_many_requests"
    assert [r.status for r in slow] == [200, 200]  # the host's own requests went on
    assert app.admission.per_host == {} and app.admission.reading == 0
    assert stored_rows()["host"] == 2


def test_bodies_arriving_have_their_own_bound_and_do_not_count_in_flight(ingest, host_token):
    app = ingest.app
    other, _ = issue_agent_token("gpu-node-2")
    third, _ = issue_agent_token("gpu-node-3")
    app.admission.max_reading = 2
    app.max_in_flight = 2  # both fit once their bodies arrive

    async def scenario() -> tuple[list[Request], Request]:
        arriving = asyncio.Event()
        slow = [asyncio.ensure_future(
            Request(batch(seq=1, hostname=name), token, arriving).send_to(app))
            for name, token in (("gpu-node-1", host_token), ("gpu-node-2", other))]
        await await_until(lambda: app.admission.reading == 2, "the bodies never started", 30)
        assert app.in_flight == 0  # a body that has not arrived takes no place in flight
        shed = await Request(batch(hostname="gpu-node-3"), third).send_to(app)
        arriving.set()
        return [await request for request in slow], shed

    slow, shed = ingest.run(scenario())
    assert_shed(shed, "reading", app.retry_after_s)
    assert [r.status for r in slow] == [200, 200]
    assert stored_rows()["host"] == 2  # nothing of the shed request
