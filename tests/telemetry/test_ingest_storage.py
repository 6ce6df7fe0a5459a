"""What ingest stores: every value where it belongs, absent stays absent, replays once."""

from __future__ import annotations

import asyncio
import time
import uuid

from django.db import connection

from controlplane.fleet.models import Engine, Gpu, Host
from tests.telemetry.factories import batch, inventory, sample, stored_rows


def fetch(sql: str, params=()):
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return cursor.fetchall()


def test_it_stores_each_value_in_its_column_and_leaves_absent_metrics_null(ingest, host_token):
    ts = time.time() - 5
    code, reply = ingest.post(batch(samples=[sample(ts)]), host_token)
    assert (code, reply["accepted"]) == (200, 1), reply
    gpu_id = Gpu.objects.get(uuid="GPU-gpu-node-1-1").id
    util, temp, power, stamp = fetch(
        "SELECT util_pct, temp_c, power_w, extract(epoch FROM ts) FROM telemetry_gpu_sample"
        " WHERE gpu_id = %s", [gpu_id])[0]
    assert (util, temp, power) == (91.0, 60.0, None)  # power_w was not sent: NULL, not 0
    assert abs(float(stamp) - ts) < 1e-5
    counts, layout_bounds, total = fetch(
        "SELECT e.ttft_seconds_counts, l.bounds, e.ttft_seconds_sum"
        " FROM telemetry_engine_sample e"
        " JOIN telemetry_histogramlayout l ON l.id = e.ttft_seconds_layout")[0]
    assert (counts, layout_bounds, total) == ([3, 2, 1, 0], [0.1, 0.5, 1.0], 1.9)
    cores, = fetch("SELECT cpu_core_pct FROM telemetry_host_sample")[0]
    assert cores == [10.0, 15.0]
    pid, affinity, engine_id = fetch(
        "SELECT pid, cpu_affinity, engine_id FROM telemetry_proc_sample")[0]
    assert (pid, affinity) == (4242, [0, 1])
    assert engine_id == Engine.objects.get(name="vllm:8000/0").id


def test_a_replayed_batch_is_acknowledged_and_stored_once(ingest, host_token):
    body = batch(seq=1)
    first = ingest.post(body, host_token)
    second = ingest.post(body, host_token)
    assert first == (200, {"accepted": 1, "duplicates": 0, "config_version": 0, "hold_s": 0.0,
                     "ignored": []})
    assert second[0] == 200 and second[1]["duplicates"] == 1 and second[1]["accepted"] == 0
    assert stored_rows()["gpu"] == 2


def test_concurrent_copies_of_one_batch_are_stored_once(ingest, host_token):
    body = batch(seq=7)
    ingest.app.admission.max_per_host = 5  # all five copies at once, past the default places

    async def race():
        return await asyncio.gather(*(ingest.apost(body, host_token) for _ in range(5)))

    replies = ingest.run(race())
    assert all(code == 200 for code, _ in replies)
    assert sum(reply["accepted"] for _, reply in replies) == 1
    assert stored_rows()["host"] == 1


def test_a_new_boot_with_lower_sequence_numbers_is_stored(ingest, host_token):
    ingest.post(batch(seq=50), host_token)
    code, reply = ingest.post(batch(seq=1, samples=[sample(time.time() + 1)]), host_token)
    assert (code, reply["accepted"]) == (200, 1)
    assert stored_rows()["host"] == 2


def test_batches_of_one_request_are_each_idempotent(ingest, host_token):
    boot = str(uuid.uuid4())
    now = time.time()
    batches = [batch(seq, boot, samples=[sample(now - 10 + seq)]) for seq in (1, 2, 3)]
    ingest.post(batches[0], host_token)
    code, reply = ingest.post({"protocol": 1, "batches": batches}, host_token)
    assert (code, reply["accepted"], reply["duplicates"]) == (200, 2, 1)
    assert stored_rows()["host"] == 3


def test_unknown_metrics_are_ignored_and_named_in_the_reply(ingest, host_token):
    body = batch()
    body["samples"][0]["gpus"][0]["nvlink_bps"] = 5
    code, reply = ingest.post(body, host_token)
    assert code == 200 and reply["ignored"] == ["gpu.nvlink_bps"]


def test_a_gpu_missing_from_a_new_inventory_is_marked_absent_and_keeps_its_history(
        ingest, host_token):
    ingest.post(batch(seq=1, gpus=2), host_token)
    body = batch(seq=2, gpus=1, samples=[sample(time.time() + 1, gpus=1)])
    assert ingest.post(body, host_token)[0] == 200
    gone = Gpu.objects.get(uuid="GPU-gpu-node-1-1")
    assert not gone.present and gone.removed_at is not None
    assert Gpu.objects.get(uuid="GPU-gpu-node-1-0").present
    assert fetch("SELECT count(*) FROM telemetry_gpu_sample WHERE gpu_id = %s",
                 [gone.id])[0][0] == 1


def test_the_inventory_fills_the_fleet_tables(ingest, host_token):
    ingest.post(batch(), host_token)
    host = Host.objects.get(hostname="gpu-node-1")
    assert host.cpu_count == 16 and host.last_seen is not None
    assert host.numa_nodes == inventory()["numa_nodes"]
    assert [g.index for g in host.gpus.all()] == [0, 1]
    assert host.engines.get().config == {"block_size": "16"}


def test_spool_evictions_reported_by_the_agent_are_counted_on_the_host(ingest, host_token):
    body = batch()
    body["agent"]["spool"] = {"evicted_batches": 3, "evicted_samples": 30}
    ingest.post(body, host_token)
    host = Host.objects.get(hostname="gpu-node-1")
    assert (host.spool_evicted_batches, host.spool_evicted_samples) == (3, 30)


def test_a_sample_row_already_stored_under_another_boot_does_not_block_the_rest(
        ingest, host_token):
    ts = time.time() - 2
    ingest.post(batch(seq=1, samples=[sample(ts)]), host_token)
    # A restarted agent re-sends the same instant under a new boot, plus a new one.
    code, reply = ingest.post(batch(seq=1, samples=[sample(ts), sample(ts + 1)]), host_token)
    assert (code, reply["accepted"]) == (200, 2)
    assert stored_rows()["host"] == 2
