"""Evaluator shards: the fleet cut by host over several evaluating workers, each holding its
shards by a lease in PostgreSQL; a worker's loss moves its shards to another, and no alert is
lost or written twice."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection

from controlplane.alerts import leases
from controlplane.alerts.evaluate import STORES, evaluate, evaluate_held
from controlplane.alerts.models import (
    Alert,
    AlertEvent,
    AlertRule,
    Evaluator,
    EvaluatorShard,
    ShardClaim,
)
from controlplane.alerts.shards import WHOLE, Shard
from controlplane.alerts.windows.raw import Reading, read
from controlplane.alerts.windows.schema import STATE_TABLE
from controlplane.telemetry.schema import column_for
from controlplane.telemetry.series import find_metric
from tests.support.alert_data import T0, make_node, minutes, rule, samples

S = timedelta(seconds=1)
LEASE_S = 20


@pytest.fixture(autouse=True)
def fresh_stores():
    STORES.clear()
    yield
    STORES.clear()


def lapse(owner: str) -> None:
    """``owner`` stopped: its leases and its last sign of life are a lease in the past."""
    past = f"now() - interval '{LEASE_S + 1} seconds'"
    with connection.cursor() as cursor:
        cursor.execute(f"UPDATE alerts_evaluatorshard SET lease_until = {past} "
                       "WHERE owner = %s", [owner])
        cursor.execute(f"UPDATE alerts_evaluator SET seen_at = {past} WHERE name = %s",
                       [owner])


def owners() -> dict[int, str]:
    return dict(EvaluatorShard.objects.values_list("index", "owner"))


def test_lanes_cut_a_shard_and_every_host_is_in_one_lane_of_one_shard():
    for n, lanes in ((1, 2), (2, 2), (3, 2), (4, 3)):
        parts = [lane for i in range(n) for lane in Shard(i, n).lanes(lanes)]
        for host in range(200):
            holding = [p for p in parts if p.holds(host)]
            assert len(holding) == 1, (n, lanes, host)
            assert Shard(holding[0].index % n, n).holds(host)
    assert Shard(1, 2).lanes(1) == [Shard(1, 2)]
    assert WHOLE.lanes(1) == [WHOLE]


def test_two_workers_share_the_shards_and_a_newcomer_gets_its_share(db):
    assert leases.hold("worker-a", 4, LEASE_S) == [0, 1, 2, 3]  # alone: all of them
    assert leases.hold("worker-b", 4, LEASE_S) == []  # a's leases hold: nothing free yet
    assert leases.hold("worker-a", 4, LEASE_S) == [0, 1]  # two live: a gives two back
    assert leases.hold("worker-b", 4, LEASE_S) == [2, 3]
    assert leases.hold("worker-a", 4, LEASE_S) == [0, 1]  # steady: each renews its own
    assert leases.hold("worker-b", 4, LEASE_S) == [2, 3]
    assert owners() == {0: "worker-a", 1: "worker-a", 2: "worker-b", 3: "worker-b"}


def test_a_lost_worker_s_shards_go_to_a_live_one_once_the_lease_lapses(db):
    leases.hold("worker-a", 2, LEASE_S)
    leases.hold("worker-b", 2, LEASE_S)
    leases.hold("worker-a", 2, LEASE_S)
    assert leases.hold("worker-b", 2, LEASE_S) == [1]
    assert leases.hold("worker-b", 2, LEASE_S) == [1]  # a's lease still runs: b waits
    lapse("worker-a")
    assert leases.hold("worker-b", 2, LEASE_S) == [0, 1]
    assert owners() == {0: "worker-b", 1: "worker-b"}
    # a comes back (it was only slow): its renewal finds shard 0 taken
    assert leases.renew("worker-a", [0], LEASE_S) == []
    assert leases.renew("worker-b", [0, 1], LEASE_S) == [0, 1]


def test_the_default_lease_lapses_before_the_second_tick_after_the_last_renewal(settings):
    settings.PITWALL = {**settings.PITWALL, "ALERT_EVAL_INTERVAL_S": 10, "ALERT_EVAL_LEASE_S": 0}
    assert leases.lease_seconds() == 15
    settings.PITWALL = {**settings.PITWALL, "ALERT_EVAL_LEASE_S": 40}
    assert leases.lease_seconds() == 40


def test_a_worker_that_stops_in_order_hands_its_shards_back_at_once(db):
    leases.hold("worker-a", 2, LEASE_S)
    leases.release("worker-a")
    assert not Evaluator.objects.filter(name="worker-a").exists()
    assert leases.hold("worker-b", 2, LEASE_S) == [0, 1]


def test_a_shard_reads_the_raw_rows_of_its_hosts_only(empty_samples):
    nodes = [make_node(f"node-{i}") for i in range(4)]
    for node in nodes:
        for gpu in node.gpus:
            samples("gpu", {"gpu_id": gpu.id}, lambda ts: {"temp_c": 70.0}, T0 - minutes(1))
        samples("host", {"host_id": node.host.id}, lambda ts: {"cpu_pct": 5.0}, T0 - minutes(1))
    for entity, metric, owner in (("gpu", "gpu.temp_c", lambda n: [g.id for g in n.gpus]),
                                  ("host", "host.cpu_pct", lambda n: [n.host.id])):
        reading = Reading(entity, (column_for(find_metric(metric)),))
        with connection.cursor() as cursor:
            keys = [set(read(cursor.cursor, reading, T0 - minutes(1), T0, shard).key.tolist())
                    for shard in (WHOLE, Shard(0, 2), Shard(1, 2))]
        assert keys[1] | keys[2] == keys[0] and not keys[1] & keys[2]
        assert keys[1] == {k for n in nodes if n.host.id % 2 == 0 for k in owner(n)}
        assert keys[1] and keys[2]


def hot_fleet() -> tuple[AlertRule, list]:
    """Four hosts of two GPUs, every GPU hot from 5 minutes before T0 to a minute after."""
    nodes = [make_node(f"node-{i}") for i in range(4)]
    for node in nodes:
        for gpu in node.gpus:
            samples("gpu", {"gpu_id": gpu.id}, lambda ts: {"temp_c": 91.0}, T0 - minutes(5),
                    T0 + minutes(1))
    hot = rule(metric="gpu.temp_c", aggregation="avg", window_s=60, op=">", threshold=85,
               for_s=20)
    return hot, nodes


def outcome(hot: AlertRule) -> tuple[dict, dict]:
    """Per target: its alert rows' states (one each, if none was written twice), and its
    transitions."""
    states: dict[str, list[str]] = {}
    for alert in Alert.objects.filter(rule=hot):
        states.setdefault(alert.target, []).append(alert.state)
    moves: dict[str, list[str]] = {}
    for event in AlertEvent.objects.filter(alert__rule=hot).order_by("at", "id"):
        moves.setdefault(event.alert.target, []).append(f"{event.from_state}>{event.to_state}")
    return states, moves


def forget_evaluation(hot: AlertRule) -> None:
    Alert.objects.filter(rule=hot).delete()
    ShardClaim.objects.all().delete()
    AlertRule.objects.filter(id=hot.id).update(last_evaluated_at=None)
    STORES.clear()
    with connection.cursor() as cursor:
        cursor.execute(f"DELETE FROM {STATE_TABLE}")


def test_shards_evaluated_apart_give_the_whole_fleet_s_alerts(empty_samples):
    hot, nodes = hot_fleet()
    instants = [T0 + k * 10 * S for k in range(4)]
    for now in instants:
        for index in (1, 0):
            evaluate(now, rule_ids=[hot.id], shard=Shard(index, 2))
        if now == T0:  # each shard stepped its own hosts' alerts only
            assert {a.host_id % 2 for a in Alert.objects.filter(rule=hot)} == {0, 1}
    sharded = outcome(hot)
    forget_evaluation(hot)
    for now in instants:
        evaluate(now, rule_ids=[hot.id])
    assert sharded == outcome(hot)
    assert len(sharded[0]) == 8 and all(s == ["firing"] for s in sharded[0].values())


def test_a_shard_s_cycle_steps_its_hosts_alerts_and_leaves_the_others(empty_samples):
    hot, nodes = hot_fleet()
    evaluate(T0, rule_ids=[hot.id], shard=Shard(0, 2))
    evaluate(T0 + 30 * S, rule_ids=[hot.id], shard=Shard(0, 2))
    evaluate(T0, rule_ids=[hot.id], shard=Shard(1, 2))
    states = {a.host_id % 2: a.state for a in Alert.objects.filter(rule=hot)}
    assert states == {0: "firing", 1: "pending"}
    # a repeated cycle of a shard for the same instant does nothing
    assert evaluate(T0 + 30 * S, rule_ids=[hot.id], shard=Shard(0, 2)).rules == 0
    assert evaluate(T0 + 30 * S, rule_ids=[hot.id], shard=Shard(1, 2)).rules == 1


def test_a_worker_lost_mid_episode_its_shard_moves_and_no_alert_is_lost_or_doubled(
        empty_samples, settings):
    """Worker a holds shard 0 and b shard 1; a dies after T0 + 10 s. b takes shard 0 at the
    first tick after the lease lapses, with new slices (a new process's), and carries a's
    pending alerts to firing: one alert per target, each transition once."""
    settings.PITWALL = {**settings.PITWALL, "ALERT_EVAL_SHARDS": 2,
                        "ALERT_EVAL_LEASE_S": LEASE_S}
    hot, nodes = hot_fleet()
    AlertRule.objects.exclude(id=hot.id).update(enabled=False)
    leases.hold("worker-a", 2)  # a starts alone, then b: a gives shard 1 back
    leases.hold("worker-b", 2)
    for now in (T0, T0 + 10 * S):
        evaluate_held("worker-a", now)
        evaluate_held("worker-b", now)
    assert owners() == {0: "worker-a", 1: "worker-b"}
    assert {a.host_id % 2: a.state for a in Alert.objects.filter(rule=hot)} == {
        0: "pending", 1: "pending"}
    lapse("worker-a")
    STORES.clear()  # b's slices of shard 0 are a new process's: none
    held = evaluate_held("worker-b", T0 + 30 * S)
    assert owners() == {0: "worker-b", 1: "worker-b"} and len(held) == 2
    evaluate_held("worker-b", T0 + 40 * S)
    states, moves = outcome(hot)
    assert len(states) == 8 and all(s == ["firing"] for s in states.values())
    assert all(m == ["inactive>pending", "pending>firing"] for m in moves.values()), moves
    claims = ShardClaim.objects.filter(shards=2, rule=hot)
    assert {c.index: c.evaluated_at for c in claims} == {0: T0 + 40 * S, 1: T0 + 40 * S}
    assert set(EvaluatorShard.objects.values_list("evaluated_at", flat=True)) == {T0 + 40 * S}
