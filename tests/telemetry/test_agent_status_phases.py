"""The phases of a deployment's start, as its agent reports them in /api/v1/agent/status, are
stored on the deployment; a report with a bad phase is refused naming the field, nothing of it
stored."""

from __future__ import annotations

import pytest

from agents import vllm_args
from controlplane.fleet import deployments
from controlplane.fleet.models import Deployment, Gpu
from controlplane.fleet.tokens import issue_agent_token
from tests.support.clients import bearer_client

PHASES = {"process_start": 1764770000.25, "weights_loaded": 1764770012.5,
          "kv_profiled": 1764770030.0, "graphs_captured": 1764770039.75,
          "api_ready": 1764770041.0}


@pytest.fixture
def replica(db):
    token, host = issue_agent_token("gpu-node-1")
    Gpu.objects.create(host=host, uuid="GPU-1", index=0, name="NVIDIA H100", mem_total_bytes=1)
    deployment = Deployment(host=host, name="llama-8b", model="meta-llama/Llama-3.1-8B-Instruct",
                            port=8000, gpu_indices=[0], vllm_version=vllm_args.DEFAULT_VERSION)
    deployments.save(deployment, reason="a test")
    return deployment, bearer_client(token)


def report(deployment: Deployment, **changes) -> dict:
    return {"deployments": [{"id": deployment.pk, "revision": 1, "state": "ready",
                             "since": 1764770041.0, "pid": 4242, **changes}]}


def test_the_reported_phases_are_stored(replica):
    deployment, agent = replica
    reply = agent.post("/api/v1/agent/status", report(deployment, phases=PHASES), format="json")
    assert reply.status_code == 200, reply.json()
    deployment.refresh_from_db()
    assert deployment.start_phases == PHASES


def test_a_start_reports_only_the_phases_it_has_reached(replica):
    deployment, agent = replica
    agent.post("/api/v1/agent/status", report(deployment, phases=PHASES), format="json")
    starting = {"process_start": 1764770100.0}
    agent.post("/api/v1/agent/status", report(deployment, state="starting", phases=starting),
               format="json")
    deployment.refresh_from_db()
    assert deployment.start_phases == starting  # the new start's, not the old one's


def test_an_agent_from_before_phases_stores_none(replica):
    deployment, agent = replica
    Deployment.objects.filter(pk=deployment.pk).update(start_phases=PHASES)
    reply = agent.post("/api/v1/agent/status", report(deployment), format="json")
    assert reply.status_code == 200
    deployment.refresh_from_db()
    assert deployment.start_phases == {}


@pytest.mark.parametrize(("phases", "words"), [
    ({"compile_done": 1764770000.0}, "unknown phase 'compile_done'"),
    ({"x" * 5000: 1.0}, "unknown phase 'xxxxxxxx"),
    ({"api_ready": -1.0}, "greater than or equal to 0"),
    ({"api_ready": 5e9}, "less than or equal to 4102444800"),
    ({"api_ready": "soon"}, "valid number"),
    ({"api_ready": None}, "may not be null"),
    (["process_start"], "dictionary"),
])
def test_a_bad_phase_is_refused_naming_the_field_and_nothing_is_stored(replica, phases, words):
    deployment, agent = replica
    reply = agent.post("/api/v1/agent/status", report(deployment, phases=phases),
                       format="json")
    assert reply.status_code == 400
    assert "phases" in str(reply.json()) and words in str(reply.json()), reply.json()
    assert len(str(reply.json())) < 1000  # a long name is not echoed back whole
    deployment.refresh_from_db()
    assert deployment.start_phases == {} and deployment.state == "unknown"

