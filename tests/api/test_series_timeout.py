"""GET /api/v1/series/ runs each statement under PITWALL["QUERY_TIMEOUT_S"]: a read past it is
a 503 that says so, not a 500, and the limit stays inside the read."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection

from controlplane.telemetry import series as series_module
from controlplane.telemetry.series.timeouts import statement_timeout
from tests.api.helpers import T0

URL = "/api/v1/series/"


@pytest.fixture
def query(mixed_fleet) -> dict:
    return {"metric": "gpu.util_pct", "entity": str(mixed_fleet.gpu.id), "start": T0.isoformat(),
            "end": (T0 + timedelta(hours=1)).isoformat()}


def test_a_read_past_the_timeout_is_a_503_that_says_so(api, query, settings, monkeypatch):
    settings.PITWALL = {**settings.PITWALL, "QUERY_TIMEOUT_S": 0.05}
    read = series_module._read_series

    def slow(*args, **kwargs):
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_sleep(5)")
        return read(*args, **kwargs)

    monkeypatch.setattr(series_module, "_read_series", slow)
    response = api.get(URL, query)
    assert response.status_code == 503, response.content
    assert "took longer than 0.05 s" in response.json()["detail"]

    monkeypatch.undo()  # the connection goes on: the next read answers
    assert api.get(URL, query).status_code == 200


def test_the_default_timeout_is_five_seconds_and_does_not_outlive_the_read(api, query):
    with connection.cursor() as cursor:
        cursor.execute("SHOW statement_timeout")
        before = cursor.fetchone()[0]
        with statement_timeout("a test"):
            cursor.execute("SHOW statement_timeout")
            assert cursor.fetchone()[0] == "5s"
        assert api.get(URL, query).status_code == 200
        cursor.execute("SHOW statement_timeout")
        assert cursor.fetchone()[0] == before
