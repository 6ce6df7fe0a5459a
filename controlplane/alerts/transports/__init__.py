"""Notification transports: one short module each, registered in ``TRANSPORTS``.

A transport is pure: it gets a channel's config dict and a ``Notification`` and makes one
delivery attempt. Storing attempts, routing, grouping and retry backoff belong to the caller.
"""

from __future__ import annotations

from .alertmanager import AlertmanagerTransport
from .base import ConfigError, DeliveryResult, Transport, TransportError
from .email import EmailTransport
from .message import Alert, Notification, make_test_notification
from .slack import SlackTransport
from .webhook import WebhookTransport

TRANSPORTS: dict[str, type[Transport]] = {
    "email": EmailTransport,
    "webhook": WebhookTransport,
    "alertmanager": AlertmanagerTransport,
    "slack": SlackTransport,
}

# For a model field: ``kind = models.CharField(choices=TRANSPORT_CHOICES, ...)``.
TRANSPORT_CHOICES = [(name, cls.label) for name, cls in TRANSPORTS.items()]


def get_transport(kind: str) -> Transport:
    try:
        return TRANSPORTS[kind]()
    except KeyError:
        raise ConfigError("kind", f"unknown channel kind {kind!r}") from None


__all__ = [
    "TRANSPORTS",
    "TRANSPORT_CHOICES",
    "Alert",
    "AlertmanagerTransport",
    "ConfigError",
    "DeliveryResult",
    "EmailTransport",
    "Notification",
    "SlackTransport",
    "Transport",
    "TransportError",
    "WebhookTransport",
    "get_transport",
    "make_test_notification",
]
