"""Every comparison operator at its boundary, and bitmask rules, against the real database.

Operators: a value held exactly at 70 for the whole window, rules at 69.5, 70 and 70.5 with each
of ``>`` ``>=`` ``<`` ``<=`` ``==`` ``!=``, through each path that compares: the threshold query
(in SQL, for the band aggregates and for ``last``), a quantile (in Python) and a named kind (in
its own SQL). A target without samples holds no condition, not even ``!=``.

Bitmasks: a sample counts when it has any bit of the mask, so ``avg`` is the share of such
samples; the default pack's throttle-reason rules are checked with their own masks at the
share they fire on.
"""

from __future__ import annotations

from datetime import timedelta

from controlplane.alerts.evaluate import evaluate
from controlplane.alerts.models import Alert, RuleKind
from controlplane.alerts.pack import pack
from tests.support.alert_data import T0, make_node, rule, samples, ttft_layout

S = timedelta(seconds=1)
OPS = (">", ">=", "<", "<=", "==", "!=")
BELOW, AT, ABOVE = -0.5, 0.0, 0.5  # threshold - value
# Whether ``value op threshold`` holds, for a threshold below, at and above the value.
HOLDS = {
    ">": {BELOW: True, AT: False, ABOVE: False},
    ">=": {BELOW: True, AT: True, ABOVE: False},
    "<": {BELOW: False, AT: False, ABOVE: True},
    "<=": {BELOW: False, AT: True, ABOVE: True},
    "==": {BELOW: False, AT: True, ABOVE: False},
    "!=": {BELOW: True, AT: False, ABOVE: True},
}


def _fired(rules: dict) -> dict:
    """{key: the targets firing} after one cycle of all the rules."""
    evaluate(T0, rule_ids=[r.id for r in rules.values()])
    firing = {}
    for alert in Alert.objects.filter(rule__in=rules.values(), state="firing"):
        firing.setdefault(alert.rule_id, []).append(alert.target)
    return {key: sorted(firing.get(r.id, [])) for key, r in rules.items()}


def test_each_operator_at_its_boundary_in_the_threshold_query(node):
    gpu = node.gpus[0]  # node.gpus[1] sends nothing
    samples("gpu", {"gpu_id": gpu.id}, lambda ts: {"temp_c": 70.0}, T0 - 120 * S)
    rules = {(agg, op, step): rule(metric="gpu.temp_c", aggregation=agg, window_s=60, op=op,
                                   threshold=70.0 + step)
             for agg in ("avg", "min", "max", "last") for op in OPS for step in HOLDS[op]}
    fired = _fired(rules)
    expected = {(agg, op, step): [f"gpu:{gpu.id}"] if HOLDS[op][step] else []
                for agg, op, step in rules}
    assert fired == expected


def test_each_operator_at_its_boundary_on_a_quantile(node):
    lay = ttft_layout()  # bounds 0.1 0.5 1 2.5 5 10: every observation in (0.5, 1]
    samples("engine", {"engine_id": node.engine.id},
            lambda ts: {"ttft_seconds_layout": lay, "ttft_seconds_counts": [0, 0, 10, 0, 0, 0, 0]},
            T0 - 120 * S)
    # the median: 0.5 + (1 - 0.5) x 0.5, interpolated in Python
    rules = {(op, step): rule(metric="engine.ttft_seconds", aggregation="quantile",
                              quantile=0.5, window_s=60, op=op, threshold=0.75 + step / 2)
             for op in OPS for step in HOLDS[op]}
    fired = _fired(rules)
    assert fired == {(op, step): [f"engine:{node.engine.id}"] if HOLDS[op][step] else []
                     for op, step in rules}


def test_each_operator_at_its_boundary_on_a_named_kind(node):
    samples("engine", {"engine_id": node.engine.id},
            lambda ts: {"kv_cache_usage": 0.5, "requests_waiting": 2.0}, T0 - 120 * S)
    rules = {(op, step): rule(kind=RuleKind.KV_PRESSURE, window_s=60, op=op,
                              threshold=0.5 + step / 2, params={"waiting_above": 0})
             for op in OPS for step in HOLDS[op]}
    fired = _fired(rules)
    assert fired == {(op, step): [f"engine:{node.engine.id}"] if HOLDS[op][step] else []
                     for op, step in rules}


def test_a_target_without_samples_holds_no_condition_not_even_not_equal(node):
    # node.gpus[0] reads 70, node.gpus[1] nothing: NULL compares to nothing
    samples("gpu", {"gpu_id": node.gpus[0].id}, lambda ts: {"temp_c": 70.0}, T0 - 120 * S)
    rules = {agg: rule(metric="gpu.temp_c", aggregation=agg, window_s=60, op="!=",
                       threshold=0) for agg in ("avg", "min", "max", "last", "rate")}
    fired = _fired(rules)
    assert fired == {"avg": [f"gpu:{node.gpus[0].id}"], "min": [f"gpu:{node.gpus[0].id}"],
                     "max": [f"gpu:{node.gpus[0].id}"], "last": [f"gpu:{node.gpus[0].id}"],
                     "rate": []}  # a constant's rate is 0


