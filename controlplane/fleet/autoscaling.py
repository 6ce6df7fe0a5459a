"""The autoscaler: the service controller's step that follows demand (docs/autoscaling.md).

Once a minute per service whose ``scaling_mode`` is not ``off``: read the service's last
minutes (``scaling_evidence``), decide (``scaling_policy``) and record the decision with its
evidence. In ``recommend`` mode that is all. In ``auto`` mode a decision that changes the count
is taken, one step at a time:

- **out**: ``replicas`` + 1 and placement puts the new replica where it fits (the decision
  keeps where and why); the step ends when the replica is in the router, and the decision
  records how long that took. A replica that no host fits, or that is not serving within the
  rollouts' ready timeout, fails the step and gives the count back.
- **in**: the highest slot's replica leaves the router first (``routing`` reads the decision);
  once the router no longer lists it, ``replicas`` - 1 and the agent drains it (the service's
  drain timeout) and stops it. No request is refused: the router sends it nothing more before
  it stops taking any.

While a step is in flight the policy takes no other; the cool-downs count from the steps taken.
Repeated decisions that change nothing (a hold, the config's case, the same recommendation) are
recorded once per ``REPEAT_S``, not every minute.

At zero replicas (``min_replicas`` 0) the service is judged every tick as well: a request the
router holds is waiting for the first replica (``scaling_policy.from_zero``), so no minute is
waited for. Scaling in to zero is the policy's ordinary scale-in, taken the same way: the last
replica leaves the router, which then holds what it is sent in its retries.
"""

from __future__ import annotations

import logging
from dataclasses import fields
from datetime import datetime, timedelta

from controlplane.fleet import routing, scaling_evidence
from controlplane.fleet.models import (
    Deployment,
    DeploymentState,
    ScaleDecision,
    ScaleState,
    ScalingMode,
    Service,
)
from controlplane.fleet.scaling_policy import (
    KNOB_RANGES,
    Decision,
    Direction,
    Policy,
    State,
    decide,
    from_zero,
)
from controlplane.telemetry.rollups.refresh import floor

log = logging.getLogger(__name__)
REPEAT_S = 600  # an unchanged hold, config case or recommendation is recorded this often
# The router agent reports its workers with each status report (every few seconds); past this
# a leaving replica is removed whatever the reports say (the router's retries cover a request
# sent to it while it drains).
ROUTER_WAIT_S = 30.0
# The knobs a Policy holds (the router's hold is the router spec's, not the decision's).
THRESHOLDS = frozenset(KNOB_RANGES) & {f.name for f in fields(Policy)}


def policy_of(service: Service) -> Policy:
    """The service's limits, and its thresholds over the defaults."""
    scaling = service.scaling if isinstance(service.scaling, dict) else {}
    return Policy(min_replicas=service.min_replicas, max_replicas=service.max_replicas,
                  **{k: v for k, v in scaling.items() if k in THRESHOLDS})


def step(service: Service, now: datetime) -> ScaleDecision | None:
    """Follow the step in flight, then judge the last whole minute once. The decision
    recorded this tick, if any. A step in flight is finished whatever the mode now: turned
    off mid scale-in, the replica it took out of the rotation would stay out for good."""
    for in_flight in ScaleDecision.objects.filter(service=service, state=ScaleState.IN_FLIGHT):
        _follow(service, in_flight, now)
    if service.scaling_mode == ScalingMode.OFF:
        return None
    if service.replicas == 0 and (started := _from_zero(service, now)) is not None:
        return started
    minute = floor(now, 60)
    if service.scaling_minute is not None and service.scaling_minute >= minute:
        return None
    Service.objects.filter(pk=service.pk).update(scaling_minute=minute)
    policy = policy_of(service)
    window_s = max(policy.out_window_s, policy.in_window_s)
    replicas = list(service.replica_set.filter(enabled=True).select_related("host"))
    minutes = scaling_evidence.service_minutes(replicas, now - timedelta(seconds=window_s),
                                               now)
    decision = decide(policy, service.replicas, minutes, state_of(service), now)
    if decision is None or _repeats(service, decision, now):
        return None
    return _record(service, decision, now)


def _from_zero(service: Service, now: datetime) -> ScaleDecision | None:
    """Judged every tick, not once a minute: at zero replicas a request the router holds
    waits for this step, and for the replica it starts."""
    decision = from_zero(policy_of(service), service.replicas,
                         scaling_evidence.router_waiting(service), state_of(service), now)
    if decision is None or _repeats(service, decision, now):
        return None
    return _record(service, decision, now)


def state_of(service: Service) -> State:
    """The cool-downs count from the steps taken, a failed one included (a host that fits
    nothing is not tried again every minute)."""
    taken = ScaleDecision.objects.filter(service=service, state__in=(
        ScaleState.IN_FLIGHT, ScaleState.DONE, ScaleState.FAILED))

    def last(direction: str) -> datetime | None:
        return taken.filter(direction=direction).order_by("-at").values_list(
            "at", flat=True).first()

    return State(last_out=last(Direction.OUT), last_in=last(Direction.IN),
                 in_flight=taken.filter(state=ScaleState.IN_FLIGHT).exists())


