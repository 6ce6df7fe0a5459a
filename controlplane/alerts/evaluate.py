"""One evaluation cycle: claim the rules, run their set-based queries, step every alert.

Safe when two workers run it at once: the cycle holds a transaction-level advisory lock (a
second worker skips instead of waiting), and each rule is claimed with
``UPDATE … WHERE last_evaluated_at < now`` so repeating a cycle for the same instant is a no-op.
"""

from __future__ import annotations

from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime

from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone

from agents.protocol import Metric
from controlplane.alerts import windows
from controlplane.alerts.apply import apply_hits
from controlplane.alerts.models import AlertRule, RuleKind
from controlplane.alerts.named import NAMED
from controlplane.alerts.named import READS as NAMED_READS
from controlplane.alerts.names import FleetNames
from controlplane.alerts.patterns import glob_match
from controlplane.alerts.queries import Hits, threshold_hits
from controlplane.alerts.rules import rule_metric
from controlplane.alerts.shards import WHOLE, Shard, shards
from controlplane.alerts.silences import matches

LOCK_KEY = 0x50_41_4C_52  # "PALR": one evaluator at a time across the cluster


@dataclass
class CycleResult:
    skipped: bool = False
    rules: int = 0
    hits: int = 0  # (rule, target) pairs whose condition holds
    transitions: list[tuple[str, str, str, str]] = field(default_factory=list)


def evaluate(now: datetime | None = None, rule_ids: list[int] | None = None) -> CycleResult:
    now = now or timezone.now()
    # Other connections see only committed rows: inside a caller's transaction, one lane.
    lanes = 1 if connection.in_atomic_block else settings.PITWALL["ALERT_EVAL_LANES"]
    parts = shards(lanes)
    windows.ensure_partitions(parts)
    with transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_try_advisory_xact_lock(%s)", [LOCK_KEY])
            if not cursor.fetchone()[0]:
                return CycleResult(skipped=True)
        rules = claim_rules(now, rule_ids)
        result = CycleResult(rules=len(rules))
        for hits, transitions in _in_lanes(rules, now, parts):
            result.hits += hits
            result.transitions += transitions
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


Outcome = tuple[int, list[tuple[str, str, str, str]]]  # hits, transitions


def _in_lanes(rules: list[AlertRule], now: datetime, parts: list[Shard]) -> list[Outcome]:
    """One shard: in this transaction. More: each shard of the fleet on a connection and in a
    transaction of its own, side by side (a cycle is SQL-bound and PostgreSQL runs one
    statement on one core); this transaction keeps the lock and the claims until all end. A
    shard that fails leaves the others' alerts stepped; the claims roll back with the error,
    so the next cycle evaluates every rule again."""
    if len(parts) == 1:
        return [_cycle(rules, now, parts[0])]
    with ThreadPoolExecutor(len(parts)) as pool:
        return list(pool.map(lambda shard: _own_connection(rules, now, shard), parts))


def _own_connection(rules: list[AlertRule], now: datetime, shard: Shard) -> Outcome:
    try:
        with transaction.atomic():
            return _cycle(rules, now, shard)
    finally:
        connection.close()  # this thread's connection, back to the pool


def _cycle(rules: list[AlertRule], now: datetime, shard: Shard) -> Outcome:
    hits = scoped(rules, run_queries(rules, now, shard))
    return sum(map(len, hits.values())), apply_hits(rules, hits, now, shard)


def run_queries(rules: list[AlertRule], now: datetime, shard: Shard = WHOLE,
                metrics: dict[str, frozenset[Metric]] | None = None) -> Hits:
    """Inside a transaction: bring the shard's slices up to ``now`` (``metrics``: only these,
    ``windows.refresh``), then every rule's query over the shard's targets."""
    statement_settings()
    windows.refresh(now, slice_needs(rules), shard, metrics)
    return query_slices(rules, now, shard)


def statement_settings() -> None:
    """For the rest of the transaction: how the cycle's statements must be planned."""
    with connection.cursor() as cursor:
        # These statements carry hundreds of expressions: PostgreSQL's JIT would spend
        # seconds compiling them for runs of a few hundred milliseconds (BENCHMARKS.md §7).
        cursor.execute("SET LOCAL jit = off")
        # A Memoize node in front of the per-target lookups hashes every column it reads
        # and never hits.
        cursor.execute("SET LOCAL enable_memoize = off")
        # Hundreds of aggregate states per target: grouped in memory, not spilled to disk.
        cursor.execute("SET LOCAL work_mem = '64MB'")


def query_slices(rules: list[AlertRule], now: datetime, shard: Shard = WHOLE) -> Hits:
    """Every rule's query over the shard's slices as they are (up to ``now``)."""
    hits: Hits = defaultdict(list)
    hits.update(threshold_hits([r for r in rules if r.kind == RuleKind.THRESHOLD], now, shard))
    for rule in rules:
        if rule.kind in NAMED:
            hits[rule.id] = NAMED[rule.kind](rule, now, shard)
    return hits


def _reads(rule: AlertRule) -> frozenset[str]:
    """The entities whose slices a rule reads."""
    if rule.kind in NAMED:
        return frozenset(NAMED_READS[rule.kind])
    return frozenset({rule_metric(rule).entity})


def slice_needs(rules: list[AlertRule]) -> dict[str, int]:
    """The longest window each entity's slices must cover for these rules."""
    needs: dict[str, int] = {}
    for rule in rules:
        for entity in _reads(rule):
            needs[entity] = max(needs.get(entity, 0), rule.window_s)
    return needs


def scoped(rules: list[AlertRule], hits: Hits) -> Hits:
    """The hits in each rule's scope: host and engine ids, hostname glob, label matchers."""
    by_name = [r for r in rules if r.hostname_glob or r.label_matchers]
    names = FleetNames.load({r.id: hits.get(r.id, []) for r in by_name}, [])
    out: Hits = {}
    for rule in rules:
        hosts, engines = set(rule.host_ids), set(rule.engine_ids)
        out[rule.id] = [
            h for h in hits.get(rule.id, [])
            if (not hosts or h.host_id in hosts) and (not engines or h.engine_id in engines)
            and (not rule.hostname_glob
                 or glob_match(rule.hostname_glob, names.hosts.get(h.host_id, "")))
            and (not rule.label_matchers
                 or matches(rule.label_matchers, names.scope_labels(h)))]
    return out
