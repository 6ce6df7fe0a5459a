"""A replay sends spooled batches (protocol v2) as they were read from disk, joined into one
body, and parses a batch only to change it (the inventory after a 409, the eviction report).
A server that does not announce v2 gets them converted back to v1; files an agent before this
one spooled in v1 replay with the rest."""

from __future__ import annotations

import copy
import gzip
import json

from agents.protocol import to_columns
from agents.spool import join_batches, write_atomic
from tests.agents.harness import Harness


def batch(seq: int) -> dict:
    # Text that JSON escapes, a non-ASCII name, floats that must come back the same.
    return {"protocol": 1, "agent": {"version": "0.1.0", "boot_id": "boot-ü", "seq": seq},
            "samples": [{"ts": 1000.1 + seq, "host": {"load1": 0.1 * seq, "cpu_pct": 1e-7}},
                        {"ts": 1001.0 + seq, "engines": [{"name": 'vllm:8000/"0"\n', "up": 1}]}]}


def spooled(h: Harness, count: int) -> list[dict]:
    sent = [batch(seq) for seq in range(1, count + 1)]
    for b in sent:
        h.spool.append(copy.deepcopy(b))
    return sent


def test_a_replayed_multi_batch_body_is_the_spooled_batches_exactly(fake_ingest, tmp_path):
    h = Harness(fake_ingest.url, tmp_path)
    sent = spooled(h, 3)
    h.drain()

    [request] = fake_ingest.requests  # the fake server json.loads the body: it is valid JSON
    assert request.body == {"protocol": 1, "batches": sent}
    assert len(h.spool) == 0


def test_joined_batches_decode_to_the_protocols_multi_batch_object(tmp_path):
    h = Harness("http://127.0.0.1:9", tmp_path)
    sent = spooled(h, 2)
    raws = [s.raw for s in h.spool.peek()]

    columns = [to_columns(b) for b in sent]
    assert json.loads(join_batches(raws)) == {"protocol": 2, "batches": columns}
    assert json.loads(gzip.decompress(gzip.compress(join_batches(raws)))) == \
        {"protocol": 2, "batches": columns}


def test_a_409_in_a_replay_gives_only_the_named_batch_the_inventory(fake_ingest, tmp_path):
    fake_ingest.script = [(409, {"error": "unknown GPU", "field": "batches[1].samples[0].gpus"})]
    h = Harness(fake_ingest.url, tmp_path)
    sent = spooled(h, 3)
    h.drain()

    first, second = fake_ingest.requests
    assert first.batches == sent
    assert second.batches == [sent[0], {**sent[1], "host": {"hostname": "gpu-node-1",
                                                           "gpus": []}}, sent[2]]


def test_the_eviction_report_rides_on_the_newest_replayed_batch_only(fake_ingest, tmp_path):
    h = Harness(fake_ingest.url, tmp_path)
    sent = spooled(h, 3)
    h.spool.max_bytes = h.spool.bytes + 1
    h.spool.append(batch(4))  # evicts the oldest one to make room
    evicted = h.spool.evictions()
    h.drain()

    [request] = fake_ingest.requests
    report = {"evicted_batches": evicted[0], "evicted_samples": evicted[1]}
    newest = batch(4)
    assert evicted[0] >= 1
    assert request.batches == [*sent[evicted[0]:],
                               {**newest, "agent": {**newest["agent"], "spool": report}}]


def test_a_server_that_speaks_2_gets_the_spooled_bytes_as_they_are(fake_ingest, tmp_path):
    fake_ingest.protocols = "1, 2"
    h = Harness(fake_ingest.url, tmp_path)
    h.shipper.client.protocol = 2
    sent = spooled(h, 3)
    raws = [s.raw for s in h.spool.peek()]
    h.drain()

    [request] = fake_ingest.requests
    assert request.body == json.loads(join_batches(raws))
    assert request.body == {"protocol": 2, "batches": [to_columns(b) for b in sent]}


def test_v1_files_an_older_agent_spooled_replay_after_the_upgrade(fake_ingest, tmp_path):
    """The files as an agent before this one wrote them: v1 JSON, gzip, the same names."""
    fake_ingest.protocols = "1, 2"
    old = [batch(seq) for seq in (1, 2)]
    for i, b in enumerate(old):
        data = json.dumps(b, separators=(",", ":"), ensure_ascii=False).encode()
        write_atomic(tmp_path / f"{i:016d}-2.json.gz", gzip.compress(data))
    h = Harness(fake_ingest.url, tmp_path)
    h.shipper.client.protocol = 2
    h.spool.append(batch(3))  # spooled by the upgraded agent, behind the old files
    h.drain()

    [request] = fake_ingest.requests
    assert request.body == {"protocol": 2, "batches": [to_columns(b) for b in [*old, batch(3)]]}
    assert len(h.spool) == 0
