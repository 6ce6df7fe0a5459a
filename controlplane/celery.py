"""The Celery app: workers and beat run the periodic work (partitions, rollups, alert rules,
tuning)."""

from __future__ import annotations

import os

from celery import Celery
from django.conf import settings

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "controlplane.settings")

app = Celery("pitwall")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
# Tasks of a subpackage are not found by the default discovery (one tasks module per app).
app.autodiscover_tasks(["controlplane.alerts.delivery"])
# While Redis (the broker) is unreachable, beat runs the alert cycle itself and the other
# periodic tasks wait for it (controlplane/beat.py, docs/alerts.md "Redis down").
app.conf.beat_scheduler = "controlplane.beat:Scheduler"


def beat_schedule() -> dict:
    """The periodic tasks, at the intervals of settings.PITWALL."""
    pitwall = settings.PITWALL
    rollup_s = float(pitwall["ROLLUP_INTERVAL_S"])
    pack_s = float(pitwall["PACK_INTERVAL_S"])
    evaluate_s = float(pitwall["ALERT_EVAL_INTERVAL_S"])
    dispatch_s = float(pitwall["ALERT_DISPATCH_INTERVAL_S"])
    tuning_s = float(pitwall["TUNING_INTERVAL_S"])
    return {
        "maintain-partitions": {
            "task": "controlplane.telemetry.tasks.maintain_partitions",
            "schedule": 3600.0,
        },
        "roll-up": {
            "task": "controlplane.telemetry.tasks.roll_up",
            "schedule": rollup_s,
        },
        "pack-history": {
            "task": "controlplane.telemetry.tasks.pack_history",
            "schedule": pack_s,
        },
        "evaluate-alert-rules": {
            "task": "controlplane.alerts.tasks.evaluate_rules",
            "schedule": evaluate_s,
            # A cycle that waited longer than one interval is stale: the next one supersedes it.
            "options": {"expires": evaluate_s},
        },
        # Notifications: group firing/resolved alerts per route, then deliver the due rows.
        "dispatch-notifications": {
            "task": "controlplane.alerts.delivery.tasks.dispatch_notifications",
            "schedule": dispatch_s,
            "options": {"expires": dispatch_s},
        },
        "deliver-due-notifications": {
            "task": "controlplane.alerts.delivery.tasks.deliver_due",
            "schedule": dispatch_s,
            "options": {"expires": dispatch_s},
        },
        "diagnose-deployments": {
            "task": "controlplane.tuning.tasks.diagnose_deployments",
            "schedule": tuning_s,
            "options": {"expires": tuning_s},
        },
        "follow-up-suggestions": {
            "task": "controlplane.tuning.tasks.follow_up_suggestions",
            "schedule": tuning_s,
            "options": {"expires": tuning_s},
        },
    }


# A promise, evaluated when Celery first reads its configuration (Django's settings are loaded
# by then): this module is imported while they are being loaded (controlplane/__init__.py), so
# it must not read them itself. An explicit app.conf.beat_schedule still wins.
app.add_defaults(lambda: {"beat_schedule": beat_schedule()})
