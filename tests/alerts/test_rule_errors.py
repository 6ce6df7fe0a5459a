"""One bad rule in an evaluation cycle is marked with its error (last_error, last_error_at) and
never stops the cycle for the other rules; the mark clears once the rule runs again."""

from __future__ import annotations

from datetime import timedelta

import pytest

from controlplane.alerts import named_kinds
from controlplane.alerts.evaluate import evaluate
from controlplane.alerts.models import Alert, AlertRule, RuleKind
from controlplane.alerts.queries import fetch
from tests.support.alert_data import T0, rule, samples

S = timedelta(seconds=1)


@pytest.fixture
def hot(node) -> AlertRule:
    """A rule that must fire at T0: GPU 0 of the node at 91 °C for the last minute."""
    samples("gpu", {"gpu_id": node.gpus[0].id}, lambda ts: {"temp_c": 91.0}, T0 - 60 * S)
    return rule(name="GPU hot", metric="gpu.temp_c", aggregation="max", window_s=30, op=">",
                threshold=85)


def fails_in_the_database(rule_, cycle):
    # a statement that fails in PostgreSQL aborts the transaction, not just the rule
    return fetch("SELECT 1 / (SELECT count(*) FROM fleet_host WHERE id < 0)", [])


def test_a_rule_whose_query_fails_is_marked_and_the_others_still_fire(hot, node, monkeypatch):
    bad = rule(name="KV full", kind=RuleKind.KV_PRESSURE, window_s=60, op=">", threshold=0.9)
    monkeypatch.setitem(named_kinds.NAMED, RuleKind.KV_PRESSURE, fails_in_the_database)

    result = evaluate(T0, rule_ids=[hot.id, bad.id])

    assert Alert.objects.get(rule=hot).state == "firing"
    assert result.rules == 2
    bad.refresh_from_db()
    hot.refresh_from_db()
    assert "division by zero" in bad.last_error and bad.last_error_at == T0
    assert hot.last_error == "" and hot.last_error_at is None

    # fixed: the next cycle runs it and clears the mark
    monkeypatch.undo()
    evaluate(T0 + 10 * S, rule_ids=[hot.id, bad.id])
    bad.refresh_from_db()
    assert (bad.last_error, bad.last_error_at) == ("", None)


def test_a_rule_whose_metric_left_the_catalog_is_marked_and_the_others_fire(hot, node):
    gone = rule(name="Old metric", metric="gpu.temp_c", aggregation="avg", window_s=30,
                op=">", threshold=0)
    AlertRule.objects.filter(id=gone.id).update(metric="gpu.temp_kelvin")

    evaluate(T0, rule_ids=[hot.id, gone.id])

    assert Alert.objects.get(rule=hot).state == "firing"
    gone.refresh_from_db()
    assert "unknown metric 'gpu.temp_kelvin'" in gone.last_error and gone.last_error_at == T0


def test_a_rule_with_a_stored_regex_re2_refuses_is_marked_and_keeps_its_alerts(hot, node):
    scoped = rule(name="Llama hot", metric="gpu.temp_c", aggregation="max", window_s=30,
                  op=">", threshold=85, label_matchers=[{"label": "host", "op": "=~",
                                                          "value": "gpu-.*"}])
    evaluate(T0, rule_ids=[scoped.id])
    assert Alert.objects.get(rule=scoped).state == "firing"
    # saved before RE2 (Python's syntax): a lookahead
    AlertRule.objects.filter(id=scoped.id).update(
        label_matchers=[{"label": "host", "op": "=~", "value": "(?=gpu)gpu-.*"}])

    evaluate(T0 + 10 * S, rule_ids=[hot.id, scoped.id])

    scoped.refresh_from_db()
    assert "label_matchers" in scoped.last_error and "RE2" in scoped.last_error
    # a rule that could not be evaluated does not resolve its alerts
    assert Alert.objects.get(rule=scoped).state == "firing"
    assert Alert.objects.get(rule=hot).state == "firing"


def test_a_summary_longer_than_its_column_is_cut_and_the_cycle_goes_on(hot, node):
    # Uncut, 2,000 rendered characters into a 1,000-character column failed the whole cycle.
    wide = rule(name="Wide summary", metric="gpu.temp_c", aggregation="max", window_s=30,
                op=">", threshold=85, summary=" ".join(["{host:>200}"] * 10))

    evaluate(T0, rule_ids=[hot.id, wide.id])

    alert = Alert.objects.get(rule=wide)
    assert alert.state == "firing" and len(alert.summary) == 1000
    assert Alert.objects.get(rule=hot).state == "firing"


def test_cycles_and_their_rule_errors_are_counted_for_metrics(hot, node, monkeypatch):
    from prometheus_client import REGISTRY

    def read() -> tuple[float, float]:
        return (REGISTRY.get_sample_value("pitwall_alert_cycle_seconds_count") or 0.0,
                REGISTRY.get_sample_value("pitwall_alert_rule_errors_total") or 0.0)

    bad = rule(name="KV full", kind=RuleKind.KV_PRESSURE, window_s=60, op=">", threshold=0.9)
    monkeypatch.setitem(named_kinds.NAMED, RuleKind.KV_PRESSURE, fails_in_the_database)
    cycles, errors = read()
    evaluate(T0, rule_ids=[hot.id, bad.id])
    assert read() == (cycles + 1, errors + 1)
    monkeypatch.undo()
    evaluate(T0 + 10 * S, rule_ids=[hot.id, bad.id])
    assert read() == (cycles + 2, errors + 1)
