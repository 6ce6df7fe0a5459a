"""The autoscaler in the service controller, on a clock the test moves: the replicas' engine
rows in PostgreSQL are the evidence; the agents report what their supervisors do and the
router agent the workers its config names (tests/fleet/controller_support.py)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

import pytest
from django.core.exceptions import ValidationError
from django.db import connection

from controlplane.audit.models import AuditEntry
from controlplane.fleet import autoscaling, routing, services
from controlplane.fleet.models import (
    Deployment,
    Host,
    ScaleDecision,
    ScaleState,
    ScalingMode,
    Service,
)
from controlplane.fleet.scaling_policy import DEFAULT_HOLD_S, Direction
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


def test_switched_to_auto_the_advice_is_taken_on_the_next_tick_not_the_next_minute(
        empty_samples):
    service, agents, clock = start(2, mode=ScalingMode.RECOMMEND)
    load(service, clock, 6, **BUSY)
    run(clock, agents, lambda: ScaleDecision.objects.filter(service=service).exists())
    [advice] = decisions(service)
    service.refresh_from_db()
    service.scaling_mode = ScalingMode.AUTO
    services.save(service, reason="take the advice")
    agents.step(clock.now)
    clock.tick(1)
    taken = decisions(service)[-1]
    assert (taken.mode, taken.direction, taken.replicas_after) == ("auto", Direction.OUT, 3)
    assert taken.state in (ScaleState.IN_FLIGHT, ScaleState.DONE)
    assert (taken.at - advice.at).total_seconds() < 60 and taken.at.minute == advice.at.minute


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


# -- scale to zero, and from zero --------------------------------------------------------------

# Not a single request in the window: what scaling in to zero needs.
NONE = {"requests_waiting": 0.0, "requests_running": 0.0, "kv_cache_usage": 0.0,
        "requests_finished_per_s": 0.0}
TO_ZERO = {"in_window_s": 60, "in_cooldown_s": 0, "out_cooldown_s": 0}


@dataclass
class HoldingRouter(Agents):
    """The router agent of a service that may scale to zero: its reports carry the router's
    pid and its count of tries that found no worker, which grows while a client's request
    waits in the router's retries (``waiting``) and the router has no worker."""

    waiting: bool = False
    tries: int = 0

    def route(self, now: datetime | None = None) -> None:
        for spec in routing.router_specs(self.router.pk):
            if self.waiting and not spec["workers"]:
                self.tries += 2  # a try every 2 s, a tick every 3 s: about that
            routing.record_router_status(self.router.pk, [{
                "service_id": spec["service_id"], "state": "ready", "pid": 77,
                "workers": spec["workers"], "healthy": True,
                "metrics": {"requests_total": 0, "per_worker": {},
                            "no_worker_tries": self.tries}}], now=now)


def start_scalable_to_zero(mode: str = ScalingMode.AUTO) -> tuple[Service, HoldingRouter,
                                                                  Clock]:
    hosts(2)
    router = router_host()
    service = make_service(router, replicas=1, scaling_mode=mode, min_replicas=0,
                           max_replicas=2, scaling=TO_ZERO)
    agents, clock = HoldingRouter(service, router), Clock()
    run(clock, agents, lambda: all(d.in_rotation for d in replicas(service)))
    return service, agents, clock


def router_spec(service: Service) -> dict:
    [spec] = routing.router_specs(service.router_host_id)
    return spec


def test_idle_scales_to_zero_through_the_router_and_a_held_request_starts_one(empty_samples):
    service, agents, clock = start_scalable_to_zero()
    assert router_spec(service)["hold_s"] == DEFAULT_HOLD_S  # started to hold, from the first
    load(service, clock, 2, **NONE)
    seen: list[tuple[bool, list[str]]] = []  # (the replica still there, the router's workers)
    run(clock, agents, lambda: ScaleDecision.objects.filter(
        service=service, state=ScaleState.DONE).exists(),
        each=lambda: seen.append((bool(replicas(service)), router_spec(service)["workers"])))
    [to_zero] = decisions(service)
    assert (to_zero.direction, to_zero.replicas_before, to_zero.replicas_after) == (
        Direction.IN, 1, 0)
    assert (True, []) in seen  # out of the router first, then removed
    service.refresh_from_db()
    assert service.replicas == 0 and replicas(service) == []
    assert router_spec(service)["workers"] == []  # requests now wait in its retries

    quiet_until = clock.now + timedelta(minutes=3)
    run(clock, agents, lambda: clock.now >= quiet_until)
    assert len(decisions(service)) == 1  # no request, no replica

    agents.waiting = True
    ticks = run(clock, agents, lambda: len(decisions(service)) == 2)
    assert ticks == 1  # the tick that heard of it: no window at zero
    from_zero = decisions(service)[-1]
    assert (from_zero.direction, from_zero.replicas_before, from_zero.replicas_after,
            from_zero.state) == (Direction.OUT, 0, 1, ScaleState.IN_FLIGHT)
    assert from_zero.evidence[0]["name"] == "router_tries_without_a_replica"
    assert "requests wait in the router with no replica" in from_zero.reason
    run(clock, agents, lambda: ScaleDecision.objects.get(pk=from_zero.pk).state
        == ScaleState.DONE)
    [replica] = replicas(service)
    assert replica.in_rotation and router_spec(service)["workers"] == [
        routing.worker_url(replica)]
    assert ScaleDecision.objects.get(pk=from_zero.pk).ready_s > 0


