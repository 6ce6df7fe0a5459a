"""A stalled engine, in a real browser: the fleet page's engine chip and the engine page's
header say "stalled" (screenshots in test-artifacts/browser/)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from controlplane.fleet.models import Engine
from tests.browser.helpers import shot
from tests.telemetry.rollup_data import insert_rows

pytestmark = pytest.mark.slow(seconds=5)


def test_a_stalled_engine_is_marked_stalled_on_the_fleet_and_engine_pages(page, browser_stack):
    browser_stack.agent("browser-busy-1").send()
    browser_stack.agent("browser-stall-1").send()  # its inventory: the host and its engine
    busy = Engine.objects.get(host__hostname="browser-busy-1")
    engine = Engine.objects.get(host__hostname="browser-stall-1")
    now = timezone.now()
    # 6 running and 2 waiting all along; tokens and finished requests stop 150 s ago
    insert_rows("engine", [
        {"engine_id": e.id, "ts": now - timedelta(seconds=age), "up": 1,
         "requests_running": 6.0, "requests_waiting": 2.0, "kv_cache_usage": 0.4,
         "generation_tokens_per_s": 0.0 if e == engine and age <= 150 else 450.0,
         "requests_finished_per_s": 0.0 if e == engine and age <= 150 else 2.0}
        for e in (busy, engine) for age in range(300, 0, -2)])

    page.goto(f"{browser_stack.base}/")
    page.wait_for_selector("body[data-ready='1']")
    chip = page.locator(f"#fleet-table .engine[data-engine-id='{engine.id}']")
    assert chip.locator(".badge.stalled").inner_text() == "stalled"
    assert page.locator(f"#fleet-table .engine[data-engine-id='{busy.id}'] .badge.stalled"
                        ).count() == 0
    shot(page, "fleet-stalled-engine")

    page.goto(f"{browser_stack.base}/engines/{engine.id}/")
    page.wait_for_selector("body[data-ready='1']")
    badge = page.locator("h1 .badge.stalled")
    assert badge.inner_text().startswith("stalled 2")  # "stalled 2 minutes"
    assert "no token generated" in badge.get_attribute("title")
    shot(page, "engine-stalled")
