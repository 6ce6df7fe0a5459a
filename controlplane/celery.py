"""The Celery app: workers and beat run the periodic work (partitions, rollups, alert rules,
tuning)."""

from __future__ import annotations

import os

from celery import Celery

from controlplane.lib.env import envint

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "controlplane.settings")

app = Celery("pitwall")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
# Tasks of a subpackage are not found by the default discovery (one tasks module per app).
app.autodiscover_tasks(["controlplane.alerts.delivery"])
# While Redis (the broker) is unreachable, beat runs the alert cycle itself and the other
# periodic tasks wait for it (controlplane/beat.py, docs/alerts.md "Redis down").
app.conf.beat_scheduler = "controlplane.beat:Scheduler"

# settings.PITWALL["ROLLUP_INTERVAL_S"] reads the same variable; this module is imported before
# Django's settings are configured, so it reads it itself.
ROLLUP_INTERVAL_S = envint("PITWALL_ROLLUP_INTERVAL_S", 60, minimum=1)
PACK_INTERVAL_S = envint("PITWALL_PACK_INTERVAL_S", 300, minimum=1)
ALERT_EVAL_INTERVAL_S = envint("PITWALL_ALERT_EVAL_INTERVAL_S", 10, minimum=1)
ALERT_DISPATCH_INTERVAL_S = envint("PITWALL_ALERT_DISPATCH_INTERVAL_S", 5, minimum=1)
TUNING_INTERVAL_S = envint("PITWALL_TUNING_INTERVAL_S", 60, minimum=1)

app.conf.beat_schedule = {
    "maintain-partitions": {
        "task": "controlplane.telemetry.tasks.maintain_partitions",
        "schedule": 3600.0,
    },
    "roll-up": {
        "task": "controlplane.telemetry.tasks.roll_up",
        "schedule": float(ROLLUP_INTERVAL_S),
    },
    "pack-history": {
        "task": "controlplane.telemetry.tasks.pack_history",
        "schedule": float(PACK_INTERVAL_S),
    },
    "evaluate-alert-rules": {
        "task": "controlplane.alerts.tasks.evaluate_rules",
        "schedule": float(ALERT_EVAL_INTERVAL_S),
        # A cycle that waited longer than one interval is stale: the next one supersedes it.
        "options": {"expires": float(ALERT_EVAL_INTERVAL_S)},
    },
    # Notifications: group firing/resolved alerts per route, then deliver the due rows.
    "dispatch-notifications": {
        "task": "controlplane.alerts.delivery.tasks.dispatch_notifications",
        "schedule": float(ALERT_DISPATCH_INTERVAL_S),
        "options": {"expires": float(ALERT_DISPATCH_INTERVAL_S)},
    },
    "deliver-due-notifications": {
        "task": "controlplane.alerts.delivery.tasks.deliver_due",
        "schedule": float(ALERT_DISPATCH_INTERVAL_S),
        "options": {"expires": float(ALERT_DISPATCH_INTERVAL_S)},
    },
    "diagnose-deployments": {
        "task": "controlplane.tuning.tasks.diagnose_deployments",
        "schedule": float(TUNING_INTERVAL_S),
        "options": {"expires": float(TUNING_INTERVAL_S)},
    },
    "follow-up-suggestions": {
        "task": "controlplane.tuning.tasks.follow_up_suggestions",
        "schedule": float(TUNING_INTERVAL_S),
        "options": {"expires": float(TUNING_INTERVAL_S)},
    },
}
