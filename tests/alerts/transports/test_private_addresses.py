"""Webhook URLs that resolve to private or reserved addresses are refused unless allowed."""

from __future__ import annotations

import ipaddress

import pytest

from controlplane.alerts.transports import SlackTransport, TransportError, WebhookTransport
from controlplane.alerts.transports.httpbase import is_refused

CONFIG = {"secret": "whsec-6c1f0d8a4b2e9f73"}


@pytest.fixture
def default_settings(settings):
    """The setting as shipped: absent, so private addresses are refused."""
    settings.PITWALL = {
        k: v for k, v in settings.PITWALL.items() if k != "ALERT_ALLOW_PRIVATE_WEBHOOKS"
    }


@pytest.mark.parametrize(
    ("url", "address"),
    [
        ("http://127.0.0.1:9/hook", "127.0.0.1"),
        ("http://10.1.2.3/hook", "10.1.2.3"),
        ("http://169.254.169.254/latest/meta-data", "169.254.169.254"),
        ("http://[::1]:9/hook", "::1"),
        ("http://localhost:9/hook", None),
    ],
)
def test_by_default_it_refuses_private_addresses_naming_the_address(
    default_settings, message, url, address
):
    with pytest.raises(TransportError) as caught:
        WebhookTransport().notify({"url": url, **CONFIG}, message)

    assert caught.value.permanent
    assert str(caught.value).startswith("refused: ")
    if address:
        assert str(caught.value).endswith(f"address {address}")


def test_by_default_the_loopback_receiver_gets_nothing(default_settings, receiver, message):
    with pytest.raises(TransportError):
        SlackTransport().notify({"url": receiver.url}, message)

    assert receiver.requests == []


def test_the_setting_allows_a_loopback_receiver(settings, receiver, message):
    settings.PITWALL = {**settings.PITWALL, "ALERT_ALLOW_PRIVATE_WEBHOOKS": True}

    SlackTransport().notify({"url": receiver.url}, message)

    assert len(receiver.requests) == 1


@pytest.mark.parametrize(
    "address",
    [
        "192.168.1.10",
        "172.16.0.1",
        "100.64.0.1",
        "224.0.0.1",
        "0.0.0.0",
        "240.0.0.1",
        "fe80::1",
        "fc00::1",
        "::ffff:127.0.0.1",
    ],
)
def test_private_shared_multicast_and_reserved_addresses_are_refused(address):
    assert is_refused(ipaddress.ip_address(address))


@pytest.mark.parametrize("address", ["1.1.1.1", "8.8.8.8", "2606:4700:4700::1111"])
def test_public_addresses_are_allowed(address):
    assert not is_refused(ipaddress.ip_address(address))
