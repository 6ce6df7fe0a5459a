"""The Celery side of tuning: beat names tasks that exist, and a pass another worker is
already running is skipped, not doubled."""

from __future__ import annotations

import psycopg
import pytest
from django.db import connection

from controlplane.celery import app
from controlplane.tuning import service
from controlplane.tuning.tasks import diagnose_deployments, follow_up_suggestions

pytestmark = pytest.mark.django_db(transaction=True)


def test_beat_schedules_the_tuning_tasks_under_their_registered_names():
    names = {entry["task"] for entry in app.conf.beat_schedule.values()}
    app.loader.import_default_modules()
    for task in (diagnose_deployments, follow_up_suggestions):
        assert task.name in names and task.name in app.tasks


def passes_timed() -> float:
    from prometheus_client import REGISTRY

    return REGISTRY.get_sample_value("pitwall_tuning_pass_seconds_count") or 0.0


def test_the_tasks_run_a_pass_and_a_follow_up():
    before = passes_timed()
    assert diagnose_deployments.apply().get() == {
        "deployments": 0, "diagnosed": 0, "engines": 0, "created": [], "refreshed": 0,
        "cleared": 0, "failed": []}
    assert follow_up_suggestions.apply().get() == {"applied": 0, "verified": 0}
    assert passes_timed() == before + 1  # /metrics's pitwall_tuning_pass_seconds


def test_a_pass_running_elsewhere_makes_this_one_skip():
    db = connection.settings_dict
    other = psycopg.connect(host=db["HOST"] or "127.0.0.1", port=db["PORT"] or 5432,
                            dbname=db["NAME"], user=db.get("USER") or None, autocommit=True)
    try:
        other.execute("SELECT pg_advisory_lock(%s)", [service.LOCK_KEY])
        before = passes_timed()
        assert diagnose_deployments.apply().get() == {"skipped": True}
        assert passes_timed() == before  # a skipped pass is not timed
        # Released at once (a closed session's locks go only when its backend notices).
        other.execute("SELECT pg_advisory_unlock(%s)", [service.LOCK_KEY])
    finally:
        other.close()
    assert "skipped" not in diagnose_deployments.apply().get()
