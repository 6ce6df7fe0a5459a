"""The 1-minute and 1-hour rollups equal what the raw rows say, computed here in Python."""

from __future__ import annotations

from datetime import timedelta

import psycopg
import pytest
from django.db import connection

from controlplane.telemetry import rollups
from controlplane.telemetry.ingest.copy import dsn_from_settings
from controlplane.telemetry.series import histogram_quantile
from tests.telemetry.rollup_data import (
    BOUNDS,
    D0,
    OTHER_LAYOUT_MINUTE,
    by_bucket,
    elementwise,
    fetch,
    raw_rows,
    start_rollups_at,
    stats,
    summed_histogram,
    write_history,
)

# Two hours and a minute of rows, rolled up at a time when all of them have settled.
NOW = D0 + timedelta(hours=2, minutes=2)
GPU_SCALARS = {"util_pct": False, "mem_used_bytes": False, "temp_c": False,
               "throttle_reasons": True}


@pytest.fixture
def history(db):
    history = write_history()
    start_rollups_at(D0)
    rollups.run(now=NOW)
    return history


def rollup(tier: str, entity: str, columns: str, where: str, params) -> dict:
    table = rollups.TABLES[tier][entity].name
    rows = fetch(f"SELECT ts, n, {columns} FROM {table} WHERE {where} ORDER BY ts", params)
    return {row[0]: row[1:] for row in rows}


def expected_gpu(history, seconds: int) -> dict:
    names = list(GPU_SCALARS) + ["xid_last"]
    rows = raw_rows("gpu", ", ".join(names), "gpu_id = %s", [history.gpu.id])
    out = {}
    for bucket, group in by_bucket(rows, seconds).items():
        per = {name: stats([r[1 + i] for r in group], GPU_SCALARS.get(name, False))
               for i, name in enumerate(names)}
        out[bucket] = (len(group), per)
    return out


def gpu_columns() -> list[str]:
    cols = []
    for name, bitmask in GPU_SCALARS.items():
        cols += [f"{name}_{s}" for s in (("min", "max", "last") if bitmask
                                         else ("min", "max", "avg", "last"))]
    return cols + ["xid_last_min", "xid_last_max", "xid_last_last"]


@pytest.mark.parametrize(("tier", "seconds", "buckets"), [("1m", 60, 121), ("1h", 3600, 2)])
def test_gpu_rollups_hold_the_min_max_avg_and_last_of_the_raw_rows(history, tier, seconds,
                                                                   buckets):
    cols = gpu_columns()
    got = rollup(tier, "gpu", ", ".join(cols), "gpu_id = %s", [history.gpu.id])
    expected = expected_gpu(history, seconds)
    # The 1-hour tier holds whole hours only: the third hour has a single minute so far.
    expected = {b: e for b, e in expected.items() if b < NOW - timedelta(minutes=2)
                or seconds == 60}
    assert sorted(got) == sorted(expected) and len(got) == buckets
    for bucket, (n, per) in expected.items():
        row = dict(zip(["n", *cols], got[bucket], strict=True))
        assert row["n"] == n
        for col in cols:
            name, stat = col.rsplit("_", 1)
            want = per[name][stat]
            assert row[col] == (pytest.approx(want, rel=1e-6) if stat == "avg" else want), (
                bucket, col)


def test_the_last_value_comes_from_the_last_row_that_has_the_metric(history):
    got = rollup("1m", "gpu", "temp_c_last", "gpu_id = %s", [history.gpu.id])
    temps = raw_rows("gpu", "temp_c", "gpu_id = %s", [history.gpu.id])
    # The 12th row of every minute lacks temp_c: its 11th speaks for the minute.
    assert got[D0] == (12, temps[10][1])


def test_a_bitmask_keeps_the_bits_set_throughout_and_at_any_time(history):
    rows = raw_rows("gpu", "throttle_reasons", "gpu_id = %s", [history.gpu.id])[:12]
    got = rollup("1m", "gpu", "throttle_reasons_min, throttle_reasons_max", "gpu_id = %s",
                 [history.gpu.id])
    any_bits = all_bits = rows[0][1]
    for _, bits in rows:
        any_bits, all_bits = any_bits | bits, all_bits & bits
    assert got[D0][1:] == (all_bits, any_bits)


@pytest.mark.parametrize(("tier", "seconds"), [("1m", 60), ("1h", 3600)])
def test_cpu_core_arrays_roll_up_core_by_core(history, tier, seconds):
    rows = raw_rows("host", "cpu_core_pct", "host_id = %s", [history.host.id])
    got = rollup(tier, "host", "cpu_core_pct_min, cpu_core_pct_max, cpu_core_pct_avg, "
                 "cpu_core_pct_last", "host_id = %s", [history.host.id])
    for bucket, values in got.items():
        want = elementwise([r[1] for r in by_bucket(rows, seconds)[bucket]])
        n, low, high, avg, last = values
        assert (low, high, last) == (want["min"], want["max"], want["last"])
        assert avg == pytest.approx(want["avg"], rel=1e-6)


