"""The autoscaler in the service controller, on a clock the test moves: the replicas' engine
rows in PostgreSQL are the evidence; the agents report what their supervisors do and the
router agent the workers its config names (tests/fleet/controller_support.py)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection

from controlplane.audit.models import AuditEntry
from controlplane.fleet import autoscaling
from controlplane.fleet.models import (
    Deployment,
    ScaleDecision,
    ScaleState,
    ScalingMode,
    Service,
)
from controlplane.fleet.scaling_policy import Direction
from controlplane.telemetry.schema import TABLES
from tests.fleet.controller_support import (
    Agents,
    Clock,
    engine,
    engine_rows,
    hosts,
    make_service,
    replicas,
    router_host,
    run,
)

pytestmark = [pytest.mark.slow(seconds=3), pytest.mark.django_db(transaction=True)]
BUSY = {"requests_waiting": 6.0, "requests_running": 8.0, "kv_cache_usage": 0.5,
        "requests_finished_per_s": 2.0}
IDLE = {"requests_waiting": 0.0, "requests_running": 0.1, "kv_cache_usage": 0.05,
        "requests_finished_per_s": 0.1}


def start(n: int, mode: str = ScalingMode.AUTO, **fields) -> tuple[Service, Agents, Clock]:
    hosts(3)
    router = router_host()
    fields = {"scaling_mode": mode, "min_replicas": 1, "max_replicas": 3, **fields}
    service = make_service(router, replicas=n, **fields)
    agents, clock = Agents(service, router), Clock()
    run(clock, agents, lambda: all(d.in_rotation for d in replicas(service)))
    return service, agents, clock


def load(service: Service, clock: Clock, minutes: int, **values: float) -> None:
    """The replicas' engine rows, every 5 s, over the minutes up to the clock and a minute on
    (after the rows a replica has already)."""
    for d in replicas(service):
        start = clock.now - timedelta(minutes=minutes)
        with connection.cursor() as cursor:
            cursor.execute(f"SELECT max(ts) FROM {TABLES['engine'].name} WHERE engine_id = %s",
                           [engine(d).pk])
            newest = cursor.fetchone()[0]
        if newest is not None:
            start = max(start, newest + timedelta(seconds=5))
        engine_rows(d, start, clock.now + timedelta(minutes=1), step_s=5, **values)


def decisions(service: Service) -> list[ScaleDecision]:
    return list(ScaleDecision.objects.filter(service=service).order_by("at", "id"))


def test_a_sustained_queue_adds_a_replica_that_serves_and_the_decision_says_how_long(
        empty_samples):
    service, agents, clock = start(2)
    load(service, clock, 4, **BUSY)
    run(clock, agents, lambda: ScaleDecision.objects.filter(service=service).exists())
    [d] = decisions(service)
    assert (d.mode, d.direction, d.replicas_before, d.replicas_after, d.state) == (
        "auto", Direction.OUT, 2, 3, ScaleState.IN_FLIGHT)
    assert {f["name"]: f["value"] for f in d.evidence}["waiting_per_replica"] == 6.0
    service.refresh_from_db()
    assert service.replicas == 3 and d.deployment.replica == 2
    assert d.placement["placed"] == 1 and d.placement["slots"][0]["reason"]

    run(clock, agents, lambda: ScaleDecision.objects.get(pk=d.pk).state == ScaleState.DONE)
    d.refresh_from_db()
    assert d.ready_s is not None and d.ready_s > 0
    assert Deployment.objects.get(pk=d.deployment_id).in_rotation
    assert AuditEntry.objects.filter(target_type="scale decision",
                                     target_id=str(d.pk)).exists()
    assert AuditEntry.objects.filter(target_type="service", action="changed",
                                     changes__has_key="replicas").exists()


def test_a_queue_at_kv_pressure_is_recorded_as_the_configs_and_adds_nothing(empty_samples):
    service, agents, clock = start(2)
    load(service, clock, 4, **{**BUSY, "kv_cache_usage": 0.97})
    run(clock, agents, lambda: ScaleDecision.objects.filter(service=service).exists())
    [d] = decisions(service)
    assert (d.direction, d.state, d.replicas_after) == (Direction.CONFIG, ScaleState.HELD, 2)
    assert "KV pressure" in d.reason
    run(clock, agents, lambda: clock.now >= d.at + timedelta(minutes=3))
    assert len(decisions(service)) == 1  # said once, not every minute
    service.refresh_from_db()
    assert service.replicas == 2


def test_idle_takes_a_replica_out_of_the_router_before_removing_it(empty_samples):
    service, agents, clock = start(3)
    load(service, clock, 11, **IDLE)
    seen: list[tuple[int, bool, str]] = []

    def watch() -> None:
        d = ScaleDecision.objects.filter(service=service).first()
        if d is not None and d.deployment_id is not None:
            row = Deployment.objects.filter(pk=d.deployment_id).first()
            if row is not None:
                seen.append((row.replica, row.in_rotation, row.rotation_note))

    run(clock, agents, lambda: ScaleDecision.objects.filter(
        service=service, state=ScaleState.DONE).exists(), each=watch)
    [d] = decisions(service)
    assert (d.direction, d.replicas_before, d.replicas_after) == (Direction.IN, 3, 2)
    assert seen and seen[0][0] == 2
    assert any(not rotating and note.startswith("scaling in") for _, rotating, note in seen)
    assert [r.replica for r in replicas(service)] == [0, 1]
    service.refresh_from_db()
    assert service.replicas == 2


def test_recommend_mode_records_the_decision_and_changes_nothing(empty_samples):
    service, agents, clock = start(2, mode=ScalingMode.RECOMMEND)
    load(service, clock, 6, **BUSY)
    begun = clock.now
    run(clock, agents, lambda: clock.now >= begun + timedelta(minutes=3))
    [d] = decisions(service)
    assert (d.mode, d.state, d.direction, d.replicas_after) == (
        "recommend", ScaleState.RECOMMENDED, Direction.OUT, 3)
    assert len(replicas(service)) == 2


def test_the_scale_out_cool_down_holds_the_next_step(empty_samples):
    service, agents, clock = start(1, max_replicas=3, scaling={"out_cooldown_s": 600})
    load(service, clock, 12, **BUSY)
    run(clock, agents, lambda: ScaleDecision.objects.filter(
        service=service, state=ScaleState.DONE).exists())
    load(service, clock, 3, **BUSY)  # the new replica queues too
    run(clock, agents, lambda: ScaleDecision.objects.filter(
        service=service, state=ScaleState.HELD).exists())
    taken, held = decisions(service)
    assert taken.direction == Direction.OUT and held.direction == Direction.HOLD
    assert "cool-down 600 s" in held.reason
    assert len(replicas(service)) == 2


def test_the_limits_and_thresholds_are_checked(db):
    hosts(1)
    policy = autoscaling.policy_of(Service(min_replicas=2, max_replicas=5,
                                           scaling={"ttft_burn": 4.0, "unknown": 1}))
    assert (policy.min_replicas, policy.max_replicas, policy.ttft_burn) == (2, 5, 4.0)


def test_a_step_in_flight_is_finished_when_scaling_is_switched_off(empty_samples):
    """Turned off mid scale-in, the replica already out of the rotation is still removed,
    rather than held out of the router for good."""
    service, agents, clock = start(3)
    load(service, clock, 11, **IDLE)
    run(clock, agents, lambda: ScaleDecision.objects.filter(
        service=service, state=ScaleState.IN_FLIGHT).exists())
    Service.objects.filter(pk=service.pk).update(scaling_mode=ScalingMode.OFF)
    run(clock, agents, lambda: not ScaleDecision.objects.filter(
        service=service, state=ScaleState.IN_FLIGHT).exists())
    assert [r.replica for r in replicas(service)] == [0, 1]
    assert all(d.in_rotation for d in replicas(service))
