"""The Celery app: workers and beat run the periodic work (partitions, rollups, alert rules,
tuning)."""

from __future__ import annotations

import os

from celery import Celery
from django.conf import settings
from kombu import Queue
from kombu.common import Broadcast

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "controlplane.settings")

app = Celery("pitwall")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
# Tasks of a subpackage are not found by the default discovery (one tasks module per app).
app.autodiscover_tasks(["controlplane.alerts.delivery"])
# While Redis (the broker) is unreachable, beat runs the alert cycle itself and the other
# periodic tasks wait for it (controlplane/beat.py, docs/alerts.md "Redis down").
app.conf.beat_scheduler = "controlplane.beat:Scheduler"


# With evaluator shards every worker must hear each evaluation tick, since each evaluates the
# shards it holds (alerts/leases.py): the tick goes to a broadcast queue (a fanout exchange,
# which Redis carries), which every worker consumes beside the default queue.
EVALUATION_BROADCAST = "pitwall.alerts.evaluate"
# Its routing key, given on both sides: Redis subscribes a worker to the exchange and key it
# is bound with, and a publish without the key would go to another channel.
EVALUATION_QUEUE = Broadcast(EVALUATION_BROADCAST, routing_key=EVALUATION_BROADCAST)


def sharded() -> bool:
    return settings.PITWALL["ALERT_EVAL_SHARDS"] > 1


def task_queues() -> dict:
    """The worker's queues: Celery's default alone, or with it the evaluation broadcast."""
    if not sharded():
        return {}
    return {"task_queues": (Queue(app.conf.task_default_queue), EVALUATION_QUEUE)}


def every(task: str, seconds: float, *, expires: bool = True) -> dict:
    """A periodic task; ``expires``: a run that waited longer than one interval is stale, the
    next one supersedes it."""
    entry: dict = {"task": task, "schedule": seconds}
    if expires:
        entry["options"] = {"expires": seconds}
    return entry


def beat_schedule() -> dict:
    """The periodic tasks, at the intervals of settings.PITWALL."""
    pitwall = settings.PITWALL
    rollup_s = float(pitwall["ROLLUP_INTERVAL_S"])
    pack_s = float(pitwall["PACK_INTERVAL_S"])
    evaluate_s = float(pitwall["ALERT_EVAL_INTERVAL_S"])
    dispatch_s = float(pitwall["ALERT_DISPATCH_INTERVAL_S"])
    tuning_s = float(pitwall["TUNING_INTERVAL_S"])
    service_s = float(pitwall["SERVICE_TICK_S"])
    evaluation = every("controlplane.alerts.tasks.evaluate_rules", evaluate_s)
    if sharded():
        # Redis carries a fanout only when the publishing channel has declared the exchange as
        # one (Celery declares no broadcast exchange itself): else the tick goes to a list
        # that no worker reads.
        evaluation["options"].update(queue=EVALUATION_BROADCAST, exchange=EVALUATION_BROADCAST,
                                     routing_key=EVALUATION_BROADCAST,
                                     declare=[EVALUATION_QUEUE.exchange])
    return {
        "maintain-partitions": every("controlplane.telemetry.tasks.maintain_partitions", 3600.0,
                                     expires=False),
        "roll-up": every("controlplane.telemetry.tasks.roll_up", rollup_s, expires=False),
        "pack-history": every("controlplane.telemetry.tasks.pack_history", pack_s,
                              expires=False),
        "evaluate-alert-rules": evaluation,
        # Notifications: group firing/resolved alerts per route, then deliver the due rows.
        "dispatch-notifications": every(
            "controlplane.alerts.delivery.tasks.dispatch_notifications", dispatch_s),
        "deliver-due-notifications": every(
            "controlplane.alerts.delivery.tasks.deliver_due", dispatch_s),
        "diagnose-deployments": every(
            "controlplane.tuning.tasks.diagnose_deployments", tuning_s),
        "follow-up-suggestions": every(
            "controlplane.tuning.tasks.follow_up_suggestions", tuning_s),
        # Services: rotation, healing and rollouts (a stale tick is superseded by the next).
        "service-controller": every("controlplane.fleet.tasks.service_controller", service_s),
    }


# A promise, evaluated when Celery first reads its configuration (Django's settings are loaded
# by then): this module is imported while they are being loaded (controlplane/__init__.py), so
# it must not read them itself. An explicit app.conf.beat_schedule still wins.
app.add_defaults(lambda: {"beat_schedule": beat_schedule(), **task_queues()})
