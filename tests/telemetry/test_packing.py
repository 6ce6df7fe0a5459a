"""Packed history: sealed days' raw rows move into per-minute arrays and read back the same."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta

import psycopg
import pytest
from django.db import connection

from agents.protocol import METRICS
from controlplane.fleet.models import Host
from controlplane.telemetry import maintenance, partitions, rollups
from controlplane.telemetry.ingest.copy import dsn_from_settings
from controlplane.telemetry.models import PackDirty, PackProgress, RollupDirty, RollupWatermark
from controlplane.telemetry.packing import job, merge
from controlplane.telemetry.packing.read import source
from controlplane.telemetry.packing.schema import TABLES as PACKED
from controlplane.telemetry.schema import TABLES
from controlplane.telemetry.series import read_series
from tests.telemetry.factories import batch, sample
from tests.telemetry.rollup_data import D0, fetch, insert_rows, start_rollups_at, write_history

DAY = timedelta(days=1)
MIDNIGHT = D0 + DAY  # the boundary: D0 is sealed at NOW, D0 + 1 day is not
NOW = MIDNIGHT + timedelta(hours=3)
HISTORY_END = D0 + timedelta(hours=2, minutes=1)
ENTITIES = ("gpu", "host", "engine", "proc")


def boundary_rows(history) -> None:
    """Rows every 5 s for ten minutes either side of MIDNIGHT (GPU and host)."""
    stamps = [MIDNIGHT + timedelta(seconds=s) for s in range(-600, 600, 5)]
    insert_rows("gpu", [{"gpu_id": history.gpu.id, "ts": ts, "util_pct": i % 101,
                         "temp_c": None if i % 7 == 0 else 50 + i % 9}
                        for i, ts in enumerate(stamps)])
    insert_rows("host", [{"host_id": history.host.id, "ts": ts, "cpu_pct": i / 4,
                          "cpu_core_pct": [float(i % 5), 1.5] if i % 9 else None}
                         for i, ts in enumerate(stamps)])


@pytest.fixture
def history(db):
    history = write_history()
    boundary_rows(history)
    start_rollups_at(D0)
    rollups.run(now=D0 + timedelta(hours=2, minutes=2))
    # As if the 1-minute rollups were built through the sealed day.
    RollupWatermark.objects.filter(resolution="1m").update(upto=MIDNIGHT + timedelta(hours=2))
    return history


def all_rows(entity: str, lo=D0, hi=MIDNIGHT + DAY) -> list[tuple]:
    """Every raw-shaped row, raw and packed, in key and time order."""
    table = TABLES[entity]
    from_sql, params = source(entity, lo, hi)
    order = ", ".join(table.primary_key)
    return fetch(f"SELECT * FROM {from_sql} ORDER BY {order}", params)


def raw_count(entity: str, day=D0) -> int:
    child = partitions.partition_name(TABLES[entity].name, day.date())
    return fetch(f"SELECT count(*) FROM {child}")[0][0]


def series_cases(history) -> list[dict]:
    gpu, host, engine = str(history.gpu.id), str(history.host.id), str(history.engine.id)
    whole = {"start": D0, "end": HISTORY_END}
    edge = {"start": MIDNIGHT - timedelta(minutes=10), "end": MIDNIGHT + timedelta(minutes=10)}
    cases = []
    # max_points: the rows as they are, and raw rows in buckets (fewer minutes than points).
    for window, bucketed in ((whole, 1000), (edge, 100)):
        for points in (10_000, bucketed):
            for stat in ("avg", "min", "max", "last"):
                cases.append({"metric": "gpu.util_pct", "entity": [gpu], "stat": stat,
                              "max_points": points, **window})
            cases.append({"metric": "gpu.temp_c", "entity": [gpu], "max_points": points,
                          **window})
            cases.append({"metric": "host.cpu_core_pct", "entity": [host],
                          "max_points": points, **window})
    for points in (10_000, 1000):
        for stat in ("avg", "min", "last"):  # a bitmask: or, and, last
            cases.append({"metric": "gpu.throttle_reasons", "entity": [gpu], "stat": stat,
                          "max_points": points, **whole})
        cases += [
            {"metric": "gpu.xid_last", "entity": [gpu], "max_points": points, **whole},
            {"metric": "gpu.mem_used_bytes", "entity": [gpu], "max_points": points, **whole},
            {"metric": "engine.ttft_seconds", "entity": [engine], "max_points": points,
             **whole},
            {"metric": "engine.ttft_seconds", "entity": [engine], "quantile": 0.9,
             "max_points": points, **whole},
            {"metric": "engine.kv_cache_usage", "entity": [engine], "max_points": points,
             **whole},
            {"metric": "proc.cpu_pct", "host": host, "max_points": points, **whole},
        ]
    return cases


def read_all(cases: list[dict]) -> list:
    out = []
    for case in cases:
        args = {k: v for k, v in case.items() if k != "metric"}
        got = read_series(METRICS[case["metric"]], **args)
        out.append((got.resolution, got.step,
                    [(line.entity.keys, line.points) for line in got.series]))
    return out


def test_series_and_rows_read_back_the_same_after_packing(history):
    cases = series_cases(history)
    before_series = read_all(cases)
    before_rows = {e: all_rows(e) for e in ENTITIES}
    assert {(r[0], r[1] is None) for r in before_series} == {("raw", True), ("raw", False)}

    report = job.run(now=NOW)

    assert report["sealed"] == [D0.date().isoformat()]
    assert all(raw_count(e) == 0 for e in ENTITIES)  # the sealed day's partitions are empty
    assert raw_count("gpu", MIDNIGHT) > 0  # the next day is not sealed: still raw
    packed = fetch(f"SELECT count(*), sum(n) FROM {PACKED['gpu'].name}")[0]
    assert packed[0] == 121 + 10 and packed[1] == 12 * 121 + 120
    assert {e: all_rows(e) for e in ENTITIES} == before_rows
    assert read_all(cases) == before_series


def test_packing_is_idempotent(history):
    job.run(now=NOW)
    packed = {e: all_rows(e) for e in ENTITIES}
    again = job.run(now=NOW)
    assert again["chunks"] == 0 and again["sealed"] == []
    assert {e: all_rows(e) for e in ENTITIES} == packed


def test_merging_the_same_raw_rows_twice_keeps_one_of_each(history):
    table, child = PACKED["gpu"], partitions.partition_name(TABLES["gpu"].name, D0.date())
    before = all_rows("gpu")
    with connection.cursor() as cursor:
        partitions.ensure(cursor, {D0.date()}, [table.name])
        for _ in range(2):
            cursor.execute(merge.merge_sql(table, merge.range_src(table, child)),
                           {"lo": D0, "hi": MIDNIGHT})
        cursor.execute(f"TRUNCATE {child}")
    assert fetch(f"SELECT sum(n) FROM {table.name}")[0][0] == 12 * 121 + 120
    assert all_rows("gpu") == before


def util(rows: list[tuple]) -> dict:
    at = [c.name for c in TABLES["gpu"].all_columns].index("util_pct")
    return {r[1]: r[at] for r in rows}


def test_late_rows_into_a_packed_minute_are_merged_once(history):
    minute = D0 + timedelta(minutes=5)
    original = util(all_rows("gpu", minute, minute + timedelta(minutes=1)))[minute]
    job.run(now=NOW)
    # An agent's spool replays a new sample and a copy of one already packed.
    insert_rows("gpu", [{"gpu_id": history.gpu.id, "ts": minute + timedelta(seconds=2.5),
                         "util_pct": 42.0},
                        {"gpu_id": history.gpu.id, "ts": minute, "util_pct": 1.0}])
    PackDirty.objects.create(host_id=history.host.id, bucket=minute)
    RollupDirty.objects.create(resolution="1m", host_id=history.host.id, bucket=minute)

    report = job.run(now=NOW)

    assert report["sealed"] == [D0.date().isoformat()] and report["late_minutes"] == 1
    assert raw_count("gpu") == 0 and not PackDirty.objects.exists()
    rows = all_rows("gpu", minute, minute + timedelta(minutes=1))
    stamps = [r[1] for r in rows]
    assert len(stamps) == len(set(stamps)) == 13  # 12 packed, one new, the copy not twice
    assert util(rows)[minute + timedelta(seconds=2.5)] == 42.0
    assert util(rows)[minute] == original  # the row packed first stays
    # The 1-minute rollup of that minute is rebuilt from the packed rows and the late one.
    rollups.run(now=NOW)
    n = fetch(f"SELECT n FROM {rollups.TABLES['1m']['gpu'].name} WHERE gpu_id = %s AND ts = %s",
              [history.gpu.id, minute])
    assert n == [(13,)]


def test_a_late_row_is_read_before_the_job_merges_it(history):
    job.run(now=NOW)
    late = D0 + timedelta(minutes=5, seconds=1)
    insert_rows("gpu", [{"gpu_id": history.gpu.id, "ts": late, "util_pct": 42.0}])
    got = read_series(METRICS["gpu.util_pct"], late, late + timedelta(seconds=1),
                      entity=[str(history.gpu.id)])
    assert got.series[0].points == [(late.timestamp(), 42.0)]


def test_ingest_marks_samples_of_sealed_days_for_the_packing_job(ingest, host_token):
    old = (time.time() - 30 * 3600) // 60 * 60 + 10.0  # 30 hours ago: its day has ended
    recent = time.time() - 120  # two minutes ago: late for rollups, not for packing
    code, reply = ingest.post(batch(samples=[sample(old), sample(recent)]), host_token)
    assert code == 200, reply
    host = Host.objects.get(hostname="gpu-node-1")
    assert set(PackDirty.objects.values_list("host_id", "bucket")) == {
        (host.id, datetime.fromtimestamp(old // 60 * 60, UTC))}


@pytest.fixture
def committed_history(empty_samples):
    """The history, committed: another connection sees its partitions. The packed tables,
    outside Django's flush, are emptied after."""
    history = write_history()
    start_rollups_at(MIDNIGHT + timedelta(hours=2))
    yield history
    with connection.cursor() as cursor:
        cursor.execute(f"TRUNCATE {', '.join(t.name for t in PACKED.values())}")


