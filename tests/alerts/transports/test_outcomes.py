"""How one attempt's outcome is classified: the caller retries the retryable ones."""

from __future__ import annotations

import socket

import pytest

from controlplane.alerts.transports import (
    AlertmanagerWebhookTransport,
    TransportError,
    WebhookTransport,
)

CONFIG = {"secret": "whsec-6c1f0d8a4b2e9f73"}


def attempt(receiver, message, transport=None):
    transport = transport or WebhookTransport()
    return transport.notify({"url": receiver.url, **CONFIG}, message)


def test_a_2xx_answer_is_a_delivery_with_the_status(receiver, allow_private, message):
    receiver.status, receiver.reply = 202, b'{"queued": true}'

    result = attempt(receiver, message)

    assert result.status_code == 202
    assert result.detail == 'HTTP 202: {"queued": true}'


def test_a_500_is_retryable_and_says_what_the_receiver_answered(receiver, allow_private, message):
    receiver.status, receiver.reply = 500, b"upstream\n  unavailable"

    with pytest.raises(TransportError) as caught:
        attempt(receiver, message)

    assert not caught.value.permanent
    assert caught.value.status_code == 500
    assert str(caught.value) == "HTTP 500: upstream unavailable"


def test_a_404_is_permanent(receiver, allow_private, message):
    receiver.status, receiver.reply = 404, b"no such hook"

    with pytest.raises(TransportError) as caught:
        attempt(receiver, message)

    assert caught.value.permanent
    assert str(caught.value) == "HTTP 404: no such hook"


@pytest.mark.parametrize("status", [408, 429, 502, 503])
def test_throttling_and_gateway_errors_are_retryable(receiver, allow_private, message, status):
    receiver.status = status

    with pytest.raises(TransportError) as caught:
        attempt(receiver, message)

    assert not caught.value.permanent


@pytest.mark.parametrize("status", [301, 400, 401, 403, 410])
def test_redirects_and_other_client_errors_are_permanent(receiver, allow_private, message, status):
    receiver.status = status

    with pytest.raises(TransportError) as caught:
        attempt(receiver, message)

    assert caught.value.permanent


def test_the_body_excerpt_is_short(receiver, allow_private, message):
    receiver.status, receiver.reply = 500, b"x" * 10_000

    with pytest.raises(TransportError) as caught:
        attempt(receiver, message)

    assert len(str(caught.value)) <= len("HTTP 500: ") + 200


def test_it_retries_when_the_webhook_times_out(receiver, allow_private, message):
    receiver.delay = 1.0

    with pytest.raises(TransportError) as caught:
        attempt(receiver, message, WebhookTransport(timeout=0.1))

    assert not caught.value.permanent
    assert str(caught.value) == "timed out after 0.1 s"


def test_a_refused_connection_is_retryable(allow_private, message):
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # bound, not listening: connections are refused

        with pytest.raises(TransportError) as caught:
            WebhookTransport().notify({"url": f"http://127.0.0.1:{port}/", **CONFIG}, message)

    assert not caught.value.permanent
    assert str(caught.value).startswith("connection failed: ")


def test_a_429_passes_on_how_long_the_receiver_asked_to_wait(receiver, allow_private, message):
    receiver.status, receiver.reply_headers = 429, {"Retry-After": "120"}

    with pytest.raises(TransportError) as caught:
        attempt(receiver, message)

    assert not caught.value.permanent
    assert caught.value.retry_after == 120


def test_an_invalid_config_is_a_permanent_error_naming_the_field(message):
    with pytest.raises(TransportError) as caught:
        AlertmanagerWebhookTransport().notify({"url": "gopher://am.example.com/"}, message)

    assert caught.value.permanent
    assert "url: must be an http:// or https:// URL" in str(caught.value)


def test_a_bad_url_is_permanent_and_the_error_keeps_its_secret_out(message):
    from controlplane.alerts.transports.httpbase import post

    with pytest.raises(TransportError) as caught:
        post("https://hooks.example.com:99999/services/T0/B0/s3cr3t-path?token=tok3n", b"{}",
             {}, timeout=1)
    assert caught.value.permanent
    assert str(caught.value) == "invalid URL https://hooks.example.com/…: bad port"
    assert "s3cr3t" not in str(caught.value) and "tok3n" not in str(caught.value)
