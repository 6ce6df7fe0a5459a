"""Faults: when storage is down the agent is told to retry, and nothing is half-stored."""

from __future__ import annotations

from tests.telemetry.factories import NOTHING, batch, stored_rows


def test_it_answers_503_when_the_database_is_unreachable_and_stores_nothing(ingest,
                                                                           host_token):
    assert ingest.post(batch(seq=1), host_token)[0] == 200
    writer = ingest.app.writer
    ingest.run(writer._reset_connection())
    writer.dsn = "host=127.0.0.1 port=1 dbname=nowhere connect_timeout=2"
    before = stored_rows()
    code, reply = ingest.post(batch(seq=2), host_token)
    assert code == 503 and "retry" in reply["error"]
    assert stored_rows() == before != NOTHING


def test_the_same_batch_is_stored_once_the_database_is_back(ingest, host_token):
    writer = ingest.app.writer
    good_dsn = writer.dsn
    ingest.post(batch(seq=1), host_token)  # warm the caches, as a running server has them
    writer.dsn = "host=127.0.0.1 port=1 dbname=nowhere connect_timeout=2"
    ingest.run(writer._reset_connection())
    body = batch(seq=2)
    assert ingest.post(body, host_token)[0] == 503
    writer.dsn = good_dsn
    code, reply = ingest.post(body, host_token)
    assert (code, reply["accepted"]) == (200, 1)
    assert stored_rows()["host"] == 2


def test_a_clean_shutdown_flushes_what_is_pending(ingest, host_token):
    writer = ingest.app.writer
    writer.flush_s = 30  # hold the flush: only shutdown can write it
    writer.flush_rows = 10**9

    async def post_then_stop():
        import asyncio

        request = asyncio.ensure_future(ingest.apost(batch(seq=1), host_token))
        for _ in range(1000):  # until the writer holds the batch (a loaded machine is slow)
            if writer._pending_rows:
                break
            await asyncio.sleep(0.01)
        assert writer._pending_rows and not request.done()
        await ingest.app.shutdown()
        return await request

    code, reply = ingest.run(post_then_stop())
    assert (code, reply["accepted"]) == (200, 1)
    assert stored_rows()["gpu"] == 2


def test_ingest_gets_new_connections_after_postgresql_dropped_its_own(ingest, host_token):
    """PostgreSQL restarted, failed over or killed the sessions: the writer's connection and
    the one its ORM calls use (token and config-version reloads) are gone. Ingest answers 503
    while they are, then stores again by itself: no process to restart by hand."""
    from django.db import connection

    from tests.support.polling import wait_until

    assert ingest.post(batch(seq=1), host_token)[0] == 200
    with connection.cursor() as cursor:  # every session of the test database but this one
        cursor.execute("SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                       "WHERE datname = current_database() AND pid <> pg_backend_pid()")
        assert cursor.fetchone()[0] >= 2  # the writer's and the ORM thread's
    seq = iter(range(2, 10_000))
    answers: list[int] = []

    def stores_again() -> bool:
        answers.append(ingest.post(batch(seq=next(seq)), host_token)[0])
        # Past several background reloads (every 2 s), which found their connection closed.
        return answers[-3:] == [200, 200, 200] and len(answers) >= 8

    wait_until(stores_again, 60, lambda: f"answers since the sessions were killed: {answers}",
               every=1.0)
    assert set(answers) <= {200, 503}
    assert stored_rows()["host"] == 1 + answers.count(200)  # each stored batch, once
