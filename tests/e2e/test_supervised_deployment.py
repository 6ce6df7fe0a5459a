"""End to end: a deployment created through the API is started by a real agent process (its
supervisor runs the simulated vLLM), reported back, changed by a graceful restart, scraped as an
engine, and stopped when deleted."""

from __future__ import annotations

import os

import pytest
from rest_framework.test import APIClient

from controlplane.fleet.models import Deployment, Engine, Gpu, Host
from controlplane.fleet.tokens import issue_agent_token, issue_api_token
from tests.support.live import free_port, sim_agent, start_server
from tests.support.polling import wait_until
from tests.support.roles import user_with_role

# Real processes or minutes of work: `make test` runs them, `make test-fast` leaves them
# out; seconds: about what each test takes (slow tests start first, the longest first).
pytestmark = pytest.mark.slow(seconds=12)


@pytest.fixture
def supervised_stack(empty_samples, tmp_path):
    user_with_role("lead", "deployer")
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {issue_api_token('lead')}")
    port = free_port()
    token_file = tmp_path / "token"
    token_file.write_text(issue_agent_token("supervised-host")[0])
    server = start_server(port, tmp_path / "server.log")
    agent = sim_agent(port, token_file, "supervised-host", tmp_path / "spool", gpus=2,
                      interval=0.5, extra=("--supervise",), log=tmp_path / "agent.log")
    yield api, agent
    agent.stop()
    server.stop()


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def reported(pk: int, revision: int):
    d = Deployment.objects.filter(pk=pk, state="ready", running_revision=revision).first()
    return d if d and d.pid else None


def test_a_deployment_runs_reports_changes_gracefully_and_stops(supervised_stack):
    api, agent = supervised_stack
    host = Host.objects.get(hostname="supervised-host")
    wait_until(lambda: Gpu.objects.filter(host=host).count() == 2, 60, agent.output)
    port = free_port()
    made = api.post("/api/v1/deployments/", {
        "host": host.pk, "name": "llama-8b", "model": "meta-llama/Llama-3.1-8B-Instruct",
        "port": port, "gpu_indices": [1], "vllm_version": "0.33.0", "cpus": [0],
        "args": {"max_num_seqs": 32, "enable_prefix_caching": True}, "drain_timeout_s": 10,
        "reason": "e2e"}, format="json")
    assert made.status_code == 201, made.json()
    pk = made.json()["id"]

    first = wait_until(lambda: reported(pk, 1), 60, agent.output)
    assert first.running_argv[first.running_argv.index("--max-num-seqs") + 1] == "32"
    assert any("simulated" in line for line in first.log_tail)
    # Scraped as an engine, and its memory claim lands on GPU 1 (CUDA_VISIBLE_DEVICES=1).
    engine = wait_until(lambda: Engine.objects.filter(
        host=host, name=f"vllm:{port}/0").exclude(gpu_uuids=[]).first(), 60, agent.output)
    assert engine.gpu_uuids == [Gpu.objects.get(host=host, index=1).uuid]

    changed = api.patch(f"/api/v1/deployments/{pk}/",
                        {"args": {"max_num_seqs": 64, "enable_prefix_caching": True},
                         "reason": "more concurrency"}, format="json")
    assert changed.status_code == 200 and changed.json()["revision"] == 2
    second = wait_until(lambda: reported(pk, 2), 60, agent.output)
    assert second.running_argv[second.running_argv.index("--max-num-seqs") + 1] == "64"
    assert second.pid != first.pid
    wait_until(lambda: not alive(first.pid), 30, agent.output)

    assert api.delete(f"/api/v1/deployments/{pk}/").status_code == 204
    wait_until(lambda: not alive(second.pid), 60, agent.output)
    assert agent.stop() == 0
    assert "Traceback" not in agent.output()
