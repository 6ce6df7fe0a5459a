"""Overload: past the writer's queue limit or the in-flight limit, ingest sheds requests at the
door with 503 + Retry-After, before reading their bodies, and stores nothing of them; through
the real ingest app on real PostgreSQL."""

from __future__ import annotations

import asyncio

import orjson
from prometheus_client import REGISTRY

from tests.support.polling import await_until
from tests.telemetry.factories import NOTHING, batch, stored_rows


class Request:
    """One POST to the ingest app over ASGI, keeping what the simple client drops: the reply's
    headers, and whether the app ever asked for the body. ``hold`` keeps the body from
    arriving (a slow client) until it is set."""

    def __init__(self, body: dict, token: str, hold: asyncio.Event | None = None) -> None:
        self.payload = orjson.dumps(body)
        self.token = token
        self.hold = hold
        self.body_read = False
        self.status = 0
        self.headers: dict[bytes, bytes] = {}
        self.reply: dict = {}

    async def send_to(self, app) -> Request:
        scope = {"type": "http", "method": "POST", "path": "/api/v1/ingest",
                 "headers": [(b"content-type", b"application/json"),
                             (b"authorization", f"Bearer {self.token}".encode())]}
        sent: list[dict] = []

        async def receive() -> dict:
            self.body_read = True
            if self.hold is not None:
                await self.hold.wait()
            return {"type": "http.request", "body": self.payload, "more_body": False}

        async def send(message: dict) -> None:
            sent.append(message)

        await app(scope, receive, send)
        self.status, self.headers = sent[0]["status"], dict(sent[0]["headers"])
        self.reply = orjson.loads(sent[1]["body"])
        return self


def shed_count(reason: str) -> float:
    value = REGISTRY.get_sample_value("pitwall_ingest_shed_requests_total", {"reason": reason})
    return value or 0.0


def assert_shed(request: Request, reason: str, retry_after_s: int) -> None:
    assert request.status == 503
    assert request.headers[b"retry-after"] == str(retry_after_s).encode()
    assert request.reply["shed"] == reason and request.reply["reason"] == "overloaded"
    assert request.reply["error"].endswith(f"retry after {retry_after_s} s")
    assert not request.body_read  # answered before its body was read


def test_a_request_is_shed_while_the_writer_holds_more_rows_than_allowed(ingest, host_token):
    app, writer = ingest.app, ingest.app.writer
    writer.flush_s, writer.flush_rows = 30, 10**9  # the writer holds what it gets
    shed_before = shed_count("queue")

    async def scenario() -> tuple[Request, Request]:
        held = asyncio.ensure_future(Request(batch(seq=1), host_token).send_to(app))
        await await_until(lambda: writer.queued_rows, "the writer never got the batch", 30)
        app.max_queued_rows = writer.queued_rows - 1  # one batch is now too many
        shed = await Request(batch(seq=2), host_token).send_to(app)
        app.max_queued_rows = 10**9
        writer.flush_s = 0
        writer._full.set()  # release the held batch: it is stored
        return await held, shed

    held, shed = ingest.run(scenario())
    assert_shed(shed, "queue", app.retry_after_s)
    assert shed_count("queue") == shed_before + 1
    assert (held.status, held.reply["accepted"]) == (200, 1)
    assert stored_rows()["host"] == 1  # the held batch's sample; nothing of the shed one


def test_a_request_is_shed_while_too_many_are_in_flight(ingest, host_token):
    """In flight: requests whose bodies arrived (here held by the writer); bodies that are
    still arriving have their own bound (test_ingest_slow_bodies.py)."""
    app, writer = ingest.app, ingest.app.writer
    writer.flush_s, writer.flush_rows = 30, 10**9  # the writer holds what it gets
    app.max_in_flight = 2
    shed_before = shed_count("requests")

    async def scenario() -> tuple[list[Request], Request]:
        held = [asyncio.ensure_future(Request(batch(seq=seq), host_token).send_to(app))
                for seq in (1, 2)]
        await await_until(lambda: app.in_flight == 2, "the requests never got in flight", 30)
        shed = await Request(batch(seq=3), host_token).send_to(app)
        writer.flush_s = 0
        writer._full.set()  # release the held batches: they are stored
        return list(await asyncio.gather(*held)), shed

    held, shed = ingest.run(scenario())
    assert_shed(shed, "requests", app.retry_after_s)
    assert shed_count("requests") == shed_before + 1
    assert [r.status for r in held] == [200, 200]
    assert app.in_flight == 0  # every request handled let go of its place
    assert stored_rows()["host"] == 2  # the held ones' samples; nothing of the shed one


def test_requests_within_the_limits_are_not_shed(ingest, host_token):
    """The limits count requests being handled, not requests ever made."""
    ingest.app.max_in_flight = 1
    answers = [ingest.post(batch(seq=seq), host_token)[0] for seq in (1, 2, 3)]
    assert answers == [200, 200, 200]
    assert stored_rows() != NOTHING


def test_a_shed_request_makes_the_writer_flush_what_waits(ingest, host_token):
    """While requests are shed no companions come for the waiting batches: the writer flushes
    them at once instead of waiting out its window (which would cap the throughput at the
    requests allowed in flight per window)."""
    app, writer = ingest.app, ingest.app.writer
    writer.flush_s, writer.flush_rows = 600, 10**9  # only a shed can make it flush now
    app.max_in_flight = 1

    async def scenario() -> tuple[Request, Request]:
        held = asyncio.ensure_future(Request(batch(seq=1), host_token).send_to(app))
        await await_until(lambda: writer.queued_rows, "the writer never got the batch", 30)
        shed = await Request(batch(seq=2), host_token).send_to(app)
        return await asyncio.wait_for(held, 30), shed

    held, shed = ingest.run(scenario())
    assert_shed(shed, "requests", app.retry_after_s)
    assert (held.status, held.reply["accepted"]) == (200, 1)
    assert stored_rows()["host"] == 1
