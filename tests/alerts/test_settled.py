"""The cycle reads and steps only the alerts it may change: an open alert whose condition
holds and that ``step`` would neither move nor write (apply._SETTLED) is skipped in SQL.
Every combination of state, age and `for` is checked against the Python state machine."""

from __future__ import annotations

import copy
import itertools
from datetime import timedelta

from controlplane.alerts.apply import _refresh_due, held_until_now, load_alerts
from controlplane.alerts.models import Alert
from controlplane.alerts.queries import Hit
from controlplane.alerts.state import step
from tests.support.alert_data import T0, rule

S = timedelta(seconds=1)


def test_skipped_alerts_are_exactly_those_step_would_leave_alone(node):
    rules = {for_s: rule(metric="gpu.temp_c", aggregation="max", window_s=60, op=">",
                         threshold=85, for_s=for_s) for for_s in (0, 30, 300)}
    states = ["pending", "firing", "resolved", "inactive"]
    evaluated_ago = [5 * S, 59 * S, 60 * S, 600 * S, None]
    true_equals_evaluated = [True, False]
    active_ago = [10 * S, 29 * S + S / 2, 30 * S, 400 * S]
    made = []
    for i, (for_s, state, ev_ago, same, act_ago) in enumerate(itertools.product(
            rules, states, evaluated_ago, true_equals_evaluated, active_ago)):
        evaluated = None if ev_ago is None else T0 - ev_ago
        made.append(Alert(
            rule=rules[for_s], target=f"gpu:{i}", host_id=node.host.id, state=state,
            active_since=T0 - act_ago if state in ("pending", "firing") else None,
            last_evaluated_at=evaluated,
            last_true_at=evaluated if same else (evaluated or T0) - 20 * S,
            labels={}, fingerprint=str(i)))
    Alert.objects.bulk_create(made)
    hits = {r.id: [Hit(a.target, node.host.id, None, None, 90.0) for a in made
                   if a.rule_id == r.id] for r in rules.values()}
    known, settled = load_alerts(list(rules.values()), hits, T0)
    assert settled and known  # both kinds occur
    assert settled.isdisjoint(known)
    assert len(settled) + len(known) == len(made)
    for alert in Alert.objects.filter(id__in=[a.id for a in made]):
        before = copy.copy(alert)
        moves = step(alert, alert.rule, True, 90.0, T0)
        writes = not held_until_now(before) or _refresh_due(before, T0)
        quiet = not moves and not writes
        assert ((alert.rule_id, alert.target) in settled) == quiet, (
            before.state, before.active_since, before.last_evaluated_at, before.last_true_at,
            alert.rule.for_s)
