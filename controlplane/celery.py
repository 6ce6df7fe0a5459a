"""The Celery app: workers and beat run the periodic work (partitions now; rules later)."""

from __future__ import annotations

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "controlplane.settings")

app = Celery("pitwall")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()

app.conf.beat_schedule = {
    "maintain-partitions": {
        "task": "controlplane.telemetry.tasks.maintain_partitions",
        "schedule": 3600.0,
    },
}
