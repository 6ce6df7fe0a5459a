"""The alert state machine of one (rule, target), Prometheus semantics.

inactive --true--> pending --true for `for`--> firing --false for keep_firing_for--> resolved
A pending alert whose condition turns false goes back to inactive; with ``for`` 0 a true
condition fires at once. ``step`` mutates the alert and returns the transitions it made.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from controlplane.alerts.models import Alert, AlertRule, AlertState

Transition = tuple[str, str]

# An evaluation instant is the worker's clock when the task starts, a few milliseconds after
# beat's tick: two ticks `for` apart may measure a hair less than `for`, and the alert would fire
# one interval late about half the time. Below 1 s, the smallest `for` that is not 0.
FOR_SLACK = timedelta(milliseconds=500)


def step(alert: Alert, rule: AlertRule, holds: bool, value: float | None,
         now: datetime) -> list[Transition]:
    alert.last_evaluated_at = now
    if holds:
        alert.value, alert.last_true_at = value, now
        return _while_true(alert, rule, now)
    return _while_false(alert, rule, now)


def _while_true(alert: Alert, rule: AlertRule, now: datetime) -> list[Transition]:
    moves: list[Transition] = []
    if alert.state in (AlertState.INACTIVE, AlertState.RESOLVED):
        moves.append((alert.state, AlertState.PENDING))
        alert.state, alert.active_since = AlertState.PENDING, now
        alert.started_at = alert.resolved_at = None
    if alert.state == AlertState.PENDING and now - alert.active_since + FOR_SLACK >= timedelta(
            seconds=rule.for_s):
        # for 0: straight from inactive to firing, one transition.
        start = moves.pop()[0] if moves else AlertState.PENDING
        moves.append((start, AlertState.FIRING))
        alert.state, alert.started_at = AlertState.FIRING, now
    return moves


def _while_false(alert: Alert, rule: AlertRule, now: datetime) -> list[Transition]:
    if alert.state == AlertState.PENDING:
        alert.state, alert.active_since = AlertState.INACTIVE, None
        return [(AlertState.PENDING, AlertState.INACTIVE)]
    if alert.state == AlertState.FIRING:
        held = alert.last_true_at and now - alert.last_true_at < timedelta(
            seconds=rule.keep_firing_for_s)
        if held:
            return []
        alert.state, alert.resolved_at, alert.active_since = AlertState.RESOLVED, now, None
        # An acknowledgement lasts until the alert resolves.
        alert.acknowledged_at, alert.acknowledged_by, alert.ack_comment = None, "", ""
        return [(AlertState.FIRING, AlertState.RESOLVED)]
    return []
