"""The evaluation cycle as Celery runs it: one worker at a time, every interval."""

from __future__ import annotations

import threading
from datetime import timedelta

from django.db import connection, transaction

from controlplane.alerts.apply import fingerprint
from controlplane.alerts.evaluate import LOCK_KEY, evaluate
from controlplane.alerts.models import Alert, AlertRule, RuleKind
from controlplane.alerts.tasks import evaluate_rules
from controlplane.alerts.windows.schema import STATE_TABLE
from controlplane.celery import app
from tests.support.alert_data import T0, make_node, rule, samples

S = timedelta(seconds=1)


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


def test_a_cycle_longer_than_its_interval_is_logged_with_what_to_do(empty_samples, settings,
                                                                     caplog):
    settings.PITWALL = {**settings.PITWALL, "ALERT_EVAL_INTERVAL_S": 10**6}
    evaluate_rules()
    assert "longer than its" not in caplog.text
    settings.PITWALL = {**settings.PITWALL, "ALERT_EVAL_INTERVAL_S": 0}  # any cycle overruns it
    evaluate_rules()
    assert "longer than its 0-s interval" in caplog.text
    assert "PITWALL_ALERT_EVAL_LANES" in caplog.text
    assert "(slices " in caplog.text and ", state " in caplog.text  # where the time went


def test_beat_runs_the_evaluation_every_10_seconds_by_default():
    entry = app.conf.beat_schedule["evaluate-alert-rules"]
    assert entry["task"] == "controlplane.alerts.tasks.evaluate_rules"
    assert entry["schedule"] == 10.0


def test_lanes_over_shards_of_the_hosts_find_what_one_connection_finds(empty_samples, settings):
    """Each lane steps the alerts of its hosts' targets (host id mod lanes), a rule that joins
    an engine's processes and GPUs (cpu_bound_engine) included; together they find what one
    connection finds, in two steps of the state machine."""
    nodes = [make_node(f"shard-node-{i}") for i in range(3)]
    assert len({n.host.id % 2 for n in nodes}) == 2  # both shards of two lanes have hosts
    start = T0 - timedelta(minutes=5)
    for n in nodes:
        for gpu in n.gpus:
            samples("gpu", {"gpu_id": gpu.id}, lambda ts: {"temp_c": 91.0, "util_pct": 40.0},
                    start)
        samples("host", {"host_id": n.host.id}, lambda ts: {"cpu_pct": 88.0}, start)
        samples("engine", {"engine_id": n.engine.id}, lambda ts: {"requests_waiting": 3.0},
                start)
        samples("proc", {"host_id": n.host.id, "pid": 4242},
                lambda ts, n=n: {"engine_id": n.engine.id, "cpu_pct": 99.5}, start)
    rules = [rule(metric="gpu.temp_c", aggregation="max", window_s=60, op=">", threshold=85),
             rule(metric="host.cpu_pct", aggregation="avg", window_s=120, op=">", threshold=75,
                  for_s=10),
             rule(metric="engine.requests_waiting", aggregation="last", window_s=60, op=">",
                  threshold=0),
             rule(kind=RuleKind.CPU_BOUND_ENGINE, window_s=120, op=">=", threshold=95,
                  params={"gpu_util_below": 85})]
    ids = [r.id for r in rules]
    found = {}
    for lanes in (1, 2, 3):
        settings.PITWALL = {**settings.PITWALL, "ALERT_EVAL_LANES": lanes}
        Alert.objects.all().delete()
        AlertRule.objects.update(last_evaluated_at=None)
        truncate_slices()
        hits = [evaluate(T0 - timedelta(seconds=10), rule_ids=ids).hits,
                evaluate(T0, rule_ids=ids).hits]
        found[lanes] = (hits, sorted(Alert.objects.filter(rule_id__in=ids)
                                     .values_list("rule_id", "target", "value", "state")))
    # per node: two GPUs, the host (pending, then firing), the engine, its CPU bound
    assert found[1][0] == [15, 15]
    assert len(found[1][1]) == 15
    assert {state for *_, state in found[1][1]} == {"firing"}
    assert found[2] == found[1]
    assert found[3] == found[1]
    # one record of what the slices cover per entity, whatever the lanes
    with connection.cursor() as cursor:
        cursor.execute("SELECT entity, hi FROM alerts_slice_state ORDER BY 1")
        assert cursor.fetchall() == [(e, T0) for e in ("engine", "gpu", "host", "proc")]


def truncate_slices() -> None:
    with connection.cursor() as cursor:
        cursor.execute(f"TRUNCATE {STATE_TABLE}")


def test_new_alerts_keep_labels_with_quotes_backslashes_and_unicode(node):
    name = 'GPU "hot" \\ {brace} ≥ 85 °C, \'quoted\''
    r = rule(name=name, metric="gpu.temp_c", aggregation="max", window_s=60, op=">",
             threshold=85, summary="{host} {gpu_index}: {value:.0f} °C")
    samples("gpu", {"gpu_id": node.gpus[0].id}, lambda ts: {"temp_c": 91.0}, T0 - 60 * S)
    evaluate(T0, rule_ids=[r.id])
    [alert] = Alert.objects.filter(rule=r)
    assert alert.labels == {"alertname": name, "severity": r.severity,
                            "host": node.host.hostname, "gpu": node.gpus[0].uuid}
    assert alert.fingerprint == fingerprint(alert.labels)
    assert alert.summary == f"{node.host.hostname} 0: 91 °C"
    assert alert.state == "firing" and alert.value == 91.0
