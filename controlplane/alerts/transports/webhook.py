"""Generic JSON webhook: the message as JSON, always signed (docs/webhooks.md)."""

from __future__ import annotations

from typing import Any

from .httpbase import HttpTransport
from .message import Notification


class WebhookTransport(HttpTransport):
    label = "Webhook (JSON, signed)"
    requires_secret = True

    def payload(self, config: dict[str, Any], message: Notification) -> dict[str, Any]:
        return message.to_dict()
