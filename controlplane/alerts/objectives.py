"""Objective attainment and error-budget burn: two named kinds over the latency histograms.

Attainment is the share of an engine's requests whose TTFT (or ITL) met the objective over
the window: its histogram's buckets summed over the window's slices (the layout holding most
observations, as quantile rules do), and the share under the objective estimated as
Prometheus's ``histogram_fraction`` does (``telemetry.series.histograms``). The burn rate is
``(1 - attainment) / (1 - target)``: 1 spends the error budget exactly over the objective's
period, 14.4 spends 2 % of a 30-day budget in one hour.

``params`` (checked by ``kind_params.params_problem``):

- ``objective``: ``"ttft"`` or ``"itl"`` (required);
- ``objective_ms``: the latency objective; default the setting of that objective
  (``ALERT_TTFT_P99_OBJECTIVE_MS``, ``TUNING_ITL_P99_OBJECTIVE_MS``), read at each cycle;
- ``min_observations``: an engine with fewer observations over the rule's window (requests
  for TTFT, inter-token intervals for ITL) is not judged: two slow requests of ten are no
  burn to page for (default 0);
- ``error_budget_burn`` only: ``target`` (default ``OBJECTIVE_TARGET``) and
  ``short_window_s``: the burn must hold over the rule's window *and* this shorter one (the
  multiwindow alert: the long window says the budget is really going, the short one that it
  still is, so the alert ends soon after the trouble does). Without it, the window alone.

An engine without observations in a window has no attainment: no traffic burns no budget.
"""

from __future__ import annotations

import numpy as np

from agents.protocol import Metric
from controlplane.alerts.models import AlertRule, RuleKind
from controlplane.alerts.queries import PY_OP, Cycle, Hit
from controlplane.alerts.windows.aggregate import histogram_sums
from controlplane.alerts.windows.needs import Needs
from controlplane.telemetry import objectives
from controlplane.telemetry.objectives import burn_rate
from controlplane.telemetry.series import find_metric
from controlplane.telemetry.series.histograms import histogram_fraction

KINDS = (RuleKind.OBJECTIVE_ATTAINMENT, RuleKind.ERROR_BUDGET_BURN)


def objective_metric(rule: AlertRule) -> Metric:
    return find_metric(objectives.OBJECTIVES[rule.params["objective"]][0])


def objective_s(rule: AlertRule) -> float:
    ms = rule.params.get("objective_ms")
    return float(ms) / 1000 if ms is not None else objectives.objective_s(
        rule.params["objective"])


def target(rule: AlertRule) -> float:
    value = rule.params.get("target")
    return float(value) if value is not None else objectives.target()


def add_needs(needs: Needs, rule: AlertRule) -> None:
    needs.add_histogram(objective_metric(rule), rule.window_s)


def attainment(rule: AlertRule, cycle: Cycle, window_s: int,
               least: int = 1) -> dict[int, float]:
    """Per engine with at least ``least`` observations in the window: the share of them
    within the objective."""
    metric = objective_metric(rule)
    view = cycle.views[metric.entity]
    j0 = cycle.column(metric.entity, window_s)
    # the same key as quantile rules': one summing of the buckets per (histogram, window)
    layouts, counts = cycle.shared(("quantile", metric.key, j0),
                                   lambda: histogram_sums(view, metric.key, j0))
    upper, out = objective_s(rule), {}
    for u in np.flatnonzero(layouts >= 0):
        edges = cycle.bounds.get(int(layouts[u]), [])
        buckets = counts[u, :len(edges) + 1].tolist()
        share = histogram_fraction(upper, edges, buckets)
        if share is not None and sum(buckets) >= least:
            out[int(view.keys[u])] = share
    return out


def objective_attainment(rule: AlertRule, cycle: Cycle) -> list[Hit]:
    """Engines whose attainment over the window op threshold (e.g. < 0.99)."""
    shares = attainment(rule, cycle, rule.window_s, _least(rule))
    return cycle.hits("engine",
                      {e: s for e, s in shares.items() if PY_OP[rule.op](s, rule.threshold)})


def error_budget_burn(rule: AlertRule, cycle: Cycle) -> list[Hit]:
    """Engines whose burn rate over the window, and over params.short_window_s when given,
    op threshold (e.g. > 14.4). value: the burn over the (long) window."""
    goal = target(rule)
    long = {e: burn_rate(s, goal)
            for e, s in attainment(rule, cycle, rule.window_s, _least(rule)).items()}
    held = {e: b for e, b in long.items() if PY_OP[rule.op](b, rule.threshold)}
    short_s = rule.params.get("short_window_s")
    if short_s and held:
        short = attainment(rule, cycle, int(short_s))
        held = {e: b for e, b in held.items()
                if e in short and PY_OP[rule.op](burn_rate(short[e], goal), rule.threshold)}
    return cycle.hits("engine", held)


def _least(rule: AlertRule) -> int:
    """params.min_observations over the rule's window (the short window needs just one: it
    only confirms the burn goes on)."""
    return max(int(rule.params.get("min_observations") or 0), 1)

