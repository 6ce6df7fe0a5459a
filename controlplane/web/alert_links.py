"""Where an alert points: its target's pages, the charts around its onset, a prefilled silence.

The chart links use the pages' own range format (ranges.py: ``?from=<unix>&to=<unix>``), so
following one opens the host, engine or GPU page zoomed on the moments the condition began.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from urllib.parse import urlencode

from django.urls import reverse
from django.utils import timezone

from controlplane.alerts.models import Alert
from controlplane.alerts.silences import LABELS
from controlplane.fleet.models import Gpu

ONSET_MARGIN = timedelta(minutes=30)


@dataclass(frozen=True)
class Link:
    kind: str  # "host", "engine", "gpu"
    label: str
    url: str


def gpu_indexes(alerts: Iterable[Alert]) -> dict[int, int]:
    """GPU id -> index on its host, for "GPU 0" rather than the UUID the labels carry."""
    ids = {a.gpu_id for a in alerts if a.gpu_id is not None}
    return dict(Gpu.objects.filter(id__in=ids).values_list("id", "index")) if ids else {}


def target_links(alert: Alert, indexes: dict[int, int] | None = None) -> list[Link]:
    """The host, engine and GPU the alert is about, as far as it names them."""
    labels = alert.labels or {}
    indexes = gpu_indexes([alert]) if indexes is None else indexes
    links = []
    if alert.host_id is not None:
        links.append(Link("host", labels.get("host") or f"host {alert.host_id}",
                          reverse("web:host", args=[alert.host_id])))
    if alert.engine_id is not None:
        links.append(Link("engine", labels.get("engine") or f"engine {alert.engine_id}",
                          reverse("web:engine", args=[alert.engine_id])))
    if alert.gpu_id is not None:
        index = indexes.get(alert.gpu_id)
        links.append(Link("gpu", f"GPU {index}" if index is not None else
                          f"GPU {labels.get('gpu') or alert.gpu_id}",
                          reverse("web:gpu", args=[alert.gpu_id])))
    return links


def onset(alert: Alert) -> datetime | None:
    return alert.active_since or alert.started_at


def onset_window(alert: Alert, now: datetime | None = None) -> tuple[int, int] | None:
    """(from, to) in unix seconds: 30 min before the onset to 30 min after it, or to now when
    that is sooner (a range reaching into the future would chart nothing there)."""
    began = onset(alert)
    if began is None:
        return None
    now = now or timezone.now()
    start = began - ONSET_MARGIN
    end = max(min(began + ONSET_MARGIN, now), began + timedelta(minutes=1))
    return int(start.timestamp()), int(end.timestamp()) + 1


def onset_links(links: list[Link], alert: Alert, now: datetime | None = None) -> list[Link]:
    """``links`` (target_links) zoomed on the onset."""
    window = onset_window(alert, now)
    if window is None:
        return []
    query = urlencode({"from": window[0], "to": window[1]})
    return [Link(link.kind, link.label, f"{link.url}?{query}") for link in links]


def silence_url(alert: Alert) -> str:
    """The silence form, prefilled with a matcher for each label of the alert a silence can
    match (all but severity: a silence of one alert should not depend on its severity)."""
    labels = alert.labels or {}
    lines = [f"{name}={labels[name]}" for name in LABELS
             if name != "severity" and labels.get(name) not in (None, "")]
    query = urlencode({"matchers": "\n".join(lines), "alert": alert.id})
    return f"{reverse('web:silences')}?{query}"