def test_a_partition_in_use_is_sealed_by_a_later_run(committed_history):
    child = partitions.partition_name(TABLES["host"].name, D0.date())
    with psycopg.connect(dsn_from_settings(connection.settings_dict)) as other:
        other.execute(f"LOCK TABLE {child} IN ACCESS SHARE MODE")  # a reader, mid-transaction
        busy = job.run(now=NOW)
        assert "busy" in busy and busy["sealed"] == []
        assert raw_count("gpu") > 0  # nothing emptied while a partition could not be locked
        other.rollback()
    assert job.run(now=NOW)["sealed"] == [D0.date().isoformat()]
    assert raw_count("gpu") == 0


def test_nothing_is_packed_before_the_rollups_built_it(history):
    RollupWatermark.objects.filter(resolution="1m").update(upto=D0 + timedelta(hours=1))
    report = job.run(now=NOW)
    assert report["sealed"] == []
    for entity in ENTITIES:
        built = fetch(f"SELECT max(ts) FROM {PACKED[entity].name}")[0][0]
        assert built == D0 + timedelta(minutes=59)
    assert raw_count("gpu") == 12 * 121 + 120  # read, not yet emptied
    RollupWatermark.objects.all().delete()
    assert job.run(now=NOW)["waiting"]


def test_a_day_not_yet_sealed_stays_raw(history):
    assert job.run(now=MIDNIGHT + timedelta(hours=1, minutes=59))["chunks"] == 0
    assert raw_count("gpu") == 12 * 121 + 120


