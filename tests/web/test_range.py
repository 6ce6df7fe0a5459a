"""The range in the URL: parsed by the server, reflected in the picker, read by the scripts."""

from __future__ import annotations

import re

import pytest
from django.http import QueryDict

from controlplane.web.ranges import MAX_CUSTOM_S, parse_range
from tests.web.helpers import host_path, page_config

NOW = 1_772_450_000.0


def parsed(query: str):
    return parse_range(QueryDict(query), now=NOW)


@pytest.mark.parametrize("query,name,seconds", [
    ("", "live", 300), ("range=live", "live", 300), ("range=1h", "1h", 3600),
    ("range=6h", "6h", 21600), ("range=24h", "24h", 86400), ("range=7d", "7d", 604800),
    ("range=30d", "30d", 2592000),
])
def test_a_preset_ends_now(query, name, seconds):
    time_range = parsed(query)
    assert (time_range.name, time_range.start, time_range.end) == (name, NOW - seconds, NOW)


def test_a_custom_range_takes_unix_seconds_or_iso_instants():
    assert parsed("from=1000&to=2000").as_json() == {
        "name": "custom", "from": 1000.0, "to": 2000.0, "live": False}
    assert parsed("from=2026-03-02T12:00:00&to=2026-03-02T13:00").end - parsed(
        "from=2026-03-02T12:00:00&to=2026-03-02T13:00").start == 3600


@pytest.mark.parametrize("query", ["range=2y", "from=2000&to=1000", "from=abc&to=2000",
                                   "from=1000", "range=<script>"])
def test_a_bad_range_falls_back_to_live(query):
    assert parsed(query).name == "live"


def test_a_custom_range_longer_than_30_days_is_clipped_to_its_end():
    time_range = parsed(f"from=1&to={NOW}")
    assert time_range.end - time_range.start == MAX_CUSTOM_S


def selected(html: str) -> list[str]:
    return re.findall(r'data-range="([^"]+)" class="selected" aria-current="true"', html)


def test_the_picker_marks_the_range_of_the_url(operator_client, page_fleet):
    html = operator_client.get(host_path(page_fleet.host), {"range": "7d"}).content.decode()
    assert selected(html) == ["7d"]
    assert 'id="range-picker" data-range="7d"' in html
    html = operator_client.get(f"/engines/{page_fleet.engine.id}/").content.decode()
    assert selected(html) == ["live"]


def test_a_custom_range_is_marked_and_handed_to_the_scripts(operator_client, page_fleet):
    response = operator_client.get(f"/gpus/{page_fleet.gpu0.id}/",
                                   {"from": "1772400000", "to": "1772403600"})
    html = response.content.decode()
    assert ('id="range-picker" data-range="custom" data-from="1772400000" '
            'data-to="1772403600"') in html
    assert 'class="custom selected" id="range-custom"' in html
    assert page_config(response)["range"] == {
        "name": "custom", "from": 1772400000.0, "to": 1772403600.0, "live": False}
