"""GET /api/v1/series/ names at most PITWALL_SERIES_MAX_ENTITIES entities: every name is looked
up before the read, so a long URL of names must be a 400 naming the limit, before any lookup."""

from __future__ import annotations

from django.db import connection
from django.test.utils import CaptureQueriesContext

URL = "/api/v1/series/"


def names(gpu, n: int) -> str:
    return ",".join([str(gpu.id)] * n)


def test_more_entities_than_the_bound_is_a_400_naming_it_and_looks_nothing_up(api,
                                                                            mixed_fleet):
    api.get(URL, {"metric": "gpu.util_pct", "entity": "1"})  # the token's last use, noted
    with CaptureQueriesContext(connection) as queries:
        response = api.get(URL, {"metric": "gpu.util_pct",
                                 "entity": names(mixed_fleet.gpu, 2000)})
    assert response.status_code == 400, response.content
    [message] = response.json()["entity"]
    assert "2000 entities" in message and "PITWALL_SERIES_MAX_ENTITIES" in message
    assert not any("fleet_gpu" in q["sql"] for q in queries.captured_queries)


def test_repeated_and_comma_separated_names_count_alike(api, mixed_fleet, settings):
    settings.PITWALL = {**settings.PITWALL, "SERIES_MAX_ENTITIES": 3}
    gpu = str(mixed_fleet.gpu.id)
    assert api.get(URL, {"metric": "gpu.util_pct", "entity": [gpu, f"{gpu},{gpu}"]}
                   ).status_code == 200
    refused = api.get(URL, {"metric": "gpu.util_pct", "entity": [gpu, f"{gpu},{gpu},{gpu}"]})
    assert refused.status_code == 400 and "at most 3" in refused.json()["entity"][0]


def test_the_bound_itself_is_allowed(api, mixed_fleet):
    response = api.get(URL, {"metric": "gpu.util_pct", "entity": names(mixed_fleet.gpu, 100)})
    assert response.status_code == 200 and len(response.json()["series"]) == 1
