"""Reports on engines Pitwall does not run, over their life, on telemetry rolled up by the
real builder: a pass makes one per engine and diagnosis and refreshes it; accept and revert
are refused with the reason; a dismissed one stays away for the same evidence; it is cleared
when the engine goes or a deployment takes its port (whose own suggestion then follows)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import IntegrityError, transaction
from django.utils import timezone

from controlplane.fleet.models import Engine
from controlplane.tuning import service
from controlplane.tuning.models import State, Suggestion
from tests.tuning.factories import deployment, gpus, host
from tests.tuning.telemetry import roll_up, steady, target, watched, write

PRESSURE = {"kv_cache_usage": 0.97, "preemptions_per_s": 0.8, "requests_running": 120}
REPORTED = {"gpu_memory_utilization": "0.9", "num_gpu_blocks_override": "None"}


@pytest.fixture
def pressed(empty_samples):
    """A server the agent watches at port 9000, under KV pressure for the last ten minutes."""
    h = host()
    gpus(h)
    t = watched(h, config=REPORTED)
    write(t, service.minute(timezone.now()) - timedelta(minutes=10), 10, engine=PRESSURE)
    roll_up()
    return t


def test_a_pass_reports_kv_pressure_on_an_engine_pitwall_does_not_run(pressed):
    first = service.tuning_pass()
    [s] = Suggestion.objects.all()
    assert first.created == [s.id] and (first.deployments, first.engines) == (0, 1)
    assert (s.engine_id, s.deployment_id, s.revision) == (pressed.engine.id, None, None)
    assert s.changes == [{"field": "args.gpu_memory_utilization", "current": 0.9,
                          "proposed": 0.95}]
    assert s.command == "--gpu-memory-utilization 0.95" and s.report_only
    assert service.tuning_pass().refreshed == 1 and Suggestion.objects.count() == 1


def test_one_open_report_per_engine_and_kind(pressed):
    service.tuning_pass()
    s = Suggestion.objects.get()
    with pytest.raises(IntegrityError), transaction.atomic():
        Suggestion.objects.create(engine=s.engine, kind=s.kind, reasoning="r", expected="e",
                                  confidence=0.5, severity=1.0)


def test_a_suggestion_names_a_deployment_or_an_engine(pressed):
    with pytest.raises(IntegrityError), transaction.atomic():
        Suggestion.objects.create(kind="kv_pressure", reasoning="r", expected="e",
                                  confidence=0.5, severity=1.0)


def test_accept_and_revert_are_refused_with_the_reason(pressed):
    service.tuning_pass()
    s = Suggestion.objects.get()
    for action in (service.accept, service.revert):
        with pytest.raises(service.Refused, match="Pitwall does not run this engine"):
            action(s)
    assert Suggestion.objects.get().state == State.OPEN


def test_a_dismissed_report_stays_away_until_clearly_worse(pressed):
    service.tuning_pass()
    service.dismiss(Suggestion.objects.get())
    assert service.tuning_pass().created == []
    Suggestion.objects.update(severity=0.3)  # the same 0.8 preemptions/s is now 2.7x worse
    assert len(service.tuning_pass().created) == 1


def test_a_report_on_an_engine_no_longer_reported_is_cleared(pressed):
    service.tuning_pass()
    Engine.objects.filter(pk=pressed.engine.pk).update(present=False)
    assert service.tuning_pass().cleared == 1
    assert Suggestion.objects.get().state == State.CLEARED


def test_an_engine_seen_for_less_than_the_window_is_not_judged(pressed):
    Engine.objects.filter(pk=pressed.engine.pk).update(first_seen=timezone.now())
    assert service.tuning_pass().engines == 0 and not Suggestion.objects.exists()


def test_a_deployment_taking_the_port_replaces_the_report_with_its_own_suggestion(pressed):
    service.tuning_pass()
    d = steady(deployment(pressed.engine.host, port=9000))
    assert target(d).engine == pressed.engine  # the agent now runs the server it watched
    result = service.tuning_pass()
    assert (result.diagnosed, result.engines) == (1, 0)
    report, own = Suggestion.objects.order_by("id")
    assert report.state == State.CLEARED and report.deployment_id is None
    assert own.state == State.OPEN and own.deployment_id == d.id
    assert own.engine == pressed.engine and own.command == "" and not own.report_only
