"""One evaluation cycle: claim the rules, run their set-based queries, step every alert.

Safe when two workers run it at once: the cycle holds a transaction-level advisory lock (a
second worker skips instead of waiting), and each rule is claimed with
``UPDATE … WHERE last_evaluated_at < now`` so repeating a cycle for the same instant is a no-op.
"""

from __future__ import annotations

import fnmatch
import hashlib
import json
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.db import connection, transaction
from django.utils import timezone

from controlplane.alerts import windows
from controlplane.alerts.models import Alert, AlertEvent, AlertRule, AlertState, RuleKind
from controlplane.alerts.named import NAMED
from controlplane.alerts.named import READS as NAMED_READS
from controlplane.alerts.queries import Hit, Hits, threshold_hits
from controlplane.alerts.rules import render_summary, rule_metric
from controlplane.alerts.state import step
from controlplane.fleet.models import Engine, Gpu, Host

LOCK_KEY = 0x50_41_4C_52  # "PALR": one evaluator at a time across the cluster
OPEN = (AlertState.PENDING, AlertState.FIRING)


@dataclass
class CycleResult:
    skipped: bool = False
    rules: int = 0
    hits: int = 0
    transitions: list[tuple[str, str, str, str]] = field(default_factory=list)


def evaluate(now: datetime | None = None, rule_ids: list[int] | None = None) -> CycleResult:
    now = now or timezone.now()
    with transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_try_advisory_xact_lock(%s)", [LOCK_KEY])
            if not cursor.fetchone()[0]:
                return CycleResult(skipped=True)
        rules = claim_rules(now, rule_ids)
        hits = scoped(rules, run_queries(rules, now))
        result = CycleResult(rules=len(rules), hits=sum(map(len, hits.values())))
        apply_hits(rules, hits, now, result)
    return result


def claim_rules(now: datetime, rule_ids: list[int] | None) -> list[AlertRule]:
    rules = AlertRule.objects.filter(enabled=True).exclude(last_evaluated_at__gte=now)
    if rule_ids is not None:
        rules = rules.filter(id__in=rule_ids)
    previous = dict(rules.values_list("id", "last_evaluated_at"))
    AlertRule.objects.filter(id__in=previous).update(last_evaluated_at=now)
    claimed = list(AlertRule.objects.filter(id__in=previous))
    for rule in claimed:  # apply_hits needs the instant of the rule's previous cycle
        rule.previous_cycle_at = previous[rule.id]
    return claimed


def run_queries(rules: list[AlertRule], now: datetime) -> Hits:
    """Inside a transaction: bring the slices up to ``now``, then every rule's query."""
    with connection.cursor() as cursor:
        # These statements carry hundreds of expressions: PostgreSQL's JIT would spend
        # seconds compiling them for runs of a few hundred milliseconds (BENCHMARKS.md §7).
        cursor.execute("SET LOCAL jit = off")
    windows.refresh(now, slice_needs(rules))
    hits: Hits = defaultdict(list)
    hits.update(threshold_hits([r for r in rules if r.kind == RuleKind.THRESHOLD], now))
    for rule in rules:
        if rule.kind in NAMED:
            hits[rule.id] = NAMED[rule.kind](rule, now)
    return hits


def slice_needs(rules: list[AlertRule]) -> dict[str, int]:
    """The longest window each entity's slices must cover for these rules."""
    needs: dict[str, int] = {}
    for rule in rules:
        entities = NAMED_READS[rule.kind] if rule.kind in NAMED else (rule_metric(rule).entity,)
        for entity in entities:
            needs[entity] = max(needs.get(entity, 0), rule.window_s)
    return needs


def scoped(rules: list[AlertRule], hits: Hits) -> Hits:
    globbed = {r.id for r in rules if r.hostname_glob}
    hostnames = _hostnames({h.host_id for rid in globbed for h in hits.get(rid, [])})
    out: Hits = {}
    for rule in rules:
        hosts, engines = set(rule.host_ids), set(rule.engine_ids)
        out[rule.id] = [
            h for h in hits.get(rule.id, [])
            if (not hosts or h.host_id in hosts) and (not engines or h.engine_id in engines)
            and (not rule.hostname_glob
                 or fnmatch.fnmatchcase(hostnames.get(h.host_id, ""), rule.hostname_glob))]
    return out


def _hostnames(ids: set) -> dict[int, str]:
    return dict(Host.objects.filter(id__in=ids).values_list("id", "hostname")) if ids else {}


