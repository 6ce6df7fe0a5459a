"""The sampling interval counted in the pass that sums the newest hourly rows, and the engines'
generation rate summed in the pass that reads their histograms.

A rolled-up efficiency range takes each entity's sampling interval from its newest 24 hourly
rows (the fullest bucket's samples). Where the range ends with 1-hour rows, the statement that
sums them also counts the rows of the last 24 hours and the most samples one holds; an entity
with a row in every one of those hours gets its interval from them (they are its newest 24
rows), the others from the probe. Both must give the probe's interval, and the sums must not
change because the statement read the hours before its stretch.

An engine's rows are read once for its histograms and its tokens: grouped by histogram layout,
so the rate's sums are added up over the groups, and must come out as value_totals' do.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from django.db import connection

from agents.protocol import METRICS
from controlplane.telemetry import partitions, rollups
from controlplane.telemetry.efficiency import HISTOGRAMS, reads
from controlplane.telemetry.series.plan import Stretch

END = datetime(2026, 3, 10, 11, tzinfo=UTC)  # on the hour, 11 hours into its day
HOUR = timedelta(hours=1)
GENERATION = METRICS["engine.generation_tokens_per_s"]
TABLE = rollups.TABLES["1h"]["engine"]
# Engine id -> n (samples) of its hourly row ``h`` hours before END (h = 1 is the newest),
# None for no row. Averages are the id plus the hour, so every row adds something different.
FULL_DAY_ONE_PARTIAL_HOUR = 1  # 1-s samples; the newest hour only half full
SLOWER_FOR_A_DAY = 2  # 2-s samples for the last 24 hours, 1-s before
GAP_IN_THE_DAY = 3  # as 2, but no row 5 hours back: its newest 24 rows reach back 25 hours
NOTHING_LATELY = 4  # rows only before the last 24 hours


def samples(engine: int, h: int) -> int | None:
    if engine == FULL_DAY_ONE_PARTIAL_HOUR:
        return 1800 if h == 1 else 3600
    if engine == GAP_IN_THE_DAY and h == 5:
        return None
    if engine in (SLOWER_FOR_A_DAY, GAP_IN_THE_DAY):
        return 1800 if h <= 24 else 3600
    return None if h <= 24 else 3600


@pytest.fixture
def hourly_rows(db):
    with connection.cursor() as cursor:
        days = [(END - timedelta(days=d)).date() for d in range(4)]
        partitions.ensure(cursor, days, [TABLE.name], rollups.TIERS["1h"].period)
        avg = TABLE.column(GENERATION, "avg").name
        layout = f"{HISTOGRAMS['ttft'].key}_layout"
        # Engine 1 counts its TTFT in two layouts, hour by hour; the others report none.
        rows = [(e, END - h * HOUR, n, e + h, 1 + h % 2 if e == 1 else None)
                for e in range(1, 5) for h in range(1, 49) if (n := samples(e, h)) is not None]
        cursor.executemany(f"INSERT INTO {TABLE.name} (engine_id, ts, n, {avg}, {layout}) "
                           f"VALUES (%s, %s, %s, %s, %s)", rows)


def sums(totals: dict[int, reads.Totals]) -> dict[int, tuple]:
    return {k: (t.samples, t.rows, t.total) for k, t in totals.items()}


START = END - 40 * HOUR
# A day read whole before the day the range ends in (no 1-day rows here: the day adds nothing),
# then the hours of END's day: the interval's window starts 13 hours before that stretch.
STRETCHES = [Stretch("1h", START, END - 35 * HOUR), Stretch("1d", END - 35 * HOUR,
                                                             END - 11 * HOUR),
             Stretch("1h", END - 11 * HOUR, END)]


def test_the_pass_that_sums_gives_the_probes_interval(hourly_rows):
    ids, start, stretches = [1, 2, 3, 4], START, STRETCHES
    since = reads.newest_window(start, stretches)
    assert since == END - 24 * HOUR

    counted = reads.value_totals(GENERATION, ids, stretches, None, since)
    assert sums(counted) == sums(reads.value_totals(GENERATION, ids, stretches))
    assert (counted[1].newest_rows, counted[2].newest_rows, counted[3].newest_rows) == (24, 24, 23)
    assert counted[4].newest_rows == 0  # rows in the first stretch only

    probed = reads.sample_intervals("engine", ids, start, END, rolled_up=True)
    assert probed == {1: 1.0, 2: 2.0, 3: 1.0, 4: 1.0}
    # Only the entities with every hour of the window: the gap leaves 3 to the probe.
    assert reads.newest_intervals(counted) == {1: 1.0, 2: 2.0}


def test_no_window_where_the_range_is_shorter_or_ends_on_other_rows():
    day = Stretch("1d", END - 35 * HOUR, END - 11 * HOUR)
    assert reads.newest_window(END - 12 * HOUR, [Stretch("1h", END - 12 * HOUR, END)]) is None
    assert reads.newest_window(END - 24 * HOUR, [Stretch("1h", END - 24 * HOUR, END)]) \
        == END - 24 * HOUR
    assert reads.newest_window(END - 40 * HOUR, [day]) is None
    assert reads.newest_window(END - 40 * HOUR, [day, Stretch("1m", END - 11 * HOUR, END)]) \
        is None


def test_the_histograms_pass_sums_the_rate_as_value_totals_does(hourly_rows):
    ids, metrics = [1, 2, 3, 4], list(HISTOGRAMS.values())
    rows = [reads.stretch_counts(metrics, ids, s, 2, GENERATION) for s in STRETCHES]
    assert len([r for r in rows[-1] if r[0] == 1]) == 2  # engine 1: a row per layout
    summed = sums(reads.value_sums(rows))
    assert summed == sums(reads.value_totals(GENERATION, ids, STRETCHES))
    # The hours of both 1-hour stretches (the day between has no 1-day rows here).
    assert summed[1][0] == sum(samples(1, h) for h in (*range(1, 12), *range(36, 41)))

