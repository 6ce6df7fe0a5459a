"""The message every transport delivers: one notification for a group of alerts.

The fields follow Alertmanager's webhook payload (``template.Data``), so the Alertmanager
transport is a renaming and every receiver sees the same facts whatever the channel kind.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal

Status = Literal["firing", "resolved"]

# Version of the generic webhook body (``Notification.to_dict``); bump on a breaking change.
SCHEMA_VERSION = "1"


def rfc3339(moment: datetime | None) -> str | None:
    if moment is None:
        return None
    return moment.astimezone(UTC).isoformat().replace("+00:00", "Z")


@dataclass(frozen=True)
class Alert:
    fingerprint: str  # stable hash of the labels: one (rule, target)
    status: Status
    labels: dict[str, str]
    annotations: dict[str, str]  # "summary" at least; "description", "runbook_url" optional
    starts_at: datetime
    ends_at: datetime | None = None  # None while firing
    generator_url: str = ""  # the charts around the onset

    @property
    def summary(self) -> str:
        return self.annotations.get("summary") or self.labels.get("alertname", self.fingerprint)

    def to_dict(self) -> dict[str, Any]:
        return {
            "fingerprint": self.fingerprint,
            "status": self.status,
            "labels": dict(self.labels),
            "annotations": dict(self.annotations),
            "starts_at": rfc3339(self.starts_at),
            "ends_at": rfc3339(self.ends_at),
            "generator_url": self.generator_url,
        }


@dataclass(frozen=True)
class Notification:
    id: str  # stable across retries of one notification: receivers drop duplicates by it
    status: Status  # "firing" while any alert of the group fires
    receiver: str  # the channel's name
    group_key: str
    group_labels: dict[str, str]
    alerts: list[Alert]
    created_at: datetime
    external_url: str = ""  # Pitwall's base URL
    test: bool = False  # "Send test notification": receivers may ignore it

    @property
    def firing(self) -> list[Alert]:
        return [a for a in self.alerts if a.status == "firing"]

    @property
    def resolved(self) -> list[Alert]:
        return [a for a in self.alerts if a.status == "resolved"]

    @property
    def common_labels(self) -> dict[str, str]:
        return _common([a.labels for a in self.alerts])

    @property
    def common_annotations(self) -> dict[str, str]:
        return _common([a.annotations for a in self.alerts])

    @property
    def title(self) -> str:
        """One line: "[FIRING:2] KV cache full on gpu-07 (+1 more)"."""
        count = f":{len(self.firing)}" if self.status == "firing" else ""
        prefix = "[TEST] " if self.test else ""
        summary = self.alerts[0].summary if self.alerts else ", ".join(self.group_labels.values())
        more = f" (+{len(self.alerts) - 1} more)" if len(self.alerts) > 1 else ""
        # Headers and chat titles are single lines: a templated summary must not break them.
        return " ".join(f"{prefix}[{self.status.upper()}{count}] {summary}{more}".split())

    def to_dict(self) -> dict[str, Any]:
        """The generic webhook body (documented in docs/webhooks.md)."""
        return {
            "version": SCHEMA_VERSION,
            "id": self.id,
            "status": self.status,
            "test": self.test,
            "receiver": self.receiver,
            "group_key": self.group_key,
            "group_labels": dict(self.group_labels),
            "common_labels": self.common_labels,
            "common_annotations": self.common_annotations,
            "external_url": self.external_url,
            "created_at": rfc3339(self.created_at),
            "alerts": [a.to_dict() for a in self.alerts],
        }


def _common(dicts: list[dict[str, str]]) -> dict[str, str]:
    if not dicts:
        return {}
    first, *rest = dicts
    return {k: v for k, v in first.items() if all(d.get(k) == v for d in rest)}


def make_test_notification(receiver: str, external_url: str = "") -> Notification:
    """What "Send test notification" sends: one firing alert, marked as a test."""
    now = datetime.now(UTC)
    labels = {"alertname": "PitwallTestNotification", "severity": "info"}
    alert = Alert(
        fingerprint=uuid.uuid4().hex[:16],
        status="firing",
        labels=labels,
        annotations={"summary": "Test notification from Pitwall"},
        starts_at=now,
        generator_url=external_url,
    )
    return Notification(
        id=str(uuid.uuid4()),
        status="firing",
        receiver=receiver,
        group_key=f"test:{receiver}",
        group_labels={"alertname": labels["alertname"]},
        alerts=[alert],
        created_at=now,
        external_url=external_url,
        test=True,
    )
