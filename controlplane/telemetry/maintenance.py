"""Partition upkeep: create the coming partitions, drop those past retention (hourly task).

Raw samples are kept ``RAW_RETENTION_DAYS`` (their packed minutes too), 1-minute rollups
``ROLLUP_1M_RETENTION_DAYS``, 1-hour rollups ``ROLLUP_1H_RETENTION_DAYS``; a partition goes once
it ends on or before today minus that many days, so a monthly 1-hour partition outlives its
cutoff by up to a month.
"""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta

from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone

from controlplane.telemetry import partitions
from controlplane.telemetry.models import PackDirty, PackProgress
from controlplane.telemetry.packing.schema import TABLES as PACKED_TABLES
from controlplane.telemetry.rollups.schema import TABLES as ROLLUP_TABLES
from controlplane.telemetry.rollups.schema import TIERS
from controlplane.telemetry.schema import TABLES


def ensure_rollup_partitions(cursor, today: date, behind: int, ahead: int) -> None:
    days = partitions.days_around(today, behind, ahead)
    for tier in TIERS.values():
        names = [t.name for t in ROLLUP_TABLES[tier.name].values()]
        partitions.ensure(cursor, days, names, tier.period)


def maintain_partitions(today: date | None = None) -> dict:
    today = today or timezone.now().date()
    conf = settings.PITWALL
    ahead = conf["PARTITIONS_AHEAD_DAYS"]
    dropped: list[str] = []
    with transaction.atomic(), connection.cursor() as cursor:
        partitions.ensure(cursor, partitions.days_around(today, 0, ahead))
        ensure_rollup_partitions(cursor, today, 0, ahead)
        cutoff = today - timedelta(days=conf["RAW_RETENTION_DAYS"])
        for table in [*TABLES.values(), *PACKED_TABLES.values()]:
            dropped += partitions.drop_before(cursor, table.name, cutoff)
        PackProgress.objects.filter(day__lt=cutoff).delete()
        PackDirty.objects.filter(bucket__lt=_midnight(cutoff)).delete()
        for tier in TIERS.values():
            cutoff = today - timedelta(days=conf[tier.retention_setting])
            for rollup in ROLLUP_TABLES[tier.name].values():
                dropped += partitions.drop_before(cursor, rollup.name, cutoff, tier.period)
    return {"created_through": str(today + timedelta(days=ahead)), "dropped": dropped}


def _midnight(day: date) -> datetime:
    return datetime(day.year, day.month, day.day, tzinfo=UTC)
