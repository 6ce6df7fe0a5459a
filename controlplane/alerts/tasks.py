"""Celery: one evaluation cycle every PITWALL["ALERT_EVAL_INTERVAL_S"] seconds (beat)."""

from __future__ import annotations

from celery import shared_task
from django.db import OperationalError

from controlplane.alerts.evaluate import evaluate


@shared_task(autoretry_for=(OperationalError,), retry_backoff=True, retry_jitter=True,
             max_retries=2, ignore_result=True)
def evaluate_rules() -> dict:
    result = evaluate()
    return {"skipped": result.skipped, "rules": result.rules, "hits": result.hits,
            "transitions": len(result.transitions)}
