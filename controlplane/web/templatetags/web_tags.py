"""Number formats and page fragments shared by the dashboard templates.

The formats match static/web/units.js, which re-renders the same cells on live updates: a
cell carries ``data-fmt`` with the name of the format used here.
"""

from __future__ import annotations

from datetime import datetime

from django import template

from controlplane.web.charts import Chart

register = template.Library()
DASH = "–"


def _number(value) -> float | None:
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


@register.filter
def gib(value) -> str:
    """Bytes in GiB, or in MiB below one GiB (a process's RSS)."""
    number = _number(value)
    if number is None:
        return DASH
    return f"{number / 2**30:.1f} GiB" if abs(number) >= 2**30 else f"{number / 2**20:.0f} MiB"


@register.filter
def pct(value) -> str:
    number = _number(value)
    return DASH if number is None else f"{number:.0f}%"


@register.filter
def ratio_pct(value) -> str:
    number = _number(value)
    return DASH if number is None else f"{number * 100:.0f}%"


@register.filter
def num(value, unit: str = "") -> str:
    number = _number(value)
    if number is None:
        return DASH
    text = f"{number:.0f}" if abs(number) >= 10 or number == int(number) else f"{number:.1f}"
    return f"{text} {unit}" if unit else text


@register.filter
def share(used, total) -> float:
    """used / total in percent, clipped to 0..100, for bar widths; 0 when unknown."""
    used_n, total_n = _number(used), _number(total)
    if not used_n or not total_n:
        return 0.0
    return round(max(0.0, min(100.0, 100 * used_n / total_n)), 1)


@register.filter
def words(value) -> str:
    """A stored code as words: "out_of_router" -> "out of router"."""
    return str(value or "").replace("_", " ")


@register.filter
def unix(value: datetime | None) -> str:
    return "" if value is None else f"{value.timestamp():.3f}"


@register.inclusion_tag("web/_chart.html")
def chart(spec: Chart) -> dict:
    return {"chart": spec}


@register.inclusion_tag("web/_range_picker.html", takes_context=True)
def range_picker(context) -> dict:
    return {"range": context["range"], "presets": context["presets"]}


@register.inclusion_tag("web/_live_status.html")
def live_status() -> dict:
    return {}
