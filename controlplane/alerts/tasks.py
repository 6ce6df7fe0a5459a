"""Celery: one evaluation cycle every PITWALL["ALERT_EVAL_INTERVAL_S"] seconds (beat)."""

from __future__ import annotations

import logging
import time

from celery import shared_task
from django.conf import settings
from django.db import OperationalError

from controlplane.alerts.delivery.tasks import dispatch_notifications
from controlplane.alerts.evaluate import evaluate
from controlplane.alerts.models import AlertState

log = logging.getLogger(__name__)

# Transitions a notification reports: dispatch at once instead of at its next beat tick.
NOTIFIED = (AlertState.FIRING, AlertState.RESOLVED)


@shared_task(autoretry_for=(OperationalError,), retry_backoff=True, retry_jitter=True,
             max_retries=2, ignore_result=True)
def evaluate_rules() -> dict:
    started = time.monotonic()
    result = evaluate()
    took, interval = time.monotonic() - started, settings.PITWALL["ALERT_EVAL_INTERVAL_S"]
    if took > interval:
        # Ticks that came meanwhile waited or found the lock held: rules ran less often.
        log.warning("alert evaluation: a cycle of %d rules took %.1f s (%s), longer than its "
                    "%d-s interval, so rules are evaluated less often than configured: give the "
                    "evaluating worker process a core of its own, and the state half "
                    "PITWALL_ALERT_EVAL_LANES lanes on as many PostgreSQL cores "
                    "(docs/alerts.md, Sizing)", result.rules, took,
                    ", ".join(f"{phase} {s:.1f} s" for phase, s in result.seconds.items()),
                    interval)
    if any(to in NOTIFIED for *_, to in result.transitions):
        dispatch_notifications.delay()
    return {"skipped": result.skipped, "rules": result.rules, "hits": result.hits,
            "transitions": len(result.transitions), "errors": len(result.errors)}
