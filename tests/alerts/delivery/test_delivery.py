"""The delivery queue against a real HTTP receiver: retries, exactly once by id, disabling."""

from __future__ import annotations

from datetime import timedelta

import pytest

from controlplane.alerts.delivery import service
from controlplane.alerts.delivery.dispatch import dispatch
from controlplane.alerts.delivery.models import Channel, DeliveryState, Notification
from tests.alerts.delivery.helpers import at, cycle, fire


def accepted_ids(receiver, since: int) -> list[str]:
    return [r.headers["X-Pitwall-Notification-Id"] for r in receiver.requests[since:]]


def test_a_receiver_failing_for_two_minutes_gets_every_notification_exactly_once_after_it_recovers(
        webhook, receiver):
    receiver.status, receiver.reply = 500, b"upstream unavailable"
    for name in ("KVCacheFull", "EngineDown", "HostNoData"):
        fire(name, "gpu-01", at(0))
    fire("GpuHot", "gpu-02", at(60))  # fires during the outage: its own group

    now = at(0)
    while now < at(minutes=2, seconds=30):
        cycle(now)
        now += timedelta(seconds=5)
    failed_requests = len(receiver.requests)
    assert failed_requests > 4  # every notification was tried, some more than once
    assert set(Notification.objects.values_list("state", flat=True)) == {DeliveryState.RETRYING}
    assert Notification.objects.first().last_error == "HTTP 500: upstream unavailable"

    receiver.status, receiver.reply = 200, b"ok"
    while now < at(minutes=15):
        cycle(now)
        now += timedelta(seconds=5)

    ids = accepted_ids(receiver, failed_requests)
    rows = Notification.objects.all()
    assert len(rows) == 4  # one row per notification, however many attempts
    assert sorted(ids) == sorted(str(n.uuid) for n in rows)  # each once, by id
    assert {n.state for n in rows} == {DeliveryState.SENT}
    assert all(n.attempts >= 2 for n in rows)
    channel = Channel.objects.get()
    assert channel.enabled and channel.last_ok and channel.last_detail == "HTTP 200: ok"


def test_every_retry_carries_the_same_id_and_body(webhook, receiver):
    receiver.status = 503
    fire("KVCacheFull")
    [row] = cycle(at(30))
    receiver.status = 200

    service.deliver_due(at(30) + timedelta(minutes=1))

    first, second = receiver.requests
    assert first.headers["X-Pitwall-Notification-Id"] == str(row.uuid)
    assert second.headers["X-Pitwall-Notification-Id"] == str(row.uuid)
    assert first.json() == second.json()
    row.refresh_from_db()
    assert (row.state, row.attempts, row.detail) == (DeliveryState.SENT, 2, "HTTP 200: ok")


def test_a_row_not_yet_due_is_not_attempted(webhook, receiver):
    receiver.status = 500
    fire("KVCacheFull")
    [row] = cycle(at(30))
    row.refresh_from_db()

    assert service.deliver(row.id, at(31)) is None
    assert at(35) <= row.next_attempt_at <= at(30) + timedelta(seconds=12)
    assert len(receiver.requests) == 1


def test_a_row_is_claimed_by_one_worker_only(webhook):
    fire("KVCacheFull")
    [row_id] = dispatch(at(30))

    assert service.claim(row_id, at(30))
    assert not service.claim(row_id, at(30))
    # A worker that died mid-attempt: the lease runs out and the row is claimable again.
    assert service.claim(row_id, at(30) + service.lease())


def test_retry_after_from_the_receiver_is_honoured(webhook, receiver):
    receiver.status, receiver.reply_headers = 429, {"Retry-After": "300"}
    fire("KVCacheFull")
    [row] = cycle(at(30))
    row.refresh_from_db()

    assert row.state == DeliveryState.RETRYING
    assert row.next_attempt_at == at(30) + timedelta(seconds=300)


def test_retries_stop_after_the_retry_period(webhook, receiver, settings):
    settings.PITWALL = {**settings.PITWALL, "ALERT_DELIVERY_RETRY_FOR_S": 600}
    receiver.status, receiver.reply = 500, b"down"
    fire("KVCacheFull")
    [row] = cycle(at(30))

    service.deliver_due(at(minutes=30))

    row.refresh_from_db()
    assert row.state == DeliveryState.FAILED
    assert row.last_error == "HTTP 500: down (gave up after 2 attempts)"
    assert Channel.objects.get().enabled  # a receiver that is down is not a broken channel


def test_a_permanent_error_disables_the_channel_with_the_reason(webhook, receiver):
    receiver.status, receiver.reply = 404, b"no such hook"
    fire("KVCacheFull")
    fire("EngineDown")

    made = cycle(at(30))

    assert {n.state for n in Notification.objects.all()} == {DeliveryState.FAILED}
    assert len(made) == 2 and len(receiver.requests) == 1  # the second was not tried
    channel = Channel.objects.get()
    assert not channel.enabled
    assert channel.disabled_reason == "HTTP 404: no such hook"
    assert channel.disabled_at == at(30)
    assert Notification.objects.get(id=made[1].id).last_error == (
        "channel disabled: HTTP 404: no such hook")
    # Nothing more is written for a disabled channel.
    fire("GpuHot")
    assert cycle(at(minutes=2)) == []


@pytest.mark.parametrize("attempts,low,high", [(1, 8, 12), (2, 16, 24), (4, 64, 96),
                                                (10, 480, 600), (30, 480, 600)])
def test_backoff_doubles_with_jitter_and_is_capped_at_ten_minutes(attempts, low, high):
    delays = [service.backoff(attempts) for _ in range(50)]

    assert all(low <= d <= high for d in delays)


def test_attempts_are_counted_for_metrics_by_channel_kind_and_outcome(webhook, receiver):
    from prometheus_client import REGISTRY

    from controlplane.alerts.metrics import AlertingNow

    def counts() -> dict[str, float]:
        read = REGISTRY.get_sample_value
        return {"sent": read("pitwall_notifications_sent_total", {"kind": "webhook"}) or 0,
                "retry": read("pitwall_notifications_failed_total",
                              {"kind": "webhook", "outcome": "retry"}) or 0,
                "final": read("pitwall_notifications_failed_total",
                              {"kind": "webhook", "outcome": "final"}) or 0}

    def pending() -> dict[str, float]:
        [family, _] = AlertingNow().collect()
        return {s.labels["kind"]: s.value for s in family.samples}

    before = counts()
    receiver.status = 503
    fire("KVCacheFull")
    cycle(at(30))
    assert pending()["webhook"] == 1 and pending()["email"] == 0
    receiver.status = 200
    service.deliver_due(at(30) + timedelta(minutes=1))
    after = counts()
    assert {k: after[k] - before[k] for k in after} == {"sent": 1, "retry": 1, "final": 0}
    assert pending()["webhook"] == 0
