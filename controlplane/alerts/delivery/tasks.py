"""Celery tasks: thin, taking ids; the work is in dispatch.py and service.py.

Beat runs ``dispatch_notifications`` and ``deliver_due`` every few seconds. Both queue one
``deliver_channel`` per channel with rows to attempt (a dispatch at once, for its new rows, so
the first attempt does not wait for the next tick): a slow or failing channel keeps one worker
slot busy, and the others deliver the other channels and run the alert cycle (the worker runs
with a concurrency of 2 or more, docs/notifications.md).
"""

from __future__ import annotations

from typing import Any

from celery import shared_task
from celery.signals import worker_init
from django.core.exceptions import ImproperlyConfigured
from django.db import OperationalError

from controlplane.alerts.delivery import dispatch as dispatching
from controlplane.alerts.delivery import service
from controlplane.alerts.delivery.models import Notification


@worker_init.connect
def check_lease(**_: Any) -> None:
    """A lease shorter than an attempt's timeout stops the worker at start, not at its first
    delivery. SystemExit: Celery logs and swallows a signal handler's Exception."""
    try:
        service.lease_s()
    except ImproperlyConfigured as exc:
        raise SystemExit(f"pitwall: {exc}") from exc


@shared_task(autoretry_for=(OperationalError,), retry_backoff=True, retry_jitter=True,
             max_retries=2, ignore_result=True)
def dispatch_notifications() -> int:
    ids = dispatching.dispatch()  # committed on return
    channels = Notification.objects.filter(id__in=ids).values_list("channel_id", flat=True)
    for channel_id in sorted(set(channels)):
        deliver_channel.delay(channel_id)
    return len(ids)


@shared_task(ignore_result=True)
def deliver_channel(channel_id: int) -> int | None:
    """The channel's due rows; None when another worker holds its turn (and covers them)."""
    rows = service.deliver_channel(channel_id)
    return None if rows is None else len(rows)


@shared_task(ignore_result=True)
def deliver_due() -> int:
    """One ``deliver_channel`` per channel with due rows: each runs in a worker slot of its
    own, so a slow receiver delays only its own channel."""
    channels = service.due_channels()
    for channel_id in channels:
        deliver_channel.delay(channel_id)
    return len(channels)
