"""Migration 0009 renames the kind of existing channels: "alertmanager" (a webhook in
Alertmanager's format) becomes "alertmanager_webhook"; the config stays as it was."""

from __future__ import annotations

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

BEFORE = [("alerts", "0008_drop_slice_tables")]
AFTER = [("alerts", "0009_alertmanager_api")]


@pytest.mark.django_db(transaction=True)
def test_existing_alertmanager_channels_become_alertmanager_webhook_and_back():
    executor = MigrationExecutor(connection)
    executor.migrate(BEFORE)
    old = MigrationExecutor(connection).loader.project_state(BEFORE).apps
    config = {"url": "https://hooks.example.com/am", "max_alerts": 5}
    old.get_model("alerts", "Channel").objects.create(name="am", kind="alertmanager",
                                                      config=config)
    old.get_model("alerts", "Channel").objects.create(name="hook", kind="webhook",
                                                      config={"url": "https://x", "secret": "s"})
    try:
        executor = MigrationExecutor(connection)
        executor.migrate(AFTER)
        new = executor.loader.project_state(AFTER).apps.get_model("alerts", "Channel")
        assert dict(new.objects.values_list("name", "kind")) == {
            "am": "alertmanager_webhook", "hook": "webhook"}
        assert new.objects.get(name="am").config == config

        executor = MigrationExecutor(connection)
        executor.migrate(BEFORE)
        back = executor.loader.project_state(BEFORE).apps.get_model("alerts", "Channel")
        assert back.objects.get(name="am").kind == "alertmanager"
    finally:
        executor = MigrationExecutor(connection)
        executor.loader.build_graph()
        executor.migrate(executor.loader.graph.leaf_nodes())
