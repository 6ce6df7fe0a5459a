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


@pytest.mark.parametrize(
    "address",
    [
        # 6to4 (2002::/16): deprecated (RFC 7526), and its relay delivers to the IPv4 inside
        "2002:7f00:1::1",  # 127.0.0.1 inside
        "2002:a9fe:a9fe::1",  # 169.254.169.254 inside
        "2002:c0a8:10a::1",  # 192.168.1.10 inside
        "2002:808:808::1",  # 8.8.8.8 inside: 6to4 is refused whatever it embeds
        # site-local (fec0::/10): deprecated private addressing (RFC 3879)
        "fec0::1",
        "feff:ffff::1",
        # NAT64 (64:ff9b::/96) to a private or loopback IPv4; the local-use prefix
        "64:ff9b::7f00:1",
        "64:ff9b::a01:203",
        "64:ff9b::a9fe:a9fe",
        "64:ff9b:1::808:808",
        # IPv4-mapped and IPv4-compatible forms of private addresses
        "::ffff:10.1.2.3",
        "::ffff:169.254.169.254",
        "::10.1.2.3",
        "::127.0.0.1",
        # Teredo (2001::/32) carries an IPv4 server and client
        "2001:0:4136:e378:8000:63bf:3fff:fdd2",
    ],
)
def test_ipv6_forms_that_reach_private_or_tunnelled_ipv4_are_refused(address):
    assert is_refused(ipaddress.ip_address(address))


def test_a_webhook_to_a_6to4_address_is_refused_naming_it(default_settings, message,
                                                            monkeypatch):
    import socket

    def resolves_to_6to4(host, port, *args, **kwargs):
        return [(socket.AF_INET6, socket.SOCK_STREAM, 6, "", ("2002:7f00:1::1", port, 0, 0))]

    monkeypatch.setattr(socket, "getaddrinfo", resolves_to_6to4)
    with pytest.raises(TransportError) as caught:
        WebhookTransport().notify({"url": "https://hooks.example.com/x", **CONFIG}, message)
    assert caught.value.permanent
    assert str(caught.value).endswith("address 2002:7f00:1::1")


@pytest.mark.parametrize("address", ["::ffff:8.8.8.8", "2a00:1450:4001:81b::200e"])
def test_public_ipv6_forms_are_still_allowed(address):
    assert not is_refused(ipaddress.ip_address(address))
