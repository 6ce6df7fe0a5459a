"""Healing: a service replica that cannot come back where it is gets a replacement elsewhere.

A replica is replaced on another host (``services.replace``: placement avoiding its host; the
old one leaves the router and is removed) when

- one of its GPUs is lost: gone from the host's inventory, or the GPU's newest row says NVML
  answers "GPU is lost" (gpu.lost = 1);
- its host has been offline (no report within ``ONLINE_WINDOW_S``) for ``HEAL_OFFLINE_S`` more;
- it crashes again and again: ``CRASH_RESTARTS`` restarts or more, still crashed or backing
  off, its last crash within ``CRASH_WINDOW``.

The replica a running rollout has in hand is left alone (the rollout stops or rolls it back
itself), and so is a slot healed for crashing within ``CRASH_WINDOW``: when the replacement
crashes as well, the config is at fault, not the host, and moving it again would only walk the
fleet. Each replacement is a ``healed`` event (alerted: ``service_disrupted``).
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta

from django.conf import settings
from django.utils import timezone

from controlplane.fleet import routing
from controlplane.fleet.models import (
    Deployment,
    DeploymentState,
    Rollout,
    RolloutState,
    Service,
    ServiceEvent,
    ServiceEventKind,
)

log = logging.getLogger(__name__)

CRASH_RESTARTS = 3
CRASH_WINDOW = timedelta(minutes=10)
CRASHING = (DeploymentState.CRASHED, DeploymentState.BACKING_OFF)


class Cause:
    GPU_LOST = "GPU lost"
    HOST_OFFLINE = "host offline"
    CRASH_LOOP = "crash loop"


def heal(service: Service, now: datetime | None = None) -> list[ServiceEvent]:
    """Replace the service's replicas that cannot recover where they are; the events of the
    replacements made."""
    from controlplane.fleet import services  # services imports the controller's modules

    now = now or timezone.now()
    replicas = list(service.replica_set.filter(enabled=True).select_related("host")
                    .order_by("replica", "id"))
    lost = routing.lost_gpus({d.host_id for d in replicas}, now)
    held = _held_by_rollout(service)
    events = []
    for d in replicas:
        if d.pk in held:
            continue
        cause, why = diagnose(d, lost, now)
        if cause is None or (cause == Cause.CRASH_LOOP and _healed_lately(service, d, now)):
            continue
        name = d.name
        made = services.replace(d, why)  # records the healed event, with why
        if made is None:
            log.info("service %s: %s cannot be replaced yet (%s): no host fits", service,
                     name, why)
            continue
        event = (ServiceEvent.objects.filter(service=service, kind=ServiceEventKind.HEALED,
                                             deployment_id=made.pk).order_by("-id").first())
        if event is not None:
            events.append(event)
    return events


def diagnose(d: Deployment, lost: set[tuple[int, int]],
             now: datetime) -> tuple[str | None, str]:
    """Why the replica must move (a Cause, and words that start with it: the healed event's
    ``why``), or (None, "")."""
    if gone := sorted(i for i in d.gpu_indices or [] if (d.host_id, i) in lost):
        return Cause.GPU_LOST, (f"{Cause.GPU_LOST}: GPU {', '.join(map(str, gone))} of "
                                f"{d.host.hostname} is lost")
    offline_s = _offline_for_s(d, now)
    if offline_s is not None and offline_s >= settings.PITWALL["HEAL_OFFLINE_S"]:
        window = settings.PITWALL["ONLINE_WINDOW_S"]
        return Cause.HOST_OFFLINE, (f"{Cause.HOST_OFFLINE}: {d.host.hostname} has not "
                                    f"reported for {offline_s + window:.0f} s")
    if d.state in CRASHING and d.restarts >= CRASH_RESTARTS and d.state_since is not None \
            and d.state_since >= now - CRASH_WINDOW:
        last = f" ({d.error})" if d.error else ""
        return Cause.CRASH_LOOP, (f"{Cause.CRASH_LOOP}: {d.restarts} restarts and "
                                  f"{d.state} on {d.host.hostname}{last}")
    return None, ""


def _offline_for_s(d: Deployment, now: datetime) -> float | None:
    """Seconds the host has been offline (past its online window); None while online."""
    seen = d.host.last_seen or d.host.created_at
    offline_since = seen + timedelta(seconds=settings.PITWALL["ONLINE_WINDOW_S"])
    return (now - offline_since).total_seconds() if now >= offline_since else None


def _held_by_rollout(service: Service) -> set[int]:
    """The replicas a running rollout has in hand: its current one, and for a surge replica
    the old one of its slot."""
    held: set[int] = set()
    for rollout in Rollout.objects.filter(service=service, state=RolloutState.RUNNING,
                                          current__isnull=False).select_related("current"):
        held.add(rollout.current_id)
        held.update(service.replica_set.filter(replica=rollout.current.replica)
                    .values_list("id", flat=True))
    return held


def _healed_lately(service: Service, d: Deployment, now: datetime) -> bool:
    """Whether the replica's slot was moved for crashing within CRASH_WINDOW."""
    return ServiceEvent.objects.filter(
        service=service, kind=ServiceEventKind.HEALED, at__gte=now - CRASH_WINDOW,
        data__replica=d.replica, data__why__startswith=Cause.CRASH_LOOP).exists()
