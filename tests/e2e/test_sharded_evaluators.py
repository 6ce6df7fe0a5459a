"""Evaluator shards over real Celery workers: beat's tick reaches both through the broadcast
queue, each holds one shard, and when one is SIGKILLed the other takes its hosts over within a
couple of cycles, with no alert lost or written twice.

Two workers (one process each, named nodes), beat and a private Redis run as subprocesses on
the test database, evaluating every second with 2 shards and a 3-s lease. Four hosts of two
GPUs run hot for the whole test (their rows are written ahead, stamped up to three minutes
on), so the rule fires on every GPU at its first cycle and keeps holding.
"""

from __future__ import annotations

import signal
from datetime import UTC, datetime, timedelta

import psutil
import pytest

from controlplane.alerts.models import Alert, AlertEvent, AlertRule, EvaluatorShard, ShardClaim
from tests.support.alert_data import make_node, rule, samples
from tests.support.live import Process, RedisServer, celery_worker_and_beat, server_env
from tests.support.polling import wait_until

pytestmark = pytest.mark.slow(seconds=15)

LEASE_S = 3


def owners() -> dict[int, str]:
    return dict(EvaluatorShard.objects.filter(index__lt=2).values_list("index", "owner"))


def claimed_at(index: int) -> datetime | None:
    claim = ShardClaim.objects.filter(shards=2, index=index).order_by("-evaluated_at").first()
    return claim.evaluated_at if claim else None


def kill_tree(process: Process) -> None:
    """SIGKILL a worker and its pool process: a machine lost, no shutdown handler runs."""
    main = psutil.Process(process.proc.pid)
    for proc in [*main.children(recursive=True), main]:
        proc.send_signal(signal.SIGKILL)
    process.proc.wait()


def test_a_killed_evaluator_s_shard_moves_to_the_other_worker_and_no_alert_is_lost_or_doubled(
        empty_samples, tmp_path):
    AlertRule.objects.update(enabled=False)
    now = datetime.now(UTC)
    for i in range(4):
        for gpu in make_node(f"shard-node-{i}", last_seen=now).gpus:
            samples("gpu", {"gpu_id": gpu.id}, lambda ts: {"temp_c": 92.0},
                    now - timedelta(minutes=2), now + timedelta(minutes=3))
    hot = rule(metric="gpu.temp_c", aggregation="max", window_s=10, op=">", threshold=85)
    broker = RedisServer(tmp_path)
    broker.start()
    env = {**server_env(), "REDIS_URL": broker.url, "CELERY_BROKER_URL": broker.url,
           "PITWALL_ALERT_EVAL_INTERVAL_S": "1", "PITWALL_ALERT_EVAL_SHARDS": "2",
           "PITWALL_ALERT_EVAL_LEASE_S": str(LEASE_S)}
    worker_a, beat = celery_worker_and_beat(env, tmp_path, concurrency=1, name="eval-a")
    worker_b = Process(worker_a.argv[:-2] + ["-n", "eval-b@%h"], env=env,
                       log=tmp_path / "worker-b.log")
    processes = [beat, worker_a, worker_b]

    def explain(what: str):
        return lambda: (f"{what}: shards {owners()}\n{worker_a.output()[-3000:]}\n"
                        f"{worker_b.output()[-3000:]}\n{beat.output()[-2000:]}")

    try:
        # Both workers hear each tick: each ends up holding one shard.
        split = wait_until(lambda: (lambda o: o if len(set(o.values())) == 2 and all(
            o.values()) else None)(owners()), 60, explain("never split"))
        a_name = next(name for name in split.values() if name.startswith("eval-a@"))
        a_shard = next(index for index, name in split.items() if name == a_name)
        wait_until(lambda: Alert.objects.filter(rule=hot, state="firing").count() == 8, 30,
                   explain("not every GPU fired"))
        kill_tree(worker_a)
        killed = datetime.now(UTC)
        taken = wait_until(lambda: set(owners().values()) == {owners()[1 - a_shard]}, 30,
                           explain("the lost worker's shard was not taken over"))
        took_s = (datetime.now(UTC) - killed).total_seconds()
        wait_until(lambda: (claimed_at(a_shard) or killed) > killed + timedelta(seconds=2),
                   30, explain("the taken shard was not evaluated again"))
    finally:
        for process in processes:
            process.stop()
        broker.stop()

    assert taken, took_s
    alerts = list(Alert.objects.filter(rule=hot))
    assert len(alerts) == len({a.target for a in alerts}) == 8
    assert all(a.state == "firing" for a in alerts)
    moves = list(AlertEvent.objects.filter(alert__rule=hot).values_list("alert__target",
                                                                        "to_state"))
    assert sorted(moves) == sorted((a.target, "firing") for a in alerts)
