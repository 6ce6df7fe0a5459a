"""GET /api/v1/series/ over rollups: the resolution per range, and values equal to the raw rows'.

Resolution rule: the coarsest of raw, 1m and 1h with at least max_points buckets over the
range, skipping toward coarser a tier whose oldest partition starts after the range does.
"""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta

import pytest
from django.db import connection

from controlplane.telemetry import partitions, rollups
from controlplane.telemetry.series import histogram_quantile
from controlplane.telemetry.series.plan import choose
from tests.api.helpers import series
from tests.telemetry.rollup_data import (
    BOUNDS,
    D0,
    by_bucket,
    raw_rows,
    start_rollups_at,
    stats,
    summed_histogram,
    write_history,
)

HOUR = timedelta(hours=1)
NOW = D0 + timedelta(hours=2, minutes=2)  # all two hours and a minute have settled


# -- which resolution -------------------------------------------------------------------------

END = datetime(2026, 5, 1, tzinfo=UTC)


@pytest.fixture
def every_tier_reaches_back(db):
    """Partitions of every tier from 91 days before END (older ones may exist too)."""
    first = (END - timedelta(days=91)).date()
    with connection.cursor() as cursor:
        partitions.ensure(cursor, [first])
        for name, tier in rollups.TIERS.items():
            tables = [t.name for t in rollups.TABLES[name].values()]
            partitions.ensure(cursor, [first], tables, tier.period)


@pytest.mark.parametrize(("span", "max_points", "resolution", "step"), [
    (HOUR, 1000, "raw", None),  # 3,600 seconds, only 60 minutes; no rows, so no step
    (timedelta(days=1), 1000, "1m", 120),  # 1,440 minutes, only 24 hours
    (timedelta(days=7), 1000, "1m", 660),  # 168 hours are too few
    (timedelta(days=30), 1000, "1m", 2640),  # 720 hours are too few
    (timedelta(days=30), 500, "1h", 7200),  # 720 hours are enough
    (timedelta(days=90), 1000, "1h", 10800),
])
def test_it_reads_the_coarsest_tier_that_still_gives_max_points(
        api, mixed_fleet, every_tier_reaches_back, span, max_points, resolution, step):
    body = ask(api, metric="gpu.util_pct", entity=mixed_fleet.gpu.id, start=END - span, end=END,
               max_points=max_points)
    assert (body["resolution"], body["step"]) == (resolution, step)


DAY = timedelta(days=1).total_seconds()
KEPT = {"raw": date(2026, 4, 20), "1m": date(2026, 3, 1), "1h": date(2025, 10, 1)}


@pytest.mark.parametrize(("span", "first_day", "resolution"), [
    (3600, date(2026, 4, 30), "raw"),
    (3600, date(2026, 4, 10), "1m"),  # raw rows are gone by then
    (DAY, date(2026, 2, 1), "1h"),  # and 1-minute rollups too
    (DAY, date(2025, 1, 1), "1m"),  # nothing reaches back: the tier the rule picks
])
def test_a_tier_that_does_not_reach_back_to_the_start_is_skipped_for_a_coarser_one(
        span, first_day, resolution):
    assert choose(span, 1000, first_day, KEPT) == resolution


def test_when_no_coarser_tier_reaches_back_a_finer_one_that_does_answers():
    assert choose(DAY, 1000, date(2026, 4, 25), {"raw": date(2026, 4, 20)}) == "raw"


# -- values from rollups ----------------------------------------------------------------------

@pytest.fixture
def history(db):
    history = write_history()
    start_rollups_at(D0)
    rollups.run(now=NOW)
    return history


def ask(api, **params) -> dict:
    response = series(api, **params)
    assert response.status_code == 200, response.content
    return response.json()


def hourly(history, column: str, bitmask: bool = False) -> dict[float, dict]:
    rows = raw_rows("gpu", column, "gpu_id = %s", [history.gpu.id])
    return {b.timestamp(): stats([r[1] for r in group], bitmask)
            for b, group in by_bucket(rows, 3600).items()}


@pytest.mark.parametrize("stat", ["avg", "min", "max", "last"])
def test_hourly_points_come_from_the_hour_rollup_and_equal_the_raw_rows(api, history, stat):
    body = ask(api, metric="gpu.temp_c", entity=history.gpu.id, start=D0, end=D0 + 2 * HOUR,
               max_points=2, stat=stat)
    assert (body["resolution"], body["step"], body["stat"]) == ("1h", 3600, stat)
    want = hourly(history, "temp_c")
    assert body["series"][0]["points"] == [
        [ts, pytest.approx(want[ts][stat], rel=1e-6)] for ts in (D0.timestamp(),
                                                                  (D0 + HOUR).timestamp())]


