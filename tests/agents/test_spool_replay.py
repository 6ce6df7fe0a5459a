"""A replay sends spooled batches as they were read from disk, joined into one body, and
parses a batch only to change it (the inventory after a 409, the eviction report)."""

from __future__ import annotations

import copy
import gzip
import json

from agents.spool import join_batches
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

    assert json.loads(join_batches(raws)) == {"protocol": 1, "batches": sent}
    assert json.loads(gzip.decompress(gzip.compress(join_batches(raws)))) == \
        {"protocol": 1, "batches": sent}


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
