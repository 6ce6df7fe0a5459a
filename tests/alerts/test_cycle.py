"""The evaluation cycle as Celery runs it: one worker at a time, every interval."""

from __future__ import annotations

import threading

from django.db import connection, transaction

from controlplane.alerts.evaluate import LOCK_KEY, evaluate
from controlplane.alerts.models import AlertRule
from controlplane.alerts.tasks import evaluate_rules
from controlplane.celery import app
from tests.alerts.conftest import T0


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
