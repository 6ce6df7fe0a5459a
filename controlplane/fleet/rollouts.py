"""Rollouts: a service change going through its replicas without dropping a request.

One ``Rollout`` row per change; the controller (tasks.service_controller) calls ``advance``
every tick, and each call moves the rollout on as far as the facts allow, then stops where it
must wait (the router's report, the agent's restart, the check's window). Calling it again
with nothing new changes nothing.

Per replica, in slot order (those already out of rotation first: changing them costs no
capacity), with at most ``max_unavailable`` replicas out of rotation at once (1 by default):

1. ``out_of_router``: the rollout holds the replica out (``routing`` stops routing it and bumps
   the router host); wait until the router's report no longer lists it, or ``ROUTER_WAIT_S``;
2. ``draining``: the new replica config is saved (a deployment revision); the agent drains the
   process (bounded by the drain timeout) and restarts it;
3. ``starting``: wait until it is ready on the new revision, bounded by the service's
   ready timeout (``ready_timeout_s``);
4. ``into_router``: back in rotation; wait until the router lists it, or ``ROUTER_WAIT_S``;
5. ``checking``: compare it with the replicas not yet changed over ``ROLLOUT_CHECK_S`` (a
   canary's first replica: over the service's ``canary_window_s``), with the tuning
   verifier's comparison and guards (``tuning.verify.judge``) on raw engine rows, and its
   errors;
6. ``confirming``: a replica judged worse is judged again over the next ``ROLLOUT_CHECK_S``
   on its own; only a second regression stops the rollout (a warm-up or a neighbour's burst
   passes, a config's regression stays).

Surge: where the service's hosts have spare GPUs for one more replica (and ``max_surge`` >= 1),
a replica with the new config is started first in the old one's slot (``surge_starting``),
goes into rotation and is checked, and only then is the old one taken out and deleted
(``retiring``): capacity never drops.

A replica that is not ready in time, leaves ready during its check or regresses twice running
stops the rollout: every replica on the new config goes back to the old one (a surge replica
whose old one still runs is deleted instead), the service's desired config goes back to the
from-revision (``services.revert``), the rollout ends ``rolled_back`` with the reason in
``detail``, and a ``rolled_back`` event is recorded (alerted: ``service_disrupted``). A new
change while a rollout runs supersedes it; the new rollout starts from the replicas as they
are (which replicas differ from the new config).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from contextvars import ContextVar
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import IntegrityError, connection, transaction
from django.utils import timezone

from controlplane.fleet import deployments, placement, routing
from controlplane.fleet.models import (
    Deployment,
    DeploymentState,
    Rollout,
    RolloutState,
    RolloutStrategy,
    Service,
    ServiceEvent,
    ServiceEventKind,
    ServiceRevision,
)
from controlplane.fleet.queries import is_online
from controlplane.fleet.replica_facts import time_to_ready
from controlplane.telemetry.models import HistogramLayout
from controlplane.telemetry.schema import TABLES
from controlplane.telemetry.series.histograms import (
    dominant_layout,
    engine_buckets,
    histogram_quantile,
)
from controlplane.tuning import verify
from controlplane.tuning.models import State as Verdict

log = logging.getLogger(__name__)

# The fields a replica takes from its service (services.REPLICA_FIELDS, spelt here too: the
# services module imports this one).
REPLICA_FIELDS = ("model", "vllm_version", "args", "env", "drain_timeout_s")
ROUTER_WAIT_S = 5.0  # the router's report is waited for at most this long
READY_TIMEOUT_MAX_S = 1800.0
READY_TIMEOUT_FACTOR = 3.0  # x the slowest start seen among the service's replicas
DRAIN_GRACE_S = 30.0  # beyond the drain timeout: the agent's fetch and its signal
ERROR_SHARE_MARGIN = 0.05  # more failed requests than the baseline by this share: regressed
# A p99 needs requests behind it: the check goes on until each side has this many with a first
# token, for at most CHECK_EXTEND x its window, then judges the failed requests alone. (The
# real CPU build's replicas each finished 2 requests in a 15 s check, and the p99 of 2
# requests across a histogram bucket's edge read as TTFT doubled.)
MIN_REQUESTS = 20
CHECK_EXTEND = 4
MAX_STEPS = 12  # transitions in one advance (each replica takes about six)


class Phase:
    NEXT = ""  # choose the next replica
    WAITING = "waiting"  # for the unavailability budget
    OUT = "out_of_router"
    DRAINING = "draining"
    STARTING = "starting"
    SURGING = "surge_starting"
    INTO = "into_router"
    CHECKING = "checking"
    CONFIRMING = "confirming"  # judged worse once: judged again before a rollback
    RETIRING = "retiring"


# While a rollback puts the service's config back, the rollout that revert starts has nothing
# left to do: the replicas were restored directly.
_RESTORING: ContextVar[int | None] = ContextVar("restoring", default=None)


class Stop(Exception):  # noqa: N818 - a control-flow signal, not an error
    """The rollout cannot go on; the message is why (the rollback's reason)."""


# -- starting ---------------------------------------------------------------------------------


@transaction.atomic
def start(service: Service, from_revision: int, to_revision: int, author=None) -> Rollout:
    """A rollout of ``service`` from one revision's replica config to another's, superseding
    the one that runs (the new one starts from the replicas as they are)."""
    now = timezone.now()
    restoring = _RESTORING.get()
    superseded = list(Rollout.objects.select_for_update().filter(
        service=service, state=RolloutState.RUNNING))
    for old in superseded:
        _one_per_slot(service, old)
        old.state, old.ended_at, old.phase = RolloutState.SUPERSEDED, now, ""
        old.detail = f"superseded by the change to revision {to_revision}"
        old.save(update_fields=["state", "ended_at", "phase", "detail"])
    if restoring is not None:
        return Rollout.objects.create(
            service=service, from_revision=from_revision, to_revision=to_revision,
            strategy=service.strategy, state=RolloutState.SUCCEEDED, started_by=author,
            started_at=now, ended_at=now,
            detail=f"the rollback of rollout #{restoring} restored the replicas directly")
    rollout = Rollout.objects.create(service=service, from_revision=from_revision,
                                     to_revision=to_revision, strategy=service.strategy,
                                     started_by=author, started_at=now, phase=Phase.NEXT)
    message = f"rollout of revision {from_revision} -> {to_revision} started ({service.strategy})"
    if superseded:
        message += "; it supersedes the rollout to revision " + ", ".join(
            str(r.to_revision) for r in superseded)
    _event(rollout, ServiceEventKind.ROLLOUT_STARTED, message, now,
           superseded=[r.pk for r in superseded])
    return rollout


def _one_per_slot(service: Service, old: Rollout) -> None:
    """A superseded rollout leaves no slot with two replicas: an old replica being retired
    goes as planned (its surge replica serves), a surge replica not yet retiring anything
    goes (the new rollout changes the old one in place or surges again)."""
    current = Deployment.objects.filter(pk=old.current_id).first() if old.current_id else None
    if current is None:
        return
    if old.phase == Phase.RETIRING or _surged_over(service, current) is not None:
        deployments.delete(current, owner=service)


# -- advancing --------------------------------------------------------------------------------


@dataclass
class Step:
    """One advance: the rollout, its service, the replica config it rolls out and when."""

    rollout: Rollout
    service: Service
    target: dict
    now: datetime

    @property
    def since(self) -> datetime:
        return self.rollout.phase_since or self.rollout.started_at

    @property
    def waited_s(self) -> float:
        return (self.now - self.since).total_seconds()

    def current(self) -> Deployment | None:
        if self.rollout.current_id is None:
            return None
        return Deployment.objects.select_related("host").filter(
            pk=self.rollout.current_id).first()


@transaction.atomic
def advance(rollout: Rollout, now: datetime | None = None) -> None:
    """Move a running rollout on as far as the facts allow; a no-op when it must wait."""
    from controlplane.fleet import services

    rollout = Rollout.objects.select_for_update().select_related("service").filter(
        pk=rollout.pk).first()
    if rollout is None or rollout.state != RolloutState.RUNNING:
        return
    step = Step(rollout, rollout.service, services.replica_config(rollout.service),
                now or timezone.now())
    for _ in range(MAX_STEPS):
        try:
            moved = HANDLERS[rollout.phase](step)
        except Stop as stop:
            rollback(step, str(stop))
            return
        if not moved or rollout.state != RolloutState.RUNNING:
            return


def _go(step: Step, phase: str, current: Deployment | None = None) -> bool:
    """Into ``phase`` with ``current`` in hand (None: none), from now; True: moved on."""
    r = step.rollout
    r.phase, r.phase_since, r.current = phase, step.now, current
    r.save(update_fields=["phase", "phase_since", "current", "done"])
    return True


def _next(step: Step) -> bool:
    """Choose the next replica to change, or finish."""
    pending = pending_replicas(step.service, step.target)
    if not pending:
        return _succeed(step)
    d = pending[0]
    if not d.enabled or not is_online(d.host.last_seen):
        return _change_idle(step, d)
    unavailable = step.service.replica_set.filter(enabled=True, in_rotation=False).exclude(
        pk=d.pk).count()
    budget = max(1, step.service.max_unavailable)
    if d.in_rotation and step.service.max_surge >= 1 and (
            surge := _start_surge(step, d)) is not None:
        return _go(step, Phase.SURGING, surge)
    if d.in_rotation and unavailable >= budget:
        if step.rollout.phase != Phase.WAITING:
            _event(step.rollout, ServiceEventKind.REPLICA_CHANGED,
                   f"waiting: {unavailable} replica(s) out of rotation already "
                   f"(max_unavailable {budget}) before {d.name} may leave", step.now, d)
            _go(step, Phase.WAITING)
        return False  # until one comes back
    _event(step.rollout, ServiceEventKind.REPLICA_CHANGED,
           f"{d.name}: out of the router for revision {step.rollout.to_revision}", step.now, d,
           phase=Phase.OUT)
    _go(step, Phase.OUT, d)
    routing.sync(step.service, step.now)
    return True


def _change_idle(step: Step, d: Deployment) -> bool:
    """A replica that serves nothing and whose agent is away (its host offline) or that is
    disabled: its new config is saved at once, for its agent to apply when it is back (the
    rotation takes it once it is ready on it). Waiting for it would hold the rollout up for a
    host that may never return (healing replaces it, with the service's config)."""
    why = "disabled" if not d.enabled else "its host is offline"
    _apply(d, step.target, step.service,
           f"rollout of service revision {step.rollout.to_revision} ({why}: applied when it "
           f"runs again)")
    step.rollout.done = [*step.rollout.done, d.pk]
    _event(step.rollout, ServiceEventKind.REPLICA_CHANGED,
           f"{d.name}: revision {d.revision} saved without waiting ({why})", step.now, d,
           phase=Phase.NEXT, revision=d.revision)
    return _go(step, Phase.NEXT)


def _out(step: Step) -> bool:
    """Wait for the router to drop it, then save the new config: the agent drains it."""
    d = _current_or_next(step)
    if d is None:
        return True
    listed = routing.router_lists(step.service, d, step.since)
    if listed and step.waited_s < ROUTER_WAIT_S:
        return False
    if listed is None and step.service.router_host_id is not None and \
            step.waited_s < ROUTER_WAIT_S:
        return False
    _apply(d, step.target, step.service,
           f"rollout of service revision {step.rollout.to_revision}")
    _event(step.rollout, ServiceEventKind.REPLICA_CHANGED,
           f"{d.name}: revision {d.revision} saved (service revision "
           f"{step.rollout.to_revision}); the agent drains and restarts it", step.now, d,
           phase=Phase.DRAINING, revision=d.revision)
    return _go(step, Phase.DRAINING, d)


def _draining(step: Step) -> bool:
    d = _current_or_next(step)
    if d is None:
        return True
    if d.running_revision == d.revision or d.state in (
            DeploymentState.STARTING, DeploymentState.CRASHED, DeploymentState.BACKING_OFF,
            DeploymentState.STOPPED):
        return _go(step, Phase.STARTING, d)
    limit = d.drain_timeout_s + DRAIN_GRACE_S
    if step.waited_s > limit:
        raise Stop(f"{d.name} did not restart within {limit:.0f} s of its new revision "
                   f"(state {d.state}, running revision {d.running_revision})")
    return False


def _starting(step: Step) -> bool:
    d = _current_or_next(step)
    if d is None:
        return True
    return _into_when_ready(step, d, f"ready on revision {d.revision}")


def _surging(step: Step) -> bool:
    """The surge replica (current) starts beside the old one."""
    d = step.current()
    if d is None:
        raise Stop("the surge replica is gone")
    return _into_when_ready(step, d, "surge replica ready")


def _into_when_ready(step: Step, d: Deployment, what: str) -> bool:
    """Into the router once ready on its revision; stopped past the ready timeout."""
    if _ready_on_revision(d):
        _event(step.rollout, ServiceEventKind.REPLICA_CHANGED,
               f"{d.name}: {what} after {step.waited_s:.0f} s; into the router", step.now, d,
               phase=Phase.INTO)
        _go(step, Phase.INTO, d)
        routing.sync(step.service, step.now)
        return True
    limit = ready_timeout_s(step.service)
    if step.waited_s > limit:
        raise Stop(_not_ready(d, limit))
    return False


def _into(step: Step) -> bool:
    d = step.current()
    if d is None:
        raise Stop("the replica in hand is gone")
    _still_serving(d, "before its check began")
    listed = routing.router_lists(step.service, d, step.since)
    if not listed and step.service.router_host_id is not None and \
            step.waited_s < ROUTER_WAIT_S:
        return False
    return _go(step, Phase.CHECKING, d)


def _checking(step: Step) -> bool:
    d = step.current()
    if d is None:
        raise Stop("the replica in hand is gone")
    _still_serving(d, "during its check")
    # The first seconds back in the router are a transient, not the config: the router sends
    # the idle replica the next requests in a burst, and its first ones include its warm-up.
    settle = float(settings.PITWALL["ROLLOUT_SETTLE_S"])
    least = check_window_s(step)
    if step.waited_s < settle + least:
        return False
    window = step.waited_s - settle
    verdict, summary = check(step, d, window, final=window >= least * CHECK_EXTEND)
    if verdict is None:
        return False  # too few requests behind a p99 yet
    if verdict == Verdict.REGRESSED:
        confirm = float(settings.PITWALL["ROLLOUT_CHECK_S"])
        _event(step.rollout, ServiceEventKind.REPLICA_CHANGED,
               f"{d.name}: worse than the replicas not yet changed over {window:.0f} s "
               f"({summary}); judged again over the next {confirm:.0f} s before a rollback",
               step.now, d, phase=Phase.CHECKING, verdict="suspect")
        return _go(step, Phase.CONFIRMING, d)
    return _checked(step, d, window, verdict, summary)


def _confirming(step: Step) -> bool:
    """A replica judged worse is judged again over a window of its own, after the first: a
    config's regression persists, a transient (a warm-up outlasting the settle, a noisy
    neighbour) passes. The rollback needs both; the price of the second look is one check
    window more on the regressed config."""
    d = step.current()
    if d is None:
        raise Stop("the replica in hand is gone")
    _still_serving(d, "during its second check")
    least = float(settings.PITWALL["ROLLOUT_CHECK_S"])
    if step.waited_s < least:
        return False
    window = step.waited_s
    verdict, summary = check(step, d, window, final=window >= least * CHECK_EXTEND)
    if verdict is None:
        return False
    if verdict == Verdict.REGRESSED:
        raise Stop(f"{d.name} regressed against the replicas not yet changed, twice running; "
                   f"over the last {window:.0f} s: {summary}")
    return _checked(step, d, window, verdict, summary)


def _checked(step: Step, d: Deployment, window: float, verdict: str, summary: str) -> bool:
    """The replica in hand passed its check: on to the next one, or retire the one a surge
    replica replaces."""
    done = [*step.rollout.done, d.pk]
    step.rollout.done = done
    _event(step.rollout, ServiceEventKind.REPLICA_CHANGED,
           f"{d.name}: checked over {window:.0f} s, {verdict}: {summary or 'no traffic'}",
           step.now, d, phase=Phase.CHECKING, verdict=str(verdict))
    old = _surged_over(step.service, d)
    if old is not None:
        _event(step.rollout, ServiceEventKind.REPLICA_CHANGED,
               f"{old.name}: replaced by {d.name}; out of the router, then stopped", step.now,
               old, phase=Phase.RETIRING)
        _go(step, Phase.RETIRING, old)
        routing.sync(step.service, step.now)
        return True
    return _go(step, Phase.NEXT)


def _retiring(step: Step) -> bool:
    """The old replica a surge replica replaces leaves the router, then is deleted."""
    d = step.current()
    if d is not None:
        listed = routing.router_lists(step.service, d, step.since)
        if (listed or (listed is None and step.service.router_host_id is not None)) and \
                step.waited_s < ROUTER_WAIT_S:
            return False
        deployments.delete(d, owner=step.service)
    return _go(step, Phase.NEXT)


HANDLERS: dict[str, Callable[[Step], bool]] = {
    Phase.NEXT: _next, Phase.WAITING: _next, Phase.OUT: _out, Phase.DRAINING: _draining,
    Phase.STARTING: _starting, Phase.SURGING: _surging, Phase.INTO: _into,
    Phase.CHECKING: _checking, Phase.CONFIRMING: _confirming, Phase.RETIRING: _retiring,
}


def _current_or_next(step: Step) -> Deployment | None:
    """The replica in hand; gone (deleted, healed away): back to choosing."""
    d = step.current()
    if d is None:
        _go(step, Phase.NEXT)
    return d


def _succeed(step: Step) -> bool:
    r = step.rollout
    r.state, r.ended_at, r.phase, r.current = RolloutState.SUCCEEDED, step.now, "", None
    r.save(update_fields=["state", "ended_at", "phase", "current", "done"])
    _event(r, ServiceEventKind.ROLLOUT_SUCCEEDED,
           f"rollout of revision {r.from_revision} -> {r.to_revision} succeeded: "
           f"{len(r.done)} replica(s) changed", step.now)
    routing.sync(step.service, step.now)
    return True


def _still_serving(d: Deployment, when: str) -> None:
    """Stop unless the changed replica is ready on its revision and routable."""
    if not _ready_on_revision(d):
        raise Stop(f"{d.name} left ready ({d.state}) {when}: "
                   f"{d.error or 'no error reported'}")
    if not d.in_rotation:
        raise Stop(f"{d.name} left the router's rotation {when}: {d.rotation_note}")


def _ready_on_revision(d: Deployment) -> bool:
    return d.state == DeploymentState.READY and d.running_revision == d.revision


def _not_ready(d: Deployment, limit: float) -> str:
    why = f"; {d.error}" if d.error else ""
    return (f"{d.name} was not ready within {limit:.0f} s (state {d.state}, "
            f"{d.restarts} restart(s){why})")


# -- which replicas, what config --------------------------------------------------------------


def replica_fields(d: Deployment) -> dict:
    return {name: getattr(d, name) for name in REPLICA_FIELDS}


def pending_replicas(service: Service, target: dict) -> list[Deployment]:
    """The replicas whose config differs from ``target``: those out of rotation first (changing
    them costs no capacity), then by slot."""
    replicas = service.replica_set.select_related("host").order_by("replica", "id")
    pending = [d for d in replicas if replica_fields(d) != target]
    return sorted(pending, key=lambda d: d.in_rotation)


def _apply(d: Deployment, config: dict, service: Service, reason: str) -> None:
    """Save ``config`` as the replica's new revision (the agent drains and restarts it)."""
    for name in REPLICA_FIELDS:
        if name in config:
            setattr(d, name, config[name])
    try:
        deployments.save(d, author=None, reason=reason, owner=service)
    except ValidationError as exc:
        raise Stop(f"{d.name}: the new config is refused: {'; '.join(exc.messages)}") from None


def ready_timeout_s(service: Service) -> float:
    """How long a replica may take to become ready: 3 x the slowest start seen among the
    service's replicas (process start to API ready), at least ROLLOUT_READY_MIN_S, at most
    1800 s. The floor is for a start slower than the ones seen: a replica restarted under load
    (measured: the real tiny model readied in 35 s alone, and took over 120 s beside two
    replicas serving on the same 2 cores)."""
    starts = [t for phases in service.replica_set.values_list("start_phases", flat=True)
              if (t := time_to_ready(phases)) is not None]
    slowest = max(starts, default=0.0)
    floor = float(settings.PITWALL["ROLLOUT_READY_MIN_S"])
    return min(max(READY_TIMEOUT_FACTOR * slowest, floor), max(READY_TIMEOUT_MAX_S, floor))


def check_window_s(step: Step) -> float:
    """A canary's first replica is compared over the canary window; every other one briefly."""
    if step.rollout.strategy == RolloutStrategy.CANARY and not step.rollout.done:
        return float(step.service.canary_window_s)
    return float(settings.PITWALL["ROLLOUT_CHECK_S"])


# -- surge ------------------------------------------------------------------------------------


def _start_surge(step: Step, old: Deployment) -> Deployment | None:
    """A replica with the new config in ``old``'s slot, where the service's hosts have a spare
    place for one (None: plain rolling)."""
    hosts = placement.hosts_for(step.service)
    already = list(step.service.replica_set.values_list("host_id", flat=True))
    need = placement.need_for(step.service, hosts, 1, already=already)
    made = placement.place(need, hosts)
    # Only spare GPUs make a surge: a replica of vLLM's CPU build (no GPUs) would start on the
    # cores the serving replicas use, slowing them and itself (measured on the real build:
    # the surge replica was not ready in 120 s beside two serving ones on 2 cores).
    if not made.slots or not made.slots[0].gpu_indices:
        return None
    slot = made.slots[0]
    surge = Deployment(host_id=slot.host_id, name=_surge_name(step.service, old, slot.host_id),
                       service=step.service, replica=old.replica, port=slot.port,
                       gpu_indices=slot.gpu_indices, cpus=slot.cpus, numa_node=slot.numa_node,
                       in_rotation=False, placement_reason=slot.reason,
                       rotation_note=routing.Why.NOT_READY)
    reason = (f"surge replica for {old.name}: rollout of service revision "
              f"{step.rollout.to_revision}")
    try:
        with transaction.atomic():
            _apply(surge, step.target, step.service, reason)
    except (Stop, IntegrityError) as exc:
        log.warning("service %s: no surge replica (%s); rolling in place", step.service, exc)
        return None
    _event(step.rollout, ServiceEventKind.REPLICA_CHANGED,
           f"{surge.name}: surge replica on {slot.hostname} for {old.name} "
           f"({slot.reason})", step.now, surge, phase=Phase.SURGING, replaces=old.pk)
    return surge


def _surge_name(service: Service, old: Deployment, host_id: int) -> str:
    taken = set(Deployment.objects.filter(host_id=host_id).values_list("name", flat=True))
    base = f"{service.name}-{old.replica}"
    for name in (base, f"{base}-next", f"{base}-r{service.revision}"):
        if name not in taken:
            return name
    return f"{base}-{timezone.now():%H%M%S}"


def _surged_over(service: Service, d: Deployment) -> Deployment | None:
    """The old replica a surge replica ``d`` replaces: another of the slot's replicas that
    does not run the new config."""
    others = service.replica_set.filter(replica=d.replica, enabled=True).exclude(pk=d.pk)
    return next((o for o in others if replica_fields(o) != replica_fields(d)), None)


# -- the check --------------------------------------------------------------------------------


def check(step: Step, d: Deployment, window: float,
          final: bool = True) -> tuple[str | None, str]:
    """The changed replica over the window against the replicas not yet changed over the same
    window (where none is left: itself before it changed), as the tuning verifier judges a
    change, on what a replica's own quality is: TTFT p99, ITL p99 and preemptions within the
    verifier's guards, and failed requests no more than the baseline's share plus
    ERROR_SHARE_MARGIN. Not throughput: a replica generates what the router sends it. The
    latencies are judged once each side has MIN_REQUESTS; before that the verdict is None
    (check longer) unless ``final``, when the failed requests decide alone."""
    lo, hi = step.now - timedelta(seconds=window), step.now
    engines = routing.engines_of([d])
    if d.pk not in engines:
        return Verdict.UNCHANGED, "no engine reported"
    after = measure([engines[d.pk]], lo, hi)
    unchanged = [o for o in step.service.replica_set.filter(enabled=True, in_rotation=True)
                 .exclude(pk=d.pk).select_related("host") if replica_fields(o) != step.target]
    if unchanged:
        before = measure(list(routing.engines_of(unchanged).values()), lo, hi)
    else:
        left = _left_router_at(step.rollout, d) or lo
        before = measure([engines[d.pk]], left - timedelta(seconds=window), left)
    if errors := _error_regression(before, after):
        return Verdict.REGRESSED, errors
    counts = (int(after.get("requests") or 0), int(before.get("requests") or 0))
    if min(counts) < MIN_REQUESTS:
        if not final:
            return None, ""
        return Verdict.UNCHANGED, (
            f"latencies not compared: {counts[0]} request(s) on it and {counts[1]} on the "
            f"others in {window:.0f} s, fewer than {MIN_REQUESTS}; no more failed requests")
    return verify.judge("", _own_quality(before), _own_quality(after), guards=latency_guards())


def latency_guards() -> dict[str, float]:
    """The verifier's guards, the latencies' widened or narrowed by ROLLOUT_LATENCY_GUARD."""
    guard = float(settings.PITWALL["ROLLOUT_LATENCY_GUARD"])
    return {**verify.GUARDS, **dict.fromkeys(verify.LATENCY_PAIR, guard)}


def _own_quality(figures: dict) -> dict:
    return {**figures, "generation_tokens_per_s": None}


def _error_regression(before: dict, after: dict) -> str:
    b, a = before.get("error_share"), after.get("error_share")
    if a is None or a <= (b or 0.0) + ERROR_SHARE_MARGIN:
        return ""
    return f"failed requests {a:.1%} of finished, against {b or 0.0:.1%}"


def _left_router_at(rollout: Rollout, d: Deployment) -> datetime | None:
    event = ServiceEvent.objects.filter(
        service_id=rollout.service_id, deployment=d, data__rollout=rollout.pk,
        data__phase=Phase.OUT).order_by("-at").first()
    return event.at if event else None


RATES = {  # verify.METRICS name -> the raw engine column averaged over the window
    "generation_tokens_per_s": "generation_tokens_per_s",
    "preemptions_per_s": "preemptions_per_s",
    "requests_waiting": "requests_waiting",
    "kv_cache_usage": "kv_cache_usage",
}


def measure(engine_ids: list[int], lo: datetime, hi: datetime) -> dict[str, float | None]:
    """verify.METRICS (per engine: the averages are over every row of these engines) from the
    raw engine rows in (lo, hi], with TTFT and ITL p99 from the summed buckets and the share
    of finished requests that failed."""
    out: dict[str, float | None] = dict.fromkeys(verify.METRICS)
    if not engine_ids:
        return out
    table = TABLES["engine"].name
    columns = [f"avg({c})" for c in RATES.values()]
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT {', '.join(columns)}, avg(requests_finished_per_s), "
            f"avg(finished_error_per_s) FROM {table} WHERE engine_id = ANY(%(ids)s) "
            f"AND ts > %(lo)s AND ts <= %(hi)s AND up = 1",
            {"ids": engine_ids, "lo": lo, "hi": hi})
        *rates, finished, failed = cursor.fetchone()
    for name, value in zip(RATES, rates, strict=True):
        out[name] = None if value is None else round(float(value), 4)
    if finished:
        out["error_share"] = float(failed or 0.0) / float(finished)
    out["ttft_p99_s"], out["requests"] = _p99("ttft_seconds", engine_ids, lo, hi)
    out["itl_p99_s"], _ = _p99("itl_seconds", engine_ids, lo, hi)
    return out


