"""A 503 tells the agent to retry and nothing about the database."""

from __future__ import annotations

import logging

from tests.telemetry.factories import batch


def test_a_503_names_no_database_detail_and_logs_it_under_a_correlation_id(ingest,
                                                                          host_token,
                                                                          caplog):
    assert ingest.post(batch(seq=1), host_token)[0] == 200
    writer = ingest.app.writer
    ingest.run(writer._reset_connection())
    writer.dsn = "host=127.0.0.1 port=1 dbname=nowhere user=pitwall_secret connect_timeout=2"
    with caplog.at_level(logging.WARNING):
        code, reply = ingest.post(batch(seq=2), host_token)
    assert code == 503 and "retry" in reply["error"]
    text = str(reply)
    for secret in ("127.0.0.1", "port 1", "nowhere", "pitwall_secret", "connection"):
        assert secret not in text, reply
    incident = reply["correlation_id"]
    assert incident in reply["error"]
    logged = [r.getMessage() for r in caplog.records if incident in r.getMessage()]
    assert logged and any("127.0.0.1" in line for line in logged), caplog.text
