"""Bodies built to make the JSON decoder or the validator work for seconds are refused, with a
4xx that names the problem, before the costly part; the server keeps answering meanwhile."""

from __future__ import annotations

import gzip
import http.client
import threading
import urllib.request
import uuid

import orjson
import pytest

from controlplane.fleet.tokens import issue_agent_token
from tests.support.live import free_port, start_server
from tests.telemetry.factories import NOTHING, batch, sample, stored_rows

BODY_BYTES = 8 * 2**20  # the default INGEST_MAX_BODY_BYTES
MAX_UNKNOWN_NAMES = 256  # validate.MAX_UNKNOWN_NAMES


def nested_bomb(protocol: int = 1) -> bytes:
    """8 KB of gzip that inflates to 8 MiB of ``[],[],...`` where a batch holds its data."""
    head = orjson.dumps({"protocol": protocol, "agent": {"boot_id": str(uuid.uuid4()),
                                                         "seq": 1}})[:-1]
    head += b',"samples":[' if protocol == 1 else b',"ts":[1],"hosts":{"x":['
    tail = b"]}" if protocol == 1 else b"]}}"
    count = (BODY_BYTES - len(head) - len(tail)) // 3
    return gzip.compress(head + (b"[]," * count)[:-1] + tail, 9)


def unknown_names_batch(names: int) -> dict:
    one = sample()
    one["host"].update({f"made_up_{i:06d}": 1.0 for i in range(names)})
    return batch(samples=[one])


@pytest.mark.parametrize("protocol", [1, 2])
def test_a_body_of_nested_empty_lists_is_refused_before_decoding(ingest, host_token,
                                                                  protocol):
    bomb = nested_bomb(protocol)
    assert len(bomb) < 16 * 1024
    status, reply = ingest.post(raw=bomb, token=host_token,
                                headers={"content-encoding": "gzip"})
    assert status == 400, reply
    assert "JSON arrays and objects" in reply["error"]
    assert "INGEST_JSON_BYTES_PER_CONTAINER" in reply["error"]
    assert stored_rows() == NOTHING


def test_real_agent_batches_are_well_within_the_structure_bound(ingest, host_token):
    """A replay of many batches (the densest real bodies are protocol 2's) still passes."""
    replay = {"protocol": 1, "batches": [batch(seq=seq) for seq in range(1, 201)]}
    status, reply = ingest.post(replay, host_token)
    assert (status, reply["accepted"]) == (200, 200), reply


def test_thousands_of_unknown_metric_names_are_refused_not_echoed(ingest, host_token):
    status, reply = ingest.post(unknown_names_batch(5000), host_token)
    assert status == 400
    assert f"more than {MAX_UNKNOWN_NAMES} unknown metric names" in reply["error"]
    assert reply["field"] == "samples[0].host"
    assert stored_rows() == NOTHING


def test_a_few_unknown_metric_names_are_still_ignored_and_listed(ingest, host_token):
    status, reply = ingest.post(unknown_names_batch(3), host_token)
    assert status == 200
    assert reply["ignored"] == ["host.made_up_000000", "host.made_up_000001",
                                "host.made_up_000002"]


def test_thousands_of_unknown_names_in_protocol_2_are_refused(ingest, host_token):
    body = {"protocol": 2, "agent": {"boot_id": str(uuid.uuid4()), "seq": 1}, "ts": [1.0],
            "hosts": {f"made_up_{i:06d}": [1.0] for i in range(5000)}}
    status, reply = ingest.post(body, host_token)
    assert status == 400
    assert f"more than {MAX_UNKNOWN_NAMES} unknown metric names" in reply["error"]
    assert reply["field"] == "hosts"


@pytest.mark.slow(seconds=6)
def test_the_server_refuses_bombs_and_answers_healthz_while_they_arrive(empty_samples,
                                                                       tmp_path):
    token, _ = issue_agent_token("bomb-host")
    port = free_port()
    server = start_server(port, tmp_path / "server.log")
    bomb, replies = nested_bomb(), []

    def send() -> None:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
        conn.request("POST", "/api/v1/ingest", bomb, {
            "Content-Type": "application/json", "Content-Encoding": "gzip",
            "Authorization": f"Bearer {token}"})
        response = conn.getresponse()
        replies.append((response.status, orjson.loads(response.read())))
        conn.close()

    try:
        senders = [threading.Thread(target=send) for _ in range(8)]
        for sender in senders:
            sender.start()
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=120) as health:
            assert health.status == 200
        for sender in senders:
            sender.join(120)
    finally:
        server.stop()
    assert len(replies) == 8
    assert {status for status, _ in replies} == {400}
    assert all("JSON arrays and objects" in reply["error"] for _, reply in replies)
    assert stored_rows() == NOTHING
