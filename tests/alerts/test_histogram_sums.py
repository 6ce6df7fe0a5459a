"""histogram_sums adds the window's slices a slice at a time; it must give what the (targets x
slices x buckets) matrices of the View give, layouts changing between slices and targets
missing from some slices included. Random raw rows, folded as a cycle folds them. And
histogram_quantiles, every target of a layout at once, must give what the per-target estimate
gives."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import numpy as np
import pytest

from controlplane.alerts.windows.aggregate import histogram_quantiles, histogram_sums
from controlplane.alerts.windows.fold import fold
from controlplane.alerts.windows.raw import Rows
from controlplane.alerts.windows.slices import first_slice, micros
from controlplane.alerts.windows.store import SliceStore, View
from controlplane.telemetry.series.histograms import histogram_quantile

KEY = "ttft_seconds"
NOW = datetime(2026, 5, 4, 12, 0, 5, tzinfo=UTC)


def matrix_sums(view: View, j0: int) -> tuple[np.ndarray, np.ndarray]:
    """The reference: per layout, the matrices masked and summed over the window's slices."""
    layouts, counts = view.layouts(KEY)[:, j0:], view.counts(KEY)[:, j0:]
    best = np.full(len(view.keys), -1, np.int64)
    best_counts = np.zeros((len(view.keys), counts.shape[2]), np.int64)
    best_total = np.full(len(view.keys), -1, np.int64)
    for layout in np.unique(layouts[layouts >= 0]):
        sums = (counts * (layouts == layout)[..., None]).sum(axis=1)
        total = sums.sum(axis=1)
        better = (layouts == layout).any(axis=1) & (total > best_total)
        best[better], best_counts[better], best_total[better] = layout, sums[better], \
            total[better]
    return best, best_counts


@pytest.mark.parametrize("seed", range(6))
def test_slice_by_slice_sums_match_the_matrices(seed):
    rng = np.random.default_rng(seed)
    n, span_s = 400, 600
    end = micros(NOW)
    ts = end - rng.integers(0, span_s * 10**6, n)
    key = rng.integers(1, 12, n).astype(np.int64)
    # targets 1-8 mostly on layout 3, 9-11 mostly on 5 (a restarted engine's new buckets),
    # a few rows without the histogram
    layouts = np.where(key < 9, rng.choice([3, 3, 3, 5, -1], n),
                       rng.choice([5, 5, 3, -1], n)).astype(np.int32)
    counts = np.where(layouts[:, None] >= 0, rng.integers(0, 9, (n, 7)), 0).astype(np.int32)
    rows = Rows(key=key, ts=ts, engine=None, layouts={KEY: layouts}, counts={KEY: counts})
    store = SliceStore("engine")
    store.blocks = {b.sid: b for b in fold(rows, {})}
    store.lo = NOW - timedelta(seconds=span_s)
    view = View(store, NOW)
    for window_s in (60, 300, span_s):
        j0 = view.column_of(first_slice(NOW, window_s))
        best, sums = histogram_sums(view, KEY, j0)
        want_best, want_sums = matrix_sums(view, j0)
        assert (best == want_best).all()
        assert (sums == want_sums).all()
    assert set(best.tolist()) >= {3, 5}  # both layouts won somewhere


@pytest.mark.parametrize("seed", range(4))
def test_quantiles_of_a_layout_at_once_equal_the_per_target_estimate(seed):
    """histogram_quantiles gives, row by row and to the bit, what Prometheus's estimate
    (histogram_quantile) gives per target: empty rows, ranks in the +Inf bucket, zero
    buckets on the way, a first bound at or below 0, integer bounds."""
    rng = np.random.default_rng(seed)
    cases = [[0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0], [-1.0, 0.0, 2.0], [0, 1, 5, 25],
             [3.0]]
    for bounds in cases:
        width = len(bounds) + 1
        counts = rng.integers(0, 6, (300, width)) * (rng.random((300, width)) < 0.6)
        counts[:10] = 0  # no observations
        counts[10:20, :-1] = 0  # all in +Inf
        counts[20:30, 1:] = 0  # all in the first bucket
        for q in (0.0, 0.5, 0.9, 0.99, 1.0):
            got = histogram_quantiles(q, bounds, counts)
            for u, row in enumerate(counts.tolist()):
                want = histogram_quantile(q, bounds, row)
                if want is None:
                    assert np.isnan(got[u])
                else:
                    assert got[u] == want, (bounds, q, row)


def test_quantiles_without_bounds_or_with_too_few_counts_have_no_value():
    counts = np.ones((3, 4), np.int64)
    assert np.isnan(histogram_quantiles(0.5, [], counts)).all()
    assert np.isnan(histogram_quantiles(0.5, [1.0, 2.0, 3.0, 4.0], counts)).all()
    # wider counts than the layout: the layout's buckets only, as the cycle cuts them
    wide = np.array([[1, 1, 0, 7]])
    assert histogram_quantiles(0.5, [1.0, 2.0], wide)[0] == histogram_quantile(
        0.5, [1.0, 2.0], [1, 1, 0])
