"""Celery: one evaluation cycle every PITWALL["ALERT_EVAL_INTERVAL_S"] seconds (beat)."""

from __future__ import annotations

from celery import shared_task
from django.db import OperationalError

from controlplane.alerts.delivery.tasks import dispatch_notifications
from controlplane.alerts.evaluate import evaluate
from controlplane.alerts.models import AlertState

# Transitions a notification reports: dispatch at once instead of at its next beat tick.
NOTIFIED = (AlertState.FIRING, AlertState.RESOLVED)


@shared_task(autoretry_for=(OperationalError,), retry_backoff=True, retry_jitter=True,
             max_retries=2, ignore_result=True)
def evaluate_rules() -> dict:
    result = evaluate()
    if any(to in NOTIFIED for *_, to in result.transitions):
        dispatch_notifications.delay()
    return {"skipped": result.skipped, "rules": result.rules, "hits": result.hits,
            "transitions": len(result.transitions)}
