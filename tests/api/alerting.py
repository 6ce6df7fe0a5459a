"""What the alerting API tests share: rules and alerts written straight in.

``api`` (alice) is an operator: she reads everything, acks and silences, but may not change
rules or channels. ``staff`` (carol, an admin; tests/api/conftest.py) may.
"""

from __future__ import annotations

import hashlib

from django.utils import timezone

from controlplane.alerts.models import Alert, AlertRule, AlertState


def make_rule(name: str = "GPU hot", severity: str = "critical") -> AlertRule:
    rule = AlertRule(name=name, severity=severity, metric="gpu.temp_c", aggregation="max",
                     window_s=30, op=">", threshold=85)
    rule.full_clean()
    rule.save()
    return rule


def make_alert(rule: AlertRule, host: str = "gpu-node-1", host_id: int | None = 1,
               state: str = AlertState.FIRING, value: float | None = 91.0) -> Alert:
    labels = {"alertname": rule.name, "severity": rule.severity, "host": host}
    now = timezone.now()
    return Alert.objects.create(
        rule=rule, target=f"host:{host_id}", host_id=host_id, labels=labels,
        fingerprint=hashlib.sha256(repr(sorted(labels.items())).encode()).hexdigest()[:32],
        state=state, value=value, summary=f"{rule.name} on {host}", active_since=now,
        started_at=now if state == AlertState.FIRING else None,
        resolved_at=now if state == AlertState.RESOLVED else None)
