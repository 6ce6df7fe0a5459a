"""Protocol v2 (columns, docs/protocol.md): stored exactly as v1 stores the same samples, with
v1's guarantees: idempotency, refusals naming the column and index, nothing stored from a
refused request, limits, unknown metrics ignored and listed."""

from __future__ import annotations

import time
import uuid

import orjson
import pytest
from django.db import connection

from agents.protocol import to_columns
from controlplane.telemetry.schema import TABLES
from tests.telemetry.factories import NOTHING, batch, sample, stored_rows


def v2(body: dict) -> dict:
    return to_columns(body)


def refused(ingest, body, token, status=400, field=None) -> dict:
    code, reply = ingest.post(body, token)
    assert code == status, reply
    assert reply["field"] == field, reply
    assert reply["error"]
    assert stored_rows() == NOTHING
    return reply


def table_contents() -> dict[str, list[tuple]]:
    """Every stored sample row, without the order the rows went in."""
    out = {}
    with connection.cursor() as cursor:
        for table in TABLES.values():
            columns = ", ".join(c.name for c in table.all_columns)
            cursor.execute(f"SELECT {columns} FROM {table.name} ORDER BY {columns}")
            out[table.entity] = cursor.fetchall()
    return out


def delete_samples() -> None:
    with connection.cursor() as cursor:
        for table in TABLES.values():
            cursor.execute(f"DELETE FROM {table.name}")


def test_a_v2_batch_stores_the_rows_its_v1_form_stores(ingest, host_token):
    now = time.time()
    samples = [sample(now - 2), sample(now - 1)]
    samples[1]["gpus"][0]["fan_pct"] = 40.0  # a key only one row has: null in the others
    del samples[0]["host"]  # a sample without host metrics: no host row for it
    code, _ = ingest.post(batch(samples=samples), host_token)
    assert code == 200
    as_v1 = table_contents()
    delete_samples()

    code, reply = ingest.post(v2(batch(samples=samples, with_inventory=False)), host_token)

    assert (code, reply["accepted"], reply["duplicates"]) == (200, 2, 0)
    assert table_contents() == as_v1
    assert {k: len(v) for k, v in as_v1.items()} == {"host": 1, "gpu": 4, "engine": 2,
                                                     "proc": 2}


def test_a_v2_batch_sent_twice_is_stored_once(ingest, host_token):
    body = v2(batch())
    assert ingest.post(body, host_token)[0] == 200

    code, reply = ingest.post(body, host_token)

    assert (code, reply["accepted"], reply["duplicates"]) == (200, 0, 1)
    assert stored_rows() == {"host": 1, "gpu": 2, "engine": 1, "proc": 1}


def test_a_v2_replay_of_several_batches_is_stored_in_one_request(ingest, host_token):
    boot = str(uuid.uuid4())
    now = time.time()
    first = v2(batch(seq=1, boot_id=boot, samples=[sample(now - 2)]))
    second = v2(batch(seq=2, boot_id=boot, samples=[sample(now - 1)], with_inventory=False))

    code, reply = ingest.post({"protocol": 2, "batches": [first, second]}, host_token)

    assert (code, reply["accepted"]) == (200, 2)
    assert stored_rows()["gpu"] == 4


def test_it_refuses_a_value_above_the_catalog_bound_naming_column_and_index(ingest,
                                                                          host_token):
    body = v2(batch())
    body["gpus"]["util_pct"][1] = 101.0

    reply = refused(ingest, body, host_token, field="gpus.util_pct[1]")

    assert reply["error"] == "101.0 is above the maximum 100.0 of gpu.util_pct"


def test_it_refuses_a_value_of_the_wrong_type_naming_the_metric(ingest, host_token):
    body = v2(batch())
    body["gpus"]["util_pct"][0] = "97"

    reply = refused(ingest, body, host_token, field="gpus.util_pct[0]")

    assert "gpu.util_pct" in reply["error"]


def test_it_refuses_a_fraction_where_the_catalog_wants_an_integer(ingest, host_token):
    body = v2(batch())
    body["gpus"]["mem_used_bytes"][0] = 1.5

    reply = refused(ingest, body, host_token, field="gpus.mem_used_bytes[0]")

    assert "must be an integer (gpu.mem_used_bytes)" in reply["error"]


