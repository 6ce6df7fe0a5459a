"""Celery: one evaluation cycle every PITWALL["ALERT_EVAL_INTERVAL_S"] seconds (beat); with
evaluator shards, each worker's cycles over the shards it holds (``leases.py``)."""

from __future__ import annotations

import logging
import os
import socket
import time

from celery import shared_task
from celery.signals import worker_shutdown
from django.conf import settings
from django.db import DatabaseError, OperationalError

from controlplane.alerts import leases
from controlplane.alerts.delivery.tasks import dispatch_notifications
from controlplane.alerts.evaluate import CycleResult, evaluate_held
from controlplane.alerts.models import AlertState

log = logging.getLogger(__name__)

# Transitions a notification reports: dispatch at once instead of at its next beat tick.
NOTIFIED = (AlertState.FIRING, AlertState.RESOLVED)


@shared_task(bind=True, autoretry_for=(OperationalError,), retry_backoff=True,
             retry_jitter=True, max_retries=2, ignore_result=True)
def evaluate_rules(self) -> dict:
    started = time.monotonic()
    results = evaluate_held(evaluator_name(self.request.hostname))
    took, interval = time.monotonic() - started, settings.PITWALL["ALERT_EVAL_INTERVAL_S"]
    if took > interval:
        # Ticks that came meanwhile waited or found the lock held: rules ran less often.
        log.warning("alert evaluation: cycles of %d rules took %.1f s (%s), longer than its "
                    "%d-s interval, so rules are evaluated less often than configured: give the "
                    "evaluating worker process a core of its own, the state half "
                    "PITWALL_ALERT_EVAL_LANES lanes on as many PostgreSQL cores, or more "
                    "workers PITWALL_ALERT_EVAL_SHARDS shards (docs/alerts.md, Sizing)",
                    max((r.rules for r in results), default=0), took,
                    "; ".join(_phases(r) for r in results), interval)
    if any(to in NOTIFIED for r in results for *_, to in r.transitions):
        dispatch_notifications.delay()
    return {"skipped": all(r.skipped for r in results), "shards": len(results),
            "rules": max((r.rules for r in results), default=0),
            "hits": sum(r.hits for r in results),
            "transitions": sum(len(r.transitions) for r in results),
            "errors": len({rule for r in results for rule in r.errors})}


def _phases(result: CycleResult) -> str:
    return ", ".join(f"{phase} {s:.1f} s" for phase, s in result.seconds.items())


def evaluator_name(node: str | None) -> str:
    """Who holds evaluator shards: the Celery worker node (any of its pool processes may run a
    tick; slices that another process built are rebuilt, never trusted), or host and pid."""
    return node or f"{socket.gethostname()}:{os.getpid()}"


@worker_shutdown.connect
def give_back_shards(sender=None, **_) -> None:
    """A worker stopping in order hands its shards back: the others take them at their next
    tick instead of after the lease."""
    if settings.PITWALL["ALERT_EVAL_SHARDS"] <= 1:
        return
    try:
        leases.release(evaluator_name(getattr(sender, "hostname", None)))
    except DatabaseError:
        log.warning("alert evaluation: could not hand the shards back; they move to another "
                    "worker when their lease lapses", exc_info=True)
