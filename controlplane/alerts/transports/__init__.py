"""Notification transports: one short module each, registered in ``TRANSPORTS``.

A transport is pure: it gets a channel's config dict and a ``Notification`` and makes one
delivery attempt. Storing attempts, routing, grouping and retry backoff belong to the caller.
"""

from __future__ import annotations

from .alertmanager import AlertmanagerWebhookTransport
from .alertmanager_api import AlertmanagerApiTransport
from .base import ConfigError, DeliveryResult, Transport, TransportError
from .email import EmailTransport
from .message import Alert, Notification, make_test_notification
from .slack import SlackTransport
from .webhook import WebhookTransport

TRANSPORTS: dict[str, type[Transport]] = {
    "email": EmailTransport,
    "webhook": WebhookTransport,
    "alertmanager_webhook": AlertmanagerWebhookTransport,
    "alertmanager_api": AlertmanagerApiTransport,
    "slack": SlackTransport,
}

# For a model field: ``kind = models.CharField(choices=TRANSPORT_CHOICES, ...)``.
TRANSPORT_CHOICES = [(name, cls.label) for name, cls in TRANSPORTS.items()]

# Kinds that dispatch feeds with the full set of firing alerts on every change and every
# ``resend_s`` (delivery/feeds.py) instead of grouped notifications: the receiver groups.
FEED_KINDS = frozenset({"alertmanager_api"})

# Kinds that were renamed: a request that still uses one is told the new names.
RENAMED_KINDS = {
    "alertmanager": "renamed 'alertmanager_webhook' (Alertmanager's webhook payload); "
                    "'alertmanager_api' posts to Alertmanager's API",
}


def unknown_kind(kind: str) -> str:
    """The error for a kind that is not in ``TRANSPORTS``, naming the new one if renamed."""
    known = ", ".join(TRANSPORTS)
    hint = RENAMED_KINDS.get(kind, f"one of {known}")
    return f"unknown channel kind {kind!r}: {hint}"


def get_transport(kind: str) -> Transport:
    try:
        return TRANSPORTS[kind]()
    except (KeyError, TypeError):
        raise ConfigError("kind", unknown_kind(kind)) from None


__all__ = [
    "TRANSPORTS",
    "TRANSPORT_CHOICES",
    "FEED_KINDS",
    "RENAMED_KINDS",
    "Alert",
    "AlertmanagerApiTransport",
    "AlertmanagerWebhookTransport",
    "ConfigError",
    "DeliveryResult",
    "EmailTransport",
    "Notification",
    "SlackTransport",
    "Transport",
    "TransportError",
    "WebhookTransport",
    "get_transport",
    "unknown_kind",
    "make_test_notification",
]
