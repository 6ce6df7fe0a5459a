"""Each aggregation over the window, one query for all targets, and the scope filters."""

from __future__ import annotations

from datetime import timedelta

from controlplane.alerts.evaluate import evaluate
from controlplane.telemetry.models import HistogramLayout
from tests.support.alert_data import T0, make_node, rule, run, samples, ttft_layout

S = timedelta(seconds=1)


def test_last_takes_the_newest_present_value_in_the_window(node):
    samples("gpu", {"gpu_id": node.gpus[0].id},
            lambda ts: {"temp_c": None if ts == T0 else (90.0 if ts == T0 - 5 * S else 50.0)},
            T0 - 60 * S)
    r = rule(metric="gpu.temp_c", aggregation="last", window_s=30, op=">", threshold=80)
    assert [a.value for a in run(r, T0)] == [90.0]


def test_rate_is_the_increase_per_second_of_a_counter_kept_as_a_gauge(node):
    samples("gpu", {"gpu_id": node.gpus[1].id},
            lambda ts: {"ecc_dbe_total": 3 + (2 if ts > T0 - 30 * S else 0)}, T0 - 120 * S)
    r = rule(metric="gpu.ecc_dbe_total", aggregation="rate", window_s=60, op=">", threshold=0)
    [alert] = run(r, T0)
    assert alert.target == f"gpu:{node.gpus[1].id}"
    assert abs(alert.value - 2 / 55) < 1e-9  # first row at T0-55 s, last at T0


