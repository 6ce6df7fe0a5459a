"""One test per class of bad input: a clear 4xx naming the field, and nothing stored."""

from __future__ import annotations

import time

import orjson
import pytest
from django.utils import timezone

from controlplane.fleet.models import AgentToken, Gpu
from controlplane.fleet.tokens import issue_agent_token
from tests.telemetry.factories import NOTHING, batch, gzipped, inventory, sample, stored_rows


def refused(ingest, body, token, status=400, field=None, **kwargs):
    code, reply = ingest.post(body, token, **kwargs)
    assert code == status, reply
    if field is not None:
        assert reply["field"] == field, reply
    assert reply["error"]
    assert stored_rows() == NOTHING
    return reply


def test_it_refuses_a_body_that_is_not_json(ingest, host_token):
    reply = refused(ingest, None, host_token, raw=b"{not json")
    assert "not valid JSON" in reply["error"]


def test_it_refuses_an_unsupported_protocol_version(ingest, host_token):
    body = batch()
    body["protocol"] = 3
    reply = refused(ingest, body, host_token, field="protocol")
    assert "speaks 1 and 2" in reply["error"]


@pytest.mark.parametrize("boot_id", [None, "not-a-uuid", 42])
def test_it_refuses_a_missing_or_malformed_boot_id(ingest, host_token, boot_id):
    body = batch()
    body["agent"]["boot_id"] = boot_id
    refused(ingest, body, host_token, field="agent.boot_id")


@pytest.mark.parametrize("seq", [0, -1, "1", 1.5, True])
def test_it_refuses_a_sequence_number_that_is_not_a_positive_integer(ingest, host_token, seq):
    body = batch()
    body["agent"]["seq"] = seq
    refused(ingest, body, host_token, field="agent.seq")


def test_it_refuses_a_metric_value_of_the_wrong_type_naming_the_field(ingest, host_token):
    body = batch()
    body["samples"][0]["gpus"][1]["util_pct"] = "97"
    reply = refused(ingest, body, host_token, field="samples[0].gpus[1].util_pct")
    assert "gpu.util_pct" in reply["error"]


def test_it_refuses_a_value_outside_the_catalog_bounds(ingest, host_token):
    body = batch()
    body["samples"][0]["engines"][0]["kv_cache_usage"] = 1.5  # a 0-1 fraction
    refused(ingest, body, host_token, field="samples[0].engines[0].kv_cache_usage")


def test_it_refuses_a_fraction_where_the_catalog_wants_an_integer(ingest, host_token):
    body = batch()
    body["samples"][0]["gpus"][0]["mem_used_bytes"] = 1.5
    refused(ingest, body, host_token, field="samples[0].gpus[0].mem_used_bytes")


def test_it_refuses_a_histogram_whose_counts_do_not_match_its_bounds(ingest, host_token):
    body = batch()
    body["samples"][0]["engines"][0]["ttft_seconds"]["counts"] = [1, 2, 3]
    reply = refused(ingest, body, host_token, field="samples[0].engines[0].ttft_seconds.counts")
    assert "+Inf" in reply["error"]


def test_it_refuses_histogram_bounds_out_of_order(ingest, host_token):
    body = batch()
    body["samples"][0]["engines"][0]["ttft_seconds"]["le"] = [0.5, 0.1, 1.0]
    refused(ingest, body, host_token, field="samples[0].engines[0].ttft_seconds.le[1]")


def test_it_refuses_the_same_gpu_twice_in_one_sample(ingest, host_token):
    body = batch()
    gpus = body["samples"][0]["gpus"]
    gpus[1]["uuid"] = gpus[0]["uuid"]
    refused(ingest, body, host_token, field="samples[0].gpus[1].uuid")


def test_it_refuses_two_samples_with_the_same_timestamp(ingest, host_token):
    ts = time.time()
    refused(ingest, batch(samples=[sample(ts), sample(ts)]), host_token, field="samples[1].ts")


def test_it_refuses_samples_from_the_future(ingest, host_token):
    reply = refused(ingest, batch(samples=[sample(time.time() + 3600)]), host_token,
                    field="samples[0].ts")
    assert "clock" in reply["error"]


