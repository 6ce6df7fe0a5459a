"""What a rule would fire on now: its queries run once, nothing stored.

The rule editor and ``POST /api/v1/alert-rules/preview/`` call this with an unsaved, validated
rule. The same queries and scope as a real cycle run (``evaluate.run_queries``/``scoped``), so
a preview never disagrees with the evaluator about which targets meet the condition.

It builds slices of its own, in this process, from the raw rows of its window, of the metrics
it reads only (the evaluator's slices live in the worker's memory), and reads them as of now.

Every statement of a preview runs at most PITWALL["QUERY_TIMEOUT_S"] seconds (default 5):
past it, PostgreSQL cancels it and ``preview`` raises ``QueryTimeout``.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from django.db import transaction
from django.utils import timezone

from controlplane.alerts.evaluate import run_queries, scoped
from controlplane.alerts.fleet_names import FleetNames
from controlplane.alerts.models import Alert, AlertRule
from controlplane.alerts.queries import Hits
from controlplane.alerts.rules import render_summary
from controlplane.telemetry.series.timeouts import QueryTimeout, statement_timeout

__all__ = ["MAX_TARGETS", "Preview", "PreviewHit", "QueryTimeout", "preview"]

PREVIEW_ID = -1  # stands in for the id of an unsaved rule inside the queries
MAX_TARGETS = 200  # a preview lists this many; ``count`` says how many there are


@dataclass(frozen=True)
class PreviewHit:
    target: str
    host_id: int | None
    host: str
    engine_id: int | None
    engine: str
    gpu_id: int | None
    gpu: str
    value: float | None
    summary: str


@dataclass(frozen=True)
class Preview:
    now: datetime
    count: int
    hits: list[PreviewHit]
    # Targets meet the condition now; with for_s > 0 they fire only if it keeps holding.
    fires_after_s: int


def preview(rule: AlertRule, now: datetime | None = None) -> Preview:
    now = now or timezone.now()
    saved_id = rule.id
    rule.id = PREVIEW_ID if saved_id is None else saved_id
    try:
        with statement_timeout("the preview"), transaction.atomic():
            found = _own_slices(rule, now)
            found = scoped([rule], found).get(rule.id, [])
            transaction.set_rollback(True)
    finally:
        rule.id = saved_id
    found = sorted(found, key=lambda h: (h.host_id or 0, h.target))
    names = FleetNames.load({PREVIEW_ID: found}, [])
    hits = []
    for hit in found[:MAX_TARGETS]:
        alert = Alert(target=hit.target, host_id=hit.host_id, engine_id=hit.engine_id,
                      gpu_id=hit.gpu_id)
        labels = names.labels(hit)
        hits.append(PreviewHit(
            target=hit.target, host_id=hit.host_id, host=labels["host"],
            engine_id=hit.engine_id, engine=labels.get("engine", ""), gpu_id=hit.gpu_id,
            gpu=labels.get("gpu", ""), value=hit.value,
            summary=render_summary(rule, names.fields(alert, hit.value))))
    return Preview(now=now, count=len(found), hits=hits, fires_after_s=rule.for_s)


def _own_slices(rule: AlertRule, now: datetime) -> Hits:
    # slices of its own, for its own window and metrics: the evaluator's are never touched
    return run_queries([rule], now, stores={})
