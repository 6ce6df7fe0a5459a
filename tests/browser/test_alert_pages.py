"""The alert pages in a real browser: the rule editor's preview of what would fire now, and a
firing alert on the alerts page leading to its own page and to a silence prefilled from it."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model

from controlplane.accounts.roles import assign_role
from controlplane.alerts.evaluate import evaluate
from controlplane.alerts.models import Alert, AlertRule
from controlplane.fleet.models import Gpu, Host
from tests.browser.helpers import shot

# A browser and real processes: `make test` runs them, `make test-fast` leaves them out;
# seconds: about what each test takes (slow tests start first, the longest first).
pytestmark = pytest.mark.slow(seconds=3)


def busy_and_idle_hosts(browser_stack) -> tuple[Host, Host]:
    """Two hosts that reported just now: one with its GPUs at 97 %, one at 20 %."""
    busy, idle = browser_stack.agent("browser-busy-1"), browser_stack.agent("browser-idle-1")
    for _ in range(2):
        busy.send(util_pct=97.0)
        idle.send(util_pct=20.0)
    return Host.objects.get(hostname="browser-busy-1"), Host.objects.get(hostname="browser-idle-1")


def test_the_rule_editor_previews_what_would_fire_now(page, browser_stack):
    assign_role(get_user_model().objects.get(username=browser_stack.username), "admin")
    busy, _ = busy_and_idle_hosts(browser_stack)
    rules_before = AlertRule.objects.count()

    page.goto(f"{browser_stack.base}/alerts/rules/new/")
    page.fill("#id_name", "GPU saturated")
    page.select_option("#id_metric", "gpu.util_pct")
    page.select_option("#id_aggregation", "max")
    page.fill("#id_window_s", "120")
    page.select_option("#id_op", ">")
    page.fill("#id_threshold", "90")
    page.fill("#id_for_s", "300")
    page.fill("#id_summary", "{host} GPU {gpu_index} at {value:.0f}%")
    page.click("#preview-button")
    page.wait_for_selector("#preview-table")

    rows = page.locator("#preview-table tbody tr[data-target]")
    assert rows.count() == 2
    assert {rows.nth(i).get_attribute("data-target") for i in range(2)} == {
        f"gpu:{g.id}" for g in Gpu.objects.filter(host=busy)}
    table = page.inner_text("#preview-table")
    assert "browser-busy-1 GPU 0 at 97%" in table and "browser-idle-1" not in table
    assert "fires after 300 s if it keeps holding" in page.inner_text("#preview")
    assert page.input_value("#id_name") == "GPU saturated"
    shot(page, "alert-rule-preview")
    assert AlertRule.objects.count() == rules_before and not Alert.objects.exists()


def test_a_firing_alert_is_listed_and_links_to_its_page(page, browser_stack):
    busy, _ = busy_and_idle_hosts(browser_stack)
    rule = AlertRule(name="GPU saturated", metric="gpu.util_pct", aggregation="max",
                     window_s=120, op=">", threshold=90, severity="critical",
                     summary="{host} GPU {gpu_index} at {value:.0f}%")
    rule.full_clean()
    rule.save()
    evaluate(rule_ids=[rule.id])
    alert = Alert.objects.filter(rule=rule, state="firing").order_by("target").first()
    assert alert is not None

    page.goto(f"{browser_stack.base}/alerts/")
    row = page.locator(f"#alert-table tr[data-alert-id='{alert.id}']")
    assert row.get_attribute("data-state") == "firing"
    assert "browser-busy-1 GPU" in row.inner_text()
    assert page.inner_text("#nav-alerts").strip().endswith("2")
    shot(page, "alerts-list")

    row.locator("a.rule-name").click()
    page.wait_for_url(f"{browser_stack.base}/alerts/{alert.id}/")
    assert page.inner_text("#alert-state") == "firing"
    onset = page.locator("#onset a[data-onset-kind='host']")
    assert f"/hosts/{busy.id}/?from=" in onset.get_attribute("href")
    shot(page, "alert-detail")

    page.click("#silence-this")
    page.wait_for_selector("#silence-form")
    assert "host=browser-busy-1" in page.input_value("#id_matchers")
    page.fill("#id_comment", "load test in progress")
    page.click("#create-silence")
    page.wait_for_selector("#messages")
    covered = page.locator(f"#active-silences [data-alert-id='{alert.id}']")
    assert covered.count() == 1
    shot(page, "alert-silences")
