"""A webhook in Alertmanager's format: the body Alertmanager's own webhook_config posts.

Kind ``alertmanager_webhook`` (it was ``alertmanager``, which read as if it talked to an
Alertmanager; ``alertmanager_api`` does that, see alertmanager_api.py).

Field names and layout follow prometheus/alertmanager notify/webhook (``Message``, version "4")
and template.Data, so receivers written for Alertmanager work unchanged.
"""

from __future__ import annotations

from typing import Any

from .base import ConfigError
from .httpbase import HttpTransport
from .message import Alert, Notification, rfc3339

# Alertmanager hides the end of a firing alert: Go's zero time, as Go's JSON encoder writes it.
GO_ZERO_TIME = "0001-01-01T00:00:00Z"


class AlertmanagerWebhookTransport(HttpTransport):
    label = "Webhook in Alertmanager's format"

    def validate_config(self, config: dict[str, Any]) -> dict[str, Any]:
        cleaned = super().validate_config(config)
        max_alerts = config.get("max_alerts", 0)
        if isinstance(max_alerts, bool) or not isinstance(max_alerts, int) or max_alerts < 0:
            raise ConfigError("max_alerts", "must be a whole number ≥ 0 (0: no limit)")
        cleaned["max_alerts"] = max_alerts
        return cleaned

    def payload(self, config: dict[str, Any], message: Notification) -> dict[str, Any]:
        alerts = message.alerts
        max_alerts = config.get("max_alerts", 0)
        truncated = max(0, len(alerts) - max_alerts) if max_alerts else 0
        if truncated:
            alerts = alerts[:max_alerts]
        return {
            "receiver": message.receiver,
            "status": message.status,
            "alerts": [alertmanager_alert(a) for a in alerts],
            "groupLabels": dict(message.group_labels),
            "commonLabels": message.common_labels,
            "commonAnnotations": message.common_annotations,
            "externalURL": message.external_url,
            "version": "4",
            "groupKey": message.group_key,
            "truncatedAlerts": truncated,
        }


def alertmanager_alert(alert: Alert) -> dict[str, Any]:
    ends_at = alert.ends_at if alert.status == "resolved" else None
    return {
        "status": alert.status,
        "labels": dict(alert.labels),
        "annotations": dict(alert.annotations),
        "startsAt": rfc3339(alert.starts_at),
        "endsAt": rfc3339(ends_at) or GO_ZERO_TIME,
        "generatorURL": alert.generator_url,
        "fingerprint": alert.fingerprint,
    }
