"""Alertmanager API channels through the real dispatch and delivery: every routed alert posted
at once, re-posted every resend_s, resolved ones with their resolve time for 15 minutes, and a
newer post superseding older unsent ones. A loopback receiver stands in for Alertmanager here
(the real one: test_real_alertmanager.py)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from controlplane.alerts.delivery import service
from controlplane.alerts.delivery.models import (
    AlertmanagerFeed,
    Channel,
    DeliveryState,
    Notification,
    Route,
)
from controlplane.alerts.silences import acknowledge, create_silence
from tests.alerts.delivery.helpers import at, cycle, fire, resolve
from tests.support.receivers import Receiver


@pytest.fixture
def am(db, receiver, allow_private) -> Channel:
    return service.create_channel(name="alertmanager", kind="alertmanager_api",
                                  config={"urls": [receiver.url], "resend_s": 60})


def posted(rec: Receiver, index: int = -1) -> dict[str, dict]:
    """host -> alert, of one POST to the stand-in Alertmanager."""
    request = rec.requests[index]
    assert request.path == "/hook/api/v2/alerts"
    return {a["labels"]["host"]: a for a in request.json()}


def rfc(moment: datetime) -> str:
    return moment.astimezone(UTC).isoformat().replace("+00:00", "Z")


def test_a_firing_alert_is_posted_at_once_and_re_posted_every_resend_s(am, receiver):
    fire("KVCacheFull", "gpu-01", at(0))

    [row] = cycle(at(1))  # no group_wait: Alertmanager has its own
    assert (row.state, row.status, row.group_id) == (DeliveryState.SENT, "firing", None)
    alert = posted(receiver)["gpu-01"]
    assert alert["labels"] == {"alertname": "KVCacheFull", "severity": "critical",
                               "host": "gpu-01"}
    assert alert["annotations"]["summary"] == "KVCacheFull on gpu-01"
    assert alert["startsAt"] == rfc(at(0))
    # endsAt is computed when sent, on the real clock: 4 × resend_s ahead.
    assert datetime.fromisoformat(alert["endsAt"]) > datetime.now(UTC) + timedelta(seconds=200)

    for second in (6, 30, 60):
        assert cycle(at(second)) == []  # unchanged, resend_s not yet past
    assert len(cycle(at(61))) == 1
    assert len(receiver.requests) == 2 and posted(receiver).keys() == {"gpu-01"}
    assert cycle(at(100)) == [] and len(cycle(at(121))) == 1


def test_a_change_posts_at_once_with_every_alert_of_the_feed(am, receiver):
    fire("KVCacheFull", "gpu-01", at(0))
    cycle(at(1))
    fire("KVCacheFull", "gpu-02", at(5))
    fire("EngineDown", "gpu-03", at(5))

    [row] = cycle(at(6))
    assert posted(receiver).keys() == {"gpu-01", "gpu-02", "gpu-03"}
    assert row.payload["group_key"] == f"feed:{am.id}"


def test_a_resolved_alert_is_posted_with_its_resolve_time_for_15_minutes(am, receiver):
    stays = fire("KVCacheFull", "gpu-01", at(0))
    goes = fire("KVCacheFull", "gpu-02", at(0))
    cycle(at(1))
    resolve(goes, at(40))

    [row] = cycle(at(42))
    alerts = posted(receiver)
    assert row.status == "firing"
    assert alerts["gpu-02"]["endsAt"] == rfc(at(40))  # when it resolved, not when posted
    assert datetime.fromisoformat(alerts["gpu-01"]["endsAt"]) > datetime.now(UTC)

    now = at(42)
    while now < at(40) + timedelta(minutes=15) - timedelta(seconds=30):
        now += timedelta(seconds=30)  # each pass past resend_s (60 s) posts again
        cycle(now)
    assert posted(receiver)["gpu-02"]["endsAt"] == rfc(at(40))  # re-posted as it was
    cycle(at(40) + timedelta(minutes=16))
    assert posted(receiver).keys() == {"gpu-01"}  # forgotten after 15 minutes

    resolve(stays, at(20, minutes=16))
    [row] = cycle(at(21, minutes=16))
    assert row.status == "resolved"
    assert posted(receiver)["gpu-01"]["endsAt"] == rfc(at(20, minutes=16))
    cycle(at(minutes=40))
    count = len(receiver.requests)
    assert cycle(at(minutes=45)) == [] and len(receiver.requests) == count  # nothing left
    assert AlertmanagerFeed.objects.get(channel=am).posted == {}


def test_pitwall_silences_and_acks_do_not_apply_the_feed_mirrors_what_fires(am, receiver):
    alert = fire("KVCacheFull", "gpu-01", at(0))
    create_silence(matchers=[{"label": "host", "op": "=", "value": "gpu-01"}],
                   starts_at=at(0), ends_at=at(hours=1), author="bob", comment="maintenance")
    assert acknowledge(alert, "bob", now=at(0))

    assert len(cycle(at(1))) == 1 and len(cycle(at(62))) == 1
    assert posted(receiver).keys() == {"gpu-01"}


def test_route_matching_decides_what_the_feed_gets_and_leaving_a_route_resolves(
        am, webhook, receiver):
    critical = Route.objects.create(name="critical", severities=["critical"])
    critical.channels.add(am)
    warning = Route.objects.create(name="warning", severities=["warning"])
    warning.channels.add(webhook)
    fire("KVCacheFull", "gpu-01", at(0), severity="critical")
    fire("GpuHot", "gpu-02", at(0), severity="warning")

    rows = cycle(at(1))
    assert [r.channel_id for r in rows] == [am.id]  # the webhook's group waits (group_wait)
    assert posted(receiver).keys() == {"gpu-01"}

    critical.channels.remove(am)  # the alert still takes that route: not the default one
    cycle(at(10))
    am_post = [r for r in receiver.requests if r.path.endswith("/api/v2/alerts")][-1].json()
    assert [(a["labels"]["host"], a["endsAt"]) for a in am_post] == [("gpu-01", rfc(at(10)))]


def test_the_grouped_channels_are_unchanged_beside_a_feed(am, webhook, receiver):
    fire("KVCacheFull", "gpu-01", at(0))
    cycle(at(1))
    rows = cycle(at(30))  # group_wait past: the webhook's one grouped notification
    assert [(r.channel_id, r.payload["group_labels"]) for r in rows] == [
        (webhook.id, {"alertname": "KVCacheFull"})]
    assert Notification.objects.filter(channel=am).count() == 1


def test_a_newer_post_supersedes_older_unsent_ones(am, receiver):
    receiver.status = 503
    alert = fire("KVCacheFull", "gpu-01", at(0))
    [first] = cycle(at(1))
    assert Notification.objects.get(id=first.id).state == DeliveryState.RETRYING
    resolve(alert, at(3))

    [second] = cycle(at(5))  # its first attempt fails too
    assert Notification.objects.get(id=first.id).state == DeliveryState.SUPERSEDED
    receiver.status = 200
    before = len(receiver.requests)
    service.deliver_due(at(minutes=5))

    sent = receiver.requests[before:]
    assert len(sent) == 1 and sent[0].headers["X-Pitwall-Notification-Id"] == str(second.uuid)
    assert posted(receiver)["gpu-01"]["endsAt"] == rfc(at(3))  # the old "firing" never went
    states = dict(Notification.objects.values_list("id", "state"))
    assert states == {first.id: DeliveryState.SUPERSEDED, second.id: DeliveryState.SENT}
    am.refresh_from_db()
    assert am.enabled


def test_a_row_left_in_flight_is_not_sent_once_a_newer_one_exists(am, receiver):
    receiver.status = 503
    alert = fire("KVCacheFull", "gpu-01", at(0))
    [first] = cycle(at(1))
    # Its worker died mid-attempt: "sending" until the lease runs out.
    Notification.objects.filter(id=first.id).update(state=DeliveryState.SENDING,
                                                    next_attempt_at=at(minutes=2))
    resolve(alert, at(3))
    receiver.status = 200
    [second] = cycle(at(5))
    assert Notification.objects.get(id=first.id).state == DeliveryState.SENDING

    assert service.deliver(first.id, at(minutes=3)).state == DeliveryState.SUPERSEDED
    assert [r.headers["X-Pitwall-Notification-Id"] for r in receiver.requests[1:]] == [
        str(second.uuid)]


def test_a_test_notification_works_for_an_alertmanager_channel(am, receiver):
    row = service.send_test(am)

    assert row.state == DeliveryState.SENT and row.test
    [alert] = receiver.requests[0].json()
    assert alert["labels"]["alertname"] == "PitwallTestNotification"
    assert not AlertmanagerFeed.objects.exists()  # the test is no part of the feed


def test_a_disabled_feed_channel_posts_the_resolution_it_missed_when_enabled(am, receiver):
    alert = fire("KVCacheFull", "gpu-01", at(0))
    cycle(at(1))
    service.disable_channel(am, "maintenance", at(2))
    resolve(alert, at(10))
    assert cycle(at(20)) == []

    service.enable_channel(am)
    cycle(at(30))
    assert posted(receiver)["gpu-01"]["endsAt"] == rfc(at(10))


def test_a_feed_keeps_an_hour_of_sent_rows_and_the_failed_ones(am, receiver):
    am.config = {**am.config, "resend_s": 600}  # fewer passes: two hours in 36 of them
    am.save()
    fire("KVCacheFull", "gpu-01", at(0))
    receiver.status = 404  # permanent: the row fails and the channel is switched off
    [failed] = cycle(at(1))
    service.enable_channel(am)
    receiver.status = 200
    test = service.send_test(am, at(2))
    now = at(2)
    while now < at(hours=2):
        now += timedelta(seconds=200)
        cycle(now)

    rows = Notification.objects.filter(channel=am, test=False).exclude(id=failed.id)
    # Posts every resend_s from the failed one at 1 s: at 602 s, 1202 s, ... 7202 s (now);
    # the last hour's are those from 3602 s on.
    assert sorted((r.created_at - at(0)).total_seconds() for r in rows) == [
        3602.0 + 600 * i for i in range(7)]
    assert min(r.created_at for r in rows) >= now - timedelta(hours=1)
    assert Notification.objects.get(id=failed.id).state == DeliveryState.FAILED
    assert Notification.objects.filter(id=test.id).exists()


def test_a_post_row_counts_its_alerts_and_each_attempt_posts_what_the_feed_holds(am, receiver):
    """A row per post holding every alert would weigh megabytes in a storm, one a minute: the
    feed row holds the alerts, the post row their counts."""
    for host in ("gpu-01", "gpu-02", "gpu-03"):
        fire("KVCacheFull", host, at(0))
    receiver.status = 503  # Alertmanager down: the post waits for a retry
    [row] = cycle(at(1))
    assert row.payload["alerts"] == [] and row.payload["feed"] == {"firing": 3, "resolved": 0}
    # Meanwhile the feed moves on (as dispatch moves it); the retry posts that, not the past.
    feed = AlertmanagerFeed.objects.get(channel=am)
    feed.posted = {fp: a for fp, a in feed.posted.items() if a["labels"]["host"] != "gpu-03"}
    feed.save()
    receiver.status = 200
    service.deliver_due(at(1) + timedelta(minutes=1))
    row.refresh_from_db()
    assert row.state == DeliveryState.SENT
    assert posted(receiver).keys() == {"gpu-01", "gpu-02"}
