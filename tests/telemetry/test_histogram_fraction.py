"""histogram_fraction: the share of observations under a bound, as Prometheus estimates it."""

import pytest

from controlplane.telemetry.series.histograms import histogram_fraction, histogram_quantile

BOUNDS = [0.1, 0.5, 1.0]


def test_whole_buckets_below_the_bound_count_whole():
    assert histogram_fraction(0.5, BOUNDS, [2, 6, 1, 1]) == pytest.approx(0.8)


def test_inside_a_bucket_it_interpolates_linearly():
    # Half of (0.5, 1.0]'s 4 observations lie under 0.75.
    assert histogram_fraction(0.75, BOUNDS, [0, 4, 4, 2]) == pytest.approx(0.6)
    # The first bucket starts at 0.
    assert histogram_fraction(0.05, BOUNDS, [10, 0, 0, 0]) == pytest.approx(0.5)


def test_the_inf_bucket_is_above_every_finite_bound():
    assert histogram_fraction(100.0, BOUNDS, [1, 1, 1, 7]) == pytest.approx(0.3)


def test_no_observations_or_a_mismatched_layout_give_none():
    assert histogram_fraction(0.5, BOUNDS, [0, 0, 0, 0]) is None
    assert histogram_fraction(0.5, BOUNDS, [1, 2]) is None


def test_it_inverts_the_quantile_estimate():
    counts = [3, 9, 5, 1]
    p90 = histogram_quantile(0.9, BOUNDS, counts)
    assert histogram_fraction(p90, BOUNDS, counts) == pytest.approx(0.9)
