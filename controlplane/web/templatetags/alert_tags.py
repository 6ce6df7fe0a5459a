"""The nav's count of firing alerts, and small formats of the alert pages."""

from __future__ import annotations

from django import template

from controlplane.alerts.models import Alert, AlertState

register = template.Library()


@register.simple_tag
def firing_alert_count() -> int:
    # One COUNT per page; the partial index "alert_open_by_rule" covers the open alerts.
    return Alert.objects.filter(state=AlertState.FIRING).count()


@register.filter
def alert_value(value) -> str:
    """A measured value as short as it stays exact enough: 91, 0.953, 1.2e+09."""
    if value is None:
        return "–"
    number = float(value)
    if number != number:  # NaN
        return "–"
    if number == int(number) and abs(number) < 1e9:
        return str(int(number))
    return f"{number:.4g}"


@register.filter
def seconds(value) -> str:
    """A duration in seconds as the rule editor says it: 90 s, 5 min, 2 h."""
    if value in (None, ""):
        return "–"
    s = int(value)
    if s and s % 3600 == 0:
        return f"{s // 3600} h"
    if s >= 60 and s % 60 == 0:
        return f"{s // 60} min"
    return f"{s} s"
