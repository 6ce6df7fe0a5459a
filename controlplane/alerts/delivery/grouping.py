"""When one group of one route sends, and what: group_wait, group_interval, repeat_interval.

Pure: dispatch (service.py) reads the alerts and the group rows, ``decide`` says what to do.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta

from controlplane.alerts.delivery.routing import Plan
from controlplane.alerts.transports import Alert
from controlplane.alerts.transports.message import rfc3339


@dataclass
class Bucket:
    """The alerts of one group now: firing ones (not silenced), and the silenced ones."""

    plan: Plan
    group_labels: dict[str, str]
    firing: dict[str, Alert] = field(default_factory=dict)
    acknowledged: set[str] = field(default_factory=set)
    muted: set[str] = field(default_factory=set)


@dataclass
class Outcome:
    first_seen_at: datetime | None
    last_sent_at: datetime | None
    sent: dict[str, dict]
    alerts: list[Alert] | None = None  # set when a notification goes out

    @property
    def sends(self) -> bool:
        return self.alerts is not None


def alert_from_dict(data: dict, **changes) -> Alert:
    alert = Alert(
        fingerprint=data["fingerprint"], status=data["status"], labels=dict(data["labels"]),
        annotations=dict(data["annotations"]),
        starts_at=datetime.fromisoformat(data["starts_at"]),
        ends_at=datetime.fromisoformat(data["ends_at"]) if data.get("ends_at") else None,
        generator_url=data.get("generator_url", ""),
    )
    return replace(alert, **changes)


def decide(first_seen_at: datetime | None, last_sent_at: datetime | None, sent: dict[str, dict],
           bucket: Bucket, silenced: Callable[[dict], bool],
           resolved_at: dict[str, datetime], now: datetime) -> Outcome:
    plan, firing = bucket.plan, bucket.firing
    # Sent as firing, not firing now: resolved (or gone), unless a silence covers it.
    gone = [fp for fp in sent if fp not in firing and fp not in bucket.muted
            and not silenced(sent[fp]["labels"])]
    if last_sent_at is None:
        if not firing:
            return Outcome(None, None, {})
        # group_wait counts from the first alert's start, not from when dispatch noticed it.
        first_seen_at = first_seen_at or min(
            min(a.starts_at for a in firing.values()), now)
        if now < first_seen_at + timedelta(seconds=plan.group_wait_s):
            return Outcome(first_seen_at, None, sent)
    else:
        changed = bool(gone) or any(
            fp not in sent or sent[fp]["starts_at"] != rfc3339(alert.starts_at)
            for fp, alert in firing.items())
        since = now - last_sent_at
        due_change = changed and since >= timedelta(seconds=plan.group_interval_s)
        # Acknowledged alerts do not repeat; a group repeats while one alert is unacknowledged.
        due_repeat = since >= timedelta(seconds=plan.repeat_interval_s) and any(
            fp not in bucket.acknowledged for fp in firing)
        if not (due_change or due_repeat):
            return Outcome(first_seen_at, last_sent_at, sent)
    resolved = [alert_from_dict(sent[fp], status="resolved", ends_at=resolved_at.get(fp, now))
                for fp in gone]
    alerts = [firing[fp] for fp in sorted(firing)] + resolved
    kept = {fp: sent[fp] for fp in sent if fp not in gone and fp not in firing}
    now_sent = {**kept, **{fp: a.to_dict() for fp, a in firing.items()}}
    if not now_sent:
        # Everything resolved: the group starts afresh (group_wait) when an alert fires again.
        return Outcome(None, None, {}, alerts)
    return Outcome(first_seen_at or now, now, now_sent, alerts)
