"""The autoscaler's minutes, read from a service's replicas' raw engine rows in PostgreSQL:
gauges averaged per replica and minute, then summed over the replicas; the TTFT burn rate
from the summed buckets against the objective; only whole minutes, stamped with their end."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from controlplane.fleet.scaling_evidence import service_minutes
from controlplane.telemetry import objectives
from tests.fleet.controller_support import (
    TTFT_BOUNDS,
    engine_rows,
    hosts,
    layout,
    make_service,
    replicas,
    router_host,
)

pytestmark = pytest.mark.django_db(transaction=True)
START = datetime(2026, 12, 6, 12, 0, tzinfo=UTC)


@pytest.fixture
def service(empty_samples):
    hosts(2)
    return make_service(router_host(), replicas=2)


def test_each_minute_sums_the_replicas_queues_and_averages_their_kv_usage(service):
    first, second = replicas(service)
    ttft = layout(TTFT_BOUNDS)
    fast = [10, 0, 0, 0, 0, 0, 0]  # every request under 0.1 s
    common = {"requests_running": 6.0, "requests_finished_per_s": 2.0,
              "ttft_seconds_layout": ttft, "ttft_seconds_counts": fast}
    # two whole minutes, every 5 s; the second replica queues 4 and uses more of its cache
    end = START + timedelta(seconds=115)
    engine_rows(first, START, end, step_s=5, requests_waiting=0.0, kv_cache_usage=0.4,
                **common)
    engine_rows(second, START, end, step_s=5, requests_waiting=4.0, kv_cache_usage=0.8,
                **common)
    got = service_minutes([first, second], START, START + timedelta(minutes=2))
    assert [m.at for m in got] == [START + timedelta(minutes=1), START + timedelta(minutes=2)]
    m = got[0]
    assert (m.replicas, m.waiting, m.running, m.requests) == (2, 4.0, 12.0, 240)
    assert m.kv_usage == pytest.approx(0.6) and m.ttft_burn == 0.0


def test_the_ttft_burn_is_the_share_over_the_objective_against_the_budget(service, settings):
    settings.PITWALL = {**settings.PITWALL, "ALERT_TTFT_P99_OBJECTIVE_MS": 1000,
                        "OBJECTIVE_TARGET": 0.99}
    (d, _) = replicas(service)
    # a tenth of the requests in (2.5, 5] s: 90 % attainment against a 99 % target
    engine_rows(d, START, START + timedelta(seconds=55), step_s=5, requests_running=1.0,
                ttft_seconds_layout=layout(TTFT_BOUNDS),
                ttft_seconds_counts=[9, 0, 0, 0, 0, 1, 0])
    [m] = service_minutes([d], START, START + timedelta(minutes=1))
    assert objectives.target() == 0.99
    assert m.ttft_burn == pytest.approx(0.1 / 0.01)


def test_a_minute_still_running_and_rows_of_a_down_engine_are_left_out(service):
    d, down = replicas(service)
    engine_rows(d, START, START + timedelta(seconds=90), step_s=5, requests_waiting=2.0)
    engine_rows(down, START, START + timedelta(seconds=90), step_s=5, up=0,
                requests_waiting=50.0)
    got = service_minutes([d, down], START, START + timedelta(seconds=90))
    assert [m.at for m in got] == [START + timedelta(minutes=1)]  # 12:01:00-12:01:30 is not whole
    assert (got[0].replicas, got[0].waiting, got[0].ttft_burn) == (1, 2.0, None)


def test_replicas_without_an_engine_have_no_minutes(service):
    assert service_minutes(replicas(service), START, START + timedelta(minutes=5)) == []
