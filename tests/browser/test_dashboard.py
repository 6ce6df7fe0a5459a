"""An operator's view, in a real browser: live values, history from rollups, zoom, and Redis
going away and coming back."""

from __future__ import annotations

import re
import time

import pytest
from django.db import connection

from controlplane.fleet.models import Gpu, Host
from controlplane.telemetry import partitions
from controlplane.telemetry.schema import TABLES
from tests.browser.helpers import ONLINE_WINDOW_S, settle, shot
from tests.support.polling import wait_until

# A browser and real processes: `make test` runs them, `make test-fast` leaves them out;
# seconds: about what each test takes (slow tests start first, the longest first).
pytestmark = pytest.mark.slow(seconds=5)

WEEK = 7 * 86400


def gpu_util_cell(tab, gpu_id: int):
    return tab.locator(f"#fleet-table [data-gpu-id='{gpu_id}'] [data-field='util_pct']")


def test_an_operator_sees_a_value_the_agent_pushed_without_reloading(page, browser_stack):
    agent = browser_stack.agent("browser-host-1")
    agent.send(util_pct=11.0)
    page.reload()
    page.wait_for_selector("body[data-ready='1']")
    gpu = Gpu.objects.get(host__hostname="browser-host-1", index=0)
    assert "11" in gpu_util_cell(page, gpu.id).inner_text()
    wait_until(lambda: page.get_attribute("#live-status", "data-state") == "live", 30,
               lambda: "the page never went live")
    shot(page, "fleet-before-push")

    agent.send(util_pct=73.0)
    wait_until(lambda: "73" in gpu_util_cell(page, gpu.id).inner_text(), 30,
               lambda: f"the pushed value never showed: {gpu_util_cell(page, gpu.id).inner_text()}")
    row = page.locator(f"#fleet-table tr[data-host-id='{gpu.host_id}']")
    assert row.get_attribute("data-state") == "online"
    assert page.evaluate("window.pitwallLiveLatencies.length") > 0
    shot(page, "fleet-after-push")


def test_a_host_that_stops_reporting_turns_offline_without_a_reload(page, browser_stack):
    agent = browser_stack.agent("browser-host-5")
    agent.send(util_pct=30.0)
    host = Host.objects.get(hostname="browser-host-5")
    page.reload()
    page.wait_for_selector("body[data-ready='1']")
    row = page.locator(f"#fleet-table tr[data-host-id='{host.id}']")
    started = time.monotonic()
    agent.send(util_pct=31.0)  # the last report
    wait_until(lambda: row.get_attribute("data-state") == "offline", 60,
               lambda: "the silent host still shows online")
    # Offline only once the window has passed since that report, not before.
    assert time.monotonic() - started >= ONLINE_WINDOW_S - 1
    assert page.locator("#fleet-summary [data-count='online']").inner_text() == "0"
    shot(page, "fleet-host-offline")


def load_week_of_history(host: Host) -> None:
    """One raw row a minute for a week for each GPU of the host, then the rollups."""
    from controlplane.telemetry import rollups

    end = int(time.time())
    start = end - WEEK
    table = TABLES["gpu"]
    with connection.cursor() as cursor:
        partitions.ensure(cursor, partitions.days_around(partitions.day_of(end), 8, 1))
        for gpu in host.gpus.all():
            cursor.execute(
                f"INSERT INTO {table.name} (gpu_id, ts, util_pct, mem_used_bytes, "
                "mem_total_bytes, temp_c, power_w) "
                "SELECT %s, to_timestamp(s), (50 + 40 * sin(s / 20000.0))::float4, "
                "(60e9 + 1e9 * sin(s / 7200.0))::int8, 85899345920, 60, 300 "
                "FROM generate_series(%s, %s, 60) AS s", [gpu.id, start, end - 120])
    rollups.catch_up()


class SeriesReplies:
    """The series API replies a tab receives from now on (read after the fact: a response's
    body cannot be awaited inside Playwright's event callback)."""

    def __init__(self, tab) -> None:
        self.responses: list = []
        tab.on("response", self._keep)

    def _keep(self, response) -> None:
        if "/api/v1/series/" in response.url:
            self.responses.append(response)

    def bodies(self) -> list[dict]:
        return [r.json() for r in list(self.responses) if r.status == 200]


def series_replies(tab) -> SeriesReplies:
    return SeriesReplies(tab)


