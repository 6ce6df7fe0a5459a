"""Celery: a tuning pass every PITWALL["TUNING_INTERVAL_S"] seconds, and the follow-up of
accepted suggestions (applied? verified?) on the same beat."""

from __future__ import annotations

from dataclasses import asdict

from celery import shared_task
from django.db import OperationalError

from controlplane.tuning import service


@shared_task(autoretry_for=(OperationalError,), retry_backoff=True, retry_jitter=True,
             max_retries=2, ignore_result=True)
def diagnose_deployments() -> dict:
    result = service.locked_pass()
    return {"skipped": True} if result is None else asdict(result)


@shared_task(autoretry_for=(OperationalError,), retry_backoff=True, retry_jitter=True,
             max_retries=2, ignore_result=True)
def follow_up_suggestions() -> dict:
    return service.follow_up()
