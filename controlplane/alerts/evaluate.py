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
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime

from django.conf import settings
from django.db import InterfaceError, connection, transaction
from django.utils import timezone

from agents.protocol import Entity
from controlplane.alerts import leases
from controlplane.alerts.apply import apply_hits
from controlplane.alerts.compiled import compile_matchers, matches_all
from controlplane.alerts.fleet_names import FleetNames
from controlplane.alerts.metrics import CYCLE_SECONDS, RULE_ERRORS
from controlplane.alerts.models import AlertRule, ShardClaim
from controlplane.alerts.named_kinds import NAMED
from controlplane.alerts.named_kinds import add_needs as NAMED_NEEDS
from controlplane.alerts.patterns import PatternError, glob_match
from controlplane.alerts.queries import Cycle, Fleet, Hit, Hits, layouts_of, threshold_hits
from controlplane.alerts.queries import add_needs as threshold_needs
from controlplane.alerts.shards import WHOLE, Shard
from controlplane.alerts.windows.needs import Needs
from controlplane.alerts.windows.store import SliceStore, View, refresh_stores
from controlplane.telemetry.series.histograms import max_buckets

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
    # wall seconds of each phase: reading and folding raw rows, the rules, the state half
    seconds: dict[str, float] = field(default_factory=dict)


# This process's slices, kept between cycles (windows/store.py says when it trusts them), per
# shard of the fleet it evaluates.
STORES: dict[Shard, dict[Entity, SliceStore]] = {}


def evaluate(now: datetime | None = None, rule_ids: list[int] | None = None,
             shard: Shard = WHOLE) -> CycleResult:
    """One cycle over ``shard`` of the fleet (the whole of it by default; an evaluator shard
    is held by one worker at a time, ``leases.py``)."""
    now = now or timezone.now()
    # Other connections see only committed rows: inside a caller's transaction, one lane.
    lanes = 1 if connection.in_atomic_block else settings.PITWALL["ALERT_EVAL_LANES"]
    side_by_side = lanes > 1
    cycle_started = time.perf_counter()
    with transaction.atomic():
        if not _locked(shard):
            return CycleResult(skipped=True)
        rules = claim_rules(now, rule_ids) if shard.whole else \
            claim_shard_rules(now, rule_ids, shard)
        result = CycleResult(rules=len(rules))
        hits = run_queries(rules, now, errors=result.errors, seconds=result.seconds,
                           side_by_side=side_by_side, shard=shard)
        hits = scoped([r for r in rules if r.id not in result.errors], hits,
                      errors=result.errors)
        live = [r for r in rules if r.id not in result.errors]
        result.hits = sum(len(hits.get(r.id, [])) for r in live)
        started = time.perf_counter()
        for transitions, errors in _in_lanes(live, hits, now, shard.lanes(lanes)):
            result.transitions += transitions
            for rule_id, error in errors.items():
                result.errors.setdefault(rule_id, error)
        record_errors(rules, result.errors, now)
        result.seconds["state"] = time.perf_counter() - started
    CYCLE_SECONDS.observe(time.perf_counter() - cycle_started)
    RULE_ERRORS.inc(len(result.errors))
    return result


def _locked(shard: Shard) -> bool:
    """The cycle's lock, for the transaction: the whole fleet's, or one shard's (two int4
    keys); a second evaluator of the same skips instead of queueing behind it."""
    with connection.cursor() as cursor:
        if shard.whole:
            cursor.execute("SELECT pg_try_advisory_xact_lock(%(key)s)", {"key": LOCK_KEY})
        else:
            cursor.execute("SELECT pg_try_advisory_xact_lock(%(key)s::int4, %(shard)s::int4)",
                           {"key": LOCK_KEY, "shard": shard.index})
        return cursor.fetchone()[0]


def evaluate_held(owner: str, now: datetime | None = None) -> list[CycleResult]:
    """The cycles of this evaluator: the whole fleet, or with ``PITWALL_ALERT_EVAL_SHARDS``
    > 1 each shard ``owner`` holds (``leases.hold``), one after the other, then the leases
    renewed from the end of the last."""
    n = settings.PITWALL["ALERT_EVAL_SHARDS"]
    if n <= 1:
        return [evaluate(now)]
    held = leases.hold(owner, n)
    now = now or timezone.now()
    results = [evaluate(now, shard=Shard(index, n)) for index in held]
    if held:
        leases.renew(owner, held, evaluated_at=now)
    return results


def record_errors(rules: list[AlertRule], errors: Errors, now: datetime) -> None:
    """Mark the rules that failed; clear the mark of those that ran (in every shard)."""
    for rule_id, error in errors.items():
        AlertRule.objects.filter(id=rule_id).update(last_error=error[:ERROR_CHARS],
                                                    last_error_at=now)
    cleared = [r.id for r in rules if r.id not in errors and (r.last_error or r.last_error_at)]
    if cleared:
        AlertRule.objects.filter(id__in=cleared).update(last_error="", last_error_at=None)


def _enabled(rule_ids: list[int] | None):
    rules = AlertRule.objects.filter(enabled=True)
    return rules if rule_ids is None else rules.filter(id__in=rule_ids)


def claim_shard_rules(now: datetime, rule_ids: list[int] | None,
                      shard: Shard) -> list[AlertRule]:
    """``claim_rules`` for one evaluator shard: the claims are the shard's own rows
    (``ShardClaim``), so shards never wait on each other's rule rows. Shard 0 also keeps
    ``AlertRule.last_evaluated_at``, which pages and the API show."""
    claims = ShardClaim.objects.filter(shards=shard.of, index=shard.index)
    previous = dict(claims.filter(rule__enabled=True).values_list("rule_id", "evaluated_at"))
    rules = [r for r in _enabled(rule_ids) if previous.get(r.id) is None
             or previous[r.id] < now]
    ShardClaim.objects.bulk_create(
        [ShardClaim(shards=shard.of, index=shard.index, rule_id=r.id, evaluated_at=now)
         for r in rules], update_conflicts=True, unique_fields=["shards", "index", "rule"],
        update_fields=["evaluated_at"])
    for rule in rules:
        rule.previous_cycle_at = previous.get(rule.id)
    if shard.index == 0 and rules:
        AlertRule.objects.filter(id__in=[r.id for r in rules]).update(last_evaluated_at=now)
    return rules


