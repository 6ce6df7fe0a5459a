"""The autoscaler's decision on recorded windows of a service's minutes: a queue at healthy KV
usage gets a replica, a queue at KV pressure gets the config change instead, idle scales in
and never below the minimum, and the cool-downs, the bounds and a step in flight hold."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from controlplane.fleet.scaling_policy import (
    DEFAULT_HOLD_S,
    WAITING_S,
    Direction,
    Minute,
    Policy,
    State,
    Waiting,
    decide,
    from_zero,
    router_hold_s,
)

NOW = datetime(2026, 12, 6, 12, 0, tzinfo=UTC)
POLICY = Policy(min_replicas=1, max_replicas=4)


def minutes(count: int, replicas: int = 2, waiting: float = 0.0, running: float = 0.0,
            kv: float | None = 0.5, burn: float | None = 0.0, requests: int = 100,
            end: datetime = NOW) -> list[Minute]:
    """``count`` minutes up to ``end``, each with these per-replica figures."""
    return [Minute(end - timedelta(minutes=i), replicas, waiting * replicas,
                   running * replicas, kv, burn, requests) for i in reversed(range(count))]


def test_a_queue_at_healthy_kv_usage_gets_a_replica():
    d = decide(POLICY, 2, minutes(3, waiting=6.0, running=8.0), State(), NOW)
    assert (d.direction, d.replicas_before, d.replicas_after) == (Direction.OUT, 2, 3)
    queued = next(f for f in d.evidence if f.name == "waiting_per_replica")
    assert (queued.value, queued.threshold, queued.window_s, queued.held) == (6.0, 4.0, 120,
                                                                               True)
    assert "waiting_per_replica 6 > 4" in d.reason


def test_a_queue_at_kv_pressure_gets_the_config_change_not_a_replica():
    d = decide(POLICY, 2, minutes(3, waiting=6.0, running=8.0, kv=0.97), State(), NOW)
    assert (d.direction, d.replicas_after) == (Direction.CONFIG, 2)
    assert "KV pressure" in d.reason and "no replica added" in d.reason
    kv = next(f for f in d.evidence if f.name == "kv_usage")
    assert kv.value == pytest.approx(0.97) and not kv.held


def test_a_burning_ttft_budget_without_a_queue_gets_a_replica():
    d = decide(POLICY, 2, minutes(3, running=8.0, burn=3.5), State(), NOW)
    assert d.direction == Direction.OUT and "ttft_burn 3.5 > 2" in d.reason


def test_one_minute_of_queue_is_a_spike_not_demand():
    window = minutes(2, running=8.0) + minutes(1, waiting=50.0, end=NOW + timedelta(minutes=1))
    assert decide(POLICY, 2, window, State(), NOW + timedelta(minutes=1)) is None


def test_a_window_with_a_missing_minute_decides_nothing():
    window = minutes(3, waiting=6.0)
    del window[1]
    assert decide(POLICY, 2, window, State(), NOW) is None


def test_at_max_replicas_the_demand_is_recorded_and_held():
    d = decide(Policy(min_replicas=1, max_replicas=2), 2, minutes(3, waiting=6.0), State(),
               NOW)
    assert (d.direction, d.replicas_after) == (Direction.HOLD, 2)
    assert "max_replicas (2)" in d.reason


def test_idle_over_the_scale_in_window_removes_one_replica():
    d = decide(POLICY, 3, minutes(10, replicas=3, running=0.2), State(), NOW)
    assert (d.direction, d.replicas_before, d.replicas_after) == (Direction.IN, 3, 2)
    assert {f.name for f in d.evidence} == {"running_per_replica", "waiting_per_replica",
                                            "running_per_replica_after"}


def test_idle_for_less_than_the_scale_in_window_keeps_the_replicas():
    assert decide(POLICY, 3, minutes(9, running=0.2), State(), NOW) is None


def test_never_below_min_replicas():
    assert decide(Policy(min_replicas=2, max_replicas=4), 2, minutes(10), State(), NOW) is None


def test_the_hysteresis_keeps_a_replica_whose_share_would_make_the_others_busy():
    """Idle per replica, but one replica fewer would run more than the idle threshold each:
    no scale-in, so no flapping between the two directions on the same load."""
    policy = Policy(min_replicas=1, max_replicas=8, idle_running_per_replica=3.0)
    three = {"replicas": 3}
    assert decide(policy, 3, minutes(10, running=2.5, **three), State(), NOW) is None  # 3.75
    assert decide(policy, 2, minutes(10, running=1.6), State(), NOW) is None  # 3.2 after
    d = decide(policy, 3, minutes(10, running=1.2, **three), State(), NOW)
    assert d.direction == Direction.IN and d.evidence[-1].value == pytest.approx(1.8)


def test_to_zero_only_without_a_single_request():
    policy = Policy(min_replicas=0, max_replicas=2)
    assert decide(policy, 1, minutes(10, replicas=1, running=0.0, requests=1), State(),
                  NOW) is None
    d = decide(policy, 1, minutes(10, replicas=1, running=0.0, requests=0), State(), NOW)
    assert (d.direction, d.replicas_after) == (Direction.IN, 0)


def test_the_scale_out_cool_down_holds_then_lets_go():
    window = minutes(3, waiting=6.0)
    recent = State(last_out=NOW - timedelta(seconds=100))
    held = decide(POLICY, 2, window, recent, NOW)
    assert (held.direction, held.replicas_after) == (Direction.HOLD, 2)
    assert "the last scale-out was 100 s ago (cool-down 180 s)" in held.reason
    later = decide(POLICY, 2, window, State(last_out=NOW - timedelta(seconds=181)), NOW)
    assert later.direction == Direction.OUT


def test_a_scale_in_waits_out_both_cool_downs():
    window = minutes(10, running=0.2)
    assert decide(POLICY, 3, window, State(last_in=NOW - timedelta(seconds=300)),
                  NOW).direction == Direction.HOLD
    after_out = decide(POLICY, 3, window, State(last_out=NOW - timedelta(seconds=300)), NOW)
    assert after_out.direction == Direction.HOLD and "scale-out" in after_out.reason
    assert decide(POLICY, 3, window, State(last_out=NOW - timedelta(seconds=601)),
                  NOW).direction == Direction.IN


def test_a_cool_down_of_a_minute_lets_the_next_minutes_decision_go_whatever_the_tick():
    policy = Policy(min_replicas=1, max_replicas=4, in_cooldown_s=60, in_window_s=60)
    window = minutes(1, running=0.2)
    # the step before was decided on the previous minute's first tick, a second or two later
    # in its minute than this one
    for ago_s in (58.0, 59.5, 60.0):
        d = decide(policy, 3, window, State(last_in=NOW - timedelta(seconds=ago_s)), NOW)
        assert d.direction == Direction.IN, (ago_s, d.reason)
    held = decide(policy, 3, window, State(last_in=NOW - timedelta(seconds=50)), NOW)
    assert held.direction == Direction.HOLD


def test_no_step_while_one_is_in_flight():
    d = decide(POLICY, 2, minutes(3, waiting=6.0), State(in_flight=True), NOW)
    assert d.direction == Direction.HOLD and "in flight" in d.reason


@pytest.mark.parametrize(("replicas", "after"), [(0, 1), (6, 5)])
def test_a_count_outside_the_limits_steps_inside_whatever_the_load_and_cool_downs(replicas,
                                                                                  after):
    cooling = State(last_out=NOW, last_in=NOW)
    d = decide(POLICY, replicas, [], cooling, NOW)
    assert d.replicas_after == after and "outside the limits 1..4" in d.reason
    held = decide(POLICY, replicas, [], State(in_flight=True), NOW)
    assert held.direction == Direction.HOLD  # still one step at a time


def test_the_decision_serialises_with_its_evidence():
    d = decide(POLICY, 2, minutes(3, waiting=6.0), State(), NOW)
    data = d.as_json()
    assert data["changes"] is True and data["evidence"][0]["name"] == "waiting_per_replica"


# -- from zero: the router is the only witness ------------------------------------------------

ZERO = Policy(min_replicas=0, max_replicas=2)


def test_at_zero_a_request_the_router_holds_starts_one_replica_at_once():
    """No window: a request waits in the router's retries for this decision."""
    d = from_zero(ZERO, 0, Waiting(NOW - timedelta(seconds=2), 3), State(), NOW)
    assert (d.direction, d.replicas_before, d.replicas_after) == (Direction.OUT, 0, 1)
    [held] = d.evidence
    assert (held.name, held.value, held.threshold, held.op, held.held) == (
        "router_tries_without_a_replica", 3, 0.0, ">", True)
    assert "requests wait in the router with no replica" in d.reason and "2 s ago" in d.reason


