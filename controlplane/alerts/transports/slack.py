"""Slack-compatible incoming webhook: ``text`` for notifications, ``blocks`` for the channel.

Mattermost and Rocket.Chat accept the same ``text``; they ignore the blocks or render them.
"""

from __future__ import annotations

from typing import Any

from .httpbase import HttpTransport
from .message import Alert, Notification

# Slack allows 50 blocks a message; a storm of alerts is summarised after this many.
MAX_ALERT_BLOCKS = 10
HEADER_CHARS = 150
SECTION_CHARS = 3000


def escape(text: str) -> str:
    """Slack's mrkdwn treats only these three characters as control characters."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


class SlackTransport(HttpTransport):
    label = "Slack-compatible webhook"

    def payload(self, config: dict[str, Any], message: Notification) -> dict[str, Any]:
        blocks: list[dict[str, Any]] = [
            {
                "type": "header",
                "text": {"type": "plain_text", "text": message.title[:HEADER_CHARS]},
            }
        ]
        blocks += [alert_block(a) for a in message.alerts[:MAX_ALERT_BLOCKS]]
        hidden = len(message.alerts) - MAX_ALERT_BLOCKS
        context = [f"Notification `{message.id}`"]
        if hidden > 0:
            context.insert(0, f"and {hidden} more alerts")
        if message.external_url:
            context.append(f"<{message.external_url}|Pitwall>")
        blocks.append({"type": "context", "elements": [mrkdwn(" · ".join(context))]})
        return {"text": escape(message.title), "blocks": blocks}


def mrkdwn(text: str) -> dict[str, str]:
    return {"type": "mrkdwn", "text": text[:SECTION_CHARS]}


def alert_block(alert: Alert) -> dict[str, Any]:
    icon = ":red_circle:" if alert.status == "firing" else ":large_green_circle:"
    lines = [f"{icon} *{escape(alert.summary)}*"]
    if description := alert.annotations.get("description"):
        lines.append(escape(description))
    labels = ", ".join(f"{k}={v}" for k, v in sorted(alert.labels.items()))
    lines.append(f"`{escape(labels)}`")
    if alert.generator_url:
        lines.append(f"<{alert.generator_url}|Charts>")
    return {"type": "section", "text": mrkdwn("\n".join(lines))}
