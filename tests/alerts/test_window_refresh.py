"""The slices behind rule windows, kept in the evaluating process: what a cycle reads and folds
again, what it keeps, and when it trusts none of it."""

from __future__ import annotations

from datetime import timedelta

import numpy as np
import pytest
from django.db import connection, transaction

from controlplane.alerts import evaluate
from controlplane.alerts.evaluate import STORES
from controlplane.alerts.shards import WHOLE
from controlplane.alerts.windows import store
from controlplane.alerts.windows.fold import PART_NAMES, fold
from controlplane.alerts.windows.raw import Reading, read
from controlplane.alerts.windows.slices import SLICE_US, micros
from controlplane.telemetry.schema import TABLES, column_for
from controlplane.telemetry.series import find_metric
from tests.support.alert_data import T0, rule, samples

S = timedelta(seconds=1)


@pytest.fixture(autouse=True)
def fresh_stores():
    STORES.clear()
    yield
    STORES.clear()


@pytest.fixture
def spans(monkeypatch) -> list:
    """The (lo, hi] spans of raw rows each cycle reads, in order (the real read runs)."""
    seen = []

    def spy(cursor, reading, lo, hi, shard=WHOLE):
        seen.append((reading.entity, lo, hi))
        return read(cursor, reading, lo, hi, shard)

    monkeypatch.setattr(store, "read", spy)
    return seen


def covered(spans: list) -> list:
    """The spans read, a rebuild's minute-long reads joined into one."""
    out: list = []
    for entity, lo, hi in spans:
        if out and out[-1][0] == entity and out[-1][2] == lo:
            out[-1] = (entity, out[-1][1], hi)
        else:
            out.append((entity, lo, hi))
    return out


def run_queries(rules, now):
    with transaction.atomic():
        return evaluate.run_queries(rules, now)


def hot_then_cool(gpu, until=T0 + 60 * S):
    samples("gpu", {"gpu_id": gpu.id}, lambda ts: {"temp_c": 95.0 if ts <= T0 - 200 * S else 40.0},
            T0 - 400 * S, until)


