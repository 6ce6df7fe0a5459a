"""GET /api/v1/hosts/ and /api/v1/hosts/<id>/."""

from __future__ import annotations

import pytest

from controlplane.fleet.models import Host

LIST = "/api/v1/hosts/"


def hostnames(response) -> list[str]:
    assert response.status_code == 200, response.content
    return [h["hostname"] for h in response.json()["results"]]


def test_it_lists_every_host_in_hostname_order(api, mixed_fleet):
    assert hostnames(api.get(LIST)) == ["gpu-node-1", "new-node-3", "sim-node-2"]


def test_it_describes_a_host_with_its_inventory_and_counts(api, mixed_fleet):
    host = mixed_fleet.online_host
    body = api.get(f"{LIST}{host.id}/").json()
    assert body == {
        "id": host.id, "hostname": "gpu-node-1", "simulated": False, "online": True,
        "last_seen": body["last_seen"], "cpu_model": "AMD EPYC 9654", "cpu_count": 192,
        "mem_total_bytes": 1_622_000_000_000, "numa_nodes": [{"id": 0, "cpus": [0, 1]}],
        "agent_version": "0.1.0", "driver_version": "570.86.15",
        # Two GPUs and two engines exist, but one of each is no longer present.
        "gpu_count": 1, "engine_count": 1,
        "spool_evicted_batches": 2, "spool_evicted_samples": 16,
        "labels": {}, "agent_labels": {}, "all_labels": {},
    }
    assert body["last_seen"].startswith(host.last_seen.strftime("%Y-%m-%dT%H:%M:%S"))


def test_it_says_a_host_is_offline_once_its_last_report_is_older_than_the_window(api, mixed_fleet):
    by_name = {h["hostname"]: h for h in api.get(LIST).json()["results"]}
    assert by_name["gpu-node-1"]["online"] is True
    assert by_name["sim-node-2"]["online"] is False
    assert by_name["new-node-3"]["online"] is False
    assert by_name["new-node-3"]["last_seen"] is None


def test_it_reads_the_online_window_from_settings(api, mixed_fleet, settings):
    settings.PITWALL = {**settings.PITWALL, "ONLINE_WINDOW_S": 24 * 3600}
    assert hostnames(api.get(LIST, {"online": "true"})) == ["gpu-node-1", "sim-node-2"]


def test_it_counts_no_gpus_or_engines_for_a_host_without_any(api, mixed_fleet):
    body = api.get(f"{LIST}{mixed_fleet.unseen_host.id}/").json()
    assert (body["gpu_count"], body["engine_count"]) == (0, 0)


@pytest.mark.parametrize(("query", "expected"), [
    ({"hostname": "sim-node-2"}, ["sim-node-2"]),
    ({"hostname": "sim-node"}, []),
    ({"simulated": "true"}, ["sim-node-2"]),
    ({"simulated": "false"}, ["gpu-node-1", "new-node-3"]),
    ({"online": "true"}, ["gpu-node-1"]),
    ({"online": "false"}, ["new-node-3", "sim-node-2"]),
    ({"online": "0", "simulated": "1"}, ["sim-node-2"]),
])
def test_it_filters(api, mixed_fleet, query, expected):
    assert hostnames(api.get(LIST, query)) == expected


@pytest.mark.parametrize("param", ["online", "simulated"])
def test_it_refuses_a_filter_value_that_is_not_a_boolean_naming_the_filter(api, mixed_fleet, param):
    response = api.get(LIST, {param: "maybe"})
    assert response.status_code == 400
    assert param in response.json()


def test_it_pages_with_limit_and_offset_in_a_stable_order(api, mixed_fleet):
    first = api.get(LIST, {"limit": 2}).json()
    second = api.get(LIST, {"limit": 2, "offset": 2}).json()
    assert first["count"] == second["count"] == 3
    names = [h["hostname"] for h in first["results"] + second["results"]]
    assert names == sorted(Host.objects.values_list("hostname", flat=True))
    assert first["next"] is not None and second["next"] is None


def test_it_caps_the_page_size(api, mixed_fleet):
    Host.objects.bulk_create(Host(hostname=f"bulk-{i:04d}") for i in range(1005))
    assert len(api.get(LIST, {"limit": 5000}).json()["results"]) == 1000


def test_it_answers_404_for_an_unknown_id(api, mixed_fleet):
    assert api.get(f"{LIST}999999/").status_code == 404


def test_it_answers_404_for_an_id_beyond_the_id_column_range(api, mixed_fleet):
    assert api.get(f"{LIST}99999999999/").status_code == 404


def test_it_answers_404_for_a_hostname_in_place_of_an_id(api, mixed_fleet):
    assert api.get(f"{LIST}gpu-node-1/").status_code == 404