def test_it_refuses_a_column_of_another_length_naming_it(ingest, host_token):
    body = v2(batch())
    body["gpus"]["temp_c"].append(50.0)

    refused(ingest, body, host_token, field="gpus.temp_c")


def test_it_refuses_the_same_gpu_twice_in_one_sample(ingest, host_token):
    body = v2(batch())
    body["gpus"]["uuid"][1] = body["gpus"]["uuid"][0]

    refused(ingest, body, host_token, field="gpus.uuid[1]")


def test_it_refuses_two_samples_with_the_same_timestamp(ingest, host_token):
    now = time.time()
    body = v2(batch(samples=[sample(now), sample(now)]))

    refused(ingest, body, host_token, field="ts[1]")


def test_it_refuses_rows_of_several_samples_without_their_sample_index(ingest, host_token):
    now = time.time()
    body = v2(batch(samples=[sample(now - 1), sample(now)]))
    del body["gpus"]["at"]

    refused(ingest, body, host_token, field="gpus.at")


def test_it_refuses_a_sample_index_outside_ts(ingest, host_token):
    now = time.time()
    body = v2(batch(samples=[sample(now - 1), sample(now)]))
    body["gpus"]["at"][3] = 2

    refused(ingest, body, host_token, field="gpus.at[3]")


@pytest.mark.parametrize(("change", "field"), [
    (lambda b: b["agent"].pop("boot_id"), "agent.boot_id"),
    (lambda b: b["agent"].update(boot_id="not-a-uuid"), "agent.boot_id"),
    (lambda b: b["agent"].update(seq=0), "agent.seq"),
    (lambda b: b["agent"].update(seq=True), "agent.seq"),
    (lambda b: b.pop("ts"), "ts"),
    (lambda b: b["host"].pop("hostname"), "host.hostname"),
    (lambda b: b["engines"]["ttft_seconds"][0]["counts"].append(1),
     "engines.ttft_seconds[0].counts"),
    (lambda b: b["engines"]["ttft_seconds"][0].update(le=[0.5, 0.1, 1.0]),
     "engines.ttft_seconds[0].le[1]"),
    (lambda b: b["processes"]["cpu_affinity"][0].append(-1),
     "processes.cpu_affinity[0][2]"),
])
def test_each_malformed_field_is_refused_by_name(ingest, host_token, change, field):
    body = v2(batch())
    change(body)

    refused(ingest, body, host_token, field=field)


def test_it_refuses_samples_from_the_future_naming_their_ts(ingest, host_token):
    body = v2(batch(samples=[sample(time.time() + 3600)]))

    reply = refused(ingest, body, host_token, field="ts[0]")

    assert "future" in reply["error"]


def test_one_bad_batch_refuses_the_whole_v2_replay(ingest, host_token):
    boot = str(uuid.uuid4())
    good = v2(batch(seq=1, boot_id=boot))
    bad = v2(batch(seq=2, boot_id=boot, with_inventory=False))
    bad["gpus"]["temp_c"][0] = 500.0

    refused(ingest, {"protocol": 2, "batches": [good, bad]}, host_token,
            field="batches[1].gpus.temp_c[0]")


def test_a_gpu_unknown_without_an_inventory_is_answered_409_naming_its_row(ingest,
                                                                            host_token):
    body = v2(batch(with_inventory=False))

    refused(ingest, body, host_token, status=409, field="gpus.uuid[0]")


def test_unknown_metrics_are_ignored_and_listed_and_the_rest_stored(ingest, host_token):
    body = v2(batch())
    body["gpus"]["sparkle_level"] = [1.0, 2.0]

    code, reply = ingest.post(body, host_token)

    assert (code, reply["ignored"]) == (200, ["gpu.sparkle_level"])
    assert stored_rows()["gpu"] == 2


def test_every_reply_announces_the_protocols_the_server_speaks(ingest, host_token):
    sent: list[dict] = []

    async def receive():
        return {"type": "http.request", "body": orjson.dumps(v2(batch())), "more_body": False}

    async def send(message):
        sent.append(message)

    scope = {"type": "http", "method": "POST", "path": "/api/v1/ingest",
             "headers": [(b"content-type", b"application/json"),
                         (b"authorization", f"Bearer {host_token}".encode())]}
    ingest.run(ingest.app(scope, receive, send))

    assert sent[0]["status"] == 200
    assert (b"pitwall-protocols", b"1, 2") in sent[0]["headers"]