def test_a_bitmask_reads_as_all_bits_seen_in_each_hour(api, history):
    body = ask(api, metric="gpu.throttle_reasons", entity=history.gpu.id, start=D0,
               end=D0 + 2 * HOUR, max_points=2)
    want = hourly(history, "throttle_reasons", bitmask=True)
    assert body["series"][0]["points"] == [[ts, want[ts]["max"]] for ts in (
        D0.timestamp(), (D0 + HOUR).timestamp())]


def test_minute_points_merge_rollup_rows_into_steps_of_whole_minutes(api, history):
    body = ask(api, metric="gpu.util_pct", entity=history.gpu.id, start=D0,
               end=D0 + 2 * HOUR, max_points=100)
    assert (body["resolution"], body["step"]) == ("1m", 120)
    rows = raw_rows("gpu", "util_pct", "gpu_id = %s", [history.gpu.id])
    want = {b.timestamp(): stats([r[1] for r in group])["avg"]
            for b, group in by_bucket(rows, 120).items() if b < D0 + 2 * HOUR}
    points = body["series"][0]["points"]
    assert [ts for ts, _ in points] == list(want)
    assert [v for _, v in points] == [pytest.approx(w, rel=1e-6) for w in want.values()]


def test_cpu_cores_read_from_rollups_core_by_core(api, history):
    body = ask(api, metric="host.cpu_core_pct", entity=history.host.id, start=D0,
               end=D0 + 2 * HOUR, max_points=2)
    rows = raw_rows("host", "cpu_core_pct", "host_id = %s", [history.host.id])
    first_hour = [r[1] for r in rows if r[0] < D0 + HOUR]
    want = [sum(core) / len(core) for core in zip(*first_hour, strict=True)]
    assert body["series"][0]["points"][0] == [D0.timestamp(),
                                              [pytest.approx(w, rel=1e-6) for w in want]]


@pytest.mark.parametrize("q", [0.5, 0.9, 0.99])
def test_quantiles_from_rollups_equal_those_of_the_summed_raw_buckets(api, history, q):
    body = ask(api, metric="engine.ttft_seconds", entity=history.engine.id, start=D0,
               end=D0 + 2 * HOUR, max_points=2, quantile=q)
    assert body["resolution"] == "1h"
    rows = raw_rows("engine", "ttft_seconds_layout, ttft_seconds_counts, ttft_seconds_sum",
                    "engine_id = %s", [history.engine.id])
    hours = by_bucket(rows, 3600)
    want = [histogram_quantile(q, BOUNDS, summed_histogram(hours[b])[1])
            for b in (D0, D0 + HOUR)]
    assert [v for _, v in body["series"][0]["points"]] == pytest.approx(want)


def test_after_the_watermarks_points_come_from_the_finer_tiers(api, history):
    # Pretend the hour tier stopped at D0 + 1 h and poison its later row: the second point
    # must come from the minute tier, the third (the last minute) from raw rows.
    start_rollups_at(D0 + HOUR)
    with connection.cursor() as cursor:
        cursor.execute("UPDATE telemetry_gpu_1h SET util_pct_avg = -1")
        cursor.execute("UPDATE telemetry_rollupwatermark SET upto = %s WHERE resolution = '1m'",
                       [D0 + 2 * HOUR])
    body = ask(api, metric="gpu.util_pct", entity=history.gpu.id, start=D0, end=D0 + 3 * HOUR,
               max_points=3)
    assert (body["resolution"], body["step"]) == ("1h", 3600)
    want = hourly(history, "util_pct")
    points = body["series"][0]["points"]
    assert points[0] == [D0.timestamp(), -1]  # from the hour tier, as poisoned
    assert points[1:] == [[ts, pytest.approx(want[ts]["avg"], rel=1e-6)]
                          for ts in ((D0 + HOUR).timestamp(), (D0 + 2 * HOUR).timestamp())]


def test_a_range_the_rollups_have_not_reached_is_read_from_raw_rows_in_the_same_steps(
        api, db):
    history = write_history()
    with connection.cursor() as cursor:  # the minute tier reaches back, but holds nothing yet
        tables = [t.name for t in rollups.TABLES["1m"].values()]
        partitions.ensure(cursor, [D0.date()], tables)
    body = ask(api, metric="gpu.util_pct", entity=history.gpu.id, start=D0,
               end=D0 + 2 * HOUR, max_points=100)
    rows = raw_rows("gpu", "util_pct", "gpu_id = %s", [history.gpu.id])
    first = stats([r[1] for r in rows[:24]])["avg"]  # two minutes of rows
    assert (body["resolution"], body["step"]) == ("1m", 120)
    assert body["series"][0]["points"][0] == [D0.timestamp(), pytest.approx(first)]
