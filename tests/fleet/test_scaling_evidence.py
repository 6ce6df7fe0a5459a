"""The autoscaler's minutes, read from a service's replicas' raw engine rows in PostgreSQL:
gauges averaged per replica and minute, then summed over the replicas; the TTFT burn rate
from the summed buckets against the objective; only whole minutes, stamped with their end."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from controlplane.fleet import routing
from controlplane.fleet.models import Service
from controlplane.fleet.scaling_evidence import router_waiting, service_minutes
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


def test_a_minute_an_engine_came_up_in_late_is_not_one_it_served(service):
    d, _ = replicas(service)
    # up at 12:00:50 and queued at once: its 10 s are not a minute of queue; the next minute,
    # served whole, is
    up = START + timedelta(seconds=50)
    engine_rows(d, up, START + timedelta(seconds=119), step_s=1, requests_waiting=3.0)
    got = service_minutes([d], START, START + timedelta(minutes=2))
    assert [(m.at, m.waiting) for m in got] == [(START + timedelta(minutes=2), 3.0)]


def test_replicas_without_an_engine_have_no_minutes(service):
    assert service_minutes(replicas(service), START, START + timedelta(minutes=5)) == []


def router_report(service, pid: int | None, tries: int | None, at: datetime) -> Service:
    """The router agent's report of the service's router, received at ``at``."""
    metrics = {"requests_total": 0, "per_worker": {}}
    if tries is not None:
        metrics["no_worker_tries"] = tries
    routing.record_router_status(service.router_host_id, [{
        "service_id": service.pk, "state": "ready", "pid": pid, "workers": [],
        "healthy": True, "metrics": metrics}], now=at)
    return Service.objects.get(pk=service.pk)


def test_the_routers_tries_without_a_worker_are_a_sign_when_they_grow(service):
    """At zero replicas the router is the only witness: its count of tries that found no
    worker says nothing of now, its growth says a request waits."""
    assert router_waiting(router_report(service, 40, 0, START)) is None
    grown = router_waiting(router_report(service, 40, 3, START + timedelta(seconds=2)))
    assert (grown.at, grown.tries) == (START + timedelta(seconds=2), 3)
    kept = router_waiting(router_report(service, 40, 3, START + timedelta(seconds=30)))
    assert kept == grown  # the same process: when it last grew is kept
    restarted = router_report(service, 41, 2, START + timedelta(seconds=40))
    assert router_waiting(restarted).tries == 2  # a new process (or a first sight) from zero
    assert router_waiting(router_report(service, 42, 0, START + timedelta(seconds=50))) is None
    assert router_waiting(router_report(service, None, None, START)) is None  # router down
