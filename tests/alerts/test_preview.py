"""The rule editor's preview: the targets that meet the condition now, nothing stored."""

from __future__ import annotations

from datetime import timedelta

from controlplane.alerts.models import Alert, AlertRule
from controlplane.alerts.preview import preview
from tests.alerts.conftest import T0, make_node, samples

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