# NVML clocks-event reasons: bits in the thermal rule's mask, and bits outside it
HW_SLOWDOWN, SW_THERMAL, HW_THERMAL, POWER_BRAKE = 0x8, 0x20, 0x40, 0x80
GPU_IDLE, SW_POWER_CAP, APP_CLOCKS = 0x1, 0x4, 0x2
# samples with a bit of the thermal mask, one or several; and samples without any
IN_MASK = [HW_SLOWDOWN, SW_THERMAL | SW_POWER_CAP, HW_THERMAL | HW_SLOWDOWN, POWER_BRAKE | GPU_IDLE]
OUT_OF_MASK = [SW_POWER_CAP, GPU_IDLE, 0, APP_CLOCKS | 0x100]


def _pack_rule(pack_key: str, **override):
    """The default pack's rule as shipped (its metric, aggregation, mask, window, op and
    threshold), firing at once so that one cycle shows whether its condition holds."""
    spec = next(s for s in pack() if s["pack_key"] == pack_key)
    fields = {k: spec[k] for k in ("metric", "aggregation", "bitmask", "window_s", "op",
                                   "threshold")}
    return rule(**{**fields, "for_s": 0, **override}), spec


def _pattern(hits: int, rows: int):
    """throttle_reasons for the k-th sample of the window (k = 0 … rows - 1): the first
    ``hits`` of every ``rows`` have a bit of the thermal mask, the others none; the values vary
    inside a slice (two samples each), so the slices keep several distinct values."""
    def values(ts):
        k = rows - 1 - int((T0 - ts) / (5 * S))
        pool = IN_MASK if k % rows < hits else OUT_OF_MASK
        return {"throttle_reasons": pool[k % len(pool)]}
    return values


def test_the_thermal_rule_fires_on_the_share_of_samples_with_any_bit_of_its_mask(empty_samples):
    node = make_node(gpus=3)
    r, spec = _pack_rule("gpu-thermal-throttle")
    assert (spec["bitmask"], spec["op"], spec["threshold"]) == (232, ">=", 0.5)
    rows = spec["window_s"] // 5  # one sample every 5 s: a 120-s window reads 24
    at, below, steady = node.gpus
    start = T0 - timedelta(seconds=spec["window_s"])
    samples("gpu", {"gpu_id": at.id}, _pattern(rows // 2, rows), start)  # exactly half
    samples("gpu", {"gpu_id": below.id}, _pattern(rows // 2 - 1, rows), start)  # one fewer
    # one value throughout: the slices keep a single distinct value (the path without unnest)
    samples("gpu", {"gpu_id": steady.id},
            lambda ts: {"throttle_reasons": SW_THERMAL | SW_POWER_CAP}, start)
    evaluate(T0, rule_ids=[r.id])
    assert {a.target: a.value for a in Alert.objects.filter(rule=r, state="firing")} == {
        f"gpu:{at.id}": 0.5, f"gpu:{steady.id}": 1.0}


def test_the_power_cap_rule_counts_only_its_own_bit(empty_samples):
    node = make_node(gpus=3)
    r, spec = _pack_rule("gpu-power-cap")
    assert (spec["bitmask"], spec["op"], spec["threshold"]) == (4, ">=", 0.9)
    rows = spec["window_s"] // 5  # 60 samples in 300 s
    capped = int(rows * 0.9)  # 54: exactly the threshold
    at, below, thermal = node.gpus
    start = T0 - timedelta(seconds=spec["window_s"])

    def with_cap(n):
        def values(ts):
            k = rows - 1 - int((T0 - ts) / (5 * S))
            return {"throttle_reasons": SW_POWER_CAP | GPU_IDLE if k < n else GPU_IDLE}
        return values

    samples("gpu", {"gpu_id": at.id}, with_cap(capped), start)
    samples("gpu", {"gpu_id": below.id}, with_cap(capped - 1), start)
    # every bit of the thermal mask and none of the power cap's
    samples("gpu", {"gpu_id": thermal.id},
            lambda ts: {"throttle_reasons": HW_SLOWDOWN | SW_THERMAL | HW_THERMAL | POWER_BRAKE},
            start)
    evaluate(T0, rule_ids=[r.id])
    assert {a.target: a.value for a in Alert.objects.filter(rule=r, state="firing")} == {
        f"gpu:{at.id}": 0.9}


def test_bitmask_max_min_and_last(empty_samples):
    """max: 1 when any sample had a bit of the mask; min: 1 when every sample had one; last:
    whether the newest sample has one."""
    node = make_node(gpus=3)
    once, always, never = node.gpus
    start = T0 - 60 * S
    samples("gpu", {"gpu_id": once.id},
            lambda ts: {"throttle_reasons": HW_THERMAL if ts == T0 - 30 * S else GPU_IDLE}, start)
    samples("gpu", {"gpu_id": always.id},
            lambda ts: {"throttle_reasons": HW_THERMAL | GPU_IDLE}, start)
    samples("gpu", {"gpu_id": never.id}, lambda ts: {"throttle_reasons": SW_POWER_CAP}, start)
    rules = {agg: rule(metric="gpu.throttle_reasons", aggregation=agg, bitmask=HW_THERMAL,
                       window_s=60, op="==", threshold=1) for agg in ("max", "min", "last")}
    assert _fired(rules) == {"max": sorted([f"gpu:{once.id}", f"gpu:{always.id}"]),
                             "min": [f"gpu:{always.id}"], "last": [f"gpu:{always.id}"]}
