"""What every transport shares: the outcome types and the two-method interface."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from django.conf import settings

from .message import Notification

DEFAULT_TIMEOUT_S = 30.0


def attempt_timeout() -> float:
    """Seconds one attempt may wait on its receiver (each connect, read or SMTP reply):
    ``PITWALL["ALERT_DELIVERY_TIMEOUT_S"]``, read when a transport is made so a change (and
    a test's) applies to the next attempt. A receiver that answers in 10 s is slow, not down."""
    return float(settings.PITWALL.get("ALERT_DELIVERY_TIMEOUT_S", DEFAULT_TIMEOUT_S))


class ConfigError(ValueError):
    """A channel's configuration is wrong; ``field`` names the key at fault."""

    def __init__(self, field: str, message: str):
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


class TransportError(Exception):
    """One delivery attempt failed.

    ``permanent`` tells the caller to stop retrying (and disable the channel); otherwise it
    retries with backoff, no sooner than ``retry_after`` seconds when the receiver said so.
    ``str(error)`` is the short reason the UI shows, e.g. "HTTP 500: upstream unavailable".
    """

    def __init__(
        self,
        message: str,
        *,
        permanent: bool = False,
        status_code: int | None = None,
        retry_after: int | None = None,
    ):
        super().__init__(message)
        self.permanent = permanent
        self.status_code = status_code
        self.retry_after = retry_after


@dataclass(frozen=True)
class DeliveryResult:
    detail: str  # "HTTP 200: ok", "sent to 2 recipients"
    status_code: int | None = None


class Transport:
    label: ClassVar[str]

    def validate_config(self, config: dict[str, Any]) -> dict[str, Any]:
        """Return the cleaned config or raise ConfigError naming the field."""
        raise NotImplementedError

    def notify(self, channel_config: dict[str, Any], message: Notification) -> DeliveryResult:
        """Make one delivery attempt; raise TransportError on failure. The caller retries."""
        raise NotImplementedError
