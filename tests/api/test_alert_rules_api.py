"""/api/v1/alert-rules/: everyone reads, staff writes; the model's validation, errors by field;
a preview that stores nothing."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from controlplane.alerts.models import Alert, AlertRule
from tests.api.alerting import make_rule
from tests.support.alert_data import make_node, samples

URL = "/api/v1/alert-rules/"
HOT = {"name": "GPU hot", "severity": "critical", "metric": "gpu.temp_c", "aggregation": "max",
       "window_s": 30, "op": ">", "threshold": 85, "for_s": 60,
       "summary": "{host} GPU {gpu_index}: {value:.0f} °C"}


def test_it_refuses_anonymous_clients_and_agent_tokens(anonymous, agent_client):
    for client in (anonymous, agent_client):
        assert client.get(URL).status_code == 401
        assert client.post(URL, HOT, format="json").status_code == 401
    assert not AlertRule.objects.filter(name="GPU hot").exists()


def test_a_user_who_may_not_edit_rules_reads_them_but_cannot_create_change_or_delete_one(api):
    rule = make_rule("Existing")
    assert api.get(URL).status_code == 200
    assert api.get(f"{URL}{rule.id}/").json()["name"] == "Existing"
    response = api.post(URL, HOT, format="json")
    assert response.status_code == 403
    assert "alerts.change_alertrule" in response.json()["detail"]
    assert api.patch(f"{URL}{rule.id}/", {"threshold": 1}, format="json").status_code == 403
    assert api.delete(f"{URL}{rule.id}/").status_code == 403
    assert not AlertRule.objects.filter(name="GPU hot").exists()
    assert AlertRule.objects.get(id=rule.id).threshold == 85


def test_staff_creates_a_rule_and_the_read_only_fields_are_ignored(staff):
    response = staff.post(URL, {**HOT, "pack_key": "sneaky", "last_evaluated_at": "2020-01-01"},
                          format="json")
    assert response.status_code == 201, response.json()
    body = response.json()
    rule = AlertRule.objects.get(id=body["id"])
    assert (rule.metric, rule.threshold, rule.for_s, rule.pack_key) == ("gpu.temp_c", 85, 60, "")
    assert rule.last_evaluated_at is None and body["pack_key"] == ""
    assert body["host_ids"] == [] and body["params"] == {}


@pytest.mark.parametrize(("change", "field"), [
    ({"metric": "gpu.no_such_metric"}, "metric"),
    ({"aggregation": "quantile", "quantile": 0.99}, "aggregation"),
    ({"summary": "{host} is {hotness}"}, "summary"),
    ({"window_s": 0}, "window_s"),
    ({"window_s": 7200}, "window_s"),
    ({"kind": "no_such_kind"}, "kind"),
    ({"op": "~"}, "op"),
    ({"host_ids": ["gpu-node-1"]}, "host_ids"),
    ({"threshold": "hot"}, "threshold"),
    ({"threshold": "nan"}, "threshold"),
    ({"aggregation": "quantile", "quantile": "inf"}, "quantile"),
    ({"params": "waiting_above=0"}, "params"),
    ({"label_matchers": [{"label": "rack", "value": "a"}]}, "label_matchers"),
    ({"label_matchers": [{"label": "model", "op": "=~", "value": "(?=llama)"}]},
     "label_matchers"),
    ({"label_matchers": [{"label": "model", "op": "=~", "value": "l" * 1001}]},
     "label_matchers"),
    ({"hostname_glob": "*" * 254}, "hostname_glob"),
    ({"summary": "{value:>20000000}"}, "summary"),
    ({"summary": "{host.__class__}"}, "summary"),
])
def test_a_rule_the_model_refuses_is_a_400_naming_the_field_and_nothing_is_stored(
        staff, change, field):
    response = staff.post(URL, {**HOT, **change}, format="json")
    assert response.status_code == 400
    assert field in response.json(), response.json()
    assert not AlertRule.objects.filter(name="GPU hot").exists()


def test_a_second_rule_with_a_taken_name_is_a_400_naming_the_name(staff):
    make_rule("GPU hot")
    response = staff.post(URL, HOT, format="json")
    assert response.status_code == 400 and "name" in response.json()


def test_an_update_is_validated_like_a_create_and_sets_updated_at(staff):
    rule = make_rule()
    before = rule.updated_at
    response = staff.patch(f"{URL}{rule.id}/", {"threshold": 90, "enabled": False},
                           format="json")
    assert response.status_code == 200, response.json()
    rule.refresh_from_db()
    assert (rule.threshold, rule.enabled) == (90, False) and rule.updated_at > before

    refused = staff.patch(f"{URL}{rule.id}/", {"metric": "gpu.nope"}, format="json")
    assert refused.status_code == 400 and "metric" in refused.json()
    rule.refresh_from_db()
    assert rule.metric == "gpu.temp_c" and rule.updated_at < timezone.now()


def test_staff_deletes_a_rule(staff):
    rule = make_rule()
    assert staff.delete(f"{URL}{rule.id}/").status_code == 204
    assert not AlertRule.objects.filter(id=rule.id).exists()


def test_a_preview_lists_the_hits_and_stores_nothing(empty_samples, staff):
    now = timezone.now()
    node = make_node(last_seen=now)
    for gpu, temp in zip(node.gpus, [91.0, 60.0], strict=True):
        samples("gpu", {"gpu_id": gpu.id}, lambda ts, t=temp: {"temp_c": t},
                now - timedelta(seconds=60), now)
    rules_before = AlertRule.objects.count()

    response = staff.post(f"{URL}preview/", HOT, format="json")
    assert response.status_code == 200, response.json()
    body = response.json()
    assert (body["count"], body["fires_after_s"]) == (1, 60)
    [hit] = body["hits"]
    assert hit["target"] == f"gpu:{node.gpus[0].id}" and hit["gpu_id"] == node.gpus[0].id
    assert (hit["host"], hit["host_id"], hit["value"]) == ("gpu-node-1", node.host.id, 91.0)
    assert hit["summary"] == "gpu-node-1 GPU 0: 91 °C"
    assert AlertRule.objects.count() == rules_before and not Alert.objects.exists()


def test_a_preview_needs_no_name_and_may_reuse_a_saved_rules_name(staff):
    make_rule("GPU hot")
    for body in ({**HOT}, {k: v for k, v in HOT.items() if k != "name"}):
        response = staff.post(f"{URL}preview/", body, format="json")
        assert response.status_code == 200, response.json()
        assert response.json()["count"] == 0
    assert AlertRule.objects.filter(name="GPU hot").count() == 1


def test_a_preview_of_a_bad_rule_is_a_400_naming_the_field(staff):
    response = staff.post(f"{URL}preview/", {**HOT, "metric": "gpu.nope"}, format="json")
    assert response.status_code == 400 and "metric" in response.json()


def test_only_those_who_may_edit_rules_preview(api, alice):
    # A preview runs the draft's queries over the fleet: not for any user.
    assert not alice.has_perm("alerts.change_alertrule")
    response = api.post(f"{URL}preview/", HOT, format="json")
    assert response.status_code == 403
    assert "alerts.change_alertrule" in response.json()["detail"]


@pytest.mark.parametrize("summary", ["{value:>20000000}", "{value:>3000000000}",
                                     "{value:.100000f}"])
def test_a_preview_with_a_huge_format_width_is_a_400_naming_the_summary(staff, summary):
    # Unbounded, "{value:>20000000}" answered 20 MB per target; ">3000000000" a MemoryError.
    response = staff.post(f"{URL}preview/", {**HOT, "summary": summary}, format="json")
    assert response.status_code == 400 and "too wide" in response.json()["summary"][0]


def test_a_preview_past_the_query_timeout_is_a_503_that_says_so(staff, settings, monkeypatch):
    from django.db import connection

    from controlplane.alerts import preview as preview_module

    def slow(rule, now):
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_sleep(5)")

    settings.PITWALL = {**settings.PITWALL, "QUERY_TIMEOUT_S": 0.05}
    monkeypatch.setattr(preview_module, "_own_slices", slow)
    response = staff.post(f"{URL}preview/", HOT, format="json")
    assert response.status_code == 503
    assert "the preview took longer than 0.05 s" in response.json()["detail"]


def test_a_rule_that_failed_its_last_cycle_says_why(api):
    rule = make_rule("Failing")
    at = timezone.now()
    AlertRule.objects.filter(id=rule.id).update(last_error="division by zero", last_error_at=at)
    body = api.get(f"{URL}{rule.id}/").json()
    assert body["last_error"] == "division by zero" and body["last_error_at"]
    assert api.get(f"{URL}{make_rule('Fine').id}/").json()["last_error"] == ""


def test_the_list_is_paginated(api):
    make_rule("A rule")
    body = api.get(URL, {"limit": 1}).json()
    assert body["count"] >= 1 and len(body["results"]) == 1