def test_at_zero_without_a_sign_of_a_request_nothing_is_decided():
    assert from_zero(ZERO, 0, None, State(), NOW) is None
    stale = Waiting(NOW - timedelta(seconds=WAITING_S + 1), 3)  # the request gave up since
    assert from_zero(ZERO, 0, stale, State(), NOW) is None
    assert decide(ZERO, 0, [], State(), NOW) is None  # no minutes at zero: no window fills


def test_above_zero_the_router_says_nothing_the_replicas_do_not():
    assert from_zero(ZERO, 1, Waiting(NOW, 3), State(), NOW) is None


def test_from_zero_waits_for_a_step_in_flight_and_a_failed_one_only_briefly():
    waiting = Waiting(NOW, 3)
    in_flight = from_zero(ZERO, 0, waiting, State(in_flight=True), NOW)
    assert in_flight.direction == Direction.HOLD and "in flight" in in_flight.reason
    failed = from_zero(ZERO, 0, waiting, State(last_out=NOW - timedelta(seconds=5)), NOW)
    assert failed.direction == Direction.HOLD and "cool-down 15 s" in failed.reason
    # not the 180-s scale-out cool-down: a request is held meanwhile
    again = from_zero(ZERO, 0, waiting, State(last_out=NOW - timedelta(seconds=30)), NOW)
    assert (again.direction, again.replicas_after) == (Direction.OUT, 1)
    fast = Policy(min_replicas=0, max_replicas=2, out_cooldown_s=0)
    assert from_zero(fast, 0, waiting, State(last_out=NOW), NOW).direction == Direction.OUT


def test_the_routers_hold_is_for_services_that_may_scale_to_zero():
    assert router_hold_s(1, {}) == 0 and router_hold_s(1, {"zero_hold_s": 120}) == 0
    assert router_hold_s(0, {}) == DEFAULT_HOLD_S == 300
    assert router_hold_s(0, {"zero_hold_s": 120}) == 120
    assert router_hold_s(0, {"zero_hold_s": 5000}) == 600  # bounded, as the knob's range
