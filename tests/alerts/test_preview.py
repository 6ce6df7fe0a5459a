"""The rule editor's preview: the targets that meet the condition now, nothing stored."""

from __future__ import annotations

from datetime import timedelta

from django.db import connection

from controlplane.alerts.evaluate import STORES, evaluate
from controlplane.alerts.models import Alert, AlertRule
from controlplane.alerts.preview import preview
from controlplane.alerts.shards import WHOLE
from controlplane.telemetry.schema import TABLES
from tests.support.alert_data import T0, make_node, rule, run, samples, ttft_layout

S = timedelta(seconds=1)


def hot_gpus(node, temps):
    for gpu, temp in zip(node.gpus, temps, strict=True):
        samples("gpu", {"gpu_id": gpu.id}, lambda ts, t=temp: {"temp_c": t}, T0 - 60 * S)


def test_a_preview_lists_the_targets_that_meet_the_condition_and_stores_nothing(node):
    hot_gpus(node, [91.0, 60.0])
    draft = AlertRule(name="hot", metric="gpu.temp_c", aggregation="max", window_s=30,
                      op=">", threshold=85, for_s=60, summary="{host} GPU {gpu_index}: {value}")
    draft.full_clean()
    result = preview(draft, T0)
    assert result.count == 1 and result.fires_after_s == 60
    [hit] = result.hits
    assert (hit.target, hit.host, hit.gpu, hit.value) == (
        f"gpu:{node.gpus[0].id}", "gpu-node-1", node.gpus[0].uuid, 91.0)
    assert hit.summary == "gpu-node-1 GPU 0: 91.0"
    assert draft.id is None
    assert not AlertRule.objects.filter(name="hot").exists() and not Alert.objects.exists()


def test_a_preview_keeps_to_the_rule_scope(empty_samples):
    inside, outside = make_node("train-1"), make_node("infer-1")
    hot_gpus(inside, [91.0, 91.0])
    hot_gpus(outside, [91.0, 91.0])
    draft = AlertRule(name="hot", metric="gpu.temp_c", aggregation="max", window_s=30,
                      op=">", threshold=85, hostname_glob="infer-*")
    result = preview(draft, T0)
    assert {h.host for h in result.hits} == {"infer-1"} and result.count == 2


def _evaluated_fleet(node):
    """The evaluator's slices for a 5-minute rule, built at T0; then the raw rows are gone."""
    samples("gpu", {"gpu_id": node.gpus[0].id}, lambda ts: {"temp_c": 91.0}, T0 - 400 * S)
    samples("gpu", {"gpu_id": node.gpus[1].id}, lambda ts: {"temp_c": 60.0}, T0 - 400 * S)
    AlertRule.objects.create(name="hot 5 min", metric="gpu.temp_c", aggregation="max",
                             window_s=300, op=">", threshold=85)
    evaluate(T0)
    with connection.cursor() as cursor:
        cursor.execute(f"TRUNCATE {TABLES['gpu'].name}")


def draft(window_s: int) -> AlertRule:
    rule = AlertRule(name="hot", metric="gpu.temp_c", aggregation="avg", window_s=window_s,
                     op=">", threshold=85, summary="{value}")
    rule.full_clean()
    return rule


def test_a_preview_reads_raw_rows_as_of_the_request_not_the_evaluators_slices(empty_samples):
    """The evaluator's slices live in the worker: a preview folds its own from raw rows now,
    and leaves the evaluator's as they were."""
    node = make_node()
    _evaluated_fleet(node)

    result = preview(draft(120), T0 + 4 * S)

    assert (result.count, result.now) == (0, T0 + 4 * S)  # built now, from no raw rows
    kept = STORES[WHOLE]["gpu"]
    assert kept.hi == T0 and kept.blocks  # the evaluator's, untouched


def test_a_preview_folding_only_its_metric_agrees_with_the_evaluator(node):
    """A preview's own slices hold the rule's one metric; a quantile, a bitmask share and a
    rate read from them what the evaluator's full slices give."""
    lay = ttft_layout()
    samples("engine", {"engine_id": node.engine.id},
            lambda ts: {"ttft_seconds_layout": lay, "ttft_seconds_counts": [0, 0, 9, 0, 1, 0, 0],
                        "kv_cache_usage": 0.5}, T0 - 300 * S)
    samples("gpu", {"gpu_id": node.gpus[0].id},
            lambda ts: {"throttle_reasons": 0x40 if (ts - T0) // S % 20 else 0x1,
                        "ecc_dbe_total": 3 + (2 if ts > T0 - 30 * S else 0), "temp_c": 50.0},
            T0 - 300 * S)
    drafts = [
        dict(metric="engine.ttft_seconds", aggregation="quantile", quantile=0.99, window_s=300,
             op=">", threshold=2.0),
        dict(metric="gpu.throttle_reasons", aggregation="avg", bitmask=0x40, window_s=60,
             op=">=", threshold=0.5),
        dict(metric="gpu.ecc_dbe_total", aggregation="rate", window_s=60, op=">", threshold=0),
    ]
    previewed = []
    for fields in drafts:  # all before the evaluator has slices to lend
        draft = AlertRule(name=f"draft {fields['metric']}", summary="{value}", **fields)
        draft.full_clean()
        previewed.append([(h.target, h.value) for h in preview(draft, T0).hits])
    for fields, found in zip(drafts, previewed, strict=True):
        assert found, fields
        assert found == [(a.target, a.value) for a in run(rule(**fields), T0)], fields
