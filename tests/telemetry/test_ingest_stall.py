"""A stalled PostgreSQL (its connections open, nothing answered) holds no ingest request for
longer than the flush timeout: the flush is abandoned and answered 503, new requests are shed
at the door while the writer is stalled, the ORM calls give up too, and the writer stores
again once the server answers.

The stall is made honestly, by a TCP relay between ingest and the real test database that
stops relaying (``Relay.freeze``): the client's kernel still accepts its bytes and the
server's answers never come, as with a SIGSTOPped server, and a new connection is accepted by
the kernel and then left unanswered, as a stopped postmaster's backlog does. The fault suite
SIGSTOPs a real server (tests/faults/test_postgres_stalled.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import select
import socket
import threading

import psycopg
import pytest
from django.conf import settings
from django.db import DatabaseError, connection

from controlplane.telemetry.ingest import orm as ingest_orm
from tests.support.polling import wait_until
from tests.telemetry.factories import batch, stored_rows

FLUSH_TIMEOUT_S = 2
# Each test waits out real connection timeouts of the writer and the ORM thread.
pytestmark = pytest.mark.slow(seconds=12)


class Relay:
    """Relays TCP connections from a local port to the database; ``freeze`` stops reading
    either side (and accepting) until ``thaw``. A side's end of stream ends the pair."""

    def __init__(self, upstream: tuple[str, int]) -> None:
        self.upstream = upstream
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.flowing = threading.Event()
        self.flowing.set()
        self.closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    def freeze(self) -> None:
        self.flowing.clear()

    def thaw(self) -> None:
        self.flowing.set()

    def close(self) -> None:
        self.closed = True
        self.flowing.set()
        self.listener.close()

    def _accept(self) -> None:
        while not self.closed:
            self.flowing.wait()
            with contextlib.suppress(OSError):
                client, _ = self.listener.accept()
                server = socket.create_connection(self.upstream)
                threading.Thread(target=self._pump, args=(client, server), daemon=True).start()

    def _pump(self, a: socket.socket, b: socket.socket) -> None:
        with a, b:
            while not self.closed:
                self.flowing.wait()  # frozen: what either side sent waits in the kernel
                readable, _, _ = select.select([a, b], [], [], 0.05)
                if not self.flowing.is_set():
                    continue
                for source in readable:
                    data = source.recv(65536)
                    if not data:
                        return
                    (b if source is a else a).sendall(data)


@pytest.fixture
def relay():
    db = connection.settings_dict
    relay = Relay((db["HOST"] or "127.0.0.1", int(db["PORT"] or 5432)))
    yield relay
    relay.close()


@pytest.fixture
def stalling_ingest(ingest, relay, monkeypatch):
    """The ingest app, its writer connected through the relay, with a short flush timeout."""
    monkeypatch.setitem(settings.PITWALL, "INGEST_FLUSH_TIMEOUT_S", FLUSH_TIMEOUT_S)
    writer = ingest.app.writer
    writer.flush_timeout_s = FLUSH_TIMEOUT_S
    ingest.run(writer._reset_connection())
    writer.dsn = psycopg.conninfo.make_conninfo(writer.dsn, host="127.0.0.1", port=relay.port)
    return ingest


def test_a_stalled_flush_is_abandoned_answered_503_and_the_writer_stores_again(
        stalling_ingest, relay, host_token):
    ingest, writer = stalling_ingest, stalling_ingest.app.writer
    assert ingest.post(batch(seq=1), host_token)[0] == 200  # through the relay
    relay.freeze()
    stalled = batch(seq=2)
    code, reply = ingest.post(stalled, host_token)  # AsgiClient gives up after 60 s
    assert code == 503 and "retry" in reply["error"]
    assert writer.stalled
    code, reply = ingest.post(batch(seq=3), host_token)
    assert (code, reply["shed"]) == (503, "stalled")  # at the door, while stalled
    assert stored_rows()["host"] == 1

    relay.thaw()
    wait_until(lambda: not writer.stalled, 60, lambda: "the writer never reconnected")
    code, reply = ingest.post(stalled, host_token)  # the agent's replay of the 503'd batch
    assert (code, reply["accepted"], reply["duplicates"]) == (200, 1, 0)
    assert ingest.post(batch(seq=4), host_token)[0] == 200
    assert stored_rows()["host"] == 3  # seq 1, the replayed one, seq 4: each once


def test_the_writer_stays_stalled_while_the_server_does_not_answer(
        stalling_ingest, relay, host_token):
    """Its reconnection attempts meet a server that accepts and says nothing: they give up
    after the timeout too, and requests are shed meanwhile, none held."""
    ingest, writer = stalling_ingest, stalling_ingest.app.writer
    relay.freeze()
    assert ingest.post(batch(seq=1), host_token)[0] == 503
    answers = [ingest.post(batch(seq=seq), host_token)[1].get("shed") for seq in (2, 3)]
    assert answers == ["stalled", "stalled"] and writer.stalled
    wait_until(lambda: writer.failed_reconnects >= 1, 60,
               lambda: "the writer never tried a new connection")
    assert writer.stalled  # the attempt gave up after the timeout: still stalled
    relay.thaw()
    wait_until(lambda: ingest.post(batch(seq=9), host_token)[0] == 200, 60,
               lambda: "ingest never stored again")


def test_an_orm_call_on_a_stalled_connection_gives_up_after_the_timeout(relay, monkeypatch,
                                                                         transactional_db):
    """The ingest ORM calls (token and config reloads) run in one thread that a silent server
    holds: the caller gets a DatabaseError after the timeout, later calls fail at once while
    the thread is held, and calls work again once the server answers."""
    monkeypatch.setitem(settings.PITWALL, "INGEST_FLUSH_TIMEOUT_S", FLUSH_TIMEOUT_S)
    db = connection.settings_dict
    held = psycopg.connect(host="127.0.0.1", port=relay.port, dbname=db["NAME"],
                           user=db["USER"] or None, password=db["PASSWORD"] or None,
                           autocommit=True)

    @ingest_orm.orm
    def query() -> int:
        return held.execute("SELECT 1").fetchone()[0]

    loop = asyncio.new_event_loop()
    try:
        assert loop.run_until_complete(query()) == 1
        relay.freeze()
        with pytest.raises(DatabaseError, match="did not answer"):
            loop.run_until_complete(query())
        with pytest.raises(DatabaseError, match="earlier query"):
            loop.run_until_complete(query())  # not queued behind the held thread
        relay.thaw()
        loop.run_until_complete(_until_answered(query))
    finally:
        relay.thaw()
        held.close()
        loop.close()


async def _until_answered(call) -> None:
    for _ in range(600):
        with contextlib.suppress(DatabaseError):
            assert await call() == 1
            return
        await asyncio.sleep(0.1)
    raise AssertionError("the ORM call never answered again")
