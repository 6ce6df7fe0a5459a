"""Threshold rules over the cycle's slices: every rule's value for every target at once.

Each rule's window aggregate is array arithmetic over its entity's (targets x slices) view
(``windows.aggregate``); rules that share a metric, an aggregation and a window share the
result. Only the (rule, target) pairs whose condition holds become ``Hit``s. Histogram
quantiles sum the slices' bucket counts per engine over the window, keep the layout holding
most observations, and interpolate per engine (``histogram_quantiles``: Prometheus's
``histogram_quantile`` over every engine of a layout at once).

Targets are what the rule's entity is in the fleet: every host, GPU and engine of the fleet
tables (one with no rows in the window has no value, so no hit), and the processes with slices
in the window (they have no fleet table), each with the engine it served last.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import numpy as np
from django.db import connection

from agents.protocol import Entity
from controlplane.alerts.models import Aggregation, AlertRule, Op
from controlplane.alerts.rules import rule_metric
from controlplane.alerts.shards import WHOLE, Shard
from controlplane.alerts.windows.aggregate import (
    histogram_quantiles,
    histogram_sums,
    rule_value,
)
from controlplane.alerts.windows.needs import Need, Needs
from controlplane.alerts.windows.slices import first_slice
from controlplane.alerts.windows.store import View
from controlplane.telemetry.models import HistogramLayout
from controlplane.telemetry.schema import column_for

PY_OP: dict[str, Callable] = {
    Op.GT: operator.gt, Op.GE: operator.ge, Op.LT: operator.lt,
    Op.LE: operator.le, Op.EQ: operator.eq, Op.NE: operator.ne,
}


@dataclass(frozen=True)
class Hit:
    """A target on which a rule's condition holds now, and the value it was judged on."""

    target: str
    host_id: int | None
    engine_id: int | None
    gpu_id: int | None
    value: float | None


Hits = dict[int, list[Hit]]  # rule id -> targets whose condition holds


def fetch(sql: str, params: dict[str, object] | None = None) -> list[tuple]:
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return cursor.fetchall()


@dataclass
class Fleet:
    """The host of each GPU and engine, read once a cycle (targets and their hosts)."""

    hosts: set[int]
    host_of_gpu: dict[int, int]
    host_of_engine: dict[int, int]

    @classmethod
    def load(cls, shard: Shard = WHOLE) -> Fleet:
        """The shard's hosts, GPUs and engines (an evaluator shard's targets)."""
        return cls({h for (h,) in fetch(f"SELECT id FROM fleet_host WHERE {shard.hosts('id')}")},
                   dict(fetch(f"SELECT id, host_id FROM fleet_gpu WHERE {shard.hosts('host_id')}")),
                   dict(fetch("SELECT id, host_id FROM fleet_engine "
                              f"WHERE {shard.hosts('host_id')}")))


@dataclass
class Cycle:
    """What one evaluation reads: an instant, each entity's view of its slices, the fleet."""

    now: datetime
    views: dict[Entity, View]
    fleet: Fleet
    bounds: dict[int, list[float]]  # histogram layout id -> its bucket bounds
    _values: dict[tuple, np.ndarray] = field(default_factory=dict)
    _targets: dict[Entity, list[tuple | None]] = field(default_factory=dict)

    def column(self, entity: Entity, window_s: int) -> int:
        """The view column of a window's first slice."""
        return self.views[entity].column_of(first_slice(self.now, window_s))

    def value(self, entity: Entity, column: str, aggregation: str, mask: int | None,
              window_s: int) -> np.ndarray:
        """Per target of the entity's view, one rule shape's value (NaN: none); shared."""
        j0 = self.column(entity, window_s)
        return self.shared((entity, column, aggregation, mask, j0),
                           lambda: rule_value(self.views[entity], column, aggregation, mask, j0))

    def shared(self, key: tuple, compute: Callable[[], Any]) -> Any:
        """``compute()`` once a cycle for every rule that asks with the same key."""
        if key not in self._values:
            self._values[key] = compute()
        return self._values[key]

    def hit(self, entity: Entity, key: int, value: float, engine: int = -1) -> Hit | None:
        """The Hit of target ``key`` of an entity; None when the fleet no longer has it."""
        value = float(value)  # not a NumPy scalar: hits are written as SQL literals
        if entity == "proc":
            host, pid = key >> 32, key & 0xFFFFFFFF
            return Hit(f"proc:{host}:{pid}", host, engine if engine >= 0 else None, None, value)
        target = self._target(entity, key)
        return None if target is None else Hit(*target, value)

    def targets(self, entity: Entity) -> list[tuple | None]:
        """Per position of a host, GPU or engine view: its Hit's fields but the value (target,
        host, engine, GPU), None where the fleet no longer has it. Once a cycle for all the
        rules of the entity: a storm's rules hold on ~28,000 targets a cycle."""
        if entity not in self._targets:
            self._targets[entity] = [self._target(entity, key)
                                     for key in self.views[entity].keys.tolist()]
        return self._targets[entity]

    def _target(self, entity: Entity, key: int) -> tuple | None:
        if entity == "host":
            return (f"host:{key}", key, None, None) if key in self.fleet.hosts else None
        if entity == "gpu":
            host = self.fleet.host_of_gpu.get(key)
            return None if host is None else (f"gpu:{key}", host, None, key)
        host = self.fleet.host_of_engine.get(key)
        return None if host is None else (f"engine:{key}", host, key, None)

    def hits(self, entity: Entity, values: Mapping[int, float]) -> list[Hit]:
        """The Hits of these targets (key -> value) in key order, those the fleet still has."""
        found = (self.hit(entity, key, value) for key, value in sorted(values.items()))
        return [hit for hit in found if hit is not None]


