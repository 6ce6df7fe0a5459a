"""Every number an agent sends is finite and in a range that fits its meaning, in the samples
and in the inventory (engine config included); a refusal names the field and nothing of the
request is stored. A number past these would be stored and break an alert rule, a page or the
tuning pass later, for every host."""

from __future__ import annotations

import time
import uuid

import pytest

from agents.protocol import to_columns
from controlplane.fleet.models import Engine, Host
from controlplane.fleet.tokens import issue_agent_token
from tests.telemetry.factories import NOTHING, batch, stored_rows

HUGE = 10**400  # the 400-digit number of the report


def with_engine_config(config: dict, protocol: int = 1) -> dict:
    body = batch()
    body["host"]["engines"][0]["config"] = config
    return to_columns(body) if protocol == 2 else body


def assert_refused(ingest, token: str, body: dict | bytes, field: str, words: str) -> None:
    status, reply = (ingest.post(raw=body, token=token) if isinstance(body, bytes)
                     else ingest.post(body, token))
    assert status == 400, reply
    assert reply["field"] == field, reply
    assert words in reply["error"], reply
    assert stored_rows() == NOTHING
    assert not Engine.objects.exists()
    assert Host.objects.get().inventory in (None, {})


def test_a_400_digit_gpu_memory_utilization_text_is_refused(ingest, host_token):
    body = with_engine_config({"gpu_memory_utilization": str(HUGE)})
    assert_refused(ingest, host_token, body, "host.engines[0].config.gpu_memory_utilization",
                   "at most 2**53")


def test_a_400_digit_number_in_a_protocol_2_config_is_refused(ingest, host_token):
    """msgspec decodes the inventory's free-form objects with Python's unbounded integers."""
    raw = (f'{{"protocol":2,"agent":{{"boot_id":"{uuid.uuid4()}","seq":1}},'
           f'"ts":[{time.time()}],"host":{{"hostname":"gpu-node-1","engines":[{{'
           f'"name":"vllm:8000/0","config":{{"args":{{"max_num_seqs":{HUGE}}}}}}}]}}}}').encode()
    assert_refused(ingest, host_token, raw, "host.engines[0].config.args.max_num_seqs",
                   "at most 2**53")


@pytest.mark.parametrize(("config", "field", "words"), [
    ({"gpu_memory_utilization": "1.5"}, "gpu_memory_utilization", "outside > 0 and <= 1"),
    ({"args": {"gpu_memory_utilization": 0}}, "args.gpu_memory_utilization", "outside > 0"),
    ({"args": {"max_num_seqs": "1e400"}}, "args.max_num_seqs", "at most 2**53"),
    ({"args": {"max_num_seqs": 2.5}}, "args.max_num_seqs", "must be an integer"),
    ({"block_size": "lots"}, "block_size", "must be an integer"),
    ({"note": [[[[[[[[[[1]]]]]]]]]]}, "note" + "[0]" * 8, "nests deeper"),
])
def test_engine_config_numbers_out_of_their_range_are_refused(ingest, host_token, config,
                                                              field, words):
    assert_refused(ingest, host_token, with_engine_config(config),
                   f"host.engines[0].config.{field}", words)


def test_a_real_engine_config_is_accepted(ingest, host_token):
    config = {"block_size": "16", "gpu_memory_utilization": "0.9", "num_gpu_blocks": "None",
              "swap_space": "4", "cache_dtype": "auto", "enable_prefix_caching": "True",
              "vllm_version": "0.11.0",
              "args": {"max_num_seqs": 256, "max_model_len": -1, "tensor_parallel_size": 2,
                       "gpu_memory_utilization": 0.92, "served_model_name": ["llama"]}}
    for protocol in (1, 2):
        body = with_engine_config(config, protocol)
        body["agent"]["seq"] = protocol
        status, reply = ingest.post(body, host_token)
        assert status == 200, reply
    assert Engine.objects.get().config == config


