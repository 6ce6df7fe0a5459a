"""What placement reads in a host's inventory (labels, address, port range, roles, cached
models) is stored as sent when it fits its bounds, and refused with a 400 naming the field,
nothing stored, when it does not: the address ends up in the URLs a router calls, the labels in
services' selectors."""

from __future__ import annotations

import pytest

from agents.protocol import to_columns
from controlplane.fleet.models import Host
from tests.telemetry.factories import batch
from tests.telemetry.test_ingest_numbers import assert_refused

FACTS = {"labels": {"pool": "batch", "zone": "rack-3", "topology.x/y": ""},
         "address": "10.0.0.5", "port_range": [8000, 8999], "roles": ["router"],
         "hf_models": [{"repo": "meta-llama/Llama-3.1-8B-Instruct", "bytes": 16060522496},
                       {"repo": "gpt2", "bytes": 0}]}


def with_facts(**changes) -> dict:
    body = batch()
    body["host"].update(FACTS, **changes)
    return body


@pytest.mark.parametrize("protocol", [1, 2])
def test_placement_facts_are_stored_with_the_inventory(ingest, host_token, protocol):
    body = with_facts()
    status, reply = ingest.post(to_columns(body) if protocol == 2 else body, host_token)
    assert status == 200, reply
    host = Host.objects.get()
    assert {key: host.inventory[key] for key in FACTS} == FACTS
    assert host.agent_labels() == FACTS["labels"]


@pytest.mark.parametrize("address", ["gpu-node-1.example.com", "fd00::5", "127.0.0.1",
                                     "gpu-node-1"])
def test_an_ip_address_or_a_dns_name_is_an_address(ingest, host_token, address):
    status, reply = ingest.post(with_facts(address=address), host_token)
    assert status == 200, reply
    assert Host.objects.get().inventory["address"] == address


def test_thirty_two_labels_are_accepted(ingest, host_token):
    labels = {f"k{i}": "v" for i in range(32)}
    status, reply = ingest.post(with_facts(labels=labels), host_token)
    assert status == 200, reply


@pytest.mark.parametrize(("changes", "field", "words"), [
    ({"labels": ["pool=batch"]}, "labels", "must be an object"),
    ({"labels": {"Pool": "batch"}}, "labels.Pool", "label key 'Pool'"),
    ({"labels": {"-pool": "batch"}}, "labels.-pool", "starting and ending"),
    ({"labels": {"k" * 64: "v"}}, "labels." + "k" * 63, "1-63 characters"),
    ({"labels": {"pool": "a b"}}, "labels.pool", "value 'a b'"),
    ({"labels": {"pool": "v" * 64}}, "labels.pool", "at most 63 characters"),
    ({"labels": {"pool": 3}}, "labels.pool", "must be a string, not int"),
    ({"labels": {f"k{i}": "v" for i in range(33)}}, "labels", "at most 32 labels"),
    ({"address": "http://10.0.0.5/"}, "address", "neither an IP address nor a DNS name"),
    ({"address": "10.0.0.5:8000"}, "address", "neither an IP address nor a DNS name"),
    ({"address": "999.1.1.1"}, "address", "neither an IP address nor a DNS name"),
    ({"address": "fe80::1%eth0"}, "address", "neither an IP address nor a DNS name"),
    ({"address": "a" * 254}, "address", "1-253 characters"),
    ({"address": 10}, "address", "must be a string"),
    ({"port_range": [9000, 8000]}, "port_range", "1 <= LOW <= HIGH <= 65535"),
    ({"port_range": [0, 8000]}, "port_range", "1 <= LOW <= HIGH <= 65535"),
    ({"port_range": [8000, 70000]}, "port_range", "1 <= LOW <= HIGH <= 65535"),
    ({"port_range": [8000, "8999"]}, "port_range", "1 <= LOW <= HIGH <= 65535"),
    ({"port_range": [8000, True]}, "port_range", "1 <= LOW <= HIGH <= 65535"),
    ({"port_range": [8000]}, "port_range", "two ports"),
    ({"port_range": "8000-8999"}, "port_range", "must be a list"),
    ({"roles": ["router", "router"]}, "roles", "at most 1 roles"),
    ({"roles": ["admin"]}, "roles[0]", "roles are router; not 'admin'"),
    ({"roles": [["router"]]}, "roles[0]", "roles are router"),
    ({"hf_models": [{"repo": "a/b/c", "bytes": 1}]}, "hf_models[0].repo",
     "Hugging Face repository id"),
    ({"hf_models": [{"repo": "../etc", "bytes": 1}]}, "hf_models[0].repo",
     "Hugging Face repository id"),
    ({"hf_models": [{"repo": "org/m", "bytes": -1}]}, "hf_models[0].bytes", "from 0 to"),
    ({"hf_models": [{"repo": "org/m", "bytes": 2**61}]}, "hf_models[0].bytes", "from 0 to"),
    ({"hf_models": [{"repo": "org/m", "bytes": 1.5}]}, "hf_models[0].bytes",
     "must be an integer"),
    ({"hf_models": [{"repo": "org/m"}]}, "hf_models[0].bytes", "bytes is required"),
    ({"hf_models": [{"repo": "org/m", "bytes": 1}, {"repo": "org/m", "bytes": 2}]},
     "hf_models[1].repo", "listed twice"),
    ({"hf_models": [{"repo": f"org/m{i}", "bytes": 1} for i in range(257)]}, "hf_models",
     "at most 256 models"),
    ({"hf_models": ["org/m"]}, "hf_models[0]", "must be an object"),
])
@pytest.mark.parametrize("protocol", [1, 2])
def test_a_bad_placement_fact_is_refused_naming_its_field(ingest, host_token, changes, field,
                                                          words, protocol):
    body = with_facts(**changes)
    assert_refused(ingest, host_token, to_columns(body) if protocol == 2 else body,
                   f"host.{field}", words)
