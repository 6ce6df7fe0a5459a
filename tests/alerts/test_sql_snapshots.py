"""Every statement the alert evaluator builds, as text: one snapshot per builder.

Each case renders a builder's statement for fixed rules at a fixed instant and compares it,
byte for byte, with ``tests/alerts/snapshots/<case>.sql``: the statement as PostgreSQL receives
it, after a header of comments naming the builder and the value each named parameter binds.
A change to a builder shows in review as a diff of readable SQL.

To update the snapshots after a deliberate change (then read the diff before committing):

    PITWALL_UPDATE_SNAPSHOTS=1 .venv/bin/python -m pytest -q tests/alerts/test_sql_snapshots.py

No database is needed: the builders only read the metric catalog. The statements run in the
behaviour tests (test_aggregations_and_scope.py, test_operators_and_bitmasks.py, ...).
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
from controlplane.alerts.named_kinds import QUERIES
from controlplane.alerts.queries import entity_query, quantile_query
from controlplane.alerts.rules import rule_metric
from controlplane.alerts.shards import WHOLE, Shard
from controlplane.alerts.windows.schema import SLICES
from controlplane.alerts.windows.slices import build_sql

SNAPSHOTS = Path(__file__).parent / "snapshots"
UPDATE = os.environ.get("PITWALL_UPDATE_SNAPSHOTS") == "1"
PACKAGE = Path(__file__).parents[2] / "controlplane" / "alerts"
# 5 s past a slice boundary: a 60-s window starts at 11:59:00 (windows round out to slices)
NOW = datetime(2026, 5, 4, 12, 0, 5, tzinfo=UTC)
HALF = Shard(1, 2)  # the second of two lanes (PITWALL_ALERT_EVAL_LANES defaults to 2)
BUCKETS = 7  # the most counts a histogram layout has (six bounds and +Inf)
PLACEHOLDER = re.compile(r"%\((\w+)\)s")


def threshold(id_: int, metric: str, aggregation: str, window_s: int, op: str, value: float,
              bitmask: int | None = None) -> AlertRule:
    return AlertRule(id=id_, name=f"rule {id_}", metric=metric, aggregation=aggregation,
                     window_s=window_s, op=op, threshold=value, bitmask=bitmask)


def group(*rules: AlertRule) -> list[tuple[AlertRule, object]]:
    return [(r, rule_metric(r)) for r in rules]


def named(kind: str, **fields) -> AlertRule:
    return AlertRule(id=1, name=kind, kind=kind, **fields)


Case = Callable[[], tuple[str, dict | None]]

CASES: dict[str, tuple[str, Case]] = {
    # threshold rules: one query per entity (queries.entity_query)
    "threshold_gpu": ("queries.entity_query: every aggregation and operator on GPUs, two "
                      "bitmasks, three aggregate windows (bands), last and rate; lane 2 of 2",
                      lambda: entity_query("gpu", group(
                          threshold(1, "gpu.temp_c", "avg", 60, ">", 85),
                          threshold(2, "gpu.temp_c", "max", 300, ">=", 90),
                          threshold(3, "gpu.util_pct", "min", 120, "<", 5),
                          threshold(4, "gpu.throttle_reasons", "avg", 120, ">=", 0.5,
                                    bitmask=232),
                          threshold(5, "gpu.throttle_reasons", "avg", 300, ">=", 0.9,
                                    bitmask=4),
                          threshold(6, "gpu.xid_last", "max", 300, "!=", 0),
                          threshold(7, "gpu.temp_c", "last", 60, "<=", 20),
                          threshold(8, "gpu.ecc_dbe_total", "rate", 600, ">", 0),
                          threshold(9, "gpu.power_w", "avg", 60, "==", 0),
                      ), NOW, HALF)),
    "threshold_host": ("queries.entity_query: one avg rule on hosts, the whole fleet",
                       lambda: entity_query("host", group(
                           threshold(1, "host.cpu_pct", "avg", 60, ">", 75)), NOW, WHOLE)),
    "threshold_engine_points": ("queries.entity_query: last and rate only (no band scan)",
                                lambda: entity_query("engine", group(
                                    threshold(1, "engine.requests_waiting", "last", 30, ">", 10),
                                    threshold(2, "engine.preemptions_per_s", "rate", 120, ">",
                                              0.1)), NOW, WHOLE)),
    "threshold_proc": ("queries.entity_query: processes, whose targets are the ones with "
                       "slices in the window",
                       lambda: entity_query("proc", group(
                           threshold(1, "proc.cpu_pct", "avg", 120, ">=", 95),
                           threshold(2, "proc.cpu_pct", "last", 30, ">=", 99)), NOW, WHOLE)),
    "quantile_ttft": ("queries.quantile_query: TTFT buckets summed per engine and layout",
                      lambda: quantile_query([AlertRule(
                          id=1, name="ttft", metric="engine.ttft_seconds",
                          aggregation="quantile", quantile=0.99, window_s=300, op=">",
                          threshold=2.0)], NOW, HALF, BUCKETS)),
    # named kinds: one statement per rule (named_kinds.QUERIES), lane 2 of 2
    "kind_host_no_data": ("named_kinds.host_no_data", lambda: QUERIES[RuleKind.HOST_NO_DATA](
        named(RuleKind.HOST_NO_DATA, window_s=60), NOW, HALF)),
    "kind_engine_down": ("named_kinds.engine_down", lambda: QUERIES[RuleKind.ENGINE_DOWN](
        named(RuleKind.ENGINE_DOWN, window_s=30), NOW, HALF)),
    "kind_kv_pressure": ("named_kinds.kv_pressure", lambda: QUERIES[RuleKind.KV_PRESSURE](
        named(RuleKind.KV_PRESSURE, window_s=60, op=">=", threshold=0.95,
              params={"waiting_above": 0}), NOW, HALF)),
    "kind_memory_beyond_share": ("named_kinds.memory_beyond_share",
                                 lambda: QUERIES[RuleKind.MEMORY_BEYOND_SHARE](
                                     named(RuleKind.MEMORY_BEYOND_SHARE, window_s=120, op=">",
                                           threshold=0.05), NOW, HALF)),
    "kind_cpu_bound_engine": ("named_kinds.cpu_bound_engine",
                              lambda: QUERIES[RuleKind.CPU_BOUND_ENGINE](
                                  named(RuleKind.CPU_BOUND_ENGINE, window_s=120, op=">=",
                                        threshold=95, params={"gpu_util_below": 85}),
                                  NOW, HALF)),
    # the fold of raw rows into slices (windows.slices.build_sql); refresh binds lo and hi
    **{f"slices_{entity}": (f"windows.slices.build_sql: the {entity} slices"
                            + ("; lane 2 of 2" if entity == "gpu" else ""),
                            lambda entity=entity: (
                                build_sql(SLICES[entity], HALF if entity == "gpu" else WHOLE,
                                          BUCKETS), None))
       for entity in ("host", "gpu", "engine", "proc")},
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
