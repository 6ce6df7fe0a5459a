"""Celery: the service controller, every PITWALL["SERVICE_TICK_S"] seconds (beat).

Each tick, for every service: set its router's rotation (``routing.sync``), replace the
replicas that cannot recover where they are (``healing.heal``), place the replicas no host
could take before (``services.scale``), and move its running rollout on
(``rollouts.advance``). One service's failure is logged and rolled back to its savepoint;
the others go on. A PostgreSQL advisory lock held for the tick's transaction keeps two ticks
from running at once (a second worker, a tick that outlived its interval): the second skips.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import datetime

from celery import shared_task
from django.db import connection, transaction
from django.utils import timezone

from controlplane.fleet import autoscaling, healing, rollouts, routing
from controlplane.fleet.models import Rollout, RolloutState, Service

log = logging.getLogger(__name__)

LOCK_KEY = 0x50_53_56_43  # "PSVC": one service controller at a time across the cluster


@dataclass
class TickResult:
    skipped: bool = False
    services: int = 0
    rotation_changed: int = 0  # services whose router's worker list changed
    healed: int = 0
    failed: list[str] = field(default_factory=list)  # services whose step raised


def tick(now: datetime | None = None) -> TickResult:
    """One pass of the controller over every service."""
    with transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_try_advisory_xact_lock(%(key)s)", {"key": LOCK_KEY})
            if not cursor.fetchone()[0]:
                return TickResult(skipped=True)
        result = TickResult()
        for service in Service.objects.order_by("id"):
            result.services += 1
            try:
                with transaction.atomic():  # a savepoint: its failure is its own
                    _control(service, now or timezone.now(), result)
            except Exception:  # noqa: BLE001 - one service's bug must not stop the others
                log.exception("service controller: service %s failed this tick", service)
                result.failed.append(service.name)
        return result


def _control(service: Service, now: datetime, result: TickResult) -> None:
    from controlplane.fleet import services  # services imports rollouts

    if routing.sync(service, now):
        result.rotation_changed += 1
    healed = healing.heal(service, now)
    result.healed += len(healed)
    unplaced = service.unplaced
    if unplaced:
        services.scale(service)  # a host may fit now: one came back, a GPU or a label freed
    running = list(Rollout.objects.filter(service=service, state=RolloutState.RUNNING))
    for rollout in running:
        rollouts.advance(rollout, now)
    # No scaling while a change rolls: the replica count is the rollout's to read meanwhile.
    scaled = None if running else autoscaling.step(service, now)
    if healed or unplaced or running or scaled:  # a steady service's tick ends with one sync
        service.refresh_from_db()
        routing.sync(service, now)  # what healing, placement and the rollout changed


@shared_task(ignore_result=True)
def service_controller() -> dict:
    """No retries: the next tick, seconds away, is the retry."""
    result = tick()
    return {"skipped": result.skipped, "services": result.services,
            "rotation_changed": result.rotation_changed, "healed": result.healed,
            "failed": result.failed}
