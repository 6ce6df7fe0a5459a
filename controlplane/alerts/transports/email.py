"""E-mail through Django's mail settings: a text and an HTML body, one message to all recipients."""

from __future__ import annotations

import smtplib
from typing import Any

from django.core.exceptions import ValidationError
from django.core.mail import EmailMultiAlternatives, get_connection
from django.core.validators import validate_email
from django.template.loader import render_to_string

from .base import ConfigError, DeliveryResult, Transport, TransportError, attempt_timeout
from .message import Notification

MESSAGE_ID_DOMAIN = "notifications.pitwall"


def message_id(notification_id: str) -> str:
    """The Message-ID of a notification's e-mail, from its id alone (stable across attempts,
    where Django would make a new one for each send)."""
    return f"<{notification_id}@{MESSAGE_ID_DOMAIN}>"


class EmailTransport(Transport):
    label = "E-mail"
    def __init__(self, timeout: float | None = None):
        # None: the setting ALERT_DELIVERY_TIMEOUT_S, for each SMTP connect and reply.
        self.timeout = attempt_timeout() if timeout is None else timeout

    def validate_config(self, config: dict[str, Any]) -> dict[str, Any]:
        to = config.get("to")
        if isinstance(to, str):
            to = [part.strip() for part in to.split(",")]
        if not isinstance(to, list) or not [a for a in to if a]:
            raise ConfigError("to", "at least one address is required")
        addresses = [a for a in to if a]
        for address in addresses:
            try:
                validate_email(address)
            except (ValidationError, TypeError) as exc:
                raise ConfigError("to", f"{address!r} is not an e-mail address") from exc
        return {"to": addresses}

    def notify(self, channel_config: dict[str, Any], message: Notification) -> DeliveryResult:
        try:
            config = self.validate_config(channel_config)
        except ConfigError as exc:
            raise TransportError(f"invalid channel configuration: {exc}", permanent=True) from exc
        context = {"message": message, "alerts": message.alerts}
        mail = EmailMultiAlternatives(
            subject=message.title,
            body=render_to_string("emails/alert.txt", context),
            to=config["to"],
            # The same on every attempt of one notification: a mail system (or a reader's
            # client) that got the first attempt can drop the repeat by it.
            headers={"X-Pitwall-Notification-Id": message.id,
                     "Message-ID": message_id(message.id)},
            connection=get_connection(timeout=self.timeout),
        )
        mail.attach_alternative(render_to_string("emails/alert.html", context), "text/html")
        try:
            mail.send()
        except smtplib.SMTPRecipientsRefused as exc:
            refused = ", ".join(exc.recipients)
            raise TransportError(f"SMTP refused the recipients: {refused}", permanent=True) from exc
        except smtplib.SMTPResponseException as exc:
            text = exc.smtp_error.decode("utf-8", "replace") if exc.smtp_error else ""
            # 5xx replies are the server's final word; 4xx ones ask to try again later.
            raise TransportError(
                f"SMTP {exc.smtp_code}: {text}", permanent=exc.smtp_code >= 500
            ) from exc
        except TimeoutError as exc:
            raise TransportError(f"SMTP timed out after {self.timeout:g} s") from exc
        except (smtplib.SMTPException, OSError) as exc:
            raise TransportError(f"SMTP failed: {exc}") from exc
        count = len(config["to"])
        return DeliveryResult(detail=f"sent to {count} recipient{'s' if count != 1 else ''}")