def test_a_longer_window_adds_the_older_slices_and_keeps_the_others(node, spans):
    gpu = node.gpus[0]
    hot_then_cool(gpu)
    short = rule(metric="gpu.temp_c", aggregation="max", window_s=60, op=">", threshold=90)
    assert run_queries([short], T0)[short.id] == []
    kept = {sid: b for sid, b in STORES[WHOLE]["gpu"].blocks.items()
            if sid < micros(T0) // SLICE_US - 1}
    assert kept

    long = rule(metric="gpu.temp_c", aggregation="max", window_s=300, op=">", threshold=90)
    hits = run_queries([short, long], T0 + 10 * S)

    # the 95 °C rows of T0-290 s … T0-200 s were folded for the new window
    assert [(h.gpu_id, h.value) for h in hits[long.id]] == [(gpu.id, 95.0)]
    # and the slices the shorter window had built were kept, not folded again
    assert all(STORES[WHOLE]["gpu"].blocks[sid] is block for sid, block in kept.items())
    # the second cycle read the span before the old window and the newest seconds only
    assert covered(spans)[1:] == [("gpu", T0 - 290 * S, T0 - 60 * S),
                                  ("gpu", T0 - 10 * S, T0 + 10 * S)]
    assert max(hi - lo for _, lo, hi in spans) <= 60 * S  # a minute at a time


def test_a_steady_cycle_reads_the_newest_seconds_and_late_rows_count_within_late_s(node, spans):
    gpu = node.gpus[0]
    samples("gpu", {"gpu_id": gpu.id}, lambda ts: {"temp_c": 50.0}, T0 - 120 * S, T0)
    hot = rule(metric="gpu.temp_c", aggregation="max", window_s=60, op=">", threshold=90)
    assert run_queries([hot], T0)[hot.id] == []
    # rows 3 s and 20 s old reach PostgreSQL after the cycle that covered their instants
    late = node.gpus[1]
    samples("gpu", {"gpu_id": late.id}, lambda ts: {"temp_c": 97.0}, T0 - 8 * S, T0 - 3 * S)
    samples("gpu", {"gpu_id": late.id}, lambda ts: {"temp_c": 99.0}, T0 - 25 * S, T0 - 20 * S)
    hits = run_queries([hot], T0 + 10 * S)
    # the one within LATE_S counts; the other came too late: a steady cycle never reads it
    assert [(h.gpu_id, h.value) for h in hits[hot.id]] == [(late.id, 97.0)]
    # the cycle rebuilt from the slice holding T0 - LATE_S, not the whole window
    assert spans[-1] == ("gpu", T0 - 10 * S, T0 + 10 * S)


def test_the_store_rebuilds_when_postgresql_no_longer_records_what_it_covers(node, spans):
    """Another process evaluated meanwhile, a cycle rolled back, the tables were emptied: the
    record in alerts_slice_state differs, and the whole window is read again."""
    gpu = node.gpus[0]
    samples("gpu", {"gpu_id": gpu.id}, lambda ts: {"temp_c": 50.0}, T0 - 120 * S, T0 + 20 * S)
    hot = rule(metric="gpu.temp_c", aggregation="max", window_s=60, op=">", threshold=90)
    run_queries([hot], T0)
    # a row old enough that a steady cycle would never read it again
    with connection.cursor() as cursor:
        cursor.execute(f"UPDATE {TABLES['gpu'].name} SET temp_c = 99 WHERE ts = %s",
                       [T0 - 40 * S])
        cursor.execute("DELETE FROM alerts_slice_state")

    hits = run_queries([hot], T0 + 10 * S)

    assert [h.value for h in hits[hot.id]] == [99.0]
    assert spans[-1] == ("gpu", T0 - 50 * S, T0 + 10 * S)


def test_the_fold_agrees_with_postgresql_over_the_same_rows(node):
    """count, sum, min, max, first and last per (GPU, slice), from the arrays, against the same
    aggregates computed by PostgreSQL over the raw rows, with absent values in between."""
    for i, gpu in enumerate(node.gpus):
        samples("gpu", {"gpu_id": gpu.id},
                lambda ts, i=i: {"power_w": None if (ts - T0) // S % 7 == 3 else
                                 100.0 + ((ts - T0) // S * 37 + i) % 91 / 3},
                T0 - 95 * S, T0)
    column = column_for(find_metric("gpu.power_w"))
    rows = read(connection.cursor().cursor, Reading("gpu", (column,)), T0 - 100 * S, T0)
    blocks = fold(rows, {"power_w": frozenset(PART_NAMES)})
    mine = {(int(k), b.sid * 10): tuple(p[part][u] for part in PART_NAMES)
            for b in blocks for u, k in enumerate(b.keys) for p in [b.parts["power_w"]]}
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT gpu_id, (extract(epoch FROM date_bin('10 s', ts - interval '1 microsecond', "
            "'2000-01-01+00')) - 946684800)::int8, count(power_w), sum(power_w::float8), "
            "min(power_w), max(power_w), "
            "(array_agg(power_w ORDER BY ts) FILTER (WHERE power_w IS NOT NULL))[1], "
            "(array_agg(power_w ORDER BY ts DESC) FILTER (WHERE power_w IS NOT NULL))[1] "
            f"FROM {TABLES['gpu'].name} WHERE ts > %s AND ts <= %s GROUP BY 1, 2",
            [T0 - 100 * S, T0])
        theirs = {(g, s): (n, total, lo, hi, first, last)
                  for g, s, n, total, lo, hi, first, last in cursor.fetchall()}
    assert set(mine) == set(theirs) and len(mine) == 2 * 10
    for key, (n, total, lo, hi, first, last) in theirs.items():
        assert mine[key][0] == n
        assert np.allclose(mine[key][1:], (total, lo, hi, first, last), rtol=1e-6)
