"""Step every alert of a cycle and write what changed: the state half of an evaluation.

The alerts of the cycle's targets are read as plain rows (``AlertRow``), not model instances:
at fleet scale a cycle touches tens of thousands and Django's model init was a third of it.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field, fields
from datetime import datetime, timedelta

import numpy as np
from django.db import connection

from controlplane.alerts.arrays import UNIX_EPOCH, from_micros, numbers, texts, timestamps
from controlplane.alerts.fleet_names import FleetNames
from controlplane.alerts.models import Alert, AlertEvent, AlertRule, AlertState
from controlplane.alerts.queries import Hit, Hits
from controlplane.alerts.rules import render_summary
from controlplane.alerts.shards import WHOLE, Shard
from controlplane.alerts.state import FOR_SLACK, step

OPEN = (AlertState.PENDING, AlertState.FIRING)


@dataclass(slots=True)
class AlertRow:
    """What a cycle reads and may change of an existing alert (the fields ``step`` uses)."""

    id: int | None
    rule_id: int
    target: str
    host_id: int | None
    engine_id: int | None
    gpu_id: int | None
    state: str
    value: float | None
    summary: str
    active_since: datetime | None
    started_at: datetime | None
    resolved_at: datetime | None
    last_true_at: datetime | None
    last_evaluated_at: datetime | None
    acknowledged_at: datetime | None
    acknowledged_by: str
    ack_comment: str

    @property
    def pk(self) -> int | None:
        return self.id


@dataclass(slots=True)
class NewAlert(AlertRow):
    """An alert the cycle creates (no id until inserted): a storm's cycle makes thousands, and
    Django's model init was a sixth of its state half."""

    labels: dict[str, str] = field(default_factory=dict)
    fingerprint: str = ""
    # the labels as written (JSON, keys sorted): the fingerprint hashes the same text, so a
    # storm's thousands of new alerts are serialised once each, not twice
    labels_json: str = "{}"


# Timestamps travel as integer microseconds: tens of thousands of rows a storm cycle, and
# parsing their text was a third of reading them.
_FIELDS = fields(AlertRow)
_TIMES = {f.name for f in _FIELDS if f.type == "datetime | None"}


def _columns(alias: str) -> str:
    return ", ".join(f"(extract(epoch FROM {alias}.{f.name}) * 1000000)::int8"
                     if f.name in _TIMES else f"{alias}.{f.name}" for f in _FIELDS)


_TIME_AT = [i for i, f in enumerate(_FIELDS) if f.name in _TIMES]


def load_alerts(rules: list[AlertRule], hits: Hits, now: datetime, shard: Shard = WHOLE
                ) -> tuple[dict[tuple[int, str], AlertRow], set[tuple[int, str]]]:
    """The alerts this cycle may change: the open alerts of these rules in the shard and the
    closed alerts of these hits. Also the (rule, target) pairs that are settled: an open alert
    whose condition still holds and that ``step`` would neither move nor write (``_SETTLED``);
    in a storm most of the firing alerts are, and they are neither read nor stepped."""
    pairs = [(rule_id, h.target) for rule_id, found in hits.items() for h in found]
    for_s = {r.id: r.for_s for r in rules}
    with connection.cursor() as cursor:
        cursor.execute(
            load_alerts_sql(shard),
            {"hit_rules": numbers(p[0] for p in pairs),
             "hit_targets": texts(p[1] for p in pairs),
             "hit_for_s": numbers(for_s[p[0]] for p in pairs),
             "rules": numbers(r.id for r in rules), "open": texts(OPEN), "now": now,
             "refresh": VALUE_REFRESH, "slack": FOR_SLACK})
        known, settled, times = {}, set(), {}
        for row in cursor.fetchall():
            if row[0]:
                ordinals = np.frombuffer(row[-1] or b"", dtype=">i8")
                settled = {pairs[n - 1] for n in ordinals.tolist()}
            else:
                alert = _alert_row(row[1:-1], times)
                known[(alert.rule_id, alert.target)] = alert
    return known, settled