def claim_rules(now: datetime, rule_ids: list[int] | None) -> list[AlertRule]:
    rules = _enabled(rule_ids).exclude(last_evaluated_at__gte=now)
    previous = dict(rules.values_list("id", "last_evaluated_at"))
    AlertRule.objects.filter(id__in=previous).update(last_evaluated_at=now)
    claimed = list(AlertRule.objects.filter(id__in=previous))
    for rule in claimed:  # apply_hits needs the instant of the rule's previous cycle
        rule.previous_cycle_at = previous[rule.id]
    return claimed


Outcome = tuple[list[tuple[str, str, str, str]], Errors]  # transitions, errors


def _in_lanes(rules: list[AlertRule], hits: Hits, now: datetime,
              parts: list[Shard]) -> list[Outcome]:
    """The state half. One shard: in this transaction. More: each shard of the fleet on a
    connection and in a transaction of its own, side by side (reading and writing the alerts
    is SQL); this transaction keeps the lock and the claims until all end. A shard that fails
    leaves the others' alerts stepped; the claims roll back with the error, so the next cycle
    evaluates every rule again."""
    if len(parts) == 1:
        return [_apply(rules, hits, now, parts[0])]
    with ThreadPoolExecutor(len(parts)) as pool:
        return list(pool.map(lambda shard: _own_connection(rules, hits, now, shard), parts))


def _own_connection(rules: list[AlertRule], hits: Hits, now: datetime, shard: Shard) -> Outcome:
    try:
        with transaction.atomic():
            return _apply(rules, hits, now, shard)
    finally:
        connection.close()  # this thread's connection, back to the pool


def _apply(rules: list[AlertRule], hits: Hits, now: datetime, shard: Shard) -> Outcome:
    """apply_hits for all the rules at once over the shard's hits; when that fails, for each
    rule alone."""
    errors: Errors = {}
    hits = {rule_id: [h for h in found if shard.holds(h.host_id)]
            for rule_id, found in hits.items()}
    done, exc = isolated(lambda: apply_hits(rules, hits, now, shard))
    if exc is None:
        return done, errors
    transitions = []
    for rule in rules:
        done, exc = isolated(lambda r=rule: apply_hits([r], {r.id: hits.get(r.id, [])}, now,
                                                       shard))
        if exc is None:
            transitions += done
        else:
            failed(errors, rule, exc)
    return transitions, errors


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


def run_queries(rules: list[AlertRule], now: datetime,
                stores: dict[Entity, SliceStore] | None = None,
                errors: Errors | None = None, seconds: dict[str, float] | None = None,
                side_by_side: bool = False, shard: Shard = WHOLE) -> Hits:
    """Bring the slices up to ``now`` (``stores``: this process's for ``shard`` by default;
    a preview passes empty ones of its own, which are neither trusted nor recorded), then
    every rule's hits on the shard's targets. With ``errors``, a rule that fails is recorded
    there and left out instead of failing them all. ``seconds``: where to add the wall time
    of the slices and the rules. ``side_by_side``: read raw rows on two connections
    (``refresh_stores``)."""
    seconds = {} if seconds is None else seconds
    started = time.perf_counter()
    own = stores is None
    stores = STORES.setdefault(shard, {}) if own else stores
    needs = Needs()
    for rule in rules:
        try:
            (NAMED_NEEDS if rule.kind in NAMED else threshold_needs)(needs, rule)
        except Exception as exc:  # noqa: BLE001 -- a metric gone from the catalog, say
            if errors is None:
                raise
            failed(errors, rule, exc)
    rules = [r for r in rules if errors is None or r.id not in errors]
    with connection.cursor() as cursor:
        built = needs.build(max_buckets(cursor))
        refresh_stores(cursor.cursor, stores, now, built, record=own,
                       side_by_side=side_by_side, shard=shard)
    cycle = Cycle(now, {e: View(stores[e], now) for e in built}, Fleet.load(shard),
                  layouts_of(built))
    seconds["slices"] = time.perf_counter() - started
    hits: Hits = {}
    for rule in rules:
        run = NAMED.get(rule.kind, threshold_hits)
        if errors is None:
            hits[rule.id] = run(rule, cycle)
            continue
        # A named kind reads the fleet tables: a failing statement must roll back alone. A
        # threshold rule is arithmetic only, and 500 savepoints would cost a tenth of a cycle.
        found, exc = isolated(lambda r=rule, run=run: run(r, cycle)) if rule.kind in NAMED \
            else _caught(lambda r=rule, run=run: run(r, cycle))
        if exc is None:
            hits[rule.id] = found
        else:
            failed(errors, rule, exc)
    seconds["rules"] = time.perf_counter() - started - seconds["slices"]
    return hits


def _caught(call: Callable[[], object]) -> tuple[object, Exception | None]:
    try:
        return call(), None
    except Exception as exc:  # noqa: BLE001 -- whatever a rule's arithmetic raises
        return None, exc


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
            compiled = compile_matchers(rule.label_matchers)  # once per rule, not per target
            found = [h for h in found if matches_all(compiled, names.scope_labels(h))]
    except PatternError as exc:
        raise PatternError(f"label_matchers: a value {exc}") from None
    return found
