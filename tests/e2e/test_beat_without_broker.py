"""Beat's scheduler (controlplane/beat.py) against a real Redis that the test stops and starts.

The scheduler runs in the test process on the test database, with a Celery app of its own
whose broker is a private redis-server: while it is stopped, a tick of the alert cycle's entry
evaluates the rules here (``last_evaluated_at`` advances) and a rollup tick is only counted;
once Redis is back, the next publish ends the outage and the delayed rollup is sent (it is in
Redis's queue, a message a worker would take); beat evaluates a while more, then publishes.
"""

from __future__ import annotations

import json
import logging
import os
import signal

import pytest
import redis
from celery import Celery
from django.utils import timezone

from controlplane.alerts.models import AlertRule
from controlplane.beat import Scheduler
from tests.support.live import RedisServer

pytestmark = pytest.mark.slow(seconds=12)

EVALUATE = "controlplane.alerts.tasks.evaluate_rules"
ROLL_UP = "controlplane.telemetry.tasks.roll_up"


def beat_app(url: str) -> Celery:
    app = Celery("beat-test", broker=url, set_as_current=False)
    app.conf.beat_schedule = {
        "evaluate-alert-rules": {"task": EVALUATE, "schedule": 3600.0},
        "roll-up": {"task": ROLL_UP, "schedule": 3600.0},
    }
    return app


def queued_tasks(url: str) -> list[str]:
    """The task names of the messages waiting in the default queue."""
    client = redis.Redis.from_url(url)
    try:
        return [json.loads(raw)["headers"]["task"] for raw in client.lrange("celery", 0, -1)]
    finally:
        client.close()


def due_now(scheduler: Scheduler, name: str) -> None:
    """Send one entry as a tick does when it is due."""
    entry = scheduler.schedule[name]
    scheduler.apply_entry(scheduler.reserve(entry), producer=scheduler.producer)


@pytest.fixture
def broker(tmp_path):
    server = RedisServer(tmp_path)
    server.start()
    yield server
    server.stop()


def test_while_redis_is_down_beat_evaluates_the_rules_itself_and_sends_the_rest_when_it_returns(
        transactional_db, broker, tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="controlplane.beat")
    rules = AlertRule.objects.filter(enabled=True)
    assert rules.exists()  # the default pack
    scheduler = Scheduler(beat_app(broker.url), schedule_filename=str(tmp_path / "schedule"))
    due_now(scheduler, "evaluate-alert-rules")  # Redis up: published, not run here
    assert queued_tasks(broker.url) == [EVALUATE]
    assert not rules.filter(last_evaluated_at__isnull=False).exists()

    broker.stop()
    before = timezone.now()
    due_now(scheduler, "evaluate-alert-rules")
    due_now(scheduler, "roll-up")
    assert scheduler.outage.down
    assert not rules.exclude(last_evaluated_at__gte=before).exists()  # evaluated by beat
    assert scheduler.outage.delayed == {"roll-up": 1}

    broker.start()  # same port, empty
    scheduler.outage.next_probe = 0  # the probe interval has passed
    due_now(scheduler, "evaluate-alert-rules")
    assert not scheduler.outage.down
    assert sorted(queued_tasks(broker.url)) == sorted([EVALUATE, ROLL_UP])  # caught up
    # The worker may still be reconnecting: beat goes on evaluating for a while.
    before = timezone.now()
    due_now(scheduler, "evaluate-alert-rules")
    assert not rules.exclude(last_evaluated_at__gte=before).exists()
    assert sorted(queued_tasks(broker.url)) == sorted([EVALUATE, ROLL_UP])
    scheduler.outage.cycle_here_until = 0  # WORKER_RECONNECT_S has passed
    due_now(scheduler, "evaluate-alert-rules")
    assert sorted(queued_tasks(broker.url)) == sorted([EVALUATE, EVALUATE, ROLL_UP])
    lines = [r.getMessage() for r in caplog.records if r.name == "controlplane.beat"]
    assert len(lines) == 2, lines  # one when it went, one when it returned
    assert "unreachable" in lines[0]
    assert "answers again" in lines[1] and "roll-up x1" in lines[1]


def test_beat_started_while_redis_is_down_runs_the_alert_cycle_instead_of_waiting(
        transactional_db, broker, tmp_path):
    broker.stop()
    scheduler = Scheduler(beat_app(broker.url), schedule_filename=str(tmp_path / "schedule"))
    before = timezone.now()
    due_now(scheduler, "evaluate-alert-rules")  # stock Celery waits here for a connection
    assert scheduler.outage.down
    assert not AlertRule.objects.filter(enabled=True).exclude(
        last_evaluated_at__gte=before).exists()


def test_a_silent_redis_does_not_hold_beat_up(transactional_db, broker, tmp_path):
    """A stalled Redis (SIGSTOP: connections open, no answer, no reset) as a network
    partition looks: a publish gives up after its socket timeout instead of waiting forever,
    and beat evaluates the rules itself."""
    scheduler = Scheduler(beat_app(broker.url), schedule_filename=str(tmp_path / "schedule"))
    due_now(scheduler, "evaluate-alert-rules")  # connected, published
    os.kill(broker.proc.pid, signal.SIGSTOP)
    try:
        before = timezone.now()
        due_now(scheduler, "evaluate-alert-rules")
        due_now(scheduler, "roll-up")
    finally:
        os.kill(broker.proc.pid, signal.SIGCONT)
    assert scheduler.outage.down and scheduler.outage.delayed == {"roll-up": 1}
    assert not AlertRule.objects.filter(enabled=True).exclude(
        last_evaluated_at__gte=before).exists()
    scheduler.outage.next_probe = 0
    due_now(scheduler, "evaluate-alert-rules")
    assert not scheduler.outage.down
