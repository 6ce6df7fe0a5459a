"""The efficiency page in a real browser, after an agent posted a known load over HTTP."""

from __future__ import annotations

import time
import urllib.request

import orjson
import pytest

from controlplane.fleet.models import Engine
from controlplane.fleet.tokens import issue_agent_token
from tests.browser.helpers import shot
from tests.telemetry.efficiency_data import HOSTNAME, EngineLoad, Load, inventory, sample

pytestmark = pytest.mark.slow(seconds=5)


def post_over_http(base: str, load: Load) -> None:
    token, _ = issue_agent_token(HOSTNAME)
    body = {"protocol": 1, "agent": {"version": "test", "boot_id": load.boot_id, "seq": 1},
            "host": inventory(load), "samples": [sample(load, i) for i in range(load.seconds)]}
    request = urllib.request.Request(
        f"{base}/api/v1/ingest", data=orjson.dumps(body), method="POST",
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=30) as reply:
        assert reply.status == 200


def test_the_page_shows_models_engines_and_notes(page, browser_stack):
    engines = [EngineLoad("vllm:8000/0", [0, 1], 600.0), EngineLoad("vllm:8001/0", [2, 3], 300.0)]
    load = Load(float(int(time.time()) - 720), 600, engines, gpus=4)
    post_over_http(browser_stack.base, load)
    engine = Engine.objects.get(name="vllm:8000/0")
    page.goto(f"{browser_stack.base}/engines/{engine.id}/")
    page.click("#efficiency-link")
    page.wait_for_selector("body[data-ready='1']")
    assert page.get_attribute("#chart-efficiency-tokens .plot", "data-state") == "drawn"
    assert page.url.endswith(f"/efficiency/#engine-{engine.id}")
    row = page.locator(f"#engine-{engine.id}")
    assert row.locator("[data-field=tokens_per_s]").inner_text() == "600.0"
    assert row.locator("[data-field=energy_source]").inner_text() in ("energy counter",
                                                                      "power × time")
    assert "95 %" in row.locator("[data-field=ttft_attainment]").inner_text()
    assert page.locator("#efficiency-models tbody tr").count() == 1
    assert "No GPU-hour price is configured" in page.inner_text("#note-price")
    shot(page, "efficiency")
