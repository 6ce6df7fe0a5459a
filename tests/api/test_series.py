"""GET /api/v1/series/ for gauges, rates and array metrics of one entity; windows.

Several entities, host=, stat and rollups: test_series_entities.py, test_series_rollups.py.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from tests.api.helpers import T0, insert_samples, series


def line(body: dict) -> dict:
    """The only series of a one-entity reply."""
    assert len(body["series"]) == 1, body
    return body["series"][0]

MINUTE = timedelta(minutes=1)
UTIL = [0.0, 10.0, 20.0, 30.0, 40.0, 50.0, 60.0, 70.0, 80.0, 90.0]
WINDOW = {"start": T0.isoformat(), "end": (T0 + 10 * MINUTE).isoformat()}


@pytest.fixture
def gpu_rows(mixed_fleet):
    rows = [{"gpu_id": mixed_fleet.gpu.id, "ts": T0 + i * MINUTE, "util_pct": v}
            for i, v in enumerate(UTIL)]
    # Absent: a row where the metric is NULL (another metric was reported).
    rows.append({"gpu_id": mixed_fleet.gpu.id, "ts": T0 + MINUTE / 2, "temp_c": 50.0})
    # Outside the window: at its end, which is exclusive.
    rows.append({"gpu_id": mixed_fleet.gpu.id, "ts": T0 + 10 * MINUTE, "util_pct": 99.0})
    # Another GPU at the same instants.
    rows.append({"gpu_id": mixed_fleet.sim_gpu.id, "ts": T0, "util_pct": 42.0})
    insert_samples("gpu", rows)


def test_it_returns_raw_points_of_a_gauge(api, mixed_fleet, gpu_rows):
    response = series(api, metric="gpu.util_pct", entity=mixed_fleet.gpu.id, **WINDOW)
    assert response.status_code == 200, response.content
    body = response.json()
    assert line(body)["points"] == [[(T0 + i * MINUTE).timestamp(), v]
                                    for i, v in enumerate(UTIL)]
    assert (body["resolution"], body["step"], body["stat"]) == ("raw", None, "avg")
    assert (body["metric"], body["unit"], body["kind"]) == ("gpu.util_pct", "%", "gauge")
    assert (body["start"], body["end"]) == (T0.timestamp(), (T0 + 10 * MINUTE).timestamp())
    assert body["quantile"] is None


def test_it_describes_the_entity(api, mixed_fleet, gpu_rows):
    body = series(api, metric="gpu.util_pct", entity=mixed_fleet.gpu.id, **WINDOW).json()
    assert line(body)["entity"] == {"kind": "gpu", "id": mixed_fleet.gpu.id, "uuid": "GPU-0aaa",
                                    "index": 0, "host": mixed_fleet.online_host.id,
                                    "hostname": "gpu-node-1"}


def test_it_finds_a_gpu_by_uuid(api, mixed_fleet, gpu_rows):
    by_uuid = series(api, metric="gpu.util_pct", entity="GPU-0aaa", **WINDOW).json()
    by_id = series(api, metric="gpu.util_pct", entity=mixed_fleet.gpu.id, **WINDOW).json()
    assert by_uuid == by_id


def test_it_returns_float4_values_in_their_shortest_form(api, mixed_fleet):
    insert_samples("gpu", [{"gpu_id": mixed_fleet.gpu.id, "ts": T0, "util_pct": 33.3}])
    body = series(api, metric="gpu.util_pct", entity=mixed_fleet.gpu.id, **WINDOW).json()
    assert line(body)["points"] == [[T0.timestamp(), 33.3]]


def test_it_returns_integer_metrics_as_integers(api, mixed_fleet):
    insert_samples("gpu", [{"gpu_id": mixed_fleet.gpu.id, "ts": T0, "mem_used_bytes": 2**36 + 1}])
    body = series(api, metric="gpu.mem_used_bytes", entity=mixed_fleet.gpu.id, **WINDOW).json()
    assert line(body)["points"] == [[T0.timestamp(), 2**36 + 1]]


def test_it_averages_equal_time_buckets_when_rows_exceed_max_points(api, mixed_fleet, gpu_rows):
    body = series(api, metric="gpu.util_pct", entity=mixed_fleet.gpu.id, max_points=5,
                  **WINDOW).json()
    # Ten minutes in five buckets: two minutes, two rows each.
    expected = [[(T0 + 2 * k * MINUTE).timestamp(), (UTIL[2 * k] + UTIL[2 * k + 1]) / 2]
                for k in range(5)]
    assert line(body)["points"] == expected
    assert (body["resolution"], body["step"]) == ("raw", 120)


def test_it_keeps_raw_rows_when_they_fit_in_max_points_exactly(api, mixed_fleet, gpu_rows):
    body = series(api, metric="gpu.util_pct", entity=mixed_fleet.gpu.id, max_points=10,
                  **WINDOW).json()
    assert (body["resolution"], body["step"]) == ("raw", None)
    assert len(line(body)["points"]) == 10


def test_it_ors_a_bitmask_within_a_bucket(api, mixed_fleet):
    insert_samples("gpu", [
        {"gpu_id": mixed_fleet.gpu.id, "ts": T0, "throttle_reasons": 1},
        {"gpu_id": mixed_fleet.gpu.id, "ts": T0 + MINUTE, "throttle_reasons": 4},
    ])
    body = series(api, metric="gpu.throttle_reasons", entity=mixed_fleet.gpu.id, max_points=1,
                  **WINDOW).json()
    assert line(body)["points"] == [[T0.timestamp(), 1 | 4]]
    assert (body["resolution"], body["step"]) == ("raw", 600)


CORES = [[10.5, 20.0], [30.5, 40.0], [50.0, 60.0], [70.0, 80.25]]


@pytest.fixture
def core_rows(mixed_fleet):
    insert_samples("host", [{"host_id": mixed_fleet.online_host.id, "ts": T0 + i * MINUTE,
                             "cpu_core_pct": cores} for i, cores in enumerate(CORES)])


def test_it_returns_the_list_of_an_array_metric(api, mixed_fleet, core_rows):
    body = series(api, metric="host.cpu_core_pct", entity="gpu-node-1", **WINDOW).json()
    assert line(body)["points"] == [[(T0 + i * MINUTE).timestamp(), c]
                                    for i, c in enumerate(CORES)]
    assert line(body)["entity"] == {"kind": "host", "id": mixed_fleet.online_host.id,
                                    "hostname": "gpu-node-1"}


def test_it_averages_an_array_metric_core_by_core(api, mixed_fleet, core_rows):
    window = {"start": T0.isoformat(), "end": (T0 + 4 * MINUTE).isoformat()}
    body = series(api, metric="host.cpu_core_pct", entity=mixed_fleet.online_host.id, max_points=2,
                  **window).json()
    first = [(a + b) / 2 for a, b in zip(CORES[0], CORES[1], strict=True)]
    second = [(a + b) / 2 for a, b in zip(CORES[2], CORES[3], strict=True)]
    assert line(body)["points"] == [[T0.timestamp(), first],
                                    [(T0 + 2 * MINUTE).timestamp(), second]]
    assert (body["resolution"], body["step"]) == ("raw", 120)


def test_it_reads_a_process_by_host_and_pid(api, mixed_fleet):
    host = mixed_fleet.online_host
    insert_samples("proc", [
        {"host_id": host.id, "pid": 4242, "ts": T0, "engine_id": mixed_fleet.engine.id,
         "cpu_pct": 99.5},
        {"host_id": host.id, "pid": 4243, "ts": T0, "cpu_pct": 1.5},
    ])
    for entity in (f"{host.id}:4242", "gpu-node-1:4242"):
        body = series(api, metric="proc.cpu_pct", entity=entity, **WINDOW).json()
        assert line(body)["points"] == [[T0.timestamp(), 99.5]]
        assert line(body)["entity"] == {"kind": "proc", "host": host.id,
                                        "hostname": "gpu-node-1", "pid": 4242}


def test_it_reads_an_engine_by_id(api, mixed_fleet):
    engine = mixed_fleet.engine.id
    insert_samples("engine", [{"engine_id": engine, "ts": T0, "kv_cache_usage": 0.5}])
    body = series(api, metric="engine.kv_cache_usage", entity=engine, **WINDOW).json()
    assert line(body)["points"] == [[T0.timestamp(), 0.5]]
    assert line(body)["entity"]["name"] == "vllm:8000/0"


def test_it_reads_the_last_hour_by_default(api, mixed_fleet):
    now = datetime.now(UTC).replace(microsecond=0)
    insert_samples("host", [
        {"host_id": mixed_fleet.online_host.id, "ts": now - timedelta(minutes=10), "cpu_pct": 12.5},
        {"host_id": mixed_fleet.online_host.id, "ts": now - timedelta(hours=2), "cpu_pct": 99.0},
    ])
    body = series(api, metric="host.cpu_pct", entity="gpu-node-1").json()
    assert line(body)["points"] == [[(now - timedelta(minutes=10)).timestamp(), 12.5]]
    assert body["end"] - body["start"] == 3600


def test_it_accepts_unix_seconds_and_iso_offsets(api, mixed_fleet, gpu_rows):
    start, end = T0.timestamp(), (T0 + 10 * MINUTE).timestamp()
    by_unix = series(api, metric="gpu.util_pct", entity=mixed_fleet.gpu.id, start=str(int(start)),
                     end=str(end)).json()
    by_iso = series(api, metric="gpu.util_pct", entity=mixed_fleet.gpu.id,
                    start="2026-03-02T13:00:00+01:00", end="2026-03-02T12:10:00").json()
    assert line(by_unix)["points"] == line(by_iso)["points"]
    assert len(line(by_unix)["points"]) == len(UTIL)


def test_it_reads_an_unescaped_plus_in_an_iso_offset(api, mixed_fleet, gpu_rows):
    # "+" in a query string means a space: clients that forget to escape it still get T0.
    url = (f"/api/v1/series/?metric=gpu.util_pct&entity={mixed_fleet.gpu.id}"
           "&start=2026-03-02T13:00:00+01:00&end=2026-03-02T12:10:00Z")
    body = api.get(url).json()
    assert body["start"] == T0.timestamp()


def test_it_returns_no_points_for_a_window_without_rows(api, mixed_fleet, gpu_rows):
    body = series(api, metric="gpu.util_pct", entity=mixed_fleet.gpu.id,
                  start="2020-01-01T00:00:00Z", end="2020-01-02T00:00:00Z").json()
    assert line(body)["points"] == []
