"""GET /api/v1/engines/ and /api/v1/engines/<id>/."""

from __future__ import annotations

import pytest

LIST = "/api/v1/engines/"


def ids(response) -> list[int]:
    assert response.status_code == 200, response.content
    return [e["id"] for e in response.json()["results"]]


def test_it_lists_engines_in_id_order(api, mixed_fleet):
    f = mixed_fleet
    expected = sorted([f.engine.id, f.stale_engine.id, f.gone_engine.id])
    assert ids(api.get(LIST)) == expected


def test_it_describes_an_engine_with_its_host_and_config(api, mixed_fleet):
    engine = mixed_fleet.engine
    body = api.get(f"{LIST}{engine.id}/").json()
    assert body == {
        "id": engine.id, "host": mixed_fleet.online_host.id, "hostname": "gpu-node-1",
        "name": "vllm:8000/0", "url": "http://127.0.0.1:8000/metrics",
        "model": "meta-llama/Llama-3.1-8B-Instruct", "gpu_uuids": ["GPU-0aaa"],
        "config": {"max_num_seqs": 256}, "simulated": False, "present": True, "online": True,
        "last_seen": body["last_seen"],
    }
    assert body["last_seen"] is not None


def test_an_engine_is_online_while_its_last_report_is_within_the_window(api, mixed_fleet):
    online = {e["id"]: e["online"] for e in api.get(LIST).json()["results"]}
    assert online == {mixed_fleet.engine.id: True, mixed_fleet.stale_engine.id: False,
                      mixed_fleet.gone_engine.id: False}


@pytest.mark.parametrize(("query", "expected"), [
    ({"online": "true"}, ["engine"]),
    ({"online": "false"}, ["stale_engine", "gone_engine"]),
    ({"present": "false"}, ["gone_engine"]),
    ({"hostname": "sim-node-2"}, ["stale_engine"]),
    ({"name": "vllm:8001/0"}, ["gone_engine"]),
    ({"model": "meta-llama/Llama-3.1-8B-Instruct"}, ["engine"]),
])
def test_it_filters(api, mixed_fleet, query, expected):
    assert ids(api.get(LIST, query)) == sorted(getattr(mixed_fleet, name).id for name in expected)


def test_it_filters_by_host_id(api, mixed_fleet):
    expected = sorted([mixed_fleet.engine.id, mixed_fleet.gone_engine.id])
    assert ids(api.get(LIST, {"host": mixed_fleet.online_host.id})) == expected


@pytest.mark.parametrize(("param", "value"), [("host", "x"), ("online", "sometimes")])
def test_it_refuses_a_bad_filter_value_naming_the_filter(api, mixed_fleet, param, value):
    response = api.get(LIST, {param: value})
    assert response.status_code == 400
    assert param in response.json()


def test_it_answers_404_for_an_unknown_id(api, mixed_fleet):
    assert api.get(f"{LIST}999999/").status_code == 404
