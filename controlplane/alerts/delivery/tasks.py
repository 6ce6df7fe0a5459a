"""Celery tasks: thin, taking ids; the work is in dispatch.py and service.py.

Beat runs ``dispatch_notifications`` and ``deliver_due`` every few seconds; a dispatch queues a
``deliver`` per new row at once so the first attempt does not wait for the next ``deliver_due``.
"""

from __future__ import annotations

from celery import shared_task
from django.db import OperationalError

from controlplane.alerts.delivery import dispatch as dispatching
from controlplane.alerts.delivery import service
from controlplane.alerts.delivery.models import Channel


@shared_task(autoretry_for=(OperationalError,), retry_backoff=True, retry_jitter=True,
             max_retries=2, ignore_result=True)
def dispatch_notifications() -> int:
    ids = dispatching.dispatch()  # committed on return
    for notification_id in ids:
        deliver.delay(notification_id)
    return len(ids)


@shared_task(ignore_result=True)
def deliver(notification_id: int) -> str | None:
    row = service.deliver(notification_id)  # None: not due, gone, or claimed elsewhere
    return row.state if row else None


@shared_task(ignore_result=True)
def deliver_due() -> int:
    return len(service.deliver_due())


@shared_task
def send_test_notification(channel_id: int) -> str | None:
    channel = Channel.objects.filter(id=channel_id).first()
    if channel is None:
        return None
    return service.send_test(channel).state
