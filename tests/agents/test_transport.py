import pytest

from agents.protocol import to_columns
from agents.transport import IngestClient
from tests.agents.fake_ingest import FakeIngest, free_port
from tests.agents.harness import TOKEN, Harness


def batch(seq: int, samples: int = 1) -> dict:
    return {"protocol": 1, "agent": {"version": "0.1.0", "boot_id": "boot-a", "seq": seq},
            "samples": [{"ts": 1000.0 + seq, "host": {"load1": 0.5}}] * samples}


def test_it_posts_gzip_json_with_the_bearer_token_to_the_ingest_path(fake_ingest):
    client = IngestClient(fake_ingest.url + "/pitwall/", TOKEN)

    reply = client.post(batch(1))

    [request] = fake_ingest.requests
    assert reply.status == 200 and reply.body["config_version"] == 7
    assert request.path == "/pitwall/api/v1/ingest"
    assert request.headers["Content-Encoding"] == "gzip"
    assert request.headers["Content-Type"] == "application/json"
    assert request.headers["Authorization"] == f"Bearer {TOKEN}"
    assert request.body == batch(1)


def test_it_keeps_one_connection_alive_across_requests(fake_ingest):
    client = IngestClient(fake_ingest.url, TOKEN)
    for seq in (1, 2, 3):
        client.post(batch(seq))

    assert len({r.client_port for r in fake_ingest.requests}) == 1


def test_it_reports_an_unreachable_server_without_raising():
    reply = IngestClient(f"http://127.0.0.1:{free_port()}", TOKEN, timeout=5).post(batch(1))

    assert reply.status == 0 and "Connection" in reply.problem
    assert TOKEN not in reply.describe()


def test_it_refuses_a_server_url_that_is_not_http():
    with pytest.raises(ValueError):
        IngestClient("ftp://example.com", TOKEN)


def test_it_retries_a_5xx_with_backoff_and_delivers_the_batch_once(fake_ingest, tmp_path):
    fake_ingest.script = [(503, {"error": "storage unavailable"})] * 2
    h = Harness(fake_ingest.url, tmp_path)

    h.shipper.submit(batch(1))
    h.drain()

    assert [r.seqs for r in fake_ingest.requests] == [[1], [1], [1]]
    # Full jitter draws up to base * 2**attempt; with the draw at its top: 0.5 then 1.0.
    assert h.sleeps == [0.5, 1.0]
    assert h.shipper.delivered_batches == 1
    assert len(h.spool) == 0
    assert len(h.warnings) == 2  # failing, then recovered: not one line per retry
    assert "503" in h.warnings[0] and "storage unavailable" in h.warnings[0]


def test_backoff_grows_exponentially_up_to_the_cap_and_restarts_after_success(fake_ingest,
                                                                              tmp_path):
    fake_ingest.script = [(500, {})] * 8
    h = Harness(fake_ingest.url, tmp_path)

    h.shipper.submit(batch(1))
    h.drain()
    h.shipper.submit(batch(2))
    fake_ingest.script = [(500, {})]
    h.drain()

    assert h.sleeps == [0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 30.0, 30.0, 0.5]


def test_jitter_scales_each_backoff_delay(fake_ingest, tmp_path):
    fake_ingest.script = [(500, {})] * 3
    h = Harness(fake_ingest.url, tmp_path, jitter=0.25)

    h.shipper.submit(batch(1))
    h.drain()

    assert h.sleeps == [0.125, 0.25, 0.5]


def test_a_batch_refused_with_400_is_dropped_with_one_line_naming_the_field(fake_ingest, tmp_path):
    fake_ingest.script = [(400, {"error": "value above 100",
                                 "field": "samples[0].gpus[0].util_pct"})]
    h = Harness(fake_ingest.url, tmp_path)

    h.shipper.submit(batch(1))
    h.drain()
    h.shipper.submit(batch(2))
    h.drain()

    assert [r.seqs for r in fake_ingest.requests] == [[1], [2]]
    assert h.shipper.dropped_batches == 1
    [line] = h.warnings
    assert "\n" not in line
    assert "value above 100" in line and "samples[0].gpus[0].util_pct" in line
    assert "boot-a/1" in line and "dropped" in line
    assert h.sleeps == []


def test_a_409_resends_the_batch_with_the_inventory(fake_ingest, tmp_path):
    fake_ingest.script = [(409, {"error": "unknown GPU", "field": "samples[0].gpus[0].uuid"})]
    h = Harness(fake_ingest.url, tmp_path)

    h.shipper.submit(batch(1))
    h.drain()

    first, second = fake_ingest.requests
    assert "host" not in first.body
    assert second.body["host"] == {"hostname": "gpu-node-1", "gpus": []}
    assert second.seqs == [1]
    assert h.inventory_requests == 1
    assert h.shipper.delivered_batches == 1 and h.shipper.dropped_batches == 0