def test_retention_drops_packed_partitions_with_the_raw_ones(history):
    job.run(now=NOW)
    name = partitions.partition_name(PACKED["gpu"].name, D0.date())
    assert fetch("SELECT to_regclass(%s) IS NOT NULL", [name])[0][0]
    report = maintenance.maintain_partitions(today=(D0 + timedelta(days=15)).date())
    assert name in report["dropped"]
    assert not PackProgress.objects.filter(day=D0.date()).exists()


def test_a_full_minute_is_compressed_in_its_row(db):
    history = write_history()
    start = D0 + timedelta(hours=5)
    insert_rows("gpu", [{"gpu_id": history.gpu.id, "ts": start + timedelta(seconds=s),
                         "util_pct": 90 + s % 3, "mem_used_bytes": 2**36,
                         "mem_total_bytes": 80 * 2**30, "temp_c": 60.0, "power_w": 400 + s,
                         "sm_clock_mhz": 1980.0, "pcie_tx_bps": 1024.0 * s,
                         "throttle_reasons": 0} for s in range(60)])
    start_rollups_at(MIDNIGHT + timedelta(hours=2))
    job.run(now=NOW)
    found = fetch(f"SELECT pg_column_compression(util_pct), pg_column_compression(mem_used_bytes),"
                  f" n FROM {PACKED['gpu'].name} WHERE ts = %s", [start])
    assert found == [("lz4", "lz4", 60)]


def test_tuning_reads_a_process_affinity_from_packed_minutes(history):
    """Tuning's facts for a window that ended in a sealed day find the process's CPU affinity
    in the packed minutes."""
    from controlplane.tuning.facts import Facts, _affinity

    at = D0 + timedelta(hours=1, minutes=30)
    insert_rows("proc", [{"host_id": history.host.id, "pid": 5151, "ts": at,
                          "engine_id": history.engine.id, "cpu_pct": 99.0,
                          "cpu_affinity": [2, 3]}])
    job.run(now=NOW)
    assert raw_count("proc") == 0
    facts = {1: Facts(None, history.host, [], {}, at - timedelta(minutes=5),
                      at + timedelta(seconds=30))}

    _affinity(facts, [(1, history.engine.id)])

    assert facts[1].proc_cpus == {2, 3}