def test_it_refuses_an_inventory_without_a_hostname(ingest, host_token):
    body = batch()
    del body["host"]["hostname"]
    refused(ingest, body, host_token, field="host.hostname")


def test_it_refuses_a_request_without_a_token(ingest, host_token):
    refused(ingest, batch(), None, status=401)


def test_it_refuses_an_unknown_token(ingest, host_token):
    refused(ingest, batch(), host_token[:-4] + "AAAA", status=401)


def test_it_refuses_a_revoked_token(ingest, host_token):
    AgentToken.objects.update(revoked_at=timezone.now())
    reply = refused(ingest, batch(), host_token, status=401)  # the token no longer authenticates
    assert "revoked" in reply["error"]


def test_an_agent_token_cannot_write_another_host(ingest, host_token):
    issue_agent_token("gpu-node-2")
    body = batch(hostname="gpu-node-2")
    reply = refused(ingest, body, host_token, status=403, field="host.hostname")
    assert "gpu-node-1" in reply["error"]


def test_an_agent_token_cannot_claim_a_gpu_of_another_host(ingest, host_token):
    other, _ = issue_agent_token("gpu-node-2")
    assert ingest.post(batch(hostname="gpu-node-2"), other)[0] == 200
    before = stored_rows()
    body = batch()
    body["host"]["gpus"][0]["uuid"] = "GPU-gpu-node-2-0"
    code, reply = ingest.post(body, host_token)
    assert (code, reply["field"]) == (403, "host.gpus[0].uuid")
    assert stored_rows() == before
    assert Gpu.objects.get(uuid="GPU-gpu-node-2-0").host.hostname == "gpu-node-2"


def test_it_answers_409_for_a_gpu_it_does_not_know_without_an_inventory(ingest, host_token):
    reply = refused(ingest, batch(with_inventory=False), host_token, status=409,
                    field="samples[0].gpus[0].uuid")
    assert "inventory" in reply["error"]


def test_it_refuses_a_body_over_the_size_limit_by_its_declared_length(ingest, host_token,
                                                                      settings):
    limit = ingest.app.max_body
    refused(ingest, None, host_token, status=413, raw=b" " * (limit + 1))


def test_it_refuses_a_gzip_body_that_inflates_past_the_limit(ingest, host_token):
    bomb = orjson.dumps(batch()) + b" " * (ingest.app.max_body + 10)
    import gzip

    refused(ingest, None, host_token, status=413, raw=gzip.compress(bomb),
            headers={"content-encoding": "gzip"})


def test_it_refuses_corrupt_gzip(ingest, host_token):
    refused(ingest, None, host_token, raw=b"\x1f\x8b\x08garbage",
            headers={"content-encoding": "gzip"})


def test_it_refuses_a_content_type_other_than_json(ingest, host_token):
    refused(ingest, None, host_token, status=415, raw=gzipped(batch()),
            headers={"content-type": "text/plain"})


def test_one_bad_batch_refuses_the_whole_multi_batch_request(ingest, host_token):
    boot = batch()["agent"]["boot_id"]
    good, bad = batch(1, boot), batch(2, boot)
    bad["samples"][0]["host"]["cpu_pct"] = -5
    refused(ingest, {"protocol": 1, "batches": [good, bad]}, host_token,
            field="batches[1].samples[0].host.cpu_pct")


def test_it_accepts_gzip_and_stores_a_valid_batch(ingest, host_token):
    code, reply = ingest.post(None, host_token, raw=gzipped(batch()),
                              headers={"content-encoding": "gzip"})
    assert code == 200, reply
    assert reply["accepted"] == 1
    assert stored_rows() == {"host": 1, "gpu": 2, "engine": 1, "proc": 1}


def test_the_inventory_hostname_must_match_even_for_a_new_token(ingest, transactional_db):
    token, _ = issue_agent_token("gpu-node-9")
    refused(ingest, batch(hostname="someone-else"), token, status=403, field="host.hostname")
    assert inventory()["hostname"] == "gpu-node-1"
