"""``GET /metrics``: who may read it, what it holds, and that promtool accepts it."""

from __future__ import annotations

from datetime import timedelta

from django.utils import timezone
from prometheus_client.parser import text_string_to_metric_families
from rest_framework.test import APIClient

from controlplane.fleet.tokens import issue_api_token
from controlplane.telemetry.models import RollupWatermark
from tests.support.alert_data import rule
from tests.support.clients import bearer_client
from tests.support.prometheus import promtool_check
from tests.support.roles import user_with_role

ELSEWHERE = {"REMOTE_ADDR": "10.1.2.3"}


def families(text: str) -> dict[str, list]:
    return {f.name: f.samples for f in text_string_to_metric_families(text)}


def test_a_scraper_on_loopback_needs_no_token(db):
    response = APIClient().get("/metrics")  # the test client comes from 127.0.0.1
    assert response.status_code == 200
    assert response["Content-Type"] == "text/plain; version=0.0.4; charset=utf-8"
    names = families(response.content.decode())
    assert {"pitwall_ingest_requests", "pitwall_ingest_flush_seconds",
            "pitwall_alert_cycle_seconds", "pitwall_notifications_pending",
            "pitwall_rollup_lag_seconds", "pitwall_live_clients"} <= set(names)


def test_elsewhere_it_needs_a_token_with_read_rights(db):
    assert APIClient().get("/metrics", **ELSEWHERE).status_code == 401
    user_with_role("nobody", None)
    no_role = bearer_client(issue_api_token("nobody", name="scraper"))
    assert no_role.get("/metrics", **ELSEWHERE).status_code == 403
    user_with_role("prometheus", "viewer")
    reader = bearer_client(issue_api_token("prometheus", name="scraper", scope="read"))
    assert reader.get("/metrics", **ELSEWHERE).status_code == 200


def test_a_proxy_on_loopback_does_not_open_it(db):
    forwarded = APIClient().get("/metrics", HTTP_X_FORWARDED_FOR="203.0.113.9")
    assert forwarded.status_code == 401


def test_the_setting_opens_it_to_everyone(db, settings):
    settings.PITWALL = {**settings.PITWALL, "METRICS_OPEN": True}
    assert APIClient().get("/metrics", **ELSEWHERE).status_code == 200


def test_rollup_lag_and_failing_rules_are_read_when_scraped(db):
    RollupWatermark.objects.create(resolution="1m", upto=timezone.now() - timedelta(seconds=95))
    broken = rule(name="broken", metric="gpu.util_pct", op=">", threshold=90)
    broken.__class__.objects.filter(pk=broken.pk).update(last_error="division by zero")
    rule(name="fine", metric="gpu.util_pct", op=">", threshold=90)
    names = families(APIClient().get("/metrics").content.decode())
    lag = {s.labels["resolution"]: s.value for s in names["pitwall_rollup_lag_seconds"]}
    assert 95 <= lag["1m"] < 95 + 60
    assert [s.value for s in names["pitwall_alert_rules_failing"]] == [1]


def test_promtool_finds_no_error_in_it(db):
    assert promtool_check(APIClient().get("/metrics").content) == (0, set())


def test_services_replicas_and_scaling_decisions_are_families(db):
    from controlplane.fleet.models import ScaleDecision
    from tests.fleet.controller_support import hosts, make_service, router_host

    hosts(2)
    service = make_service(router_host(), replicas=2, scaling_mode="auto", min_replicas=1,
                           max_replicas=4)
    for state in ("done", "done", "held"):
        ScaleDecision.objects.create(service=service, mode="auto", direction="out",
                                     replicas_before=1, replicas_after=2, reason="queue",
                                     state=state)
    names = families(APIClient().get("/metrics").content.decode())
    desired = {(s.labels["service"], s.labels["scaling_mode"]): s.value
               for s in names["pitwall_service_replicas_desired"]}
    assert desired == {("llama", "auto"): 2}
    assert [s.value for s in names["pitwall_service_replicas_serving"]] == [0]  # none ready
    assert {s.labels["bound"]: s.value for s in names["pitwall_service_replicas_limit"]} == {
        "min": 1, "max": 4}
    counts = {s.labels["state"]: s.value for s in names["pitwall_service_scale_decisions"]
              if s.name.endswith("_total")}
    assert counts == {"done": 2, "held": 1}