def test_a_host_page_switched_to_7_days_draws_its_charts_from_rollups(page, browser_stack):
    agent = browser_stack.agent("browser-host-2")
    agent.send(util_pct=40.0)
    host = Host.objects.get(hostname="browser-host-2")
    load_week_of_history(host)
    page.goto(f"{browser_stack.base}/hosts/{host.id}/")
    page.wait_for_selector("body[data-ready='1']")
    replies = series_replies(page)

    with page.expect_response(lambda r: "metric=gpu.util_pct&" in r.url, timeout=60_000):
        page.click("#range-picker a[data-range='7d']")
    page.wait_for_url(re.compile(r"range=7d"))
    page.wait_for_function("document.querySelectorAll(\".plot[data-state='loading']\").length == 0")
    gpu_replies = [r for r in replies.bodies() if r["metric"].startswith("gpu.")]
    assert {r["resolution"] for r in gpu_replies} <= {"1m", "1h"}
    util = next(r for r in gpu_replies if r["metric"] == "gpu.util_pct")
    assert sum(len(s["points"]) for s in util["series"]) > 100  # a week of points, not a dot
    drawn = page.locator(".plot[data-state='drawn']").count()
    assert drawn > 0
    assert page.locator("#range-picker").get_attribute("data-range") == "7d"
    shot(page, "host-7d-from-rollups")


def test_dragging_across_a_chart_zooms_into_a_custom_range_kept_in_the_url(page, browser_stack):
    agent = browser_stack.agent("browser-host-3")
    agent.send(util_pct=40.0)
    host = Host.objects.get(hostname="browser-host-3")
    load_week_of_history(host)
    page.goto(f"{browser_stack.base}/hosts/{host.id}/?range=7d")
    page.wait_for_selector("body[data-ready='1']")
    chart = page.locator("figure[data-metric='gpu.util_pct'] .u-over").first
    chart.scroll_into_view_if_needed()
    box = chart.bounding_box()
    replies = series_replies(page)

    y = box["y"] + box["height"] / 2
    with page.expect_response(lambda r: "metric=gpu.util_pct&" in r.url, timeout=60_000):
        page.mouse.move(box["x"] + box["width"] * 0.40, y)
        page.mouse.down()
        page.mouse.move(box["x"] + box["width"] * 0.50, y, steps=8)
        page.mouse.up()

    page.wait_for_url(re.compile(r"from=\d+.*to=\d+"))
    query = dict(re.findall(r"(from|to)=(\d+)", page.url))
    span = int(query["to"]) - int(query["from"])
    assert 0.05 * WEEK < span < 0.15 * WEEK  # a tenth of the week, as dragged
    assert page.locator("#range-picker").get_attribute("data-range") == "custom"
    zoomed = next(r for r in replies.bodies() if r["metric"] == "gpu.util_pct")
    assert abs(zoomed["end"] - zoomed["start"] - span) < 2
    shot(page, "host-zoomed")


def test_pages_and_history_work_without_redis_and_live_resumes_when_it_returns(page, browser_stack):
    agent = browser_stack.agent("browser-host-4")
    agent.send(util_pct=21.0)
    gpu = Gpu.objects.get(host__hostname="browser-host-4", index=0)
    page.reload()
    wait_until(lambda: page.get_attribute("#live-status", "data-state") == "live", 30,
               lambda: "the page never went live")

    browser_stack.redis.stop()
    wait_until(lambda: page.get_attribute("#live-status", "data-state") != "live", 60,
               lambda: "the indicator still says live with Redis gone")
    assert agent.send(util_pct=22.0)["accepted"] == 1  # ingest does not need Redis
    page.goto(f"{browser_stack.base}/gpus/{gpu.id}/?range=1h")  # pages and history still work
    page.wait_for_selector("body[data-ready='1']")
    assert page.locator(".plot[data-state='drawn']").count() > 0
    shot(page, "gpu-page-without-redis")

    page.goto(f"{browser_stack.base}/")
    page.wait_for_selector("body[data-ready='1']")
    browser_stack.redis.start()
    wait_until(lambda: page.get_attribute("#live-status", "data-state") == "live", 90,
               lambda: f"live never resumed: {page.get_attribute('#live-status', 'data-state')}")

    def pushed() -> bool:
        agent.send(util_pct=88.0)
        settle(0.5)
        return "88" in gpu_util_cell(page, gpu.id).inner_text()

    wait_until(pushed, 60, lambda: "values pushed after Redis returned never showed")
    shot(page, "fleet-live-again")
