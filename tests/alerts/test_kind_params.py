"""The params of the named kinds are checked key by key, with errors that name the key; the
rule editor offers the kinds and refuses bad params without storing the rule."""

from __future__ import annotations

import pytest
from django.core.exceptions import ValidationError
from django.test import Client

from controlplane.alerts.models import AlertRule, RuleKind
from tests.support.roles import user_with_role

BURN = dict(kind=RuleKind.ERROR_BUDGET_BURN, window_s=3600, op=">", threshold=14.4)


def params_error(**fields) -> str:
    fields.setdefault("name", "r")
    with pytest.raises(ValidationError) as caught:
        AlertRule(**fields).full_clean()
    errors = caught.value.message_dict
    assert list(errors) == ["params"], errors
    return errors["params"][0]


@pytest.mark.parametrize(("params", "names"), [
    ({}, "params.objective must be one of 'ttft', 'itl'; got None"),
    ({"objective": "tft"}, "params.objective must be one of 'ttft', 'itl'; got 'tft'"),
    ({"objective": "ttft", "objective_ms": 0}, "params.objective_ms"),
    ({"objective": "ttft", "objective_ms": "2000"}, "params.objective_ms"),
    ({"objective": "ttft", "objective_ms": 10**9}, "params.objective_ms"),
    ({"objective": "ttft", "target": 1}, "params.target"),
    ({"objective": "ttft", "target": True}, "params.target"),
    ({"objective": "ttft", "short_window_s": 7200}, "params.short_window_s"),
    ({"objective": "ttft", "short_window_s": 30.5}, "params.short_window_s"),
    ({"objective": "ttft", "short_window": 300}, "unknown key(s) short_window"),
    ({"objective": "ttft", "min_observations": -1}, "params.min_observations"),
    ({"objective": "ttft", "min_observations": 1.5}, "params.min_observations"),
])
def test_a_burn_rule_with_bad_params_is_refused_naming_the_key(db, params, names):
    assert names in params_error(params=params, **BURN)


def test_attainment_takes_no_target_or_short_window(db):
    message = params_error(kind=RuleKind.OBJECTIVE_ATTAINMENT, window_s=300, op="<",
                           threshold=0.99, params={"objective": "itl", "target": 0.9})
    assert "unknown key(s) target" in message


def test_stall_and_lost_gpu_params(db):
    assert "known: none" in params_error(kind=RuleKind.ENGINE_STALLED, window_s=120,
                                         params={"waiting_above": 0})
    assert "params.removed_within_s" in params_error(kind=RuleKind.GPU_LOST, window_s=60,
                                                     params={"removed_within_s": -1})


def test_good_params_pass(db):
    for fields in (dict(params={"objective": "itl", "objective_ms": 50, "target": 0.995,
                                "short_window_s": 300}, **BURN),
                   dict(kind=RuleKind.OBJECTIVE_ATTAINMENT, window_s=300,
                        params={"objective": "ttft"}),
                   dict(kind=RuleKind.ENGINE_STALLED, window_s=120),
                   dict(kind=RuleKind.GPU_LOST, window_s=60, params={"removed_within_s": 0})):
        AlertRule(name="ok", **fields).full_clean()


@pytest.fixture
def lead(db) -> Client:
    client = Client()
    client.force_login(user_with_role("lead", "admin", password="x"))
    return client


def burn_form(**fields) -> dict:
    form = {"name": "TTFT burn", "enabled": "on", "kind": "error_budget_burn",
            "severity": "critical", "metric": "", "aggregation": "avg", "window_s": "3600",
            "op": ">", "threshold": "14.4", "for_s": "0", "keep_firing_for_s": "0",
            "params": '{"objective": "ttft", "short_window_s": 300}', "summary": "",
            "host_ids": "", "engine_ids": "", "hostname_glob": "", "description": ""}
    form.update(fields)
    return form


def test_the_rule_editor_offers_the_kinds_with_params_and_names_a_bad_param(lead):
    html = lead.get("/alerts/rules/new/").content.decode()
    for kind in ("engine_stalled", "gpu_lost", "objective_attainment", "error_budget_burn"):
        assert f'value="{kind}"' in html
    response = lead.post("/alerts/rules/new/", burn_form(params='{"objective": "e2e"}'))
    assert response.status_code == 200
    assert "params.objective must be one of" in response.content.decode()
    assert not AlertRule.objects.filter(name="TTFT burn").exists()
    response = lead.post("/alerts/rules/new/", burn_form())
    assert response.status_code == 302
    assert AlertRule.objects.get(name="TTFT burn").params["short_window_s"] == 300


def test_the_api_refuses_bad_params_with_a_400_naming_params(lead):
    body = {"name": "ITL burn", "kind": "error_budget_burn", "window_s": 3600, "op": ">",
            "threshold": 14.4, "params": {"objective": "itl", "short_window_s": 7200}}
    response = lead.post("/api/v1/alert-rules/", body, content_type="application/json")
    assert response.status_code == 400
    assert "params.short_window_s" in str(response.json()["params"])
    assert not AlertRule.objects.filter(name="ITL burn").exists()
    body["params"] = {"objective": "itl", "short_window_s": 300}
    response = lead.post("/api/v1/alert-rules/", body, content_type="application/json")
    assert response.status_code == 201, response.json()


def test_the_editor_previews_a_burn_rule_without_storing_it(lead):
    response = lead.post("/alerts/rules/new/", burn_form(preview="1"))
    assert response.status_code == 200
    assert 'id="preview-count"' in response.content.decode()
    assert not AlertRule.objects.filter(name="TTFT burn").exists()
