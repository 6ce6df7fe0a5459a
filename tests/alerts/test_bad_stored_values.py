"""A value an agent stored before ingest validated it (a 400-digit gpu_memory_utilization)
must not fail a rule for every other host: the rule's SQL casts only what it can."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection

from controlplane.alerts.evaluate import evaluate
from controlplane.alerts.models import Alert, AlertRule
from tests.support.alert_data import GPU_TOTAL, T0, Node, make_node, samples

HUGE = "1" + "0" * 400  # overflows float8 (about 1.8e308 at most)


def gpus_at_ninety_percent(node: Node) -> None:
    for gpu in node.gpus:
        samples("gpu", {"gpu_id": gpu.id},
                lambda ts: {"mem_used_bytes": int(0.9 * GPU_TOTAL),
                            "mem_total_bytes": GPU_TOTAL}, T0 - timedelta(minutes=5), T0)


def store_share(node: Node, raw_json: str) -> None:
    """Written as ingest wrote it before validation: straight into the engine's config."""
    with connection.cursor() as cursor:
        cursor.execute("UPDATE fleet_engine SET config = jsonb_set(config, "
                       "'{gpu_memory_utilization}', %s::jsonb) WHERE id = %s",
                       [raw_json, node.engine.id])


@pytest.mark.parametrize("bad", [
    HUGE,  # a JSON number: config->>'…' is its 401 digits
    f'"{HUGE}"',  # the same as a string
    f'"0.{"0" * 400}1"',  # underflows float8
    '"1e400"', '"-0.5"', '"NaN"', '"0.5.5"', "[0.5]", '{"x": 1}', "null",
])
def test_one_engines_bad_share_does_not_fail_the_rule_for_the_other_hosts(empty_samples, bad):
    good, spoiled = make_node("gpu-good-1", utilization="0.5"), make_node(
        "gpu-bad-1", utilization="0.5")
    store_share(spoiled, bad)
    for node in (good, spoiled):
        gpus_at_ninety_percent(node)
    rule = AlertRule.objects.get(pack_key="memory-beyond-share")

    result = evaluate(T0, rule_ids=[rule.id])

    assert result.errors == {}
    rule.refresh_from_db()
    assert rule.last_error == ""
    # 90 % used against a share of 0.5: 40 % beyond it on both of the good host's GPUs; the
    # bad value counts as vLLM's default share (0.9), nothing beyond it
    pending = Alert.objects.filter(rule=rule).values_list("target", flat=True)
    assert sorted(pending) == sorted(f"gpu:{g.id}" for g in good.gpus)
