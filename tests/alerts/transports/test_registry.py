from __future__ import annotations

import pytest

from controlplane.alerts.transports import (
    TRANSPORT_CHOICES,
    TRANSPORTS,
    ConfigError,
    get_transport,
    make_test_notification,
)


def test_every_transport_is_registered_with_a_label_for_the_models_choices():
    assert set(TRANSPORTS) == {"email", "webhook", "alertmanager_webhook", "alertmanager_api",
                               "slack"}
    assert [name for name, _ in TRANSPORT_CHOICES] == list(TRANSPORTS)
    assert all(label for _, label in TRANSPORT_CHOICES)


def test_an_unknown_kind_is_a_config_error_naming_the_field():
    with pytest.raises(ConfigError) as caught:
        get_transport("pager")

    assert caught.value.field == "kind"


@pytest.mark.parametrize("kind", ["webhook", "alertmanager_webhook", "slack"])
def test_every_kind_delivers_the_test_notification(kind, receiver, allow_private):
    message = make_test_notification("oncall", "https://pitwall.example.com")

    get_transport(kind).notify({"url": receiver.url, "secret": "whsec-test-1234"}, message)

    [request] = receiver.requests
    assert request.headers["X-Pitwall-Notification-Id"] == message.id
    assert b"Test notification from Pitwall" in request.body


def test_the_test_notification_is_marked_as_a_test_and_has_a_unique_id():
    first, second = make_test_notification("oncall"), make_test_notification("oncall")

    assert first.test
    assert first.title == "[TEST] [FIRING:1] Test notification from Pitwall"
    assert first.id != second.id


def test_the_old_alertmanager_kind_is_refused_with_its_new_names():
    with pytest.raises(ConfigError) as caught:
        get_transport("alertmanager")

    assert caught.value.field == "kind"
    assert caught.value.message == (
        "unknown channel kind 'alertmanager': renamed 'alertmanager_webhook' (Alertmanager's "
        "webhook payload); 'alertmanager_api' posts to Alertmanager's API")
