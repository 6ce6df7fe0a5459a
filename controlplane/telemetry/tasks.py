from celery import shared_task
from django.conf import settings

from controlplane.telemetry import maintenance, rollups
from controlplane.telemetry.packing import job as packing


@shared_task
def maintain_partitions() -> dict:
    return maintenance.maintain_partitions()


@shared_task
def roll_up() -> dict:
    # Stop starting new chunks before the next beat: a backlog continues in the next run.
    return rollups.run(budget_s=settings.PITWALL["ROLLUP_INTERVAL_S"] * 0.75)


@shared_task
def pack_history() -> dict:
    # Claimed with an advisory lock, idempotent; a long day continues in the next run.
    return packing.run(budget_s=settings.PITWALL["PACK_INTERVAL_S"] * 0.75)
