"""One server's bad data, stored as an agent sent it before ingest validated it, costs that
server its diagnosis at most, never the tuning pass for the others."""

from __future__ import annotations

import json
import logging
from datetime import timedelta

import pytest
from django.db import connection
from django.utils import timezone

from controlplane.fleet.models import Host
from controlplane.tuning import service
from controlplane.tuning.models import Suggestion
from tests.tuning.factories import deployment, gpus, host
from tests.tuning.telemetry import Target, roll_up, steady, target, watched, write

PRESSURE = {"kv_cache_usage": 0.97, "preemptions_per_s": 0.8, "requests_running": 120}


def pressed_deployment(hostname: str) -> Target:
    h = host(hostname=hostname)
    gpus(h)
    t = target(steady(deployment(h)))
    write(t, service.minute(timezone.now()) - timedelta(minutes=10), 10, engine=PRESSURE)
    return t


def store_numa_nodes(h: Host, nodes: object) -> None:
    """Written as ingest wrote it before validation: straight into the host's row."""
    with connection.cursor() as cursor:
        cursor.execute("UPDATE fleet_host SET numa_nodes = %s::jsonb WHERE id = %s",
                       [json.dumps(nodes), h.id])


def suggested_hosts() -> list[str]:
    return sorted(Suggestion.objects.values_list("deployment__host__hostname", flat=True))


@pytest.mark.parametrize("nodes", [
    [{"id": 0, "cpus": [[1]]}, {"id": 1, "cpus": list(range(16, 32))}],
    [{"id": 0, "cpus": [0, "1", None, 2.5, True]}, {"id": 1, "cpus": 7}],
    [{"id": [0], "cpus": [1]}, {"id": 1, "cpus": [2]}],
    {"id": 0},
])
def test_a_bad_numa_layout_does_not_stop_the_pass(empty_samples, nodes):
    good, spoiled = pressed_deployment("gpu-good-1"), pressed_deployment("gpu-bad-1")
    roll_up()
    store_numa_nodes(spoiled.deployment.host, nodes)

    result = service.tuning_pass()

    # both are still diagnosed: the layout's odd entries are left out
    assert result.failed == []
    assert suggested_hosts() == ["gpu-bad-1", "gpu-good-1"]
    assert good.deployment.host_id != spoiled.deployment.host_id


def test_a_server_whose_data_no_diagnosis_expects_is_left_out_and_named(empty_samples,
                                                                         caplog):
    good = pressed_deployment("gpu-good-1")
    odd = host(hostname="gpu-odd-1")
    gpus(odd)
    # an engine Pitwall does not run, whose reported config is a list, not an object
    t = watched(odd)
    with connection.cursor() as cursor:
        cursor.execute("UPDATE fleet_engine SET config = '[[1]]' WHERE id = %s", [t.engine.id])
    write(t, service.minute(timezone.now()) - timedelta(minutes=10), 10, engine=PRESSURE)
    roll_up()

    with caplog.at_level(logging.ERROR, logger="controlplane.tuning.service"):
        result = service.tuning_pass()

    assert result.failed == ["engine at gpu-odd-1:9000"]
    assert "engine at gpu-odd-1:9000 failed" in caplog.text
    [made] = Suggestion.objects.all()
    assert made.deployment == good.deployment and result.created == [made.id]