def apply_hits(rules: list[AlertRule], hits: Hits, now: datetime, result: CycleResult) -> None:
    by_id = {r.id: r for r in rules}
    targets = {h.target for found in hits.values() for h in found}
    known = {(a.rule_id, a.target): a for a in Alert.objects.filter(rule_id__in=by_id).filter(
        state__in=OPEN) | Alert.objects.filter(rule_id__in=by_id, target__in=targets)}
    names = FleetNames.load(hits, known.values())
    new, changed, events = [], [], []
    for rule_id, found in hits.items():
        rule = by_id[rule_id]
        for hit in found:
            alert = known.pop((rule_id, hit.target), None)
            if alert is None:
                alert = _new_alert(rule, hit, names)
                new.append(alert)
                write = True
            else:
                write = not held_until_now(alert) or _refresh_due(alert, now)
            moves = step(alert, rule, True, hit.value, now)
            if moves or write:
                alert.summary = render_summary(rule, names.fields(alert, hit.value))
                if alert.pk is not None:
                    changed.append(alert)
            events += [(alert, m) for m in moves]
    for alert in known.values():  # open alerts whose condition no longer holds
        if alert.state in OPEN:
            rule = by_id[alert.rule_id]
            held = held_until_now(alert)
            if held and rule.previous_cycle_at:
                # Not written while it held (see held_until_now): it was last true at the
                # rule's previous cycle, which keep_firing_for counts from.
                alert.last_true_at = max(alert.last_true_at, rule.previous_cycle_at)
            moves = step(alert, rule, False, None, now)
            events += [(alert, m) for m in moves]
            if moves or held:
                changed.append(alert)
    Alert.objects.bulk_create(new)
    bulk_update_state(changed)
    AlertEvent.objects.bulk_create(AlertEvent(alert=a, at=now, from_state=f, to_state=t,
                                              value=a.value) for a, (f, t) in events)
    result.transitions = [(by_id[a.rule_id].name, a.target, f, t) for a, (f, t) in events]


# An alert whose condition keeps holding and whose state does not move is written at most
# this often (its value, summary and last_true_at): at fleet scale, rewriting every firing
# alert every 10 s was most of a cycle's writes (BENCHMARKS.md §7).
VALUE_REFRESH = timedelta(seconds=60)


def held_until_now(alert: Alert) -> bool:
    """True when the condition held at the alert's last write and, since the evaluator writes
    every alert whose condition flips, at every cycle since."""
    return alert.last_true_at is not None and alert.last_true_at == alert.last_evaluated_at


def _refresh_due(alert: Alert, now: datetime) -> bool:
    return alert.last_evaluated_at is None or now - alert.last_evaluated_at >= VALUE_REFRESH


# Column and array type of every field a cycle may change.
_STATE_FIELDS = {"state": "text", "value": "float8", "summary": "text",
                 "active_since": "timestamptz", "started_at": "timestamptz",
                 "resolved_at": "timestamptz", "last_true_at": "timestamptz",
                 "last_evaluated_at": "timestamptz", "acknowledged_at": "timestamptz",
                 "acknowledged_by": "text", "ack_comment": "text"}


def bulk_update_state(alerts: list[Alert]) -> None:
    """One UPDATE … FROM unnest(arrays) for all of them: Django's bulk_update builds a CASE
    per field with a branch per row, which PostgreSQL evaluates in O(rows²)."""
    if not alerts:
        return
    cols = ", ".join(f"{f} = u.{f}" for f in _STATE_FIELDS)
    arrays = ", ".join(f"%s::{t}[]" for t in ["int8", *_STATE_FIELDS.values()])
    names = ", ".join(["id", *_STATE_FIELDS])
    params = [[a.id for a in alerts],
              *([getattr(a, f) for a in alerts] for f in _STATE_FIELDS)]
    with connection.cursor() as cursor:
        cursor.execute(f"UPDATE {Alert._meta.db_table} a SET {cols} "
                       f"FROM unnest({arrays}) AS u({names}) WHERE a.id = u.id", params)


def _new_alert(rule: AlertRule, hit: Hit, names: FleetNames) -> Alert:
    labels = {"alertname": rule.name, "severity": rule.severity, **names.labels(hit)}
    return Alert(rule=rule, target=hit.target, host_id=hit.host_id, engine_id=hit.engine_id,
                 gpu_id=hit.gpu_id, labels=labels, fingerprint=fingerprint(labels))


def fingerprint(labels: dict[str, str]) -> str:
    return hashlib.sha256(json.dumps(labels, sort_keys=True).encode()).hexdigest()[:32]


@dataclass
class FleetNames:
    """Hostnames, engine names and GPU uuids/indexes of the targets in this cycle only."""

    hosts: dict[int, str]
    engines: dict[int, str]
    gpus: dict[int, tuple[str, int]]

    @classmethod
    def load(cls, hits: Hits, alerts) -> FleetNames:
        rows = [*(h for found in hits.values() for h in found), *alerts]
        ids = {k: {getattr(r, f"{k}_id") for r in rows} - {None} for k in ("host", "engine", "gpu")}
        return cls(
            _hostnames(ids["host"]),
            dict(Engine.objects.filter(id__in=ids["engine"]).values_list("id", "name")),
            {i: (u, x) for i, u, x in
             Gpu.objects.filter(id__in=ids["gpu"]).values_list("id", "uuid", "index")})

    def labels(self, hit: Hit) -> dict[str, str]:
        out = {"host": self.hosts.get(hit.host_id, "")}
        if hit.engine_id is not None:
            out["engine"] = self.engines.get(hit.engine_id, "")
        if hit.gpu_id is not None:
            out["gpu"] = self.gpus.get(hit.gpu_id, ("", 0))[0]
        return out

    def fields(self, alert: Alert, value: float | None) -> dict[str, object]:
        uuid, index = self.gpus.get(alert.gpu_id, ("", "")) if alert.gpu_id else ("", "")
        return {"value": value, "target": alert.target, "host": self.hosts.get(alert.host_id, ""),
                "host_id": alert.host_id, "engine": self.engines.get(alert.engine_id, ""),
                "engine_id": alert.engine_id, "gpu": uuid, "gpu_id": alert.gpu_id,
                "gpu_index": index}