def holding(values: np.ndarray, op: str, threshold: float) -> np.ndarray:
    """The positions whose value exists and meets the condition (NaN never does, for <> too)."""
    present = ~np.isnan(values)
    met = np.zeros(len(values), bool)
    met[present] = PY_OP[op](values[present], threshold)
    return np.flatnonzero(met)


def threshold_hits(rule: AlertRule, cycle: Cycle) -> list[Hit]:
    """The targets on which a threshold rule's condition holds now."""
    metric = rule_metric(rule)
    if rule.aggregation == Aggregation.QUANTILE:
        return _quantile_hits(rule, cycle)
    view = cycle.views[metric.entity]
    values = cycle.value(metric.entity, column_for(metric).name, rule.aggregation,
                         rule.bitmask, rule.window_s)
    found = holding(values, rule.op, rule.threshold)
    if metric.entity == "proc":
        engines = _proc_engines(view, cycle.column("proc", rule.window_s))
        hits = (cycle.hit("proc", int(view.keys[u]), float(values[u]), int(engines[u]))
                for u in found)
        return [hit for hit in hits if hit is not None]
    targets = cycle.targets(metric.entity)
    at = zip(found.tolist(), values[found].tolist(), strict=True)
    return [Hit(*targets[u], value) for u, value in at if targets[u] is not None]


def _proc_engines(view: View, j0: int) -> np.ndarray:
    """Per process: the engine it served, the highest id among its slices in the window."""
    engines = view.engines()[:, j0:]
    return engines.max(axis=1) if engines.shape[1] else np.full(len(view.keys), -1)


def _quantile_hits(rule: AlertRule, cycle: Cycle) -> list[Hit]:
    metric = rule_metric(rule)
    j0 = cycle.column(metric.entity, rule.window_s)
    q = rule.quantile or 0.0
    values = cycle.shared(("quantiles", metric.key, j0, q),
                          lambda: _quantiles(cycle, metric.entity, metric.key, j0, q))
    targets = cycle.targets(metric.entity)
    found = holding(values, rule.op, rule.threshold)
    at = zip(found.tolist(), values[found].tolist(), strict=True)
    return [Hit(*targets[u], value) for u, value in at if targets[u] is not None]


def _quantiles(cycle: Cycle, entity: Entity, key: str, j0: int, q: float) -> np.ndarray:
    """Per target of the view: the histogram's ``q`` quantile over the window (NaN: none),
    each layout's targets at once (the rules of one metric and window share the sums)."""
    view = cycle.views[entity]
    layouts, counts = cycle.shared(("quantile", key, j0),  # objectives.py shares the sums
                                   lambda: histogram_sums(view, key, j0))
    values = np.full(len(layouts), np.nan)
    for layout in np.unique(layouts[layouts >= 0]).tolist():
        at = np.flatnonzero(layouts == layout)
        values[at] = histogram_quantiles(q, cycle.bounds.get(layout, []), counts[at])
    return values


def layouts_of(needs: dict[Entity, Need]) -> dict[int, list[float]]:
    """The bounds of every histogram layout, when a rule reads a histogram (a few rows: one per
    layout the fleet's engines ever reported)."""
    if not any(need.reading.histograms for need in needs.values()):
        return {}
    return dict(HistogramLayout.objects.values_list("id", "bounds"))


# The parts of a column each aggregation reads (fold.PART_NAMES).
PARTS = {Aggregation.AVG: ("n", "sum"), Aggregation.MIN: ("min",), Aggregation.MAX: ("max",),
         Aggregation.LAST: ("last",), Aggregation.RATE: ("first", "last")}


def add_needs(needs: Needs, rule: AlertRule) -> None:
    """What a threshold rule reads of its entity's slices."""
    metric = rule_metric(rule)
    if metric.kind == "histogram":
        needs.add_histogram(metric, rule.window_s)
        return
    parts = PARTS[rule.aggregation]
    if rule.bitmask and rule.aggregation not in (Aggregation.LAST, Aggregation.RATE):
        parts = ("n", ("mask", int(rule.bitmask)))
    needs.add(metric.entity, rule.window_s, column_for(metric).name, parts)