def test_a_bad_token_keeps_the_batch_spooled_while_backing_off(fake_ingest, tmp_path):
    fake_ingest.script = [(401, {"error": "unknown token"})] * 3
    h = Harness(fake_ingest.url, tmp_path)

    h.shipper.submit(batch(1))
    for _ in range(3):
        h.shipper.step()

    assert h.shipper.dropped_batches == 0
    assert len(h.spool) == 1
    assert h.sleeps == [0.5, 1.0, 2.0]
    [line] = h.warnings
    assert "token" in line and "401" in line and TOKEN not in line

    h.drain()  # the operator fixed the token
    assert fake_ingest.requests[-1].seqs == [1] and len(h.spool) == 0


def test_batches_are_spooled_while_the_server_is_down_and_replayed_in_order(tmp_path):
    port = free_port()
    h = Harness(f"http://127.0.0.1:{port}", tmp_path)
    h.shipper.submit(batch(1))
    h.shipper.submit(batch(2))  # both in memory when the first send fails
    h.shipper.step()
    for seq in (3, 4, 5):
        h.shipper.submit(batch(seq))
        h.shipper.step()
    assert len(h.spool) == 5

    with FakeIngest(port) as fake_ingest:
        h.shipper.submit(batch(6))  # queued on disk behind the others
        h.drain()
        h.shipper.submit(batch(7))  # the spool drained: straight from memory again
        h.drain()

    assert [r.seqs for r in fake_ingest.requests] == [[1, 2, 3, 4, 5, 6], [7]]
    assert fake_ingest.requests[0].body["protocol"] == 1
    assert len(h.spool) == 0


def test_replay_splits_a_long_spool_into_groups(fake_ingest, tmp_path):
    h = Harness(fake_ingest.url, tmp_path)
    for seq in range(1, 251):
        h.spool.append(batch(seq))

    h.drain()

    assert [len(r.seqs) for r in fake_ingest.requests] == [200, 50]
    assert [s for r in fake_ingest.requests for s in r.seqs] == list(range(1, 251))


def test_spooled_batches_survive_a_restart_of_the_agent(fake_ingest, tmp_path):
    down = Harness(f"http://127.0.0.1:{free_port()}", tmp_path)
    down.shipper.submit(batch(1))
    down.shipper.submit(batch(2))
    down.shipper.close()  # shutdown before any send: the memory queue goes to disk

    Harness(fake_ingest.url, tmp_path).drain()

    assert [r.seqs for r in fake_ingest.requests] == [[1, 2]]


def test_a_multi_batch_400_drops_only_the_batch_it_names(fake_ingest, tmp_path):
    h = Harness(fake_ingest.url, tmp_path)
    for seq in (1, 2, 3):
        h.spool.append(batch(seq))
    fake_ingest.script = [(400, {"error": "bad", "field": "batches[1].samples[0].host.load1"})]

    h.drain()

    assert [r.seqs for r in fake_ingest.requests] == [[1, 2, 3], [1, 3]]
    assert h.shipper.dropped_batches == 1 and "boot-a/2" in h.warnings[0]


def test_a_multi_batch_400_from_memory_drops_only_the_batch_it_names(fake_ingest, tmp_path):
    h = Harness(fake_ingest.url, tmp_path)
    for seq in (1, 2, 3):
        h.shipper.submit(batch(seq))  # the server is up: they wait in memory, not on disk
    fake_ingest.script = [(400, {"error": "bad", "field": "batches[1].samples[0].host.load1"})]

    h.drain()

    assert [r.seqs for r in fake_ingest.requests] == [[1, 2, 3], [1, 3]]
    assert h.shipper.dropped_batches == 1 and len(h.spool) == 0


def test_a_413_on_a_group_sends_smaller_groups_before_dropping_anything(fake_ingest, tmp_path):
    h = Harness(fake_ingest.url, tmp_path)
    for seq in (1, 2, 3, 4):
        h.spool.append(batch(seq))
    fake_ingest.script = [(413, {"error": "body too large"})]

    h.drain()

    assert [r.seqs for r in fake_ingest.requests] == [[1, 2, 3, 4], [1, 2], [3, 4]]
    assert h.shipper.dropped_batches == 0


def test_eviction_counts_ride_on_the_next_request_until_acknowledged(fake_ingest, tmp_path):
    h = Harness(fake_ingest.url, tmp_path, max_bytes=1)
    h.spool.append(batch(1, samples=4))  # too big for the bound: evicted at once
    assert h.spool.evictions() == (1, 4)
    h.spool.max_bytes = 10**9
    fake_ingest.script = [(503, {})]

    h.shipper.submit(batch(2))
    h.drain()

    failed, delivered = fake_ingest.requests
    report = {"evicted_batches": 1, "evicted_samples": 4}
    assert failed.batches[-1]["agent"]["spool"] == report  # kept after the failed attempt
    assert delivered.batches[-1]["agent"]["spool"] == report
    assert h.spool.evictions() == (0, 0)
    h.shipper.submit(batch(3))
    h.drain()
    assert "spool" not in fake_ingest.requests[-1].body["agent"]