def _repeats(service: Service, decision: Decision, now: datetime) -> bool:
    """Whether the decision only says again what the latest recorded one said lately."""
    if decision.changes and service.scaling_mode == ScalingMode.AUTO:
        return False
    latest = ScaleDecision.objects.filter(service=service).order_by("-at", "-id").first()
    return (latest is not None and latest.direction == decision.direction
            and latest.replicas_before == decision.replicas_before
            and latest.state in (ScaleState.HELD, ScaleState.RECOMMENDED)
            and (now - latest.at).total_seconds() < REPEAT_S)


def _record(service: Service, decision: Decision, now: datetime) -> ScaleDecision:
    taken = decision.changes and service.scaling_mode == ScalingMode.AUTO
    state = (ScaleState.IN_FLIGHT if taken else
             ScaleState.RECOMMENDED if decision.changes else ScaleState.HELD)
    row = ScaleDecision.objects.create(
        service=service, at=now, mode=service.scaling_mode, direction=decision.direction,
        replicas_before=decision.replicas_before, replicas_after=decision.replicas_after,
        reason=decision.reason, evidence=decision.as_json()["evidence"], state=state)
    if taken:
        (_scale_out if decision.replicas_after > decision.replicas_before else _scale_in)(
            service, row, now)
    return row


def _scale_out(service: Service, row: ScaleDecision, now: datetime) -> None:
    from controlplane.fleet import services  # services imports the controller's modules

    _set_replicas(service, row.replicas_after)
    services.scale(service)
    added = (Deployment.objects.filter(service=service, replica__gte=row.replicas_before)
             .order_by("-replica", "-id").first())
    service.refresh_from_db()
    row.placement = service.placement if isinstance(service.placement, dict) else {}
    if added is None:
        _end(row, ScaleState.FAILED, now, f"no host fits another replica: "
                                          f"{row.placement.get('summary', 'no placement')}")
        _set_replicas(service, row.replicas_before)
        services.scale(service)  # the unplaced slot is given up
        return
    row.deployment = added
    row.save(update_fields=["placement", "deployment"])


def _scale_in(service: Service, row: ScaleDecision, now: datetime) -> None:
    leaving = (Deployment.objects.filter(service=service, replica__gte=row.replicas_after)
               .order_by("-replica", "-id").first())
    row.deployment = leaving
    row.save(update_fields=["deployment"])
    routing.sync(service, now)  # out of the rotation now: the router drops it next


def _follow(service: Service, row: ScaleDecision, now: datetime) -> None:
    """One look at the step in flight: done, failed or still going."""
    waited_s = (now - row.at).total_seconds()
    d = Deployment.objects.filter(pk=row.deployment_id).select_related("host").first()
    if row.direction == Direction.OUT:
        _follow_out(service, row, d, waited_s, now)
    else:
        _follow_in(service, row, d, waited_s, now)


def _follow_out(service: Service, row: ScaleDecision, d: Deployment | None, waited_s: float,
                now: datetime) -> None:
    from controlplane.fleet import rollouts, services

    if d is None:
        _end(row, ScaleState.FAILED, now, "the added replica is gone")
        return
    if d.in_rotation and d.state == DeploymentState.READY:
        row.ready_s = round(waited_s, 1)
        _end(row, ScaleState.DONE, now, "")
        return
    limit = rollouts.ready_timeout_s(service)
    if waited_s > limit:
        _end(row, ScaleState.FAILED, now, f"{d.name} was not serving within {limit:.0f} s "
                                          f"(state {d.state}): the count is given back")
        _set_replicas(service, row.replicas_before)
        services.scale(service)


def _follow_in(service: Service, row: ScaleDecision, d: Deployment | None, waited_s: float,
               now: datetime) -> None:
    from controlplane.fleet import services

    if d is not None:
        listed = routing.router_lists(service, d, row.at)
        unknown = listed is None and service.router_host_id is not None
        if (listed or unknown) and waited_s < ROUTER_WAIT_S:
            return
    _set_replicas(service, row.replicas_after)
    services.scale(service)  # the agent drains the replica (drain timeout) and stops it
    _end(row, ScaleState.DONE, now, "")


def _set_replicas(service: Service, count: int) -> None:
    """The count, through the ORM's save: the audit log records the change as the system's."""
    service.replicas = count
    service.save(update_fields=["replicas"])


def _end(row: ScaleDecision, state: str, now: datetime, detail: str) -> None:
    row.state, row.ended_at, row.detail = state, now, detail
    row.save(update_fields=["state", "ended_at", "detail", "ready_s", "placement"])
    if state == ScaleState.FAILED:
        log.warning("service %s: scale %s failed: %s", row.service_id, row.direction, detail)
