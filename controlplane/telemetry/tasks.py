from celery import shared_task

from controlplane.telemetry import maintenance


@shared_task
def maintain_partitions() -> dict:
    return maintenance.maintain_partitions()