def load_alerts_sql(shard: Shard = WHOLE) -> str:
    """``load_alerts``' statement: a row per alert to step (``settled`` false, its fields) and
    one row for the settled pairs (``settled`` true): their ordinals among the hits, as one
    ``bytea`` of big-endian int8s. A storm has ~24,000 settled pairs; as a row each (17 NULL
    columns) their fetch and the Python loop over them were a tenth of the state half.

    Each hit carries its rule's ``for_s`` (the cycle holds the rules): joined to the rule
    table, the planner, expecting few open alerts, probed its primary key once per alert
    (28,000 in a storm), and joined to the rules as an array it compared every alert with
    every rule. ``o`` keeps the fields read only, not the labels: it hashes in memory."""
    table = Alert._meta.db_table
    padding = ", ".join(["NULL"] * len(_FIELDS))
    fields_of_a = ", ".join(f"a.{f.name}" for f in _FIELDS)
    return (
        "WITH h AS MATERIALIZED (\n"
        "  SELECT * FROM unnest(%(hit_rules)s::int8[], %(hit_targets)s::text[], "
        "%(hit_for_s)s::int4[]) WITH ORDINALITY AS h(rule_id, target, for_s, n)),\n"
        "o AS MATERIALIZED (\n"
        f"  SELECT {fields_of_a}, h.n,\n"
        f"    coalesce(h.rule_id IS NOT NULL AND {_SETTLED}, false) AS settled\n"
        f"  FROM {table} a\n"
        "  LEFT JOIN h ON h.rule_id = a.rule_id AND h.target = a.target\n"
        "  WHERE a.rule_id = ANY(%(rules)s::int8[]) AND a.state = ANY(%(open)s::text[])\n"
        f"    AND {shard.hosts('a.host_id')})\n"
        f"SELECT false, {_columns('o')}, NULL::bytea\n"
        "FROM o WHERE NOT o.settled\n"
        "UNION ALL\n"
        f"SELECT true, {padding}, string_agg(int8send(o.n), ''::bytea)\n"
        "FROM o WHERE o.settled\n"
        "UNION ALL\n"
        f"SELECT false, {_columns('a')}, NULL\n"
        f"FROM {table} a\n"
        "JOIN h ON a.rule_id = h.rule_id AND a.target = h.target\n"
        "WHERE a.state <> ALL(%(open)s::text[])")


# Mirrors ``step`` for an open alert whose condition holds: no transition (firing, or pending
# short of ``for``) and no write (held_until_now and no _refresh_due). tests/alerts check that
# every pair it skips, stepped in Python, would do nothing.
_SETTLED = (
    "a.last_true_at IS NOT NULL AND a.last_true_at = a.last_evaluated_at\n"
    "    AND a.last_evaluated_at > %(now)s - %(refresh)s\n"
    "    AND (a.state = 'firing'\n"
    "      OR a.active_since + h.for_s * interval '1 second' - %(slack)s > %(now)s)")


def _alert_row(row: tuple, times: dict[int, datetime]) -> AlertRow:
    """``times``: the instants read so far (microseconds -> datetime): a storm's thousands of
    rows hold a few dozen, each converted once."""
    row = list(row)
    for i in _TIME_AT:
        micros = row[i]
        if micros is not None:
            at = times.get(micros)
            if at is None:
                at = times[micros] = UNIX_EPOCH + timedelta(microseconds=micros)
            row[i] = at
    return AlertRow(*row)


def apply_hits(rules: list[AlertRule], hits: Hits, now: datetime,
               shard: Shard = WHOLE) -> list[tuple[str, str, str, str]]:
    """Step the alerts of the shard's targets, write, and return the transitions as (rule
    name, target, from, to)."""
    by_id = {r.id: r for r in rules}
    known, settled = load_alerts(rules, hits, now, shard)
    live = {rule_id: [h for h in found if (rule_id, h.target) not in settled]
            for rule_id, found in hits.items()}
    names = FleetNames.load(live, known.values())
    new, changed, events = [], [], []
    for rule_id, found in live.items():
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
    insert_new(new)
    bulk_update_state(changed)
    insert_events(events, now)
    return [(by_id[a.rule_id].name, a.target, f, t) for a, (f, t) in events]


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


def bulk_update_state(alerts: list[AlertRow]) -> None:
    """One UPDATE … FROM unnest(arrays) for all of them: Django's bulk_update builds a CASE
    per field with a branch per row, which PostgreSQL evaluates in O(rows²)."""
    if not alerts:
        return
    params = {"id": numbers(a.id for a in alerts),
              **{f: _LITERAL[t](getattr(a, f) for a in alerts) for f, t in _STATE_FIELDS.items()}}
    with connection.cursor() as cursor:
        cursor.execute(UPDATE_STATE_SQL, params)


# How each column's values are written (arrays.py); timestamps travel as int8 microseconds.
_LITERAL = {"text": texts, "jsonb": texts, "float8": numbers, "int8": numbers, "int4": numbers,
            "timestamptz": timestamps}