def test_a_bitmask_counts_the_share_of_samples_with_a_bit_set(node):
    samples("gpu", {"gpu_id": node.gpus[0].id},
            lambda ts: {"throttle_reasons": 0x40 | 0x1 if (ts - T0) // S % 20 else 0x1},
            T0 - 60 * S)
    r = rule(metric="gpu.throttle_reasons", aggregation="avg", bitmask=0x40, window_s=60,
             op=">=", threshold=0.5)
    [alert] = run(r, T0)
    assert alert.value == 9 / 12  # rows at -40, -20 and 0 s lack the bit


def test_a_quantile_is_interpolated_from_the_buckets_summed_over_the_window(node):
    lay = ttft_layout()  # bounds 0.1 0.5 1 2.5 5 10
    samples("engine", {"engine_id": node.engine.id},
            lambda ts: {"ttft_seconds_layout": lay,
                        "ttft_seconds_counts": [0, 0, 9, 0, 1, 0, 0]}, T0 - 300 * S)
    p99 = rule(metric="engine.ttft_seconds", aggregation="quantile", quantile=0.99,
               window_s=300, op=">", threshold=2.0)
    p50 = rule(metric="engine.ttft_seconds", aggregation="quantile", quantile=0.5,
               window_s=300, op=">", threshold=2.0)
    [alert] = run(p99, T0)
    assert abs(alert.value - (2.5 + 2.5 * (0.99 * 600 - 540) / 60)) < 1e-9
    assert run(p50, T0) == []


def test_a_layout_change_keeps_the_layout_holding_most_observations(node):
    wide = ttft_layout()  # bounds 0.1 0.5 1 2.5 5 10: seven counts
    narrow = HistogramLayout.objects.create(bounds=[1.0, 20.0]).id  # three counts
    # one row of each layout in every 10-s slice: the wide one holds 10 observations, the
    # narrow one 1, so every slice (and the window) keeps the wide layout's summed counts
    samples("engine", {"engine_id": node.engine.id},
            lambda ts: {"ttft_seconds_layout": wide, "ttft_seconds_counts": [0, 0, 0, 10, 0, 0, 0]}
            if ts.second % 10 == 5 else
            {"ttft_seconds_layout": narrow, "ttft_seconds_counts": [0, 0, 1]}, T0 - 60 * S)
    p50 = rule(metric="engine.ttft_seconds", aggregation="quantile", quantile=0.5,
               window_s=60, op=">", threshold=0)
    [alert] = run(p50, T0)
    assert abs(alert.value - (1.0 + 1.5 * 0.5)) < 1e-9  # inside the wide layout's (1, 2.5]


def test_one_cycle_reports_every_target_of_the_fleet(empty_samples):
    nodes = [make_node(f"n{i}") for i in range(3)]
    for n in nodes:
        samples("host", {"host_id": n.host.id}, lambda ts: {"cpu_pct": 90.0}, T0 - 60 * S)
    r = rule(metric="host.cpu_pct", window_s=60, op=">", threshold=75)
    assert sorted(a.host_id for a in run(r, T0)) == sorted(n.host.id for n in nodes)


def busy_hosts():
    nodes = [make_node(name) for name in ("train-1", "infer-1", "infer-2")]
    for n in nodes:
        samples("host", {"host_id": n.host.id}, lambda ts: {"cpu_pct": 90.0}, T0 - 60 * S)
        samples("engine", {"engine_id": n.engine.id}, lambda ts: {"requests_waiting": 3.0},
                T0 - 60 * S)
    return nodes


def test_a_hostname_glob_limits_the_rule_to_matching_hosts(empty_samples):
    busy_hosts()
    r = rule(metric="host.cpu_pct", window_s=60, op=">", threshold=75, hostname_glob="infer-*")
    assert sorted(a.labels["host"] for a in run(r, T0)) == ["infer-1", "infer-2"]


def test_host_and_engine_ids_limit_the_rule_to_those_targets(empty_samples):
    train, infer1, _ = busy_hosts()
    by_host = rule(metric="host.cpu_pct", window_s=60, op=">", threshold=75,
                   host_ids=[train.host.id])
    by_engine = rule(metric="engine.requests_waiting", window_s=60, op=">", threshold=0,
                     engine_ids=[infer1.engine.id])
    evaluate(T0, rule_ids=[by_host.id, by_engine.id])
    assert [a.host_id for a in by_host.alerts.all()] == [train.host.id]
    assert [a.engine_id for a in by_engine.alerts.all()] == [infer1.engine.id]


def test_label_matchers_scope_a_rule_by_model_engine_and_host(empty_samples):
    nodes = busy_hosts()  # train-1, infer-1, infer-2
    models = {"train-1": "mistral-7b", "infer-1": "llama-3-70b", "infer-2": "llama-3-8b"}
    for n in nodes:
        n.engine.model = models[n.host.hostname]
        n.engine.save()
    llama = rule(metric="engine.requests_waiting", window_s=60, op=">", threshold=0,
                 label_matchers=[{"label": "model", "op": "=~", "value": "llama-3-.*"},
                                 {"label": "host", "op": "!=", "value": "infer-2"}])
    # host targets have no engine: their model label reads "", so only != and !~ pass them
    not_mistral = rule(metric="host.cpu_pct", window_s=60, op=">", threshold=75,
                       label_matchers=[{"label": "model", "op": "!=", "value": "mistral-7b"}])
    engine_named = rule(metric="host.cpu_pct", window_s=60, op=">", threshold=75,
                        label_matchers=[{"label": "engine", "value": "vllm:8000/0"}])
    evaluate(T0, rule_ids=[llama.id, not_mistral.id, engine_named.id])
    assert [a.labels["host"] for a in llama.alerts.all()] == ["infer-1"]
    assert not_mistral.alerts.count() == 3
    assert engine_named.alerts.count() == 0


def test_process_metrics_alert_per_process_with_its_engine(node):
    samples("proc", {"host_id": node.host.id, "pid": 4242},
            lambda ts: {"engine_id": node.engine.id, "cpu_pct": 99.0}, T0 - 60 * S)
    r = rule(metric="proc.cpu_pct", window_s=60, op=">=", threshold=95,
             summary="{engine} pid on {host}: {value:.0f}%")
    [alert] = run(r, T0)
    assert alert.target == f"proc:{node.host.id}:4242"
    assert alert.engine_id == node.engine.id
    assert alert.summary == "vllm:8000/0 pid on gpu-node-1: 99%"


def test_disabled_rules_are_not_evaluated(node):
    samples("host", {"host_id": node.host.id}, lambda ts: {"cpu_pct": 90.0}, T0 - 60 * S)
    r = rule(metric="host.cpu_pct", window_s=60, op=">", threshold=75, enabled=False)
    assert run(r, T0) == []
