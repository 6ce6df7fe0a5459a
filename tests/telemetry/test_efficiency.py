"""Efficiency figures from samples posted through the real ingest app, checked by hand.

The load (efficiency_data.py): ten minutes of 1-s samples; engine A on GPUs 0 and 1 at 600
generated tokens/s, each GPU drawing 300 W. So by hand: 600 x 600 = 360,000 tokens; power
gives 2 x 300 W x 600 s = 360,000 J, 1.0 token per joule; 2 GPUs x 600 s = 1/3 GPU-hour.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta

import pytest
from django.db import connection

from agents.protocol import METRICS
from controlplane.fleet.models import Engine
from controlplane.telemetry import efficiency, partitions, rollups
from controlplane.telemetry.efficiency.figures import burn_rate, fraction_under
from controlplane.telemetry.efficiency.stretches import split
from controlplane.telemetry.models import RollupWatermark
from controlplane.telemetry.schema import TABLES
from controlplane.telemetry.series import SeriesError
from controlplane.telemetry.series.plan import Stretch
from tests.telemetry.efficiency_data import MODEL, EngineLoad, Load, post
from tests.telemetry.rollup_data import start_rollups_at

TOKENS = 600 * 600
SECONDS = 600
needs_counter = pytest.mark.skipif("gpu.energy_j" not in METRICS,
                                   reason="the catalog has no gpu.energy_j yet")


def recent_load(**kwargs) -> Load:
    """Ten minutes ending two minutes ago (no rollup built: raw rows answer)."""
    t0 = float(int(time.time()) - SECONDS - 120)
    return Load(t0, SECONDS, [EngineLoad("vllm:8000/0", [0, 1], 600.0)], **kwargs)


def only_engine(report) -> efficiency.EngineRow:
    (row,) = report.engines
    return row


def test_tokens_power_and_gpu_hours_from_raw_rows(ingest, host_token):
    post(ingest, host_token, recent_load(energy_counter=False))
    f = only_engine(efficiency.report("1h")).figures
    assert f.generation_tokens == pytest.approx(TOKENS)
    assert f.generation_tokens_per_s == pytest.approx(600.0)
    assert f.seconds_with_samples == pytest.approx(SECONDS)
    assert f.energy_source == "power"
    assert f.energy_j == pytest.approx(2 * 300 * 600)
    assert f.tokens_per_joule == pytest.approx(1.0)
    assert (f.gpus, f.gpu_hours) == (2, pytest.approx(2 * 600 / 3600))


@needs_counter
def test_the_energy_counter_is_used_when_every_gpu_reports_it(ingest, host_token):
    post(ingest, host_token, recent_load())
    f = only_engine(efficiency.report("1h")).figures
    assert f.energy_source == "energy_counter"
    # Per GPU the counter rose 300 J/s over the 599 s between the first and the last sample;
    # scaled to the 600 intervals the 600 samples stand for (as the rate samples do).
    assert f.energy_j == pytest.approx(2 * 300 * 599 * 600 / 599)
    assert f.tokens_per_joule == pytest.approx(1.0)


@needs_counter
def test_a_counter_reset_counts_from_the_new_start(ingest, host_token):
    post(ingest, host_token, recent_load(counter_reset_at=300))
    f = only_engine(efficiency.report("1h")).figures
    # 299 steps up before the reset, 299 after it; the step across it is lost.
    assert f.energy_j == pytest.approx(2 * 300 * 598 * 600 / 599)


@needs_counter
def test_an_engine_with_a_gpu_without_the_counter_falls_back_to_power(ingest, host_token):
    post(ingest, host_token, recent_load(counter_gpus={0}))
    f = only_engine(efficiency.report("1h")).figures
    assert f.energy_source == "power"
    assert f.tokens_per_joule == pytest.approx(1.0)


def test_attainment_and_burn_from_the_summed_histograms(ingest, host_token):
    post(ingest, host_token, recent_load())
    f = only_engine(efficiency.report("1h")).figures
    # Five histogram samples: TTFT 95 of 100 under 2 s; ITL 495 of 500 under 100 ms.
    assert (f.ttft.attainment, f.ttft.requests) == (pytest.approx(0.95), 100)
    assert f.ttft.burn_1h == pytest.approx((1 - 0.95) / (1 - 0.99))  # 5.0
    assert f.ttft.burn_30d == pytest.approx(5.0)
    assert (f.itl.attainment, f.itl.requests) == (pytest.approx(0.99), 500)
    assert f.itl.burn_1h == pytest.approx(1.0)
    assert (f.ttft.objective_ms, f.itl.objective_ms) == (2000, 100)


def test_a_stricter_target_burns_faster(ingest, host_token, settings):
    settings.PITWALL = {**settings.PITWALL, "OBJECTIVE_TARGET": 0.995}
    post(ingest, host_token, recent_load())
    f = only_engine(efficiency.report("1h")).figures
    assert f.ttft.burn_1h == pytest.approx(0.05 / 0.005)


def test_cost_from_the_gpu_hour_price(ingest, host_token, settings):
    settings.PITWALL = {**settings.PITWALL, "GPU_HOUR_PRICE": 3.0}
    post(ingest, host_token, recent_load())
    f = only_engine(efficiency.report("1h")).figures
    assert f.cost == pytest.approx(1.0)  # 1/3 GPU-hour at 3.0
    assert f.cost_per_million_tokens == pytest.approx(1.0 / 0.36)


def test_without_a_price_the_cost_is_unknown_not_zero(ingest, host_token, settings):
    settings.PITWALL = {**settings.PITWALL, "GPU_HOUR_PRICE": 0.0}
    post(ingest, host_token, recent_load())
    report = efficiency.report("1h")
    f = only_engine(report).figures
    assert (f.cost, f.cost_per_million_tokens, report.gpu_hour_price) == (None, None, None)


def test_a_model_sums_its_engines(ingest, host_token):
    load = recent_load(gpus=4, energy_counter=False)
    load.engines.append(EngineLoad("vllm:8001/0", [2, 3], 300.0))
    load.engines.append(EngineLoad("vllm:8002/0", [], 100.0, model="other/model"))
    post(ingest, host_token, load)
    report = efficiency.report("1h")
    by_model = {m.model: m for m in report.models}
    f = by_model[MODEL].figures
    assert len(by_model[MODEL].engine_ids) == 2
    assert f.generation_tokens == pytest.approx(900 * 600)
    assert f.generation_tokens_per_s == pytest.approx(900.0)
    assert f.energy_j == pytest.approx(4 * 300 * 600)
    assert f.tokens_per_joule == pytest.approx(0.75)
    assert f.gpu_hours == pytest.approx(4 * 600 / 3600)
    assert (f.ttft.requests, f.ttft.attainment) == (200, pytest.approx(0.95))
    # An engine naming no GPU has tokens but no energy and no GPU-hours.
    other = by_model["other/model"].figures
    assert (other.tokens_per_joule, other.energy_source, other.gpu_hours) == (None, None, 0)
    assert other.generation_tokens == pytest.approx(100 * 600)


def test_only_samples_inside_the_range_count(ingest, host_token):
    load = recent_load(energy_counter=False)
    post(ingest, host_token, load)
    end = datetime.fromtimestamp(load.t0 + 300, UTC)  # half the samples are before it
    f = only_engine(efficiency.report("1h", end=end)).figures
    assert f.generation_tokens == pytest.approx(600 * 300)


def test_the_reads_run_without_jit_or_parallel_workers(db):
    # Set for the report's transaction: inside a caller's (this test's), they hold to its end.
    efficiency.report("1h")
    with connection.cursor() as cursor:
        cursor.execute("SELECT current_setting('jit'), "
                       "current_setting('max_parallel_workers_per_gather')")
        assert cursor.fetchone() == ("off", "0")


def test_an_unknown_range_names_the_parameter():
    with pytest.raises(SeriesError) as err:
        efficiency.report("2h")
    assert err.value.param == "range"


def test_attainment_over_two_layouts_weighs_each_by_its_observations():
    layouts = {1: [8, 2, 0], 2: [10, 20, 10, 0]}  # 8 of 10 under 1.0; 30 of 40 under 1.0
    bounds = {1: [1.0, 2.0], 2: [0.5, 1.0, 4.0]}
    assert fraction_under(1.0, layouts, bounds) == pytest.approx(38 / 50)
    assert fraction_under(1.0, {}, bounds) is None
    assert burn_rate(None, 0.99) is None


# -- which tables answer ----------------------------------------------------------------------

H = datetime(2026, 3, 3, 10, tzinfo=UTC)


def test_whole_buckets_come_from_the_coarse_tier_and_edges_from_finer_ones():
    start, end = H + timedelta(minutes=30, seconds=15), H + timedelta(hours=3, minutes=5)
    built = {"1h": H + timedelta(hours=2), "1m": H + timedelta(hours=3, minutes=4)}
    assert split("1h", start, end, built) == [
        Stretch("raw", start, H + timedelta(minutes=31)),
        Stretch("1m", H + timedelta(minutes=31), H + timedelta(hours=1)),
        Stretch("1h", H + timedelta(hours=1), H + timedelta(hours=2)),
        Stretch("1m", H + timedelta(hours=2), H + timedelta(hours=3, minutes=4)),
        Stretch("raw", H + timedelta(hours=3, minutes=4), end),
    ]


def test_nothing_built_reads_raw_rows():
    assert split("1h", H, H + timedelta(hours=5), {}) == [Stretch("raw", H, H + timedelta(hours=5))]


@pytest.fixture
def every_tier_reaches_back():
    """Partitions of every tier from 40 days back, as maintenance keeps them."""
    first = (datetime.now(UTC) - timedelta(days=40)).date()
    with connection.cursor() as cursor:
        partitions.ensure(cursor, [first])
        for name, tier in rollups.TIERS.items():
            tables = [t.name for t in rollups.TABLES[name].values()]
            partitions.ensure(cursor, [first], tables, tier.period)


def load_hour() -> datetime:
    """10:00 UTC three days ago: the load's day is not whole two hours later, whatever time
    the test runs (from 22:00, two hours later was the next day and the daily tier answered)."""
    return datetime.combine((datetime.now(UTC) - timedelta(days=3)).date(),
                            datetime.min.time(), UTC) + timedelta(hours=10)


def test_30_days_read_the_partial_day_from_the_hourly_rollups(ingest, host_token,
                                                              every_tier_reaches_back):
    hour = load_hour()
    post(ingest, host_token, Load(hour.timestamp(), SECONDS,
                                  [EngineLoad("vllm:8000/0", [0, 1], 600.0)]))
    start_rollups_at(hour)
    rollups.run(now=hour + timedelta(hours=2))
    end = hour + timedelta(hours=2)
    before = only_engine(efficiency.report("30d", end=end))
    truncate(TABLES.values())  # the raw rows go: only the rollups can answer now
    report = efficiency.report("30d", end=end)
    assert report.resolution == "1d"  # whole days; the day of the load is not whole yet
    assert any(s.resolution == "1h" and s.lo <= hour and s.hi >= hour + timedelta(hours=1)
               for s in report.stretches)
    f = only_engine(report).figures
    assert f == before.figures
    assert_load_figures(f)


def test_30_days_read_whole_days_from_the_daily_rollups(ingest, host_token,
                                                         every_tier_reaches_back):
    hour = load_hour()
    post(ingest, host_token, Load(hour.timestamp(), SECONDS,
                                  [EngineLoad("vllm:8000/0", [0, 1], 600.0)]))
    start_rollups_at(hour)
    end = datetime.combine(hour.date() + timedelta(days=1), datetime.min.time(), UTC) \
        + timedelta(hours=2)
    rollups.run(now=end)
    before = only_engine(efficiency.report("30d", end=end))
    # Only the 1-day tier holds the load's day now.
    truncate([*TABLES.values(), *rollups.TABLES["1m"].values(),
              *rollups.TABLES["1h"].values()])
    report = efficiency.report("30d", end=end)
    assert report.resolution == "1d"
    assert any(s.resolution == "1d" and s.lo <= hour and s.hi >= hour + timedelta(hours=1)
               for s in report.stretches)
    f = only_engine(report).figures
    assert f == before.figures
    assert_load_figures(f)


def truncate(tables) -> None:
    with connection.cursor() as cursor:
        for table in tables:
            cursor.execute(f"TRUNCATE {table.name}")


def assert_load_figures(f) -> None:
    """The figures of the 600-s load of the two tests above, whichever tier holds it."""
    assert f.generation_tokens == pytest.approx(TOKENS)
    # The bucket's last value over its lowest, x 600 / 599 for its 600 rows.
    source = "energy_counter" if "gpu.energy_j" in METRICS else "power"
    assert (f.energy_source, f.tokens_per_joule) == (source, pytest.approx(1.0))
    assert f.gpu_hours == pytest.approx(2 * 600 / 3600)
    assert (f.ttft.attainment, f.ttft.requests) == (pytest.approx(0.95), 100)
    assert f.ttft.burn_30d == pytest.approx(5.0)
    assert f.ttft.burn_1h is None  # the range's last hour had no requests


def test_an_engine_not_present_and_not_seen_in_the_range_is_left_out(ingest, host_token):
    post(ingest, host_token, recent_load())
    Engine.objects.update(present=False)
    later = datetime.now(UTC) + timedelta(days=2)
    assert efficiency.report("1h", end=later).engines == []


def test_long_ranges_end_where_the_hourly_rollups_do_while_they_keep_up(db):
    now = H + timedelta(minutes=20)
    RollupWatermark.objects.update_or_create(resolution="1h", defaults={"upto": H})
    assert [efficiency.default_end(r, now) for r in ("30d", "7d", "24h")] == [H, H, H]
    assert efficiency.default_end("1h", now) == now
    RollupWatermark.objects.filter(resolution="1h").update(upto=H - timedelta(hours=3))
    assert efficiency.default_end("30d", now) == now  # the rollups fell behind: exact, slower
