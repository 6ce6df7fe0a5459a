"""One evaluation cycle: claim the rules, run their set-based queries, step every alert.

Safe when two workers run it at once: the cycle holds a transaction-level advisory lock (a
second worker skips instead of waiting), and each rule is claimed with
``UPDATE … WHERE last_evaluated_at < now`` so repeating a cycle for the same instant is a no-op.

One bad rule never stops a cycle: its query runs in a savepoint of its own when the shared
query fails, and a rule that still fails (its query, its scope, its alerts' writes) is left out
of the cycle, its alerts untouched, and marked with the error (``last_error``,
``last_error_at``); the other rules go on. A cycle in which it succeeds clears the mark.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime

from django.conf import settings
from django.db import InterfaceError, connection, transaction
from django.utils import timezone

from agents.protocol import Metric
from controlplane.alerts import windows
from controlplane.alerts.apply import apply_hits
from controlplane.alerts.fleet_names import FleetNames
from controlplane.alerts.models import AlertRule, RuleKind
from controlplane.alerts.named_kinds import NAMED
from controlplane.alerts.named_kinds import READS as NAMED_READS
from controlplane.alerts.patterns import PatternError, glob_match
from controlplane.alerts.queries import Hit, Hits, threshold_hits
from controlplane.alerts.rules import rule_metric
from controlplane.alerts.shards import WHOLE, Shard, shards
from controlplane.alerts.silences import matches

log = logging.getLogger(__name__)

LOCK_KEY = 0x50_41_4C_52  # "PALR": one evaluator at a time across the cluster
ERROR_CHARS = 500  # AlertRule.last_error's max_length
Errors = dict[int, str]  # rule id -> why it failed this cycle


@dataclass
class CycleResult:
    skipped: bool = False
    rules: int = 0
    hits: int = 0  # (rule, target) pairs whose condition holds
    transitions: list[tuple[str, str, str, str]] = field(default_factory=list)
    errors: Errors = field(default_factory=dict)  # the rules that failed, and why


def evaluate(now: datetime | None = None, rule_ids: list[int] | None = None) -> CycleResult:
    now = now or timezone.now()
    # Other connections see only committed rows: inside a caller's transaction, one lane.
    lanes = 1 if connection.in_atomic_block else settings.PITWALL["ALERT_EVAL_LANES"]
    parts = shards(lanes)
    windows.ensure_partitions(parts)
    with transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_try_advisory_xact_lock(%(key)s)", {"key": LOCK_KEY})
            if not cursor.fetchone()[0]:
                return CycleResult(skipped=True)
        rules = claim_rules(now, rule_ids)
        result = CycleResult(rules=len(rules))
        for hits, transitions, errors in _in_lanes(rules, now, parts):
            result.hits += hits
            result.transitions += transitions
            for rule_id, error in errors.items():
                result.errors.setdefault(rule_id, error)
        record_errors(rules, result.errors, now)
    return result


def record_errors(rules: list[AlertRule], errors: Errors, now: datetime) -> None:
    """Mark the rules that failed; clear the mark of those that ran (in every shard)."""
    for rule_id, error in errors.items():
        AlertRule.objects.filter(id=rule_id).update(last_error=error[:ERROR_CHARS],
                                                    last_error_at=now)
    cleared = [r.id for r in rules if r.id not in errors and (r.last_error or r.last_error_at)]
    if cleared:
        AlertRule.objects.filter(id__in=cleared).update(last_error="", last_error_at=None)


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


Outcome = tuple[int, list[tuple[str, str, str, str]], Errors]  # hits, transitions, errors


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
    errors: Errors = {}
    hits = run_queries(rules, now, shard, errors=errors)
    hits = scoped([r for r in rules if r.id not in errors], hits, errors=errors)
    transitions = _apply([r for r in rules if r.id not in errors], hits, now, shard, errors)
    count = sum(len(found) for rule_id, found in hits.items() if rule_id not in errors)
    return count, transitions, errors


def _apply(rules: list[AlertRule], hits: Hits, now: datetime, shard: Shard,
           errors: Errors) -> list[tuple[str, str, str, str]]:
    """apply_hits for all the rules at once; when that fails, for each rule alone."""
    done, exc = isolated(lambda: apply_hits(rules, hits, now, shard))
    if exc is None:
        return done
    transitions = []
    for rule in rules:
        done, exc = isolated(lambda r=rule: apply_hits([r], {r.id: hits.get(r.id, [])}, now,
                                                       shard))
        if exc is None:
            transitions += done
        else:
            failed(errors, rule, exc)
    return transitions


def isolated(call: Callable[[], object]) -> tuple[object, Exception | None]:
    """(its result, None), or (None, the exception): in a savepoint, so a statement that fails
    rolls back itself only and the transaction goes on. A lost connection is no rule's fault:
    it propagates."""
    try:
        with transaction.atomic():
            return call(), None
    except InterfaceError:
        raise
    except Exception as exc:  # noqa: BLE001 -- whatever a rule's query or data raises
        if connection.connection is None or getattr(connection.connection, "closed", False):
            raise
        return None, exc


def failed(errors: Errors, rule: AlertRule, exc: Exception, where: str = "") -> None:
    text = " ".join(str(exc).split()) or type(exc).__name__
    errors[rule.id] = f"{where}{text}"[:ERROR_CHARS]
    log.warning("alert evaluation: rule %s (%s) failed and was left out of the cycle: %s",
                rule.id, rule.name, errors[rule.id], exc_info=exc)


def run_queries(rules: list[AlertRule], now: datetime, shard: Shard = WHOLE,
                metrics: dict[str, frozenset[Metric]] | None = None,
                errors: Errors | None = None) -> Hits:
    """Inside a transaction: bring the shard's slices up to ``now`` (``metrics``: only these,
    ``windows.refresh``), then every rule's query over the shard's targets. With ``errors``, a
    rule that fails is recorded there and left out instead of failing them all."""
    statement_settings()
    if errors is not None:
        for rule in rules:
            try:
                _reads(rule)
            except Exception as exc:  # noqa: BLE001 -- a metric gone from the catalog, say
                failed(errors, rule, exc)
        rules = [r for r in rules if r.id not in errors]
    windows.refresh(now, slice_needs(rules), shard, metrics)
    return query_slices(rules, now, shard, errors)


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


def query_slices(rules: list[AlertRule], now: datetime, shard: Shard = WHOLE,
                 errors: Errors | None = None) -> Hits:
    """Every rule's query over the shard's slices as they are (up to ``now``). With
    ``errors``: when the threshold rules' shared queries fail, each rule's alone; a named
    rule's in a savepoint of its own; the failing ones recorded in ``errors``."""
    hits: Hits = defaultdict(list)
    thresholds = [r for r in rules if r.kind == RuleKind.THRESHOLD]
    kinds = [r for r in rules if r.kind in NAMED]
    if errors is None:
        hits.update(threshold_hits(thresholds, now, shard))
        for rule in kinds:
            hits[rule.id] = NAMED[rule.kind](rule, now, shard)
        return hits
    found, exc = isolated(lambda: threshold_hits(thresholds, now, shard)) if thresholds \
        else ({}, None)
    if exc is None:
        hits.update(found)
    else:
        for rule in thresholds:
            found, exc = isolated(lambda r=rule: threshold_hits([r], now, shard))
            if exc is None:
                hits.update(found)
            else:
                failed(errors, rule, exc)
    for rule in kinds:
        found, exc = isolated(lambda r=rule: NAMED[r.kind](r, now, shard))
        if exc is None:
            hits[rule.id] = found
        else:
            failed(errors, rule, exc)
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