def _p99(key: str, engine_ids: list[int], lo: datetime,
         hi: datetime) -> tuple[float | None, int]:
    """p99 from the bucket counts summed over the rows, and the observations behind it."""
    by_layout = engine_buckets(key, engine_ids, lo, hi).get(None)
    if not by_layout:
        return None, 0
    layout, counts = dominant_layout(by_layout)
    bounds = HistogramLayout.objects.filter(pk=layout).values_list("bounds", flat=True).first()
    value = histogram_quantile(0.99, bounds or [], counts)
    return (None if value is None else round(value, 4)), sum(counts)


# -- rolling back -----------------------------------------------------------------------------


def rollback(step: Step, why: str) -> None:
    """Every replica on the new config back to the from-revision's; the service's desired
    config too; the rollout ends rolled_back."""
    from controlplane.fleet import services

    r, service = step.rollout, step.service
    r.state, r.ended_at, r.detail, r.phase = RolloutState.ROLLED_BACK, step.now, why[:2000], ""
    r.save(update_fields=["state", "ended_at", "detail", "phase", "done"])
    restored, removed = _restore_replicas(step, why)
    _event(r, ServiceEventKind.ROLLED_BACK,
           f"rollout of revision {r.from_revision} -> {r.to_revision} rolled back: {why}",
           step.now, step.current(), why=why, restored=restored, removed=removed)
    token = _RESTORING.set(r.pk)
    try:
        with transaction.atomic():
            services.revert(service, r.from_revision, author=None, reason=f"rollback: {why}")
    except ValidationError as exc:
        r.detail = f"{r.detail}; the service's desired config stays at revision " \
                   f"{r.to_revision}: {'; '.join(exc.messages)}"[:4000]
        r.save(update_fields=["detail"])
    finally:
        _RESTORING.reset(token)
    service.refresh_from_db()
    routing.sync(service, step.now)


