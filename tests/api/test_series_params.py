"""GET /api/v1/series/ refuses bad parameters with a 400 naming each, unknown entities with 404."""

from __future__ import annotations

from datetime import timedelta

import pytest

from tests.api.helpers import T0, series

START, END = T0.isoformat(), (T0 + timedelta(hours=1)).isoformat()


@pytest.fixture
def good(mixed_fleet) -> dict:
    return {"metric": "gpu.util_pct", "entity": str(mixed_fleet.gpu.id), "start": START, "end": END}


@pytest.mark.parametrize(("change", "param"), [
    ({"metric": None}, "metric"),
    ({"metric": "gpu.utilpct"}, "metric"),
    ({"metric": "util_pct"}, "metric"),
    ({"entity": None}, "entity"),
    ({"start": "yesterday"}, "start"),
    ({"start": "99999999999999999999"}, "start"),
    ({"end": "2026-13-01T00:00:00"}, "end"),
    ({"end": START}, "end"),  # an empty window
    ({"start": END, "end": START}, "end"),
    ({"start": (T0 - timedelta(days=731, seconds=1)).isoformat(), "end": START}, "start"),
    ({"max_points": "0"}, "max_points"),
    ({"max_points": "10001"}, "max_points"),
    ({"max_points": "many"}, "max_points"),
    ({"quantile": "0.99"}, "quantile"),  # gpu.util_pct is no histogram
    ({"metric": "engine.ttft_seconds", "entity": "1", "quantile": "1.5"}, "quantile"),
    ({"metric": "engine.ttft_seconds", "entity": "1", "quantile": "nan"}, "quantile"),
    ({"metric": "engine.up", "entity": "vllm:8000/0"}, "entity"),
    ({"metric": "proc.cpu_pct", "entity": "4242"}, "entity"),
    ({"metric": "proc.cpu_pct", "entity": "gpu-node-1:x"}, "entity"),
    ({"entity": " , "}, "entity"),
    ({"host": "gpu-node-1"}, "host"),  # entity and host at once
    ({"stat": "median"}, "stat"),
    ({"metric": "engine.ttft_seconds", "entity": "1", "stat": "max"}, "stat"),
])
def test_it_refuses_a_bad_parameter_naming_it(api, good, change, param):
    params = {k: v for k, v in {**good, **change}.items() if v is not None}
    response = series(api, **params)
    assert response.status_code == 400, response.content
    assert list(response.json()) == [param]


def test_it_lists_close_names_for_an_unknown_metric(api, good):
    body = series(api, **{**good, "metric": "gpu.utilpct"}).json()
    assert "gpu.util_pct" in body["metric"][0]
    assert "gpu.mem_util_pct" in body["metric"][0]


@pytest.mark.parametrize("days", [31, 32, 365, 731])
def test_it_allows_windows_of_up_to_two_years(api, good, days):
    start = (T0 - timedelta(days=days)).isoformat()
    response = series(api, **{**good, "start": start, "end": START})
    assert response.status_code == 200, response.content


def test_it_names_every_bad_parameter_at_once(api, good):
    response = series(api, **{**good, "start": "soon", "max_points": "-1"})
    assert response.status_code == 400
    assert set(response.json()) == {"start", "max_points"}


@pytest.mark.parametrize(("metric", "entity", "named"), [
    ("gpu.util_pct", "GPU-ffff", "GPU-ffff"),
    ("gpu.util_pct", "987654", "987654"),
    ("host.cpu_pct", "no-such-host", "no-such-host"),
    ("engine.up", "987654", "987654"),
    ("proc.cpu_pct", "no-such-host:4242", "no-such-host"),
    ("proc.cpu_pct", "gpu-node-1:4242", "4242"),  # a pid never sampled on that host
])
def test_it_answers_404_naming_an_unknown_entity(api, good, metric, entity, named):
    response = series(api, **{**good, "metric": metric, "entity": entity})
    assert response.status_code == 404, response.content
    assert named in response.json()["entity"][0]


def test_it_answers_404_naming_an_unknown_host(api, good):
    params = {k: v for k, v in good.items() if k != "entity"}
    response = series(api, **params, host="no-such-host")
    assert response.status_code == 404, response.content
    assert "no-such-host" in response.json()["host"][0]


def test_one_unknown_entity_among_several_is_a_404_naming_it(api, good, mixed_fleet):
    response = series(api, **{**good, "entity": f"{mixed_fleet.gpu.id},GPU-ffff"})
    assert response.status_code == 404, response.content
    assert "GPU-ffff" in response.json()["entity"][0]
