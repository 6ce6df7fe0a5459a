"""The Celery app: workers and beat run the periodic work (partitions, rollups; rules later)."""

from __future__ import annotations

import os

from celery import Celery

from controlplane.lib.env import envint

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "controlplane.settings")

app = Celery("pitwall")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()

# settings.PITWALL["ROLLUP_INTERVAL_S"] reads the same variable; this module is imported before
# Django's settings are configured, so it reads it itself.
ROLLUP_INTERVAL_S = envint("PITWALL_ROLLUP_INTERVAL_S", 60, minimum=1)

app.conf.beat_schedule = {
    "maintain-partitions": {
        "task": "controlplane.telemetry.tasks.maintain_partitions",
        "schedule": 3600.0,
    },
    "roll-up": {
        "task": "controlplane.telemetry.tasks.roll_up",
        "schedule": float(ROLLUP_INTERVAL_S),
    },
}