def _restore_replicas(step: Step, why: str) -> tuple[list[str], list[str]]:
    """The replicas on the new config: a surge replica whose old one still runs is deleted,
    every other one gets the from-revision's config as a new revision."""
    service = step.service
    old_config = from_config(step.rollout, step.target)
    restored, removed = [], []
    for d in service.replica_set.select_related("host").order_by("replica", "id"):
        if replica_fields(d) != step.target:
            continue
        if _surged_over(service, d) is not None:
            deployments.delete(d, owner=service)
            removed.append(d.name)
            continue
        try:
            _apply(d, old_config, service, f"rollback: {why}")
            restored.append(d.name)
        except Stop as exc:
            log.warning("service %s: %s could not be rolled back: %s", service, d.name, exc)
    return restored, removed


def from_config(rollout: Rollout, target: dict) -> dict:
    """The replica config of the rollout's from-revision. Revisions keep env values redacted:
    a replica not yet changed still holds the old values; failing that, each replica keeps its
    own value of a key (deployments.save resolves REDACTED so)."""
    revision = ServiceRevision.objects.filter(service_id=rollout.service_id,
                                              revision=rollout.from_revision).first()
    config = {name: (revision.config if revision else {}).get(name, target[name])
              for name in REPLICA_FIELDS}
    unchanged = next((d for d in Deployment.objects.filter(service_id=rollout.service_id)
                      if replica_fields(d) != target), None)
    if unchanged is not None and isinstance(config["env"], dict):
        config["env"] = {k: unchanged.env.get(k, v) if v == deployments.REDACTED else v
                         for k, v in config["env"].items()}
    return config


# -- events -----------------------------------------------------------------------------------


def _event(rollout: Rollout, kind: str, message: str, at: datetime,
           deployment: Deployment | None = None, **data) -> ServiceEvent:
    return ServiceEvent.objects.create(
        service_id=rollout.service_id, kind=kind, at=at, deployment=deployment,
        message=message, data={"rollout": rollout.pk, **data})
