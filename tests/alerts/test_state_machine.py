"""inactive -> pending -> firing -> resolved, driven by explicit evaluation instants."""

from __future__ import annotations

from datetime import timedelta

from controlplane.alerts.evaluate import evaluate
from controlplane.alerts.models import Alert, AlertEvent
from tests.support.alert_data import T0, firing, rule, run, samples

S = timedelta(seconds=1)


def temp_rule(**extra):
    return rule(name="GPU hot", metric="gpu.temp_c", aggregation="max", window_s=10, op=">",
                threshold=85, summary="{host} GPU {gpu_index}: {value:.0f} °C", **extra)


def hot_between(node, start_s: int, end_s: int, until_s: int) -> None:
    """gpu 0 at 95 °C from T0+start_s to T0+end_s, 60 °C otherwise, rows up to T0+until_s."""
    samples("gpu", {"gpu_id": node.gpus[0].id},
            lambda ts: {"temp_c": 95.0 if start_s * S < ts - T0 <= end_s * S else 60.0},
            T0 - 60 * S, T0 + until_s * S)


def evaluate_every_10s(r, until_s: int) -> list[str]:
    """Evaluate from T0 to T0+until_s; the state after each cycle."""
    states = []
    for t in range(0, until_s + 1, 10):
        alerts = run(r, T0 + t * S)
        states.append(alerts[0].state if alerts else "inactive")
    return states


def test_a_30_second_spike_does_not_fire_a_rule_with_for_60s(node):
    r = temp_rule(for_s=60)
    hot_between(node, 0, 30, 180)
    states = evaluate_every_10s(r, 180)
    assert "firing" not in states
    assert "pending" in states
    assert states[-1] == "inactive"


def test_a_sustained_condition_fires_once_for_has_elapsed_and_resolves_after(node):
    r = temp_rule(for_s=60)
    hot_between(node, 0, 120, 200)
    states = evaluate_every_10s(r, 200)
    # true from the 10 s cycle (window 10 s) until the 130 s cycle sees only cool samples
    assert states[1:7] == ["pending"] * 6
    assert states[7] == "firing"  # 70 s: pending since 10 s, 60 s held
    assert states[-1] == "resolved"
    alert = Alert.objects.get(rule=r)
    moves = list(AlertEvent.objects.filter(alert=alert).values_list("from_state", "to_state"))
    assert moves == [("inactive", "pending"), ("pending", "firing"), ("firing", "resolved")]
    assert alert.started_at == T0 + 70 * S and alert.resolved_at == T0 + 130 * S


def test_keep_firing_for_holds_a_flapping_alert_firing(node):
    r = temp_rule(for_s=0, keep_firing_for_s=60)
    # hot for 20 s, cool for 20 s, over and over
    samples("gpu", {"gpu_id": node.gpus[0].id},
            lambda ts: {"temp_c": 95.0 if ((ts - T0) // S) % 40 < 20 else 60.0},
            T0 - 60 * S, T0 + 200 * S)
    states = evaluate_every_10s(r, 200)
    assert states[0] == "firing"
    assert set(states) == {"firing"}
    assert AlertEvent.objects.filter(to_state="resolved").count() == 0


def test_without_keep_firing_for_the_same_flapping_resolves_and_refires(node):
    r = temp_rule(for_s=0)
    samples("gpu", {"gpu_id": node.gpus[0].id},
            lambda ts: {"temp_c": 95.0 if ((ts - T0) // S) % 40 < 20 else 60.0},
            T0 - 60 * S, T0 + 200 * S)
    states = evaluate_every_10s(r, 200)
    assert "resolved" in states and states.count("firing") > 1


def test_for_zero_fires_at_once_with_a_single_transition(node):
    r = temp_rule(for_s=0)
    hot_between(node, -60, 0, 0)
    assert firing(r, T0) == [f"gpu:{node.gpus[0].id}"]
    moves = list(AlertEvent.objects.values_list("from_state", "to_state"))
    assert moves == [("inactive", "firing")]


def test_the_summary_is_rendered_with_the_targets_values(node):
    r = temp_rule(for_s=0)
    hot_between(node, -60, 0, 0)
    alert = run(r, T0)[0]
    assert alert.summary == "gpu-node-1 GPU 0: 95 °C"
    assert alert.labels == {"alertname": "GPU hot", "severity": "warning",
                            "host": "gpu-node-1", "gpu": node.gpus[0].uuid}
    assert alert.value == 95.0 and len(alert.fingerprint) == 32


def test_a_second_cycle_at_the_same_instant_changes_nothing(node):
    r = temp_rule(for_s=0)
    hot_between(node, -60, 0, 0)
    first = evaluate(T0, rule_ids=[r.id])
    again = evaluate(T0, rule_ids=[r.id])
    assert first.rules == 1 and again.rules == 0
    assert AlertEvent.objects.count() == 1


def test_a_target_that_stops_reporting_resolves_its_alert(node):
    r = temp_rule(for_s=0)
    hot_between(node, -60, 0, 0)  # no rows after T0
    assert run(r, T0)[0].state == "firing"
    assert run(r, T0 + 30 * S)[0].state == "resolved"


def test_an_alert_that_fires_again_after_resolving_starts_a_new_episode(node):
    r = temp_rule(for_s=0)
    hot_between(node, -60, 0, 0)
    samples("gpu", {"gpu_id": node.gpus[0].id}, lambda ts: {"temp_c": 95.0},
            T0 + 55 * S, T0 + 70 * S)
    run(r, T0)
    run(r, T0 + 30 * S)
    alert = run(r, T0 + 70 * S)[0]
    assert alert.state == "firing" and alert.started_at == T0 + 70 * S
    assert alert.resolved_at is None


def written_at(r) -> tuple:
    alert = Alert.objects.get(rule=r)
    return alert.last_evaluated_at, alert.value


def test_a_steady_firing_alert_is_rewritten_once_a_minute_not_every_cycle(node):
    r = temp_rule(for_s=0)
    samples("gpu", {"gpu_id": node.gpus[0].id},
            lambda ts: {"temp_c": 90.0 + ((ts - T0) // S) % 7}, T0 - 60 * S, T0 + 200 * S)
    writes = set()
    for t in range(0, 130, 10):
        evaluate(T0 + t * S, rule_ids=[r.id])
        writes.add(written_at(r)[0])
    assert writes == {T0, T0 + 60 * S, T0 + 120 * S}
    alert = Alert.objects.get(rule=r)
    assert alert.state == "firing" and alert.value is not None


def test_keep_firing_for_counts_from_the_last_true_cycle_even_when_it_was_not_written(node):
    r = temp_rule(for_s=0, keep_firing_for_s=30)
    hot_between(node, -60, 40, 200)  # hot until T0+40 s; the 50 s cycle sees only cool rows
    states = evaluate_every_10s(r, 120)
    # last true at the 40 s cycle (not written: the 0 s write was the last), so held until
    # the 70 s cycle and resolved at 70 s, not earlier
    assert states[:7] == ["firing"] * 7
    assert states[7] == "resolved"
    assert Alert.objects.get(rule=r).resolved_at == T0 + 70 * S
