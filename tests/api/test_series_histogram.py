"""GET /api/v1/series/ for histogram metrics: observation counts and estimated quantiles."""

from __future__ import annotations

from datetime import timedelta

import pytest

from controlplane.telemetry.series import histogram_quantile
from tests.api.helpers import T0, insert_samples, layout, series

MINUTE = timedelta(minutes=1)
BOUNDS = [0.1, 0.5, 1.0]
WINDOW = {"start": T0.isoformat(), "end": (T0 + 3 * MINUTE).isoformat()}


@pytest.fixture
def ttft_rows(mixed_fleet):
    lay = layout(BOUNDS)
    insert_samples("engine", [
        {"engine_id": mixed_fleet.engine.id, "ts": T0, "ttft_seconds_layout": lay,
         "ttft_seconds_counts": [2, 6, 2, 0], "ttft_seconds_sum": 3.0},
        {"engine_id": mixed_fleet.engine.id, "ts": T0 + MINUTE, "ttft_seconds_layout": lay,
         "ttft_seconds_counts": [0, 0, 1, 9]},  # nine slower than the highest bound
        {"engine_id": mixed_fleet.engine.id, "ts": T0 + 2 * MINUTE, "ttft_seconds_layout": lay,
         "ttft_seconds_counts": [0, 0, 0, 0]},  # an interval without requests
        {"engine_id": mixed_fleet.engine.id, "ts": T0 + 150 * MINUTE / 60, "up": 1},  # no histogram
    ])


def ttft(api, mixed_fleet, **params) -> dict:
    """The reply, with the points of its only series as ``points``."""
    response = series(api, metric="engine.ttft_seconds", entity=mixed_fleet.engine.id,
                      **{**WINDOW, **params})
    assert response.status_code == 200, response.content
    body = response.json()
    (only,) = body["series"]
    return {**body, "points": only["points"]}


def test_without_quantile_each_point_is_the_observation_count(api, mixed_fleet, ttft_rows):
    body = ttft(api, mixed_fleet)
    assert body["points"] == [[T0.timestamp(), 10], [(T0 + MINUTE).timestamp(), 10],
                              [(T0 + 2 * MINUTE).timestamp(), 0]]
    assert (body["unit"], body["kind"], body["resolution"]) == ("s", "histogram", "raw")
    assert (body["step"], body["stat"]) == (None, None)


def test_it_estimates_a_quantile_inside_the_bucket_that_holds_it(api, mixed_fleet, ttft_rows):
    body = ttft(api, mixed_fleet, quantile=0.5)
    # By hand, first row: 10 observations, rank 5 falls in (0.1, 0.5], which holds 6 of them
    # after the 2 below it: 0.1 + (0.5 - 0.1) * (5 - 2) / 6 = 0.3.
    # Second row: rank 5 falls in +Inf, so the highest finite bound, 1.0.
    # Third row: no observations, no quantile: the point is left out.
    assert body["points"] == [[T0.timestamp(), pytest.approx(0.3)],
                              [(T0 + MINUTE).timestamp(), 1.0]]
    assert body["quantile"] == 0.5


def test_it_estimates_the_99th_percentile(api, mixed_fleet, ttft_rows):
    body = ttft(api, mixed_fleet, quantile=0.99)
    # Rank 9.9 of 10 falls in (0.5, 1.0], holding 2 after 8: 0.5 + 0.5 * (9.9 - 8) / 2.
    assert body["points"][0] == [T0.timestamp(), pytest.approx(0.975)]


def test_it_sums_bucket_counts_within_a_time_bucket(api, mixed_fleet, ttft_rows):
    body = ttft(api, mixed_fleet, max_points=1)
    assert body["points"] == [[T0.timestamp(), 20]]
    assert (body["resolution"], body["step"]) == ("raw", 180)


def test_it_estimates_a_quantile_from_the_summed_buckets(api, mixed_fleet, ttft_rows):
    body = ttft(api, mixed_fleet, max_points=1, quantile=0.5)
    # Summed counts [2, 6, 3, 9]: rank 10 of 20 falls in (0.5, 1.0], holding 3 after 8.
    assert body["points"] == [[T0.timestamp(), pytest.approx(0.5 + 0.5 * (10 - 8) / 3)]]


def test_a_bucket_whose_layout_changed_speaks_with_the_layout_holding_most_observations(
        api, mixed_fleet):
    insert_samples("engine", [
        {"engine_id": mixed_fleet.engine.id, "ts": T0, "ttft_seconds_layout": layout([1.0]),
         "ttft_seconds_counts": [1, 0]},
        {"engine_id": mixed_fleet.engine.id, "ts": T0 + MINUTE,
         "ttft_seconds_layout": layout(BOUNDS),
         "ttft_seconds_counts": [4, 0, 0, 0]},
    ])
    body = ttft(api, mixed_fleet, max_points=1, quantile=0.5)
    # The four observations in (0, 0.1] win: rank 2 of 4 gives 0.1 * 2 / 4.
    assert body["points"] == [[T0.timestamp(), pytest.approx(0.05)]]
    assert ttft(api, mixed_fleet, max_points=1)["points"] == [[T0.timestamp(), 5]]


@pytest.mark.parametrize(("q", "bounds", "counts", "expected"), [
    (0.5, [1.0, 2.0], [4, 0, 0], 0.5),  # the first bucket starts at 0
    (0.5, [1.0, 2.0], [2, 2, 0], 1.0),  # a rank on a bound stays in the lower bucket
    (0.75, [1.0, 2.0], [2, 2, 0], 1.5),
    (0.0, [1.0, 2.0], [0, 3, 0], 1.0),  # the lower edge of the first non-empty bucket
    (1.0, [1.0, 2.0], [1, 1, 1], 2.0),  # +Inf: the highest finite bound
    (0.5, [1.0, 2.0], [0, 0, 0], None),  # nothing observed
    (0.5, [1.0, 2.0], [1, 1], None),  # counts that do not fit the bounds
])
def test_histogram_quantile_follows_prometheus(q, bounds, counts, expected):
    assert histogram_quantile(q, bounds, counts) == (
        pytest.approx(expected) if expected is not None else None)
