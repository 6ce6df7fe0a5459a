"""'Send test notification' for every channel kind: delivered once and recorded."""

from __future__ import annotations

from controlplane.alerts.delivery import service
from controlplane.alerts.delivery.models import DeliveryState, Notification


def test_a_test_notification_is_delivered_and_recorded(webhook, receiver):
    row = service.send_test(webhook)

    assert row.state == DeliveryState.SENT and row.test and row.attempts == 1
    [request] = receiver.requests
    assert request.json()["test"] is True
    assert request.headers["X-Pitwall-Notification-Id"] == str(row.uuid)
    webhook.refresh_from_db()
    assert webhook.last_ok and webhook.last_detail == "HTTP 200: ok"


def test_a_failed_test_notification_shows_the_error_and_leaves_the_channel_on(webhook, receiver):
    receiver.status, receiver.reply = 401, b"bad signature"

    row = service.send_test(webhook)

    assert (row.state, row.last_error) == (DeliveryState.FAILED, "HTTP 401: bad signature")
    webhook.refresh_from_db()
    assert webhook.enabled and webhook.last_ok is False


def test_a_retryable_failure_of_a_test_notification_is_not_retried(webhook, receiver):
    receiver.status = 500

    row = service.send_test(webhook)

    assert row.state == DeliveryState.FAILED
    assert service.deliver_due() == []


def test_a_test_notification_by_email_reaches_the_smtp_server(db, smtp_inbox):
    channel = service.create_channel(name="ops mail", kind="email",
                                     config={"to": ["ops@example.com"]})

    row = service.send_test(channel)

    assert list(Notification.objects.filter(channel=channel)) == [row]
    assert (row.state, row.detail) == (DeliveryState.SENT, "sent to 1 recipient")
    [mail] = smtp_inbox.messages
    assert mail["X-Pitwall-Notification-Id"] == str(row.uuid)
    assert "[TEST]" in mail["Subject"]
