"""GET /api/v1/series/ for several entities at once, for all of a host's, and by statistic."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from controlplane.fleet.models import Gpu
from tests.api.helpers import T0, insert_samples, series

MINUTE = timedelta(minutes=1)
WINDOW = {"start": T0.isoformat(), "end": (T0 + 4 * MINUTE).isoformat()}


@pytest.fixture
def two_gpus(mixed_fleet):
    second = Gpu.objects.create(host=mixed_fleet.online_host, uuid="GPU-3ddd", index=2)
    rows = []
    for i in range(4):
        rows.append({"gpu_id": mixed_fleet.gpu.id, "ts": T0 + i * MINUTE, "util_pct": 10.0 * i,
                     "throttle_reasons": [1, 4, 5, 1][i]})
        rows.append({"gpu_id": second.id, "ts": T0 + i * MINUTE, "util_pct": 50.0 + i})
    insert_samples("gpu", rows)
    return mixed_fleet.gpu, second


def points_by_entity(body: dict) -> dict:
    return {line["entity"]["id"]: line["points"] for line in body["series"]}


@pytest.mark.parametrize("form", ["repeated", "comma"])
def test_it_returns_one_series_per_entity_in_the_order_asked(api, two_gpus, form):
    first, second = two_gpus
    entity = ([second.uuid, first.id] if form == "repeated" else f"{second.uuid},{first.id}")
    body = series(api, metric="gpu.util_pct", entity=entity, **WINDOW).json()
    assert [line["entity"]["id"] for line in body["series"]] == [second.id, first.id]
    assert points_by_entity(body) == {
        first.id: [[(T0 + i * MINUTE).timestamp(), 10.0 * i] for i in range(4)],
        second.id: [[(T0 + i * MINUTE).timestamp(), 50.0 + i] for i in range(4)],
    }


def test_an_entity_named_twice_is_answered_once(api, two_gpus):
    first, _ = two_gpus
    body = series(api, metric="gpu.util_pct", entity=f"{first.id},{first.uuid}",
                  **WINDOW).json()
    assert len(body["series"]) == 1


def test_it_reads_all_entities_with_one_query_of_the_sample_table(api, two_gpus):
    first, second = two_gpus
    for entity in (str(first.id), f"{first.id},{second.id}"):
        with CaptureQueriesContext(connection) as queries:
            response = series(api, metric="gpu.util_pct", entity=entity, max_points=2,
                              **WINDOW)
        assert response.status_code == 200
        reads = [q for q in queries.captured_queries if "FROM telemetry_gpu_sample" in q["sql"]]
        assert len(reads) == 2  # the raw rows (more than max_points), then their buckets


def test_host_gives_its_present_gpus_in_index_order(api, mixed_fleet, two_gpus):
    first, second = two_gpus
    body = series(api, metric="gpu.util_pct", host="gpu-node-1", **WINDOW).json()
    # The removed GPU (index 1) is not present any more.
    assert [line["entity"]["index"] for line in body["series"]] == [0, 2]
    assert points_by_entity(body)[second.id][0] == [T0.timestamp(), 50.0]


def test_host_gives_the_host_itself_for_host_metrics(api, mixed_fleet):
    insert_samples("host", [{"host_id": mixed_fleet.online_host.id, "ts": T0, "cpu_pct": 5.0}])
    body = series(api, metric="host.cpu_pct", host=str(mixed_fleet.online_host.id), **WINDOW).json()
    assert [line["entity"]["hostname"] for line in body["series"]] == ["gpu-node-1"]
    assert body["series"][0]["points"] == [[T0.timestamp(), 5.0]]


def test_host_gives_its_present_engines(api, mixed_fleet):
    insert_samples("engine", [{"engine_id": mixed_fleet.engine.id, "ts": T0, "up": 1}])
    body = series(api, metric="engine.up", host="gpu-node-1", **WINDOW).json()
    assert [line["entity"]["id"] for line in body["series"]] == [mixed_fleet.engine.id]


def test_host_gives_the_processes_seen_in_the_window(api, mixed_fleet):
    host = mixed_fleet.online_host.id
    insert_samples("proc", [
        {"host_id": host, "pid": 9, "ts": T0 + MINUTE, "cpu_pct": 9.0},
        {"host_id": host, "pid": 7, "ts": T0, "cpu_pct": 7.0},
        {"host_id": host, "pid": 8, "ts": T0 - 10 * MINUTE, "cpu_pct": 8.0},  # before it
    ])
    body = series(api, metric="proc.cpu_pct", host="gpu-node-1", **WINDOW).json()
    assert [(line["entity"]["pid"], line["points"]) for line in body["series"]] == [
        (7, [[T0.timestamp(), 7.0]]), (9, [[(T0 + MINUTE).timestamp(), 9.0]])]


@pytest.mark.parametrize(("stat", "first_bucket"), [
    ("avg", 5.0), ("min", 0.0), ("max", 10.0), ("last", 10.0)])
def test_stat_picks_the_statistic_of_each_bucket(api, two_gpus, stat, first_bucket):
    first, _ = two_gpus
    body = series(api, metric="gpu.util_pct", entity=first.id, max_points=2, stat=stat,
                  **WINDOW).json()
    assert body["series"][0]["points"][0] == [T0.timestamp(), first_bucket]
    assert (body["stat"], body["step"]) == (stat, 120)


@pytest.mark.parametrize(("stat", "bits"), [("avg", 1 | 4), ("max", 1 | 4), ("min", 1 & 4)])
def test_a_bitmask_bucket_ors_its_bits_or_ands_them_for_min(api, two_gpus, stat, bits):
    first, _ = two_gpus
    body = series(api, metric="gpu.throttle_reasons", entity=first.id, max_points=2,
                  stat=stat, **WINDOW).json()
    assert body["series"][0]["points"][0] == [T0.timestamp(), bits]
