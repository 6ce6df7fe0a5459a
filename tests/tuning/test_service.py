"""Suggestions over their life, on telemetry rolled up by the real builder: a pass makes and
refreshes them, clears them when the symptom goes, keeps dismissed ones away; accept changes
the deployment, follow-up marks it applied and verifies it; revert goes back."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from controlplane.fleet.models import Deployment
from controlplane.tuning import service
from controlplane.tuning.facts import Server, deployment_facts
from controlplane.tuning.models import State, Suggestion
from tests.tuning.factories import deployment, gpus, host
from tests.tuning.telemetry import roll_up, steady, target, write

PRESSURE = {"kv_cache_usage": 0.97, "preemptions_per_s": 0.8, "requests_running": 120}


@pytest.fixture
def steady_llama(empty_samples):
    h = host()
    gpus(h)
    return target(steady(deployment(h)))


def last_minutes(minutes: int = 10):
    end = service.minute(timezone.now())
    return end - timedelta(minutes=minutes)


def test_a_pass_finds_kv_pressure_in_rolled_up_telemetry_and_refreshes_it(steady_llama):
    write(steady_llama, last_minutes(), 10, engine=PRESSURE)
    roll_up()
    first = service.tuning_pass()
    [s] = Suggestion.objects.all()
    assert first.created == [s.id] and s.kind == "kv_pressure" and s.state == "open"
    # vLLM holds its 90 %: the other 10 % of the GPU is free for the KV cache.
    assert s.changes == [{"field": "args.gpu_memory_utilization", "current": 0.9,
                          "proposed": 0.95}]
    kv = next(e for e in s.evidence if e["metric"] == "engine.kv_cache_usage")
    assert kv["value"] == pytest.approx(0.97) and kv["entity_id"] == steady_llama.engine.id
    again = service.tuning_pass()
    assert again.refreshed == 1 and Suggestion.objects.count() == 1


def test_healthy_telemetry_makes_no_suggestion(steady_llama):
    write(steady_llama, last_minutes(), 10)
    roll_up()
    assert service.tuning_pass().created == [] and not Suggestion.objects.exists()


def test_a_suggestion_whose_symptom_went_away_is_cleared(steady_llama):
    # Rows are written in time order and rolled up once, as ingest and the builder see them.
    write(steady_llama, last_minutes(20), 10, engine=PRESSURE)
    write(steady_llama, last_minutes(), 10)
    roll_up()
    service.tuning_pass(timezone.now() - timedelta(minutes=10))
    assert service.tuning_pass().cleared == 1
    assert Suggestion.objects.get().state == State.CLEARED


def test_a_dismissed_suggestion_stays_away_until_the_evidence_is_clearly_worse(steady_llama):
    write(steady_llama, last_minutes(20), 20, engine=PRESSURE)
    roll_up()
    service.tuning_pass(timezone.now() - timedelta(minutes=10))
    service.dismiss(Suggestion.objects.get())
    assert service.tuning_pass().created == []
    # Twice the preemptions: worth another look.
    Suggestion.objects.update(severity=0.3)
    assert len(service.tuning_pass().created) == 1


def test_a_deployment_changed_within_the_window_is_not_judged(steady_llama):
    write(steady_llama, last_minutes(), 10, engine=PRESSURE)
    roll_up()
    Deployment.objects.filter(pk=steady_llama.deployment.pk).update(updated_at=timezone.now())
    result = service.tuning_pass()
    assert (result.deployments, result.diagnosed) == (1, 0)


def open_pressure(steady_llama) -> Suggestion:
    write(steady_llama, last_minutes(), 10, engine=PRESSURE)
    roll_up()
    service.tuning_pass()
    return Suggestion.objects.get()


def test_accepting_changes_the_desired_config_as_a_new_revision(steady_llama):
    s = service.accept(open_pressure(steady_llama))
    d = Deployment.objects.get(pk=steady_llama.deployment.pk)
    assert (s.state, s.revision, s.revision_after) == ("accepted", 1, 2)
    assert d.revision == 2 and d.args["gpu_memory_utilization"] == 0.95
    assert d.revisions.get(revision=2).reason == f"suggestion #{s.pk}: KV-cache pressure"


def test_a_suggestion_made_before_the_deployment_changed_is_not_accepted(steady_llama):
    s = open_pressure(steady_llama)
    d = Deployment.objects.get(pk=steady_llama.deployment.pk)
    d.args = {**d.args, "max_num_seqs": 100}
    from controlplane.fleet import deployments
    deployments.save(d)
    with pytest.raises(service.Refused, match="changed since"):
        service.accept(s)


def test_a_report_cannot_be_accepted(steady_llama):
    s = open_pressure(steady_llama)
    Suggestion.objects.filter(pk=s.pk).update(changes=[])
    with pytest.raises(service.Refused, match="report"):
        service.accept(s)


def test_follow_up_marks_it_applied_then_verifies_it_on_equal_windows(steady_llama, settings):
    settings.PITWALL = {**settings.PITWALL, "TUNING_VERIFY_WINDOW_S": 300,
                        "TUNING_SETTLE_S": 60}
    now = timezone.now()
    before_end = service.minute(now) - timedelta(minutes=12)
    write(steady_llama, before_end - timedelta(minutes=10), 10, engine=PRESSURE)
    write(steady_llama, before_end, 12)  # after the change: no preemptions, KV at 50 %
    roll_up()
    service.tuning_pass(before_end)
    s = service.accept(Suggestion.objects.get())
    Suggestion.objects.filter(pk=s.pk).update(decided_at=before_end)
    Deployment.objects.filter(pk=steady_llama.deployment.pk).update(
        state="ready", running_revision=2, state_since=before_end + timedelta(minutes=1))
    assert service.follow_up(now) == {"applied": 1, "verified": 1}
    s.refresh_from_db()
    assert s.state == State.IMPROVED
    v = s.verification
    assert v["target"] == "preemptions_per_s"
    assert v["before"]["preemptions_per_s"] == pytest.approx(0.8)
    assert v["after"]["preemptions_per_s"] == 0
    assert "preemptions_per_s 0.8 -> 0" in v["summary"]


def test_revert_goes_back_to_the_config_the_suggestion_was_made_against(steady_llama):
    s = service.accept(open_pressure(steady_llama))
    service.revert(s)
    d = Deployment.objects.get(pk=steady_llama.deployment.pk)
    assert d.revision == 3 and d.args["gpu_memory_utilization"] == 0.9
    assert Suggestion.objects.get(pk=s.pk).state == State.REVERTED
    with pytest.raises(service.Refused):
        service.revert(Suggestion.objects.get(pk=s.pk))


def as_the_pass_reads(d: Deployment):
    """The deployment's facts and its suggestions, as a pass reads them."""
    server = Server.of(d)
    facts = deployment_facts(d, last_minutes(), service.minute(timezone.now()))
    return facts, service._suggestions_of([server], {server.key: facts})[server.key]


def test_an_accept_landing_during_a_pass_is_not_overwritten_by_its_refresh(steady_llama):
    s = open_pressure(steady_llama)
    d = Deployment.objects.get(pk=steady_llama.deployment.pk)
    facts, read_by_the_pass = as_the_pass_reads(d)  # before the operator acts
    service.accept(s)
    finding = service.Finding("kv_pressure", "r", "e", 0.9, 0.8)
    service.record(facts, [finding], read_by_the_pass, service.PassResult(), timezone.now())
    s.refresh_from_db()
    assert s.state == State.ACCEPTED and s.reasoning != "r"


def test_no_new_suggestion_of_a_kind_whose_change_is_being_verified(steady_llama):
    s = service.accept(open_pressure(steady_llama))
    Suggestion.objects.filter(pk=s.pk).update(state=State.APPLIED)
    d = Deployment.objects.get(pk=steady_llama.deployment.pk)  # now at the accepted revision
    finding = service.Finding("kv_pressure", "r", "e", 0.9, 0.8)
    result = service.PassResult()
    facts, mine = as_the_pass_reads(d)
    service.record(facts, [finding], mine, result, timezone.now())
    assert result.created == [] and Suggestion.objects.count() == 1