def scoped(rules: list[AlertRule], hits: Hits, errors: Errors | None = None) -> Hits:
    """The hits in each rule's scope: host and engine ids, hostname glob, label matchers.
    A pattern that cannot be matched (stored before RE2) raises, or with ``errors`` is
    recorded there and the rule left out."""
    by_name = [r for r in rules if r.hostname_glob or r.label_matchers]
    names = FleetNames.load({r.id: hits.get(r.id, []) for r in by_name}, [])
    out: Hits = {}
    for rule in rules:
        try:
            out[rule.id] = _in_scope(rule, hits.get(rule.id, []), names)
        except PatternError as exc:
            if errors is None:
                raise
            failed(errors, rule, exc)
    return out


def _in_scope(rule: AlertRule, found: list[Hit], names: FleetNames) -> list[Hit]:
    hosts, engines = set(rule.host_ids), set(rule.engine_ids)
    found = [h for h in found if (not hosts or h.host_id in hosts)
             and (not engines or h.engine_id in engines)]
    try:
        if rule.hostname_glob:
            found = [h for h in found
                     if glob_match(rule.hostname_glob, names.hosts.get(h.host_id, ""))]
    except PatternError as exc:
        raise PatternError(f"hostname_glob {exc}") from None
    try:
        if rule.label_matchers:
            found = [h for h in found if matches(rule.label_matchers, names.scope_labels(h))]
    except PatternError as exc:
        raise PatternError(f"label_matchers: a value {exc}") from None
    return found
