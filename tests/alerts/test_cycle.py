"""The evaluation cycle as Celery runs it: one worker at a time, every interval."""

from __future__ import annotations

import threading
from datetime import timedelta

from django.db import connection, transaction

from controlplane.alerts.evaluate import LOCK_KEY, evaluate
from controlplane.alerts.models import Alert, AlertRule, RuleKind
from controlplane.alerts.tasks import evaluate_rules
from controlplane.alerts.windows.schema import all_names as slice_tables
from controlplane.celery import app
from tests.alerts.conftest import T0, rule, samples


def test_a_second_worker_skips_the_cycle_while_the_first_holds_it(empty_samples):
    held, release = threading.Event(), threading.Event()

    def other_worker():
        try:
            with transaction.atomic(), connection.cursor() as cursor:
                cursor.execute("SELECT pg_advisory_xact_lock(%s)", [LOCK_KEY])
                held.set()
                release.wait(10)
        finally:
            connection.close()

    thread = threading.Thread(target=other_worker)
    thread.start()
    try:
        assert held.wait(10)
        assert evaluate(T0).skipped
    finally:
        release.set()
        thread.join()
    assert AlertRule.objects.filter(last_evaluated_at__isnull=False).count() == 0
    assert not evaluate(T0).skipped


def test_the_task_evaluates_every_enabled_rule(empty_samples):
    outcome = evaluate_rules()
    assert outcome["rules"] == AlertRule.objects.filter(enabled=True).count() > 0
    assert not outcome["skipped"]


def test_beat_runs_the_evaluation_every_10_seconds_by_default():
    entry = app.conf.beat_schedule["evaluate-alert-rules"]
    assert entry["task"] == "controlplane.alerts.tasks.evaluate_rules"
    assert entry["schedule"] == 10.0


def test_side_by_side_lanes_find_what_one_connection_finds(node, settings):
    """GPU slices on one connection, host/engine/proc on another, and a rule that reads across
    both (cpu_bound_engine: process CPU and GPU utilisation) after them."""
    start = T0 - timedelta(minutes=5)
    for gpu in node.gpus:
        samples("gpu", {"gpu_id": gpu.id}, lambda ts: {"temp_c": 91.0, "util_pct": 40.0}, start)
    samples("host", {"host_id": node.host.id}, lambda ts: {"cpu_pct": 88.0}, start)
    samples("engine", {"engine_id": node.engine.id}, lambda ts: {"requests_waiting": 3.0}, start)
    samples("proc", {"host_id": node.host.id, "pid": 4242},
            lambda ts: {"engine_id": node.engine.id, "cpu_pct": 99.5}, start)
    rules = [rule(metric="gpu.temp_c", aggregation="max", window_s=60, op=">", threshold=85),
             rule(metric="host.cpu_pct", aggregation="avg", window_s=120, op=">", threshold=75),
             rule(metric="engine.requests_waiting", aggregation="last", window_s=60, op=">",
                  threshold=0),
             rule(kind=RuleKind.CPU_BOUND_ENGINE, window_s=120, op=">=", threshold=95,
                  params={"gpu_util_below": 85})]
    ids = [r.id for r in rules]
    found = {}
    for lanes in (1, 2):
        settings.PITWALL = {**settings.PITWALL, "ALERT_EVAL_LANES": lanes}
        Alert.objects.all().delete()
        AlertRule.objects.update(last_evaluated_at=None)
        truncate_slices()
        evaluate(T0, rule_ids=ids)
        found[lanes] = sorted(Alert.objects.filter(rule_id__in=ids)
                              .values_list("rule_id", "target", "value", "state"))
    assert len(found[1]) == 5  # two GPUs, the host, the engine, and the engine's CPU bound
    assert found[2] == found[1]


def truncate_slices() -> None:
    with connection.cursor() as cursor:
        cursor.execute("TRUNCATE " + ", ".join(slice_tables()))
