"""GET /api/v1/gpus/ and /api/v1/gpus/<id>/."""

from __future__ import annotations

import pytest

LIST = "/api/v1/gpus/"


def uuids(response) -> list[str]:
    assert response.status_code == 200, response.content
    return [g["uuid"] for g in response.json()["results"]]


def test_it_lists_gpus_present_and_removed(api, mixed_fleet):
    assert uuids(api.get(LIST)) == ["GPU-0aaa", "GPU-1bbb", "GPU-2ccc"]


def test_it_describes_a_gpu_with_its_host(api, mixed_fleet):
    gpu = mixed_fleet.gpu
    body = api.get(f"{LIST}{gpu.id}/").json()
    assert body == {
        "id": gpu.id, "uuid": "GPU-0aaa", "host": mixed_fleet.online_host.id,
        "hostname": "gpu-node-1",
        "index": 0, "name": "NVIDIA H100", "mem_total_bytes": 80 * 2**30,
        "pci_bus_id": "00000000:18:00.0", "numa_node": 0, "mig": None, "simulated": False,
        "present": True, "online": True, "first_seen": body["first_seen"], "removed_at": None,
    }


def test_a_gpu_is_online_only_when_present_and_its_host_is_online(api, mixed_fleet):
    by_uuid = {g["uuid"]: g for g in api.get(LIST).json()["results"]}
    assert by_uuid["GPU-0aaa"]["online"] is True
    assert by_uuid["GPU-1bbb"]["online"] is False  # removed, on an online host
    assert by_uuid["GPU-2ccc"]["online"] is False  # present, on an offline host
    assert by_uuid["GPU-1bbb"]["removed_at"] is not None


@pytest.mark.parametrize(("query", "expected"), [
    ({"uuid": "GPU-2ccc"}, ["GPU-2ccc"]),
    ({"present": "true"}, ["GPU-0aaa", "GPU-2ccc"]),
    ({"present": "false"}, ["GPU-1bbb"]),
    ({"online": "true"}, ["GPU-0aaa"]),
    ({"hostname": "sim-node-2"}, ["GPU-2ccc"]),
])
def test_it_filters(api, mixed_fleet, query, expected):
    assert uuids(api.get(LIST, query)) == expected


def test_it_filters_by_host_id(api, mixed_fleet):
    assert uuids(api.get(LIST, {"host": mixed_fleet.online_host.id})) == ["GPU-0aaa", "GPU-1bbb"]
    assert uuids(api.get(LIST, {"host": mixed_fleet.online_host.id, "present": "true"})) == [
        "GPU-0aaa"]
    assert uuids(api.get(LIST, {"host": mixed_fleet.unseen_host.id})) == []


@pytest.mark.parametrize(("param", "value"), [
    ("host", "gpu-node-1"), ("host", "0"), ("host", "99999999999"), ("present", "yes"),
])
def test_it_refuses_a_bad_filter_value_naming_the_filter(api, mixed_fleet, param, value):
    response = api.get(LIST, {param: value})
    assert response.status_code == 400
    assert param in response.json()


def test_it_answers_404_for_an_unknown_id(api, mixed_fleet):
    assert api.get(f"{LIST}999999/").status_code == 404