@pytest.mark.parametrize(("change", "field", "words"), [
    (lambda inv: inv["numa_nodes"][0].update(cpus=[[1]]), "numa_nodes[0].cpus[0]",
     "CPU numbers"),
    (lambda inv: inv["numa_nodes"][0].update(cpus=[0, 40000]), "numa_nodes[0].cpus[1]",
     "CPU numbers"),
    (lambda inv: inv["numa_nodes"][0].update(id=5000), "numa_nodes[0].id", "from 0 to 1023"),
    (lambda inv: inv.update(cpu_count=0), "cpu_count", "from 1 to"),
    (lambda inv: inv.update(mem_total_bytes=2**62), "mem_total_bytes", "from 0 to"),
    (lambda inv: inv["gpus"][0].update(mem_total_bytes=-1), "gpus[0].mem_total_bytes",
     "from 0 to"),
    (lambda inv: inv["gpus"][0].update(index=5000), "gpus[0].index", "from 0 to 1023"),
    (lambda inv: inv["gpus"][0].update(numa_node=-2), "gpus[0].numa_node", "from -1 to"),
    (lambda inv: inv["gpus"][0].update(mig={"slices": 1e300}), "gpus[0].mig.slices",
     "at most 2**53"),
])
def test_inventory_numbers_out_of_range_are_refused(ingest, host_token, change, field, words):
    body = batch()
    change(body["host"])
    assert_refused(ingest, host_token, body, f"host.{field}", words)


@pytest.mark.parametrize("protocol", [1, 2])
def test_a_sample_value_without_a_catalog_bound_is_still_bounded(ingest, host_token,
                                                                  protocol):
    body = batch(with_inventory=False)
    body["samples"][0]["host"]["net_rx_bps"] = 1e300
    field = "samples[0].host.net_rx_bps" if protocol == 1 else "hosts.net_rx_bps[0]"
    assert_refused(ingest, host_token, to_columns(body) if protocol == 2 else body, field,
                   "2**63")


@pytest.mark.parametrize("protocol", [1, 2])
def test_a_histogram_sum_past_the_bound_is_refused(ingest, host_token, protocol):
    body = batch(with_inventory=False)
    body["samples"][0]["engines"][0]["ttft_seconds"]["sum"] = 1e300
    status, reply = ingest.post(to_columns(body) if protocol == 2 else body, host_token)
    assert status == 400, reply
    assert "sum" in reply["field"]
    assert stored_rows() == NOTHING


@pytest.mark.parametrize("protocol", [1, 2])
def test_a_spool_eviction_count_past_bigint_is_refused(ingest, host_token, protocol):
    """The host's eviction counters add these up in bigint: 2**64 - 1 failed the writer's
    whole flush, other hosts' batches with it."""
    body = batch()
    body["agent"]["spool"] = {"evicted_batches": 2**64 - 1, "evicted_samples": 0}
    if protocol == 2:
        body = to_columns(body)
    status, reply = ingest.post(body, host_token)
    assert status == 400, reply
    assert reply["field"] == "agent.spool.evicted_batches"
    assert stored_rows() == NOTHING


def test_an_engine_keeps_only_gpus_of_its_own_host(ingest, host_token):
    """Another host's GPU UUID under an engine would show that GPU on the engine's page and
    in the export's model= filter."""
    assert ingest.post(batch(hostname="gpu-node-1"), host_token)[0] == 200
    other, _ = issue_agent_token("gpu-node-2")
    body = batch(hostname="gpu-node-2")
    body["host"]["engines"][0]["gpu_uuids"] = ["GPU-gpu-node-1-0", "GPU-gpu-node-2-1"]
    status, reply = ingest.post(body, other)
    assert status == 200, reply
    engine = Engine.objects.get(host__hostname="gpu-node-2")
    assert engine.gpu_uuids == ["GPU-gpu-node-2-1"]
