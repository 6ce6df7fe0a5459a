"""Late samples (an agent replaying its spool) reach rollups that were already built."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from types import SimpleNamespace

import pytest

from controlplane.fleet.models import Host
from controlplane.telemetry import rollups
from controlplane.telemetry.ingest.tables import WIDTH, TableColumns
from controlplane.telemetry.models import RollupDirty
from controlplane.telemetry.rollups.late import late_minutes
from tests.telemetry.factories import batch, sample
from tests.telemetry.rollup_data import D0, fetch, insert_rows, start_rollups_at, write_history

NOW = D0 + timedelta(hours=2, minutes=2)
LATE_MINUTE = D0 + timedelta(minutes=5)


def dirty() -> set[tuple]:
    return set(RollupDirty.objects.values_list("resolution", "host_id", "bucket"))


def test_ingest_marks_the_minutes_of_late_samples_dirty(ingest, host_token):
    now = time.time()
    old = (now - 7200) // 60 * 60 + 10.0  # two hours ago, 10 s into its minute
    body = batch(samples=[sample(old), sample(old + 1), sample(old + 60), sample(now - 1)])
    code, reply = ingest.post(body, host_token)
    assert code == 200, reply
    host = Host.objects.get(hostname="gpu-node-1")
    minute = old // 60 * 60
    assert dirty() == {("1m", host.id, datetime.fromtimestamp(t, UTC))
                       for t in (minute, minute + 60)}


def test_ingest_marks_nothing_for_live_samples(ingest, host_token):
    code, reply = ingest.post(batch(samples=[sample(time.time() - 1)]), host_token)
    assert code == 200, reply
    assert dirty() == set()


def test_a_sample_is_late_once_its_minute_ended_half_the_settle_time_ago(settings):
    settings.PITWALL = {**settings.PITWALL, "ROLLUP_SETTLE_S": 30}
    gpu = "telemetry_gpu_sample"
    values = (None,) * (WIDTH[gpu] - 2)  # every value NULL: only the times matter
    table = TableColumns(gpu, 2, ([1, 1], [1000 * 60 - 0.5, 1000 * 60 + 1], *values))
    item = SimpleNamespace(host_id=3, tables={gpu: table})
    # The minute starting at 999 * 60 ended at 1000 * 60: late from 15 s after that.
    assert late_minutes([item], now=1000 * 60 + 14.9) == []
    assert late_minutes([item], now=1000 * 60 + 15) == [(3, 999 * 60)]


@pytest.fixture
def built(db):
    history = write_history()
    start_rollups_at(D0)
    rollups.run(now=NOW)
    return history


def gpu_minute(history, minute: datetime) -> tuple:
    return fetch("SELECT n, util_pct_max FROM telemetry_gpu_1m WHERE gpu_id = %s AND ts = %s",
                 [history.gpu.id, minute])[0]


def test_a_dirty_minute_is_recomputed_with_its_late_samples_and_so_is_its_hour(built):
    n, _ = gpu_minute(built, LATE_MINUTE)
    insert_rows("gpu", [{"gpu_id": built.gpu.id, "ts": LATE_MINUTE + timedelta(seconds=2),
                         "util_pct": 100.0}])
    insert_rows("engine", [{"engine_id": built.engine.id,
                            "ts": LATE_MINUTE + timedelta(seconds=2),
                            "ttft_seconds_layout": built.layout,
                            "ttft_seconds_counts": [1000, 0, 0, 0]}])
    RollupDirty.objects.create(resolution="1m", host_id=built.host.id, bucket=LATE_MINUTE)
    report = rollups.run(now=NOW)
    assert report["1m"]["recomputed"] == 1 and report["1h"]["recomputed"] == 1
    assert gpu_minute(built, LATE_MINUTE) == (n + 1, 100.0)
    hour = fetch("SELECT n, util_pct_max FROM telemetry_gpu_1h WHERE ts = %s", [D0])[0]
    assert hour == (720 + 1, 100.0)
    counts = fetch("SELECT ttft_seconds_counts FROM telemetry_engine_1h WHERE ts = %s", [D0])
    assert counts[0][0][0] >= 1000
    assert dirty() == set()


def test_without_a_dirty_mark_late_samples_stay_out_of_built_minutes(built):
    # What the dirty marks are for: the regular pass never looks back.
    n, high = gpu_minute(built, LATE_MINUTE)
    insert_rows("gpu", [{"gpu_id": built.gpu.id, "ts": LATE_MINUTE + timedelta(seconds=2),
                         "util_pct": 100.0}])
    rollups.run(now=NOW)
    assert gpu_minute(built, LATE_MINUTE) == (n, high)


def test_dirty_marks_past_the_watermark_are_left_to_the_regular_pass(db):
    history = write_history()
    start_rollups_at(D0)
    rollups.run(now=D0 + timedelta(minutes=3))  # the 1-minute tier is built to D0 + 2 min
    RollupDirty.objects.create(resolution="1m", host_id=history.host.id, bucket=LATE_MINUTE)
    report = rollups.run(now=D0 + timedelta(minutes=3))
    assert report["1m"]["recomputed"] == 0 and dirty() == set()
    rollups.run(now=D0 + timedelta(minutes=7))
    assert gpu_minute(history, LATE_MINUTE)[0] == 12  # counted once


def test_dirty_marks_older_than_retention_are_dropped(built, settings):
    settings.PITWALL = {**settings.PITWALL, "ROLLUP_1M_RETENTION_DAYS": 1}
    RollupDirty.objects.create(resolution="1m", host_id=built.host.id, bucket=LATE_MINUTE)
    report = rollups.run(now=NOW + timedelta(days=3))
    assert report["1m"]["recomputed"] == 0 and dirty() == set()


def test_a_late_sample_reaches_the_day_of_its_hour(db):
    history = write_history()
    start_rollups_at(D0)
    after_the_day = D0 + timedelta(days=1, minutes=2)
    rollups.run(now=after_the_day)  # the day D0 is whole in the 1-hour tier: built
    day = "SELECT n, util_pct_max FROM telemetry_gpu_1d WHERE gpu_id = %s AND ts = %s"
    n, _ = fetch(day, [history.gpu.id, D0])[0]
    insert_rows("gpu", [{"gpu_id": history.gpu.id, "ts": LATE_MINUTE + timedelta(seconds=2),
                         "util_pct": 100.0}])
    RollupDirty.objects.create(resolution="1m", host_id=history.host.id, bucket=LATE_MINUTE)
    report = rollups.run(now=after_the_day)
    assert [report[t]["recomputed"] for t in ("1m", "1h", "1d")] == [1, 1, 1]
    assert fetch(day, [history.gpu.id, D0])[0] == (n + 1, 100.0)
    assert dirty() == set()
