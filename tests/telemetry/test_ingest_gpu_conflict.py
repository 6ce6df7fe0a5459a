"""A GPU UUID held by another host: refused without naming that host, logged, movable."""

from __future__ import annotations

import logging

import pytest

from controlplane.fleet import inventory as fleet_inventory
from controlplane.fleet.models import Gpu, Host
from controlplane.fleet.tokens import issue_agent_token
from tests.telemetry.factories import batch, stored_rows

UUID = "GPU-5d1c7a52-0b8e-4a44-9f3e-2c9e1f0d7a11"


def claim_gpu_of_node_2(ingest, host_token):
    """gpu-node-2 registers GPU UUID; returns a batch of gpu-node-1 that lists it too."""
    other, _ = issue_agent_token("gpu-node-2")
    theirs = batch(hostname="gpu-node-2")
    theirs["host"]["gpus"][0]["uuid"] = UUID
    theirs["samples"][0]["gpus"][0]["uuid"] = UUID
    assert ingest.post(theirs, other)[0] == 200
    body = batch(seq=5)
    body["host"]["gpus"][0]["uuid"] = UUID
    body["samples"][0]["gpus"][0]["uuid"] = UUID
    return body


def test_a_gpu_conflict_does_not_name_the_other_host_and_is_logged(ingest, host_token,
                                                                   caplog):
    body = claim_gpu_of_node_2(ingest, host_token)
    with caplog.at_level(logging.WARNING):
        code, reply = ingest.post(body, host_token)
    assert (code, reply["field"]) == (403, "host.gpus[0].uuid")
    assert "gpu-node-2" not in str(reply)
    assert "another host" in reply["error"]
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING
                and UUID in r.getMessage()]
    assert warnings, caplog.text
    assert "gpu-node-1" in warnings[0].getMessage()
    assert "gpu-node-2" in warnings[0].getMessage()


def test_an_admin_moves_a_gpu_and_the_new_host_may_report_it(ingest, host_token):
    body = claim_gpu_of_node_2(ingest, host_token)
    assert ingest.post(body, host_token)[0] == 403
    moved = fleet_inventory.move_gpu(UUID, "gpu-node-1")
    assert moved.host.hostname == "gpu-node-1"
    assert ingest.post(body, host_token)[0] == 200
    assert Gpu.objects.get(uuid=UUID).host.hostname == "gpu-node-1"
    with pytest.raises(Host.DoesNotExist):
        fleet_inventory.move_gpu(UUID, "ghost")


def test_a_host_that_still_lists_a_gpu_moved_away_is_refused_again(ingest, host_token):
    """gpu-node-2 held the GPU and its state is cached in the ingest process; once the GPU is
    moved, gpu-node-2's next batches (same inventory) are checked again and refused."""
    body = claim_gpu_of_node_2(ingest, host_token)
    theirs = batch(seq=2, hostname="gpu-node-2")
    theirs["host"]["gpus"][0]["uuid"] = UUID
    theirs["samples"][0]["gpus"][0]["uuid"] = UUID
    other, _ = issue_agent_token("gpu-node-2")
    assert ingest.post(theirs, other)[0] == 200
    fleet_inventory.move_gpu(UUID, "gpu-node-1")
    assert ingest.post(body, host_token)[0] == 200
    ingest.app.registry._versions_loaded = -float("inf")  # its 2-s reload, now
    gpu_rows = stored_rows()["gpu"]
    theirs["agent"]["seq"] = 3
    code, reply = ingest.post(theirs, other)
    assert (code, reply["field"]) == (403, "host.gpus[0].uuid")
    assert stored_rows()["gpu"] == gpu_rows
