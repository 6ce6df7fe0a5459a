"""What a rule would fire on now: its queries run once, nothing stored.

The rule editor and ``POST /api/v1/alert-rules/preview/`` call this with an unsaved, validated
rule. The same queries and scope as a real cycle run (``evaluate.query_slices``/``scoped``), so
a preview never disagrees with the evaluator about which targets meet the condition.

When the evaluator's slices cover the rule's window (its enabled rules read windows at least as
long, and it ran within the last two intervals), the preview reads them as of the evaluator's
last cycle: at fleet scale, building a 5-minute window of 8,000 GPUs from raw rows took 25 s.
Otherwise it builds slices of its own, in temporary tables dropped with its transaction, and
reads them as of now.

Every statement of a preview runs at most PITWALL["QUERY_TIMEOUT_S"] seconds (default 5):
past it, PostgreSQL cancels it and ``preview`` raises ``QueryTimeout``.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone

from controlplane.alerts import windows
from controlplane.alerts.evaluate import (
    query_slices,
    run_queries,
    scoped,
    slice_needs,
    statement_settings,
)
from controlplane.alerts.fleet_names import FleetNames
from controlplane.alerts.models import Alert, AlertRule, RuleKind
from controlplane.alerts.queries import Hits
from controlplane.alerts.rules import render_summary, rule_metric
from controlplane.alerts.shards import Shard, shards
from controlplane.alerts.windows.schema import STATE_TABLE
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
            found, now = _from_evaluator(rule, now) or _own_slices(rule, now)
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


def _own_slices(rule: AlertRule, now: datetime) -> tuple[Hits, datetime]:
    # its own slices for its own window, dropped with the transaction: the evaluator's are
    # neither read half-built nor touched; a threshold rule's of its one metric only
    windows.isolated()
    metrics = None
    if rule.kind == RuleKind.THRESHOLD:
        metric = rule_metric(rule)
        metrics = {metric.entity: frozenset({metric})}
    return run_queries([rule], now, metrics=metrics), now


def _from_evaluator(rule: AlertRule, now: datetime) -> tuple[Hits, datetime] | None:
    """The rule's hits over the evaluator's slices, shard by shard, each as of its last cycle;
    and the earliest of those instants. None when they do not cover the rule's window."""
    needs = slice_needs([rule])
    parts = shards(settings.PITWALL["ALERT_EVAL_LANES"])
    fresh = now - timedelta(seconds=2 * settings.PITWALL["ALERT_EVAL_INTERVAL_S"])
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT entity, lo, hi FROM {STATE_TABLE} WHERE entity = ANY(%(marks)s)",
                       {"marks": [shard.mark(entity) for entity in needs for shard in parts]})
        marks = {key: (lo, hi) for key, lo, hi in cursor.fetchall()}
    instants: dict[Shard, datetime] = {}
    for shard in parts:
        for entity, longest in needs.items():
            mark = marks.get(shard.mark(entity))
            if mark is None or not fresh <= mark[1] <= now or \
                    mark[0] > windows.window_start(mark[1], longest):
                return None
            instants[shard] = min(instants.get(shard, mark[1]), mark[1])
    if not instants:  # a rule that reads no slices (agent offline): the fleet tables now
        return None
    statement_settings()
    hits: Hits = {}
    for shard, at in instants.items():
        for rule_id, found in query_slices([rule], at, shard).items():
            hits.setdefault(rule_id, []).extend(found)
    return hits, min(instants.values())
