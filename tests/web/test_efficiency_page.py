"""The efficiency page: tables per model and per engine of a known load posted through the
real ingest app (tests/telemetry/efficiency_data.py), its notes, and the links to it."""

from __future__ import annotations

import re
import time

import pytest
from django.test import Client

from controlplane.fleet.models import Engine
from tests.support.roles import user_with_role
from tests.telemetry.efficiency_data import MODEL, EngineLoad, Load, post
from tests.web.helpers import assert_sends_to_login

PAGE = "/efficiency/"


@pytest.fixture
def viewer(transactional_db) -> Client:
    client = Client()
    client.force_login(user_with_role("vic", "viewer"))
    return client


@pytest.fixture
def load(ingest, host_token) -> Load:
    load = Load(float(int(time.time()) - 720), 600,
                [EngineLoad("vllm:8000/0", [0, 1], 600.0)], energy_counter=False)
    post(ingest, host_token, load)
    return load


def cells(html: str, row_attr: str) -> dict[str, str]:
    """The data-field cells of the row carrying ``row_attr``, as text."""
    row = re.search(rf"<tr [^>]*{re.escape(row_attr)}[^>]*>(.*?)</tr>", html, re.S)
    assert row, f"no row with {row_attr}"
    found = re.findall(r'<td[^>]*data-field="([^"]+)"[^>]*>(.*?)</td>', row.group(1), re.S)
    return {name: " ".join(re.sub(r"<[^>]+>", " ", text).split()) for name, text in found}


def test_it_sends_anonymous_visitors_to_the_login_page(db):
    assert_sends_to_login(PAGE)


def test_it_shows_each_model_and_engine_with_its_figures(viewer, load):
    html = viewer.get(PAGE).content.decode()
    engine = Engine.objects.get()
    row = cells(html, f'data-engine-id="{engine.id}"')
    assert row["tokens_per_s"] == "600.0"
    assert row["tokens_per_joule"] == "1.000"
    assert row["energy_source"] == "power × time"
    assert row["gpu_hours"] == "0.33"
    assert row["ttft_attainment"].startswith("95 %")  # against a 99 % target: it misses
    assert row["ttft_burn"] == "5.0× / 5.0×"
    assert row["itl_attainment"].startswith("99 %")
    assert 'class="misses">95 %' in html and 'class="burning">5.0×' in html
    model = cells(html, f'data-model="{MODEL}"')
    assert model["tokens"] == "360,000"


def test_it_says_where_the_energy_came_from_and_that_no_price_is_set(viewer, load, settings):
    settings.PITWALL = {**settings.PITWALL, "GPU_HOUR_PRICE": 0.0}
    html = viewer.get(PAGE).content.decode()
    note = re.search(r'<li id="note-energy">(.*?)</li>', html, re.S).group(1)
    assert "from power × time" in note
    assert "No GPU-hour price is configured" in html
    assert cells(html, f'data-model="{MODEL}"')["cost_per_million"] == "–"


def test_with_a_price_it_shows_the_cost(viewer, load, settings):
    settings.PITWALL = {**settings.PITWALL, "GPU_HOUR_PRICE": 3.0}
    html = viewer.get(PAGE).content.decode()
    assert "3.0 USD per GPU-hour" in html
    assert cells(html, f'data-model="{MODEL}"')["cost_per_million"] == "2.78"


def test_the_range_picker_offers_four_ranges_and_a_stale_one_falls_back(viewer, load):
    html = viewer.get(PAGE, {"range": "7d"}).content.decode()
    assert re.findall(r'data-range="(\w+)"', html) == ["1h", "24h", "7d", "30d"]
    assert 'data-range="7d" class="selected"' in html
    assert "The last 7 d, read from raw samples." in html  # no rollup built yet
    assert 'data-range="1h" class="selected"' in viewer.get(PAGE, {"range": "9y"}).content.decode()


def test_it_charts_the_engines_tokens_per_second_with_its_module(viewer, load):
    from django.templatetags.static import static

    engine = Engine.objects.get()
    html = viewer.get(PAGE).content.decode()
    lines = re.search(r'id="chart-efficiency-tokens"[^>]*data-lines="([^"]+)"', html).group(1)
    assert f'&quot;entity&quot;: &quot;{engine.id}&quot;' in lines
    assert "engine.generation_tokens_per_s" in lines
    assert f'<script type="module" src="{static("web/efficiency.js")}">' in html


def test_without_tokens_there_is_no_chart(viewer):
    html = viewer.get(PAGE).content.decode()
    assert "chart-efficiency-tokens" not in html
    assert "No engine reported in this range." in html


def test_the_nav_and_the_engine_page_link_to_it(viewer, load):
    engine = Engine.objects.get()
    html = viewer.get(f"/engines/{engine.id}/").content.decode()
    assert f'href="{PAGE}#engine-{engine.id}"' in html
    assert f'<a href="{PAGE}">Efficiency</a>' in html
