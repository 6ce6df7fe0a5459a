from __future__ import annotations

import pytest

from controlplane.alerts.transports import AlertmanagerWebhookTransport
from controlplane.alerts.transports.base import ConfigError

ALERT_FIELDS = {
    "status",
    "labels",
    "annotations",
    "startsAt",
    "endsAt",
    "generatorURL",
    "fingerprint",
}


def deliver(receiver, message, **config):
    AlertmanagerWebhookTransport().notify({"url": receiver.url, **config}, message)
    [request] = receiver.requests
    return request


def test_it_posts_an_alertmanager_version_4_payload(receiver, allow_private, message):
    body = deliver(receiver, message).json()

    assert list(body) == [
        "receiver",
        "status",
        "alerts",
        "groupLabels",
        "commonLabels",
        "commonAnnotations",
        "externalURL",
        "version",
        "groupKey",
        "truncatedAlerts",
    ]
    assert body["version"] == "4"
    assert body["receiver"] == "oncall"
    assert body["status"] == "firing"
    assert body["groupKey"] == message.group_key
    assert body["groupLabels"] == {"alertname": "KVCacheFull"}
    assert body["commonLabels"] == {"alertname": "KVCacheFull", "severity": "critical"}
    assert body["commonAnnotations"] == {
        "description": "Requests queue <behind> a full cache & preemptions rise."
    }
    assert body["externalURL"] == "https://pitwall.example.com"
    assert body["truncatedAlerts"] == 0


def test_each_alert_has_alertmanagers_fields_and_times(receiver, allow_private, message):
    firing, resolved = deliver(receiver, message).json()["alerts"]

    assert set(firing) == set(resolved) == ALERT_FIELDS
    assert firing["status"] == "firing"
    assert firing["labels"]["host"] == "gpu-07"
    assert firing["annotations"]["summary"].startswith("KV cache at 97% on gpu-07")
    assert firing["startsAt"] == "2026-12-02T14:30:00Z"
    # Alertmanager hides a firing alert's end behind Go's zero time.
    assert firing["endsAt"] == "0001-01-01T00:00:00Z"
    assert firing["generatorURL"] == message.alerts[0].generator_url
    assert firing["fingerprint"] == message.alerts[0].fingerprint
    assert resolved["status"] == "resolved"
    assert resolved["endsAt"] == "2026-12-02T14:45:00Z"


def test_alerts_beyond_max_alerts_are_counted_as_truncated(receiver, allow_private, message):
    body = deliver(receiver, message, max_alerts=1).json()

    assert len(body["alerts"]) == 1
    assert body["truncatedAlerts"] == 1


def test_it_carries_the_notification_id_header_and_signs_only_with_a_secret(
    receiver, allow_private, message
):
    request = deliver(receiver, message)

    assert request.headers["X-Pitwall-Notification-Id"] == message.id
    assert "X-Pitwall-Signature" not in request.headers


def test_it_signs_when_the_channel_has_a_secret(receiver, allow_private, message):
    request = deliver(receiver, message, secret="s3cret-for-the-relay")

    assert request.headers["X-Pitwall-Signature"].startswith("v1=")


@pytest.mark.parametrize("max_alerts", [-1, "10", 1.5, True])
def test_it_rejects_a_max_alerts_that_is_not_a_whole_number(max_alerts):
    with pytest.raises(ConfigError) as caught:
        AlertmanagerWebhookTransport().validate_config(
            {"url": "https://am.example.com/", "max_alerts": max_alerts}
        )

    assert caught.value.field == "max_alerts"
