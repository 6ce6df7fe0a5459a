"""group_wait, group_interval, repeat_interval and resolved notifications."""

from __future__ import annotations

from controlplane.alerts.delivery.dispatch import dispatch
from controlplane.alerts.delivery.models import Notification, NotificationGroup, Route
from tests.alerts.delivery.helpers import at, cycle, fire, payloads, resolve


def fingerprints(payload: dict) -> list[tuple[str, str]]:
    return sorted((a["labels"]["host"], a["status"]) for a in payload["alerts"])


def test_two_alerts_of_one_group_within_group_wait_make_one_notification_with_both(
        webhook, receiver):
    fire("KVCacheFull", "gpu-01", at(0))
    assert cycle(at(10)) == []  # still within group_wait
    fire("KVCacheFull", "gpu-02", at(20))

    made = cycle(at(30))

    assert len(made) == 1
    [body] = payloads(receiver)
    assert fingerprints(body) == [("gpu-01", "firing"), ("gpu-02", "firing")]
    assert body["status"] == "firing"
    assert body["group_labels"] == {"alertname": "KVCacheFull"}
    assert body["id"] == str(made[0].uuid)


def test_alerts_of_different_groups_are_notified_separately(webhook, receiver):
    fire("KVCacheFull", "gpu-01")
    fire("EngineDown", "gpu-01")

    assert len(cycle(at(30))) == 2
    assert sorted(p["group_labels"]["alertname"] for p in payloads(receiver)) == [
        "EngineDown", "KVCacheFull"]


def test_a_route_groups_by_its_labels(webhook, receiver):
    route = Route.objects.create(name="per host", group_by=["host"])
    route.channels.add(webhook)
    fire("KVCacheFull", "gpu-01")
    fire("EngineDown", "gpu-01")
    fire("EngineDown", "gpu-02")

    cycle(at(30))

    bodies = sorted(payloads(receiver), key=lambda p: p["group_labels"]["host"])
    assert [len(b["alerts"]) for b in bodies] == [2, 1]
    assert bodies[0]["group_key"] == 'per host:{host="gpu-01"}'


def test_an_alert_joining_a_sent_group_waits_for_group_interval(webhook, receiver):
    fire("KVCacheFull", "gpu-01")
    cycle(at(30))
    fire("KVCacheFull", "gpu-02", at(60))

    assert cycle(at(60)) == []
    assert cycle(at(seconds=30, minutes=4, )) == []
    [later] = cycle(at(seconds=30, minutes=5))

    assert fingerprints(later.payload) == [("gpu-01", "firing"), ("gpu-02", "firing")]


def test_an_unchanged_firing_group_repeats_after_repeat_interval_only(webhook, receiver):
    fire("KVCacheFull", "gpu-01")
    cycle(at(30))

    assert cycle(at(minutes=30)) == []
    assert cycle(at(hours=4)) == []
    assert len(cycle(at(seconds=30, hours=4))) == 1
    assert len(receiver.requests) == 2
    assert len({p["id"] for p in payloads(receiver)}) == 2


def test_a_resolved_alert_is_sent_once_as_resolved(webhook, receiver):
    alert = fire("KVCacheFull", "gpu-01")
    cycle(at(30))
    resolve(alert, at(minutes=6))

    [made] = cycle(at(minutes=6))
    assert cycle(at(minutes=20)) == []
    assert cycle(at(hours=5)) == []

    assert made.status == "resolved"
    [alert_body] = made.payload["alerts"]
    assert alert_body["status"] == "resolved"
    assert alert_body["ends_at"] == "2026-12-02T15:06:00Z"


def test_an_alert_resolved_within_group_wait_sends_nothing(webhook, receiver):
    alert = fire("KVCacheFull", "gpu-01")
    cycle(at(10))
    resolve(alert, at(20))

    assert cycle(at(40)) == []
    assert receiver.requests == []


def test_a_restart_does_not_resend_what_the_group_rows_say_was_sent(webhook, receiver):
    fire("KVCacheFull", "gpu-01")
    cycle(at(30))

    # A new process has nothing in memory: the group row is all it knows.
    assert dispatch(at(31)) == []
    assert dispatch(at(minutes=10)) == []
    group = NotificationGroup.objects.get()
    assert group.last_sent_at == at(30)
    assert Notification.objects.count() == 1


def test_an_alert_that_fires_again_is_a_change_of_its_group(webhook, receiver):
    alert = fire("KVCacheFull", "gpu-01")
    cycle(at(30))
    # Resolved and firing again between two dispatches: the same row, a new start.
    alert.started_at = at(minutes=3)
    alert.save(update_fields=["started_at"])

    [again] = cycle(at(minutes=6))

    [body] = again.payload["alerts"]
    assert (body["status"], body["starts_at"]) == ("firing", "2026-12-02T15:03:00Z")


def test_regrouping_a_route_resolves_only_the_alerts_that_stopped_firing(webhook, receiver):
    route = Route.objects.create(name="by alert", group_by=["alertname"])
    route.channels.add(webhook)
    fire("KVCacheFull", "gpu-01")
    gone = fire("KVCacheFull", "gpu-02")
    cycle(at(30))
    # An operator now groups by host too; one of the alerts resolves meanwhile.
    Route.objects.filter(id=route.id).update(group_by=["alertname", "host"])
    resolve(gone, at(minutes=5))

    made = cycle(at(minutes=6))

    sent = sorted((n.payload["group_labels"].get("host", "*"), fingerprints(n.payload))
                  for n in made)
    # The old group says gpu-02 resolved and nothing about gpu-01, which still fires: it moved
    # to its new group, announced there.
    assert sent == [("*", [("gpu-02", "resolved")]), ("gpu-01", [("gpu-01", "firing")])]
    assert cycle(at(minutes=20)) == []