def test_recommend_mode_at_zero_records_the_replica_it_would_start(empty_samples):
    service, agents, clock = start_scalable_to_zero()
    Service.objects.filter(pk=service.pk).update(replicas=0, scaling_mode=ScalingMode.RECOMMEND)
    service.refresh_from_db()
    services.scale(service)
    agents.waiting = True
    begun = clock.now
    run(clock, agents, lambda: clock.now >= begun + timedelta(minutes=2))
    [d] = decisions(service)
    assert (d.mode, d.state, d.direction, d.replicas_before, d.replicas_after) == (
        "recommend", ScaleState.RECOMMENDED, Direction.OUT, 0, 1)
    assert replicas(service) == []  # said once, nothing started


def save_refused(service: Service, **changes) -> dict:
    for name, value in changes.items():
        setattr(service, name, value)
    with pytest.raises(ValidationError) as refused:
        services.save(service)
    return refused.value.message_dict


def test_scale_to_zero_needs_auto_mode_and_a_router(db):
    hosts(1)
    router = router_host()
    at_zero = make_service(router, replicas=0, scaling_mode=ScalingMode.AUTO, min_replicas=0,
                           max_replicas=1)
    assert replicas(at_zero) == [] and router_spec(at_zero)["hold_s"] == DEFAULT_HOLD_S
    said = save_refused(at_zero, scaling_mode=ScalingMode.RECOMMEND)
    assert "0 only with scaling_mode auto and min_replicas 0" in said["replicas"][0]
    said = save_refused(Service.objects.get(pk=at_zero.pk), min_replicas=1)
    assert "0 only with scaling_mode auto and min_replicas 0" in said["replicas"][0]
    said = save_refused(Service.objects.get(pk=at_zero.pk), router_host=None)
    assert "0 needs a router (router_host)" in said["min_replicas"][0]
    said = save_refused(Service.objects.get(pk=at_zero.pk), min_replicas=-1)
    assert said["min_replicas"] == ["must be a whole number from 0 to 64"]


def test_min_replicas_to_and_from_zero_restarts_the_router_with_its_hold(db):
    hosts(1)
    router = router_host()
    service = make_service(router, replicas=1, scaling_mode=ScalingMode.AUTO, min_replicas=1,
                           max_replicas=2)
    assert "hold_s" not in router_spec(service)  # as every router before scale to zero
    version = Host.objects.get(pk=router.pk).config_version
    service.min_replicas, service.scaling = 0, {"zero_hold_s": 120}
    services.save(service)
    assert router_spec(service)["hold_s"] == 120
    assert Host.objects.get(pk=router.pk).config_version > version
    version = Host.objects.get(pk=router.pk).config_version
    service.max_replicas = 3  # nothing the router runs with: its agent is not asked
    services.save(service)
    assert Host.objects.get(pk=router.pk).config_version == version
    service.min_replicas = 1
    services.save(service)
    assert "hold_s" not in router_spec(service)
    assert Host.objects.get(pk=router.pk).config_version > version


def test_a_change_at_zero_rolls_nothing_and_the_first_replica_runs_it(empty_samples):
    hosts(1)
    router = router_host()
    service = make_service(router, replicas=0, scaling_mode=ScalingMode.AUTO, min_replicas=0,
                           max_replicas=1, scaling=TO_ZERO)
    agents, clock = HoldingRouter(service, router), Clock()
    service.args = {**service.args, "max_num_seqs": 64}
    services.save(service, reason="a change at zero")
    run(clock, agents, lambda: not service.rollouts.filter(state="running").exists())
    agents.waiting = True
    run(clock, agents, lambda: any(d.in_rotation for d in replicas(service)))
    [replica] = replicas(service)
    assert replica.args["max_num_seqs"] == 64  # placed with the config of its day
