"""Retention drops whole partitions past each tier's days, keeps the rest, creates ahead."""

from __future__ import annotations

from datetime import date, timedelta

import pytest
from django.db import connection

from controlplane.telemetry import maintenance, partitions
from controlplane.telemetry.rollups.schema import TABLES as ROLLUPS
from controlplane.telemetry.schema import TABLES as RAW

# Far from any date other tests write to: the partitions made here are dropped afterwards.
TODAY = date(2001, 6, 15)
RAW_GPU = RAW["gpu"].name
GPU_1M = ROLLUPS["1m"]["gpu"].name
GPU_1H = ROLLUPS["1h"]["gpu"].name


OLD_YEARS = ("1999", "2000", "2001")


def names(table: str) -> list[str]:
    """This test's partitions of ``table``, in date order."""
    with connection.cursor() as cursor:
        cursor.execute(partitions.EXISTING_SQL, [[table]])
        return sorted(child for _, child in cursor.fetchall()
                      if child.rsplit("_p", 1)[1].startswith(OLD_YEARS))


@pytest.fixture
def old_partitions(transactional_db):
    """Raw and 1-minute days and 1-hour months on both sides of each default cutoff."""
    def days(first: date, count: int) -> list[date]:
        return [first + timedelta(days=i) for i in range(count)]

    with connection.cursor() as cursor:
        partitions.ensure(cursor, days(date(2001, 5, 30), 4))  # raw: cutoff 2001-06-01
        one_minute = [t.name for t in ROLLUPS["1m"].values()]
        partitions.ensure(cursor, days(date(2001, 3, 15), 4), one_minute)  # cutoff 03-17
        one_hour = [t.name for t in ROLLUPS["1h"].values()]
        partitions.ensure(cursor, [date(1999, 5, 1), date(1999, 6, 1)], one_hour, "month")
    yield
    with connection.cursor() as cursor:
        for table in [*RAW.values(), *ROLLUPS["1m"].values(), *ROLLUPS["1h"].values()]:
            for name in names(table.name):
                cursor.execute(f"DROP TABLE {name}")


def test_each_tier_drops_the_partitions_that_ended_by_its_cutoff(old_partitions):
    result = maintenance.maintain_partitions(TODAY)
    # Raw keeps 14 days: 2001-05-31 ended at the cutoff 2001-06-01 and is gone.
    assert names(RAW_GPU)[:3] == [f"{RAW_GPU}_p20010601", f"{RAW_GPU}_p20010602",
                                  f"{RAW_GPU}_p20010615"]
    # 1 min keeps 90 days: cutoff 2001-03-17.
    assert names(GPU_1M)[:2] == [f"{GPU_1M}_p20010317", f"{GPU_1M}_p20010318"]
    # 1 h keeps 730 days: cutoff 1999-06-15, so May 1999 goes and June 1999 stays.
    assert names(GPU_1H)[0] == f"{GPU_1H}_p199906"
    for gone in (f"{RAW_GPU}_p20010531", f"{GPU_1M}_p20010316", f"{GPU_1H}_p199905"):
        assert gone in result["dropped"]


def test_retention_follows_the_settings(old_partitions, settings):
    settings.PITWALL = {**settings.PITWALL, "RAW_RETENTION_DAYS": 100,
                        "ROLLUP_1M_RETENTION_DAYS": 1, "ROLLUP_1H_RETENTION_DAYS": 3650}
    maintenance.maintain_partitions(TODAY)
    assert f"{RAW_GPU}_p20010530" in names(RAW_GPU)
    assert not any(n.endswith(("20010315", "20010318")) for n in names(GPU_1M))
    assert f"{GPU_1H}_p199905" in names(GPU_1H)


def test_it_creates_the_coming_partitions_of_every_tier(old_partitions, settings):
    settings.PITWALL = {**settings.PITWALL, "PARTITIONS_AHEAD_DAYS": 17}
    maintenance.maintain_partitions(TODAY)
    assert f"{RAW_GPU}_p20010702" in names(RAW_GPU)
    assert f"{GPU_1M}_p20010702" in names(GPU_1M)
    assert [n for n in names(GPU_1H) if n.startswith(f"{GPU_1H}_p2001")] == [
        f"{GPU_1H}_p200106", f"{GPU_1H}_p200107"]
