"""/api/v1/suggestions/: read by everyone signed in; accepted, dismissed, reverted by staff."""

from __future__ import annotations

import pytest
from django.utils import timezone

from controlplane.fleet import deployments
from controlplane.fleet.models import Deployment, Engine
from controlplane.tuning.models import Suggestion
from tests.api.deploying import llama

URL = "/api/v1/suggestions/"


@pytest.fixture
def suggestion(gpu_host) -> Suggestion:
    body = llama(gpu_host.host)
    d = Deployment(host=gpu_host.host, **{k: v for k, v in body.items()
                                          if k not in ("host", "reason")})
    deployments.save(d)
    now = timezone.now()
    return Suggestion.objects.create(
        deployment=d, kind="concurrency_cap", revision=d.revision, confidence=0.9, severity=12,
        changes=[{"field": "args.max_num_seqs", "current": 128, "proposed": 240}],
        reasoning="Requests queued while 128 ran.", expected="Shorter queue.",
        evidence=[{"metric": "engine.requests_waiting", "stat": "avg", "value": 12.0,
                   "threshold": "> 0", "entity": "host", "entity_id": gpu_host.host.id,
                   "start": (now - timezone.timedelta(minutes=10)).isoformat(),
                   "end": now.isoformat()}])


def test_everyone_signed_in_reads_suggestions_with_chart_links(api, suggestion):
    [row] = api.get(URL).json()["results"]
    assert row["kind_label"] == "Concurrency cap" and row["state"] == "open"
    assert row["changes"][0]["proposed"] == 240
    chart = row["evidence"][0]["chart"]
    assert chart.startswith(f"/hosts/{suggestion.deployment.host_id}/?from=")


def test_users_who_are_not_staff_cannot_accept(api, suggestion):
    assert api.post(f"{URL}{suggestion.pk}/accept/").status_code == 403
    assert Suggestion.objects.get(pk=suggestion.pk).state == "open"


def test_staff_accept_makes_a_new_revision_and_a_second_accept_conflicts(staff, suggestion):
    reply = staff.post(f"{URL}{suggestion.pk}/accept/")
    assert reply.status_code == 200, reply.json()
    assert reply.json()["state"] == "accepted" and reply.json()["decided_by"] == "carol"
    d = Deployment.objects.get(pk=suggestion.deployment_id)
    assert d.revision == 2 and d.args["max_num_seqs"] == 240
    again = staff.post(f"{URL}{suggestion.pk}/accept/")
    assert again.status_code == 409 and "accepted" in again.json()["detail"]


def test_staff_dismiss_and_an_open_suggestion_cannot_be_reverted(staff, suggestion):
    assert staff.post(f"{URL}{suggestion.pk}/revert/").status_code == 409
    reply = staff.post(f"{URL}{suggestion.pk}/dismiss/")
    assert reply.status_code == 200 and reply.json()["state"] == "dismissed"


def test_staff_revert_an_accepted_suggestion(staff, suggestion):
    staff.post(f"{URL}{suggestion.pk}/accept/")
    reply = staff.post(f"{URL}{suggestion.pk}/revert/")
    assert reply.status_code == 200 and reply.json()["state"] == "reverted"
    d = Deployment.objects.get(pk=suggestion.deployment_id)
    assert d.revision == 3 and d.args["max_num_seqs"] == 128


def test_anonymous_callers_are_refused(anonymous, suggestion):
    assert anonymous.get(URL).status_code in (401, 403)


@pytest.fixture
def report(gpu_host) -> Suggestion:
    """A report on an engine Pitwall does not run (no deployment at its port)."""
    engine = Engine.objects.create(host=gpu_host.host, name="vllm:9000/0",
                                   gpu_uuids=["GPU-h200-0"])
    now = timezone.now()
    return Suggestion.objects.create(
        engine=engine, kind="prefill_ttft", confidence=0.6, severity=3.0,
        changes=[{"field": "args.max_num_batched_tokens", "current": 8192,
                  "proposed": 12288}],
        command="--max-num-batched-tokens 12288", reasoning="TTFT p99 6 s.",
        expected="Lower TTFT p99.",
        evidence=[{"metric": "engine.ttft_seconds", "stat": "p99", "value": 6.0,
                   "threshold": "> 2 s", "entity": "engine", "entity_id": engine.id,
                   "start": (now - timezone.timedelta(minutes=10)).isoformat(),
                   "end": now.isoformat()}])


def test_a_report_on_an_engine_names_it_and_no_deployment(api, report, suggestion):
    rows = api.get(URL).json()["results"]
    assert {r["id"] for r in rows} == {report.id, suggestion.id}
    [row] = api.get(URL, {"engine": report.engine_id}).json()["results"]
    assert (row["engine"], row["engine_name"], row["deployment"], row["deployment_name"],
            row["host"], row["revision"]) == (report.engine_id, "vllm:9000/0", None, None,
                                              report.engine.host_id, None)
    assert row["report_only"] is True and row["command"] == "--max-num-batched-tokens 12288"
    assert row["evidence"][0]["chart"].startswith(f"/engines/{report.engine_id}/?from=")
    detail = api.get(f"{URL}{suggestion.pk}/").json()
    assert detail["report_only"] is False and detail["command"] == ""


def test_a_report_on_an_engine_cannot_be_accepted_or_reverted_but_is_dismissed(staff, report):
    for action in ("accept", "revert"):
        reply = staff.post(f"{URL}{report.pk}/{action}/")
        assert reply.status_code == 409
        assert "Pitwall does not run this engine" in reply.json()["detail"]
    assert Suggestion.objects.get(pk=report.pk).state == "open"
    reply = staff.post(f"{URL}{report.pk}/dismiss/")
    assert reply.status_code == 200 and reply.json()["state"] == "dismissed"


def test_users_who_are_not_staff_cannot_dismiss_a_report(api, report):
    assert api.post(f"{URL}{report.pk}/dismiss/").status_code == 403
