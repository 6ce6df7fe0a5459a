"""Redis (the broker) goes away under a real Celery beat and worker, and comes back.

Beat, worker and a private redis-server run as subprocesses on the test database, with the
evaluation every second. While Redis is stopped a GPU runs hot: beat evaluates the rules
itself (controlplane/beat.py), the alert fires and its webhook is delivered, all without the
broker. Redis starts again on the same port: neither process is restarted, and the worker runs
beat's tasks again, the delayed rollup first.
"""

from __future__ import annotations

import time

import pytest

from controlplane.alerts.models import AlertEvent, AlertRule
from controlplane.fleet.models import Gpu, Host
from tests.alerts.delivery.helpers import route_to_webhook
from tests.e2e.test_celery_alerts import Feed, alertnames, status_of
from tests.support.live import (
    HookReceiver,
    Process,
    RedisServer,
    celery_worker_and_beat,
    server_env,
)
from tests.support.polling import wait_until

pytestmark = pytest.mark.slow(seconds=40)

HOT = "E2E broker down: GPU hot"


def make_rule_and_route(receiver: HookReceiver) -> None:
    AlertRule.objects.update(enabled=False)  # only this test's rule
    rule = AlertRule(name=HOT, metric="gpu.temp_c", aggregation="max", window_s=5, op=">",
                     threshold=85, for_s=2, severity="critical", summary="{host}: {value:.0f}")
    rule.full_clean()
    rule.save()
    route_to_webhook(HOT, receiver.url, name="e2e-broker-down", secret="s3cret-broker")


def ran_by_worker(worker: Process, task: str, after: int) -> int:
    """How many runs of ``task`` the worker's log shows past its first ``after`` characters."""
    return worker.output()[after:].count(f"{task}[") // 2  # "received" and "succeeded"


def test_alerts_fire_while_redis_is_down_and_beat_and_worker_go_on_when_it_returns(
        empty_samples, tmp_path):
    gpu = Gpu.objects.create(host=Host.objects.create(hostname="broker-down-host"), index=0,
                             uuid="GPU-broker-down-0")
    receiver = HookReceiver().start()
    make_rule_and_route(receiver)
    broker = RedisServer(tmp_path)
    broker.start()
    env = {**server_env(), "REDIS_URL": broker.url, "CELERY_BROKER_URL": broker.url,
           "PITWALL_ALERT_EVAL_INTERVAL_S": "1", "PITWALL_ALERT_DISPATCH_INTERVAL_S": "1",
           "PITWALL_ROLLUP_INTERVAL_S": "2", "PITWALL_ALERT_ALLOW_PRIVATE_WEBHOOKS": "true"}
    worker, beat = celery_worker_and_beat(env, tmp_path, concurrency=1, loglevel="info")
    feed = Feed(gpu)
    rule = AlertRule.objects.get(name=HOT)

    def logs() -> str:
        return f"beat:\n{beat.output()[-6000:]}\nworker:\n{worker.output()[-6000:]}"

    def firing_webhook():
        feed.tick(95.0, 300.0)
        return next((p for p in receiver.posts if status_of(p) == "firing"), None)

    try:
        wait_until(lambda: ran_by_worker(worker, "evaluate_rules", 0), 60, logs)
        broker.stop()
        stopped = time.time()
        wait_until(lambda: "the broker is unreachable" in beat.output(), 30, logs)
        fired = wait_until(firing_webhook, 60, lambda: f"no webhook while down\n{logs()}")
        evaluated_while_down = AlertRule.objects.get(id=rule.id).last_evaluated_at.timestamp()
        worker_log_at = len(worker.output())
        broker.start()
        restarted = time.time()
        wait_until(lambda: "the broker answers again" in beat.output(), 30, logs)
        wait_until(lambda: ran_by_worker(worker, "roll_up", worker_log_at), 90, logs)
        alive = [p.proc.poll() is None for p in (beat, worker)]
    finally:
        beat.stop()
        worker.stop()
        broker.stop()
        receiver.stop()

    assert stopped < fired["at"] < restarted  # fired and delivered with no broker
    assert alertnames(fired) == {HOT}
    assert stopped < evaluated_while_down < restarted
    moved = AlertEvent.objects.filter(alert__rule=rule, to_state="firing").get()
    assert stopped < moved.at.timestamp() < restarted
    outage_lines = [line for line in beat.output().splitlines() if "controlplane.beat" in line
                    or "the broker" in line]
    assert "roll-up x" in outage_lines[-1]  # the rollups it delayed are named
    assert alive == [True, True]  # the same processes throughout: none was restarted
