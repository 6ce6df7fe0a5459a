"""Alerts written straight into the Alert table, and time driven by an explicit ``now`` (no
sleeping): what the delivery tests share."""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime, timedelta

from controlplane.alerts.delivery import service
from controlplane.alerts.delivery.dispatch import dispatch
from controlplane.alerts.delivery.models import Notification, Route
from controlplane.alerts.models import Alert, AlertRule, AlertState
from tests.support.receivers import Receiver

T0 = datetime(2026, 12, 2, 15, 0, tzinfo=UTC)
SECRET = "whsec-delivery-5f2a9c"


def at(seconds: float = 0, minutes: float = 0, hours: float = 0) -> datetime:
    return T0 + timedelta(seconds=seconds, minutes=minutes, hours=hours)


def fire(alertname: str, host: str = "gpu-01", now: datetime = T0,
         severity: str = "critical") -> Alert:
    rule, _ = AlertRule.objects.get_or_create(
        name=alertname, defaults={"severity": severity, "metric": "gpu_util",
                                  "description": f"{alertname} runbook"})
    labels = {"alertname": alertname, "severity": severity, "host": host}
    return Alert.objects.create(
        rule=rule, target=f"host:{host}", labels=labels,
        fingerprint=hashlib.sha256(repr(sorted(labels.items())).encode()).hexdigest()[:32],
        state=AlertState.FIRING, started_at=now, active_since=now,
        summary=f"{alertname} on {host}")


def resolve(alert: Alert, now: datetime) -> None:
    # What the state machine does on resolve: the acknowledgement ends with it.
    Alert.objects.filter(id=alert.id).update(state=AlertState.RESOLVED, resolved_at=now,
                                             acknowledged_at=None, acknowledged_by="")


def cycle(now: datetime) -> list[Notification]:
    """One dispatch and one delivery pass at ``now``; the rows written by the dispatch."""
    ids = dispatch(now)
    service.deliver_due(now)
    return list(Notification.objects.filter(id__in=ids).order_by("id"))


def payloads(rec: Receiver) -> list[dict]:
    return [r.json() for r in rec.requests]


def route_to_webhook(alertname: str, url: str, *, name: str, secret: str) -> Route:
    """A webhook channel at ``url`` and a route sending it ``alertname``'s notifications at
    once (no group wait; repeats hourly)."""
    channel = service.create_channel(name=name, kind="webhook",
                                     config={"url": url, "secret": secret})
    route = Route(name=name, group_wait_s=0, group_interval_s=1, repeat_interval_s=3600,
                  matchers=[{"label": "alertname", "op": "=", "value": alertname}])
    route.full_clean()
    route.save()
    route.channels.set([channel])
    return route