def _unnest(types: dict[str, str]) -> str:
    """unnest() of one array parameter per column, named after it (%(col)s::type[])."""
    return ",\n  ".join(f"%({name})s::{'int8' if t == 'timestamptz' else t}[]"
                        for name, t in types.items())


def _read(name: str, sql_type: str) -> str:
    """Column ``name`` of the unnest as its column's type."""
    return from_micros(f"u.{name}") if sql_type == "timestamptz" else f"u.{name}"


UPDATE_STATE_SQL = (
    f"UPDATE {Alert._meta.db_table} a\n"
    f"SET {', '.join(f'{f} = {_read(f, t)}' for f, t in _STATE_FIELDS.items())}\n"
    f"FROM unnest(\n  {_unnest({'id': 'int8', **_STATE_FIELDS})})\n"
    f"  AS u({', '.join(['id', *_STATE_FIELDS])})\n"
    "WHERE a.id = u.id")


_NEW_FIELDS = {"rule_id": "int8", "target": "text", "host_id": "int4", "engine_id": "int4",
               "gpu_id": "int4", "labels": "jsonb", "fingerprint": "text", **_STATE_FIELDS}


INSERT_NEW_SQL = (
    f"INSERT INTO {Alert._meta.db_table} ({', '.join(_NEW_FIELDS)})\n"
    f"SELECT {', '.join(_read(f, t) for f, t in _NEW_FIELDS.items())}\n"
    f"FROM unnest(\n  {_unnest(_NEW_FIELDS)})\n"
    f"  AS u({', '.join(_NEW_FIELDS)})\n"
    "RETURNING id, rule_id, target")


def insert_new(alerts: list[NewAlert]) -> None:
    """The cycle's new alerts in one INSERT … SELECT FROM unnest, their ids set from RETURNING
    (Django's bulk_create binds every field of every row in Python: a restart's first cycle
    creates tens of thousands)."""
    if not alerts:
        return
    params = {f: _LITERAL[t](getattr(a, "labels_json" if f == "labels" else f)
                             for a in alerts) for f, t in _NEW_FIELDS.items()}
    with connection.cursor() as cursor:
        cursor.execute(INSERT_NEW_SQL, params)
        ids = {(rule_id, target): id_ for id_, rule_id, target in cursor.fetchall()}
    for alert in alerts:
        alert.id = ids[(alert.rule_id, alert.target)]


INSERT_EVENTS_SQL = (
    f"INSERT INTO {AlertEvent._meta.db_table} (alert_id, at, from_state, to_state, value, note)\n"
    "SELECT u.alert_id, %(at)s, u.from_state, u.to_state, u.value, ''\n"
    "FROM unnest(%(alert_id)s::int8[], %(from_state)s::text[], %(to_state)s::text[], "
    "%(value)s::float8[])\n"
    "  AS u(alert_id, from_state, to_state, value)")


def insert_events(events: list[tuple[AlertRow, tuple[str, str]]], now: datetime) -> None:
    """The cycle's transitions as AlertEvent rows, in one INSERT … SELECT FROM unnest."""
    if not events:
        return
    with connection.cursor() as cursor:
        cursor.execute(INSERT_EVENTS_SQL, {
            "at": now, "alert_id": numbers(a.id for a, _ in events),
            "from_state": texts(m[0] for _, m in events),
            "to_state": texts(m[1] for _, m in events),
            "value": numbers(a.value for a, _ in events)})


def _new_alert(rule: AlertRule, hit: Hit, names: FleetNames) -> NewAlert:
    """As ``Alert``'s field defaults make a new one."""
    labels = {"alertname": rule.name, "severity": rule.severity, **names.labels(hit)}
    text = _labels_json(labels)
    return NewAlert(id=None, rule_id=rule.id, target=hit.target, host_id=hit.host_id,
                    engine_id=hit.engine_id, gpu_id=hit.gpu_id, state=AlertState.INACTIVE,
                    value=None, summary="", active_since=None, started_at=None,
                    resolved_at=None, last_true_at=None, last_evaluated_at=None,
                    acknowledged_at=None, acknowledged_by="", ack_comment="", labels=labels,
                    fingerprint=_hash(text), labels_json=text)


def _labels_json(labels: dict[str, str]) -> str:
    return json.dumps(labels, sort_keys=True)


def _hash(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def fingerprint(labels: dict[str, str]) -> str:
    return _hash(_labels_json(labels))
