"""A cycle summarises the BRIN ranges of the newest raw rows that filled since the last one."""

from __future__ import annotations

from datetime import timedelta

from django.db import connection

from controlplane.alerts.windows import brin
from controlplane.telemetry import partitions
from controlplane.telemetry.partitions import day_of, partition_name
from controlplane.telemetry.schema import TABLES
from tests.support.alert_data import T0

GPUS = TABLES["gpu"].name


def unsummarised(partition: str) -> int:
    """How many ranges of the partition's BRIN index are not summarised (and summarises them:
    call it last)."""
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT brin_summarize_new_values('{partition}_ts_idx'::regclass)")
        return cursor.fetchone()[0]


def test_the_filled_ranges_are_summarised_and_the_last_is_left_filling(node):
    with connection.cursor() as cursor:  # rows in time order, as ingest writes them: ~4 ranges
        partitions.ensure(cursor, {day_of(T0.timestamp())})
        cursor.execute(f"INSERT INTO {GPUS} (gpu_id, ts, temp_c) "
                       f"SELECT %s, %s - n * interval '500 milliseconds', 50 "
                       f"FROM generate_series(80000, 1, -1) n", [node.gpus[0].id, T0])
        cursor.execute("SELECT pg_relation_size(%s) / 8192",
                       [partition_name(GPUS, day_of(T0.timestamp()))])
        pages = cursor.fetchone()[0]
    partition = partition_name(GPUS, day_of(T0.timestamp()))
    brin._DONE.pop(partition, None)
    assert pages > 3 * brin.RANGE_PAGES

    done = brin.summarize_new_ranges(TABLES["gpu"], T0 - timedelta(seconds=20), T0)

    full = (pages - 1) // brin.RANGE_PAGES
    assert 0 < done <= full  # autovacuum may have summarised some meanwhile
    assert brin._DONE[partition] == full  # the next cycle starts at the range still filling
    assert brin.summarize_new_ranges(TABLES["gpu"], T0 - timedelta(seconds=20), T0) == 0
    assert unsummarised(partition) == 1  # only the last range, which ingest keeps filling
