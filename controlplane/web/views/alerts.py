"""The alerts list and one alert's page (history, ack, silence, the charts around its onset)."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.contrib import messages
from django.db.models import Case, Count, IntegerField, Q, QuerySet, Value, When
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.utils import timezone
from django.views.decorators.http import require_POST

from controlplane.alerts.models import Alert, AlertState, Severity, Silence
from controlplane.alerts.silences import acknowledge, active_silences, silenced_by, unacknowledge
from controlplane.web.alert_links import (
    Link,
    gpu_indexes,
    onset_links,
    silence_url,
    target_links,
)
from controlplane.web.forms import AckForm
from controlplane.web.views.access import needs

alerts_access = needs("alerts.view_alert")
ack_access = needs("alerts.view_alert", "alerts.ack_alert")

RECENT = timedelta(hours=24)  # resolved alerts listed this long after they resolved
MAX_ROWS = 500
LISTED = (AlertState.FIRING, AlertState.PENDING, AlertState.RESOLVED)
STATE_ORDER = Case(*(When(state=s, then=Value(i)) for i, s in enumerate(LISTED)),
                   default=Value(9), output_field=IntegerField())
SEVERITY_ORDER = Case(When(rule__severity=Severity.CRITICAL, then=Value(0)),
                      When(rule__severity=Severity.WARNING, then=Value(1)),
                      default=Value(2), output_field=IntegerField())


@dataclass
class AlertRow:
    alert: Alert
    silence: Silence | None
    links: list[Link] = field(default_factory=list)

    @property
    def since(self) -> datetime | None:
        a = self.alert
        return {AlertState.FIRING: a.started_at, AlertState.RESOLVED: a.resolved_at}.get(
            a.state) or a.active_since


def recent_alerts(now: datetime) -> QuerySet[Alert]:
    """Open alerts and those resolved in the last day."""
    return Alert.objects.filter(
        Q(state__in=[AlertState.FIRING, AlertState.PENDING])
        | Q(state=AlertState.RESOLVED, resolved_at__gte=now - RECENT))


def listed_alerts(query, now: datetime) -> QuerySet[Alert]:
    """The recent alerts narrowed by ?state= and ?severity=, firing and critical first."""
    alerts = recent_alerts(now).select_related("rule")
    if query.get("state") in LISTED:
        alerts = alerts.filter(state=query["state"])
    if query.get("severity") in Severity.values:
        alerts = alerts.filter(rule__severity=query["severity"])
    return alerts.order_by(STATE_ORDER, SEVERITY_ORDER, "-active_since", "id")


@alerts_access
def alerts(request: HttpRequest) -> HttpResponse:
    now = timezone.now()
    silences = list(active_silences(now))
    listed = list(listed_alerts(request.GET, now)[:MAX_ROWS])
    indexes = gpu_indexes(listed)
    rows = [AlertRow(a, silenced_by(a, now, silences), target_links(a, indexes))
            for a in listed]
    # Whatever the filter, the summary counts every recent alert.
    counts = dict.fromkeys(LISTED, 0) | dict(
        recent_alerts(now).values_list("state").annotate(n=Count("id")).order_by())
    return render(request, "web/alerts/list.html", {
        "rows": rows, "counts": counts, "states": LISTED, "severities": Severity.values,
        "state": request.GET.get("state", ""), "severity": request.GET.get("severity", ""),
        "recent_hours": int(RECENT.total_seconds() // 3600), "tab": "alerts"})


@alerts_access
def alert(request: HttpRequest, alert_id: int) -> HttpResponse:
    alert = get_object_or_404(Alert.objects.select_related("rule"), pk=alert_id)
    now = timezone.now()
    links = target_links(alert)
    return render(request, "web/alerts/detail.html", {
        "alert": alert, "rule": alert.rule, "silence": silenced_by(alert, now),
        "links": links, "onset_links": onset_links(links, alert, now),
        "silence_url": silence_url(alert),
        "labels": sorted((alert.labels or {}).items()),
        "events": alert.events.order_by("-at", "-id")[:200], "ack_form": AckForm(),
        "tab": "alerts"})


@ack_access
@require_POST
def alert_ack(request: HttpRequest, alert_id: int) -> HttpResponse:
    """``action=ack`` (with an optional comment) or ``action=unack``; any signed-in user."""
    alert = get_object_or_404(Alert, pk=alert_id)
    if request.POST.get("action") == "unack":
        unacknowledge(alert)
        messages.success(request, "Acknowledgement removed: repeats resume while it fires.")
    else:
        form = AckForm(request.POST)
        comment = form.cleaned_data["comment"] if form.is_valid() else ""
        if acknowledge(alert, by=request.user.get_username(), comment=comment):
            messages.success(request, "Acknowledged: no repeats until it resolves.")
        else:
            messages.error(request, f"Not acknowledged: the alert is {alert.state}, "
                                    f"only a firing alert can be.")
    return redirect("web:alert", alert_id=alert.id)