def test_the_sender_thread_delivers_what_the_loop_submits(fake_ingest, tmp_path):
    h = Harness(fake_ingest.url, tmp_path)
    h.shipper.start()
    try:
        for seq in (1, 2, 3):
            h.shipper.submit(batch(seq))
        assert fake_ingest.wait_for(3)
    finally:
        h.shipper.close()

    assert [s for r in fake_ingest.requests for s in r.seqs] == [1, 2, 3]
    assert len(h.spool) == 0


def test_closing_puts_what_the_thread_had_not_sent_on_disk_in_order(tmp_path):
    h = Harness(f"http://127.0.0.1:{free_port()}", tmp_path)
    h.shipper.start()
    for seq in (1, 2, 3):
        h.shipper.submit(batch(seq))
    h.shipper.close()

    assert [s.batch["agent"]["seq"] for s in h.spool.peek()] == [1, 2, 3]


def test_a_409_before_any_inventory_was_collected_is_retried_not_dropped(fake_ingest, tmp_path):
    fake_ingest.script = [(409, {"error": "unknown GPU", "field": "samples[0].gpus[0].uuid"})]
    h = Harness(fake_ingest.url, tmp_path)
    h.shipper._inventory = lambda: None  # a spooled batch replayed before the first tick

    h.shipper.submit(batch(1))
    h.shipper.step()
    assert h.shipper.dropped_batches == 0 and len(h.spool) == 1

    h.drain()
    assert fake_ingest.requests[-1].seqs == [1] and len(h.spool) == 0


def test_a_batch_json_cannot_encode_is_dropped_and_the_next_one_still_goes(fake_ingest, tmp_path):
    h = Harness(fake_ingest.url, tmp_path)
    bad = batch(1)
    bad["samples"][0]["host"] = {"load1": object()}

    h.shipper.submit(bad)
    h.shipper.submit(batch(2))
    h.drain()

    assert [r.seqs for r in fake_ingest.requests] == [[2]]
    assert h.shipper.dropped_batches == 1
    [line] = h.warnings
    assert "boot-a/1" in line and "JSON" in line


def test_the_sender_thread_survives_an_unexpected_error(fake_ingest, tmp_path):
    h = Harness(fake_ingest.url, tmp_path)
    real_post = h.shipper.client.post
    calls = []

    def flaky_post(payload):
        calls.append(payload)
        if len(calls) == 1:
            raise RuntimeError("bug in the transport")
        return real_post(payload)

    h.shipper.client.post = flaky_post
    h.shipper.start()
    try:
        h.shipper.submit(batch(1))
        assert fake_ingest.wait_for(1)
    finally:
        h.shipper.close()

    assert fake_ingest.requests[0].seqs == [1]
    assert any("sender" in w and "bug in the transport" in w for w in h.warnings)


def test_live_batches_switch_to_protocol_2_once_the_server_announces_it(fake_ingest):
    fake_ingest.protocols = "1, 2"
    client = IngestClient(fake_ingest.url, TOKEN)

    client.post(batch(1))
    client.post(batch(2))

    first, second = fake_ingest.requests
    assert first.body == batch(1)  # nothing announced yet: v1
    assert second.body == to_columns(batch(2))
    assert second.body["protocol"] == 2 and second.body["hosts"] == {"load1": [0.5]}


def test_an_agent_keeps_protocol_1_with_a_server_that_does_not_announce_2(fake_ingest):
    client = IngestClient(fake_ingest.url, TOKEN)
    for seq in (1, 2, 3):
        client.post(batch(seq))

    assert [r.body["protocol"] for r in fake_ingest.requests] == [1, 1, 1]


def test_a_protocol_2_batch_refused_for_its_protocol_is_resent_as_protocol_1(fake_ingest):
    fake_ingest.protocols = "1, 2"
    client = IngestClient(fake_ingest.url, TOKEN)
    client.post(batch(1))
    fake_ingest.protocols = None  # the server was rolled back to a v1-only version
    fake_ingest.script = [(400, {"error": "unsupported protocol version 2", "field": "protocol"})]

    reply = client.post(batch(2))

    assert reply.status == 200
    assert [r.body["protocol"] for r in fake_ingest.requests] == [1, 2, 1]
    assert fake_ingest.requests[-1].body == batch(2) and client.protocol == 1


def test_a_spool_replay_travels_as_spooled_v2_to_a_server_that_speaks_2(fake_ingest, tmp_path):
    fake_ingest.protocols = "1, 2"
    h = Harness(fake_ingest.url, tmp_path)
    h.shipper.client.protocol = 2
    for seq in (1, 2, 3):
        h.spool.append(batch(seq))

    h.shipper.step()

    [request] = fake_ingest.requests
    assert request.body["protocol"] == 2 and request.seqs == [1, 2, 3]
    assert request.batches == [to_columns(batch(seq)) for seq in (1, 2, 3)]