@pytest.mark.parametrize(("tier", "seconds"), [("1m", 60), ("1h", 3600)])
def test_histograms_are_summed_bucket_by_bucket(history, tier, seconds):
    rows = raw_rows("engine", "ttft_seconds_layout, ttft_seconds_counts, ttft_seconds_sum",
                    "engine_id = %s", [history.engine.id])
    got = rollup(tier, "engine", "ttft_seconds_layout, ttft_seconds_counts, ttft_seconds_sum",
                 "engine_id = %s", [history.engine.id])
    assert got
    for bucket, (_, lay, counts, total) in got.items():
        want_lay, want_counts, want_sum = summed_histogram(by_bucket(rows, seconds)[bucket])
        assert (lay, counts) == (want_lay, want_counts)
        assert total == pytest.approx(want_sum)


def test_percentiles_from_the_hour_rollup_equal_those_of_the_raw_rows(history):
    rows = raw_rows("engine", "ttft_seconds_layout, ttft_seconds_counts, ttft_seconds_sum",
                    "engine_id = %s AND ts < %s", [history.engine.id, D0 + timedelta(hours=1)])
    counts = [0, 0, 0, 0]
    for _, lay, row_counts, _ in rows:
        if lay == history.layout:
            counts = [a + b for a, b in zip(counts, row_counts, strict=True)]
    got = rollup("1h", "engine", "ttft_seconds_counts", "engine_id = %s", [history.engine.id])
    assert got[D0][1] == counts
    for q in (0.5, 0.9, 0.99):
        assert histogram_quantile(q, BOUNDS, got[D0][1]) == histogram_quantile(q, BOUNDS, counts)


def test_a_minute_whose_layout_changed_keeps_the_layout_with_most_observations(history):
    minute = D0 + timedelta(minutes=OTHER_LAYOUT_MINUTE)
    got = rollup("1m", "engine", "ttft_seconds_layout", "engine_id = %s AND ts = %s",
                 [history.engine.id, minute])
    assert got[minute] == (12, history.layout)


def test_the_process_rollup_keeps_the_last_engine_it_served(history):
    got = rollup("1h", "proc", "engine_id, cpu_pct_max", "host_id = %s AND pid = %s",
                 [history.host.id, history.pid])
    # Minutes 100 and on carry no engine: the hour still names the one seen last.
    assert got[D0 + timedelta(hours=1)][1] == history.engine.id


def test_running_again_changes_nothing(history):
    tables = [t.name for t in rollups.TABLES["1m"].values()] + [
        t.name for t in rollups.TABLES["1h"].values()]
    before = {name: fetch(f"SELECT * FROM {name} ORDER BY 1, 2, 3") for name in tables}
    start_rollups_at(D0)  # rebuild everything from the start: upserts replace rows
    rollups.run(now=NOW)
    after = {name: fetch(f"SELECT * FROM {name} ORDER BY 1, 2, 3") for name in tables}
    assert after == before


def test_minutes_roll_up_once_they_have_settled(db):
    write_history()
    start_rollups_at(D0)
    rollups.run(now=D0 + timedelta(minutes=10, seconds=29))
    assert rollups.read_watermark(rollups.TIERS["1m"]) == D0 + timedelta(minutes=9)
    rollups.run(now=D0 + timedelta(minutes=10, seconds=30))
    assert rollups.read_watermark(rollups.TIERS["1m"]) == D0 + timedelta(minutes=10)


def test_an_hour_rolls_up_once_all_its_minutes_have(db):
    write_history()
    start_rollups_at(D0)
    rollups.run(now=D0 + timedelta(minutes=60, seconds=29))
    assert rollups.read_watermark(rollups.TIERS["1h"]) == D0
    assert rollup("1h", "gpu", "util_pct_max", "TRUE", []) == {}
    rollups.run(now=D0 + timedelta(minutes=60, seconds=30))
    assert rollups.read_watermark(rollups.TIERS["1h"]) == D0 + timedelta(hours=1)
    assert list(rollup("1h", "gpu", "util_pct_max", "TRUE", [])) == [D0]


def test_a_new_installation_starts_from_the_oldest_raw_partition(db):
    write_history()
    report = rollups.catch_up(now=NOW)
    assert rollups.read_watermark(rollups.TIERS["1m"]) == NOW - timedelta(minutes=1)
    assert report["1m"]["upto"] == (NOW - timedelta(minutes=1)).isoformat()
    assert len(rollup("1m", "gpu", "util_pct_max", "TRUE", [])) == 121


def test_a_second_worker_stops_while_another_holds_the_rollup_lock(db):
    write_history()
    start_rollups_at(D0)
    with psycopg.connect(dsn_from_settings(connection.settings_dict)) as other:
        other.execute("SELECT pg_advisory_xact_lock(hashtext('pitwall.rollups'))")
        report = rollups.run(now=NOW)
    assert report == {"busy": True}
    assert rollups.read_watermark(rollups.TIERS["1m"]) == D0
    assert rollups.run(now=NOW)["1m"]["upto"] == (NOW - timedelta(minutes=1)).isoformat()
