"""The alert side's own metrics (``/metrics``, docs/prometheus.md): evaluation cycles and rule
errors as they happen; notifications sent and failed per channel kind as they are attempted;
what waits to be delivered and which rules are failing, read from the database when scraped.
"""

from __future__ import annotations

from collections.abc import Iterator

from django.db.models import Count
from prometheus_client import Counter, Histogram
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

CYCLE_SECONDS = Histogram(
    "pitwall_alert_cycle_seconds", "One alert evaluation cycle (every rule over the fleet)",
    buckets=(0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0))
RULE_ERRORS = Counter(
    "pitwall_alert_rule_errors", "Rule evaluations that failed (the rule is marked with its "
    "error and left out of that cycle)")
NOTIFICATIONS_SENT = Counter(
    "pitwall_notifications_sent", "Notifications delivered, by channel kind", ["kind"])
NOTIFICATIONS_FAILED = Counter(
    "pitwall_notifications_failed", "Delivery attempts that failed, by channel kind and "
    "whether another attempt follows (retry) or not (final)", ["kind", "outcome"])


def count_attempt(kind: str, ok: bool, final: bool = False) -> None:
    """One delivery attempt's outcome."""
    if ok:
        NOTIFICATIONS_SENT.labels(kind).inc()
    else:
        NOTIFICATIONS_FAILED.labels(kind, "final" if final else "retry").inc()


class AlertingNow(Collector):
    """Read when scraped: notifications waiting per channel kind, rules failing now."""

    def collect(self) -> Iterator[GaugeMetricFamily]:
        from controlplane.alerts.delivery.models import CLAIMABLE, Notification
        from controlplane.alerts.models import AlertRule
        from controlplane.alerts.transports import TRANSPORTS

        pending = GaugeMetricFamily(
            "pitwall_notifications_pending", "Notifications not yet delivered (pending, "
            "sending or waiting for a retry), by channel kind", labels=["kind"])
        waiting = dict(Notification.objects.filter(state__in=CLAIMABLE)
                       .values_list("channel__kind").annotate(n=Count("id")))
        for kind in TRANSPORTS:  # every kind, at 0 too: a stuck queue shows from its start
            pending.add_metric([kind], waiting.get(kind, 0))
        yield pending
        failing = AlertRule.objects.filter(enabled=True).exclude(last_error="").count()
        yield GaugeMetricFamily("pitwall_alert_rules_failing",
                                "Enabled rules whose last evaluation failed", value=failing)
