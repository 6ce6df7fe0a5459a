from __future__ import annotations

import re
import time
from pathlib import Path

import pytest

from controlplane.alerts.transports import WebhookTransport
from controlplane.alerts.transports.base import ConfigError

DOCS = Path(__file__).resolve().parents[3] / "docs" / "webhooks.md"
SECRET = "whsec-6c1f0d8a4b2e9f73"


def documented_verifier():
    """The verification snippet of docs/webhooks.md, run as a receiver would copy it."""
    section = DOCS.read_text().split("## Verifying the signature", 1)[1]
    code = re.search(r"```python\n(.*?)```", section, re.DOTALL).group(1)
    namespace: dict = {}
    exec(code, namespace)  # noqa: S102 -- our own documentation
    return namespace["verify_pitwall_signature"]


@pytest.fixture
def delivered(receiver, allow_private, message):
    result = WebhookTransport().notify({"url": receiver.url, "secret": SECRET}, message)
    [request] = receiver.requests
    return result, request


def test_it_posts_the_message_as_json(delivered, message):
    result, request = delivered

    assert result.status_code == 200
    assert result.detail == "HTTP 200: ok"
    assert request.path == "/hook"
    assert request.headers["Content-Type"] == "application/json"
    body = request.json()
    assert body == message.to_dict()
    assert body["version"] == "1"
    assert body["alerts"][0]["generator_url"].startswith("https://pitwall.example.com/hosts/")
    assert body["common_labels"] == {"alertname": "KVCacheFull", "severity": "critical"}


def test_the_notification_id_is_in_a_header_and_in_the_body(delivered, message):
    _, request = delivered

    assert request.headers["X-Pitwall-Notification-Id"] == message.id
    assert request.json()["id"] == message.id


def test_the_signature_verifies_with_the_documented_snippet(delivered):
    _, request = delivered
    verify = documented_verifier()

    assert request.headers["X-Pitwall-Signature"].startswith("v1=")
    assert verify(SECRET, request.headers, request.body)


def test_the_documented_snippet_rejects_a_wrong_secret_a_changed_body_and_a_replay(delivered):
    _, request = delivered
    verify = documented_verifier()
    signed_at = int(request.headers["X-Pitwall-Timestamp"])

    assert not verify("another-secret", request.headers, request.body)
    assert not verify(SECRET, request.headers, request.body.replace(b"firing", b"resolved"))
    assert not verify(SECRET, request.headers, request.body, now=signed_at + 301)
    assert verify(SECRET, request.headers, request.body, now=signed_at + 299)


def test_the_timestamp_is_the_current_unix_time(delivered):
    _, request = delivered

    assert abs(int(request.headers["X-Pitwall-Timestamp"]) - time.time()) < 3600


def test_a_generic_webhook_requires_a_secret():
    with pytest.raises(ConfigError) as caught:
        WebhookTransport().validate_config({"url": "https://hooks.example.com/pitwall"})

    assert caught.value.field == "secret"


@pytest.mark.parametrize(
    "url", [None, "", "ftp://hooks.example.com/x", "https://", "http://hooks.example.com:99999/"]
)
def test_it_rejects_a_url_that_is_not_http_naming_the_field(url):
    with pytest.raises(ConfigError) as caught:
        WebhookTransport().validate_config({"url": url, "secret": SECRET})

    assert caught.value.field == "url"
