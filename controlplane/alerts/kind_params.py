"""The ``params`` of the named kinds that take a fixed set of them, checked key by key.

Kept apart from the kinds themselves (``named_kinds``, ``objectives``) so that rule validation
(``rules.validate_rule``) imports no evaluation code. A message names the key at fault:
``params.objective must be one of 'ttft', 'itl'; got 'tft'``.
"""

from __future__ import annotations

import math

from controlplane.alerts.models import AlertRule, RuleKind
from controlplane.telemetry.objectives import OBJECTIVES

MAX_OBJECTIVE_MS = 600_000  # ten minutes: anything longer is a typo
MAX_OBSERVATIONS = 10**9
# kind -> the params keys it reads (the kinds not listed keep their free-form params)
ALLOWED = {
    RuleKind.ENGINE_STALLED: set(),
    RuleKind.GPU_LOST: {"removed_within_s"},
    RuleKind.SERVICE_DISRUPTED: set(),
    RuleKind.OBJECTIVE_ATTAINMENT: {"objective", "objective_ms", "min_observations"},
    RuleKind.ERROR_BUDGET_BURN: {"objective", "objective_ms", "min_observations", "target",
                                 "short_window_s"},
}


def params_problem(rule: AlertRule) -> str | None:
    """Why a rule's params are refused, or None."""
    params = rule.params
    if not isinstance(params, dict):
        return "params must be an object, e.g. {\"waiting_above\": 0}"
    allowed = ALLOWED.get(rule.kind)
    if allowed is None:
        return None
    unknown = sorted(set(params) - allowed)
    if unknown:
        known = ", ".join(sorted(allowed)) or "none"
        return f"params: unknown key(s) {', '.join(unknown)} for {rule.kind}; known: {known}"
    if rule.kind == RuleKind.GPU_LOST:
        return _whole("removed_within_s", params.get("removed_within_s"), 0, 10**8)
    if rule.kind in (RuleKind.OBJECTIVE_ATTAINMENT, RuleKind.ERROR_BUDGET_BURN):
        return _objective_problem(rule)
    return None


def _objective_problem(rule: AlertRule) -> str | None:
    params = rule.params
    if params.get("objective") not in OBJECTIVES:
        return (f"params.objective must be one of {', '.join(map(repr, OBJECTIVES))}; "
                f"got {params.get('objective')!r}")
    ms = params.get("objective_ms")
    if ms is not None and not (_number(ms) and 0 < ms <= MAX_OBJECTIVE_MS):
        return (f"params.objective_ms must be a number of milliseconds above 0 and at most "
                f"{MAX_OBJECTIVE_MS}")
    goal = params.get("target")
    if goal is not None and not (_number(goal) and 0 < goal < 1):
        return "params.target must be a share between 0 and 1 (0.99 for 99 %)"
    least = params.get("min_observations")
    if least is not None and not (isinstance(least, int) and not isinstance(least, bool)
                                  and 0 <= least <= MAX_OBSERVATIONS):
        return f"params.min_observations must be a whole number from 0 to {MAX_OBSERVATIONS}"
    return _whole("short_window_s", params.get("short_window_s"), 1, rule.window_s,
                  "the rule's window_s")


def _whole(key: str, value: object, low: int, high: int, high_is: str = "") -> str | None:
    if value is None or (isinstance(value, int) and not isinstance(value, bool)
                         and low <= value <= high):
        return None
    return f"params.{key} must be whole seconds from {low} to {high_is or high}" + (
        f" ({high})" if high_is else "")


def _number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(
        value)
