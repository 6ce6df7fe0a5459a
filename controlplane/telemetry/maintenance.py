"""Partition upkeep: create the coming days' partitions, drop the days past retention."""

from __future__ import annotations

from datetime import timedelta

from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone

from controlplane.telemetry import partitions
from controlplane.telemetry.schema import TABLES


def maintain_partitions() -> dict:
    today = timezone.now().date()
    ahead = settings.PITWALL["PARTITIONS_AHEAD_DAYS"]
    cutoff = today - timedelta(days=settings.PITWALL["RAW_RETENTION_DAYS"])
    dropped: list[str] = []
    with transaction.atomic(), connection.cursor() as cursor:
        partitions.ensure(cursor, partitions.days_around(today, 0, ahead))
        for table in TABLES.values():
            dropped += partitions.drop_before(cursor, table.name, cutoff)
    return {"created_through": str(today + timedelta(days=ahead)), "dropped": dropped}
