"""Every statement the alert evaluator builds, as text: one snapshot per builder.

Each case renders a builder's statement for fixed rules at a fixed instant and compares it,
byte for byte, with ``tests/alerts/snapshots/<case>.sql``: the statement as PostgreSQL receives
it, after a header of comments naming the builder and the value each named parameter binds.
A change to a builder shows in review as a diff of readable SQL.

To update the snapshots after a deliberate change (then read the diff before committing):

    PITWALL_UPDATE_SNAPSHOTS=1 .venv/bin/python -m pytest -q tests/alerts/test_sql_snapshots.py

No database is needed: the builders only read the metric catalog. The statements run in the
behaviour tests (test_aggregations_and_scope.py, test_operators_and_bitmasks.py, ...). Windows
themselves are array arithmetic in the evaluating process (windows/aggregate.py), not SQL.
"""

from __future__ import annotations

import ast
import os
import re
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from controlplane.alerts import apply
from controlplane.alerts.models import AlertRule, RuleKind
from controlplane.alerts.named_kinds import (
    absent_gpus_sql,
    engine_gpus_sql,
    gpu_shares_sql,
    host_no_data_sql,
    reporting_engines_sql,
)
from controlplane.alerts.shards import Shard
from controlplane.alerts.windows.raw import Reading, read_sql
from controlplane.telemetry.schema import TABLES

SNAPSHOTS = Path(__file__).parent / "snapshots"
UPDATE = os.environ.get("PITWALL_UPDATE_SNAPSHOTS") == "1"
PACKAGE = Path(__file__).parents[2] / "controlplane" / "alerts"
# 5 s past a slice boundary: a 60-s window starts at 11:59:00 (windows round out to slices)
NOW = datetime(2026, 5, 4, 12, 0, 5, tzinfo=UTC)
HALF = Shard(1, 2)  # the second of two lanes (PITWALL_ALERT_EVAL_LANES defaults to 2)
BUCKETS = 7  # the most counts a histogram layout has (six bounds and +Inf)
PLACEHOLDER = re.compile(r"%\((\w+)\)s")


def named(kind: str, **fields) -> AlertRule:
    return AlertRule(id=1, name=kind, kind=kind, **fields)


Case = Callable[[], tuple[str, dict | None]]

def full_reading(entity: str) -> Reading:
    """Every scalar column and histogram of an entity's raw table: what a cycle whose rules
    read them all copies."""
    table = TABLES[entity]
    histograms = tuple(dict.fromkeys(c.metric for c in table.columns if c.part))
    return Reading(entity, tuple(c for c in table.columns if c.metric and not c.part
                                 and not c.metric.array), histograms,
                   BUCKETS if histograms else 0)


CASES: dict[str, tuple[str, Case]] = {
    # the raw rows a cycle folds into slices (windows.raw.read_sql); refresh binds lo and hi
    **{f"raw_{entity}": (f"windows.raw.read_sql: the {entity} rows, every column",
                         lambda entity=entity: (read_sql(full_reading(entity)), None))
       for entity in ("host", "gpu", "engine", "proc")},
    # what the named kinds read of the fleet tables (named_kinds)
    "kind_host_no_data": ("named_kinds.host_no_data_sql", lambda: host_no_data_sql(
        named(RuleKind.HOST_NO_DATA, window_s=60), NOW)),
    "kind_reporting_engines": ("named_kinds.reporting_engines_sql (engine_down)",
                               lambda: reporting_engines_sql(
                                   named(RuleKind.ENGINE_DOWN, window_s=30), NOW)),
    "kind_gpu_shares": ("named_kinds.gpu_shares_sql (memory_beyond_share)", gpu_shares_sql),
    "kind_engine_gpus": ("named_kinds.engine_gpus_sql (cpu_bound_engine)", engine_gpus_sql),
    "kind_absent_gpus": ("named_kinds.absent_gpus_sql (gpu_lost)", lambda: absent_gpus_sql(
        named(RuleKind.GPU_LOST, window_s=60, params={"removed_within_s": 86400}), NOW)),
    # the state half of a cycle (apply.py)
    "apply_load_alerts": ("apply.load_alerts_sql: the alerts a cycle may step; lane 2 of 2",
                          lambda: (apply.load_alerts_sql(HALF), None)),
    "apply_update_state": ("apply.UPDATE_STATE_SQL: the changed alerts, one UPDATE",
                           lambda: (apply.UPDATE_STATE_SQL, None)),
    "apply_insert_new": ("apply.INSERT_NEW_SQL: the new alerts, one INSERT",
                         lambda: (apply.INSERT_NEW_SQL, None)),
    "apply_insert_events": ("apply.INSERT_EVENTS_SQL: the transitions, one INSERT",
                            lambda: (apply.INSERT_EVENTS_SQL, None)),
}


def _value(value: object) -> str:
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, timedelta):
        return f"{value.total_seconds():g} s"
    return repr(value)


def render(about: str, sql: str, params: dict | None) -> str:
    """The snapshot: a header of comments, then the statement exactly as built."""
    head = [f"-- {about}"]
    if params is None:
        names = sorted(set(PLACEHOLDER.findall(sql)))
        head.append(f"-- binds: {', '.join(names) or 'nothing'} (given where it runs)")
    else:
        head.append(f"-- now = {NOW.isoformat()}, binding:")
        head += [f"--   %({name})s = {_value(params[name])}" for name in params]
    return "\n".join(head) + "\n" + sql + "\n"


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_statement_matches_its_snapshot(case):
    about, build = CASES[case]
    sql, params = build()
    assert "%s" not in sql, "positional placeholder: the evaluator binds by name"
    if params is not None:  # every placeholder bound, every parameter used
        assert set(PLACEHOLDER.findall(sql)) == set(params)
    text = render(about, sql, params)
    path = SNAPSHOTS / f"{case}.sql"
    if UPDATE:
        path.parent.mkdir(exist_ok=True)
        path.write_text(text)
        return
    assert path.exists(), f"no snapshot {path}: run with PITWALL_UPDATE_SNAPSHOTS=1 to write it"
    assert text == path.read_text(), (
        f"{case}: the statement differs from {path.relative_to(PACKAGE.parents[1])}; if the "
        f"change is deliberate, rerun with PITWALL_UPDATE_SNAPSHOTS=1 and review the diff")


def test_every_snapshot_has_a_case():
    stale = {p.stem for p in SNAPSHOTS.glob("*.sql")} - set(CASES)
    assert not stale, f"snapshots without a case (delete them): {sorted(stale)}"


def test_the_same_statement_twice():
    """Snapshots are deterministic: a builder renders the same text every time."""
    for about, build in CASES.values():
        assert render(about, *build()) == render(about, *build()), about


def _logging_args(tree: ast.AST) -> set[int]:
    """ids of the nodes inside logging calls (log.warning("… %s", x) formats, not binds)."""
    inside = set()
    for node in ast.walk(tree):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and isinstance(node.func.value, ast.Name) and node.func.value.id in {"log"}):
            inside |= {id(n) for arg in node.args for n in ast.walk(arg)}
    return inside


def test_no_positional_placeholders_in_the_alerts_package():
    """One parameter style: every statement under controlplane/alerts binds %(name)s."""
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if "migrations" in path.parts:
            continue
        tree = ast.parse(path.read_text())
        skip = _logging_args(tree)
        for node in ast.walk(tree):
            if (isinstance(node, ast.Constant) and isinstance(node.value, str)
                    and "%s" in node.value and id(node) not in skip):
                found.append(f"{path.relative_to(PACKAGE.parent)}:{node.lineno}")
    assert not found, f"positional %s placeholders: {found}"
