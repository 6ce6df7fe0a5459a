"""End to end: a real agent process (simulated GPUs, a simulated vLLM server) streams to the
real ASGI server; the samples are read back through the REST API."""

from __future__ import annotations

import sys

import pytest
from rest_framework.test import APIClient

from controlplane.fleet.models import Engine, Gpu, Host
from controlplane.fleet.tokens import issue_agent_token, issue_api_token
from tests.support.live import Process, free_port, sim_agent, start_server
from tests.support.polling import wait_until
from tests.support.roles import user_with_role

# Real processes or minutes of work: `make test` runs them, `make test-fast` leaves them
# out; seconds: about what each test takes (slow tests start first, the longest first).
pytestmark = pytest.mark.slow(seconds=5)


@pytest.fixture
def agent_stack(empty_samples, tmp_path, django_user_model):
    user_with_role("operator", "viewer")
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {issue_api_token('operator')}")
    port, vllm_port = free_port(), free_port()
    token_file = tmp_path / "token"
    token_file.write_text(issue_agent_token("e2e-host")[0])
    server = start_server(port, tmp_path / "server.log")
    vllm = Process([sys.executable, "-m", "agents.sim.vllm_server", "--port", str(vllm_port),
                    "--gpu-indices", "0,1", "--tensor-parallel-size", "2", "--load", "20",
                    "--seed", "7"], log=tmp_path / "vllm.log")
    agent = sim_agent(port, token_file, "e2e-host", tmp_path / "spool", gpus=3, interval=0.5,
                      extra=("--vllm-metrics-url", f"http://127.0.0.1:{vllm_port}/metrics"),
                      log=tmp_path / "agent.log")
    yield api, agent
    agent.stop()
    vllm.stop()
    server.stop()


def series(api, metric: str, entity, **params) -> list:
    reply = api.get("/api/v1/series/", {"metric": metric, "entity": entity, **params})
    assert reply.status_code == 200, reply.content
    [one] = reply.json()["series"]  # one entity asked, one series back
    return one["points"]


def test_samples_from_a_real_agent_come_back_through_the_api(agent_stack):
    api, agent = agent_stack
    host = wait_until(lambda: Host.objects.filter(hostname="e2e-host", last_seen__isnull=False)
                      .first(), 60, agent.output)
    assert host.simulated
    gpus = list(Gpu.objects.filter(host=host).order_by("index"))
    assert [g.index for g in gpus] == [0, 1, 2] and all(g.simulated for g in gpus)

    busy = wait_until(lambda: len(pts := series(api, "gpu.util_pct", gpus[0].uuid)) >= 4 and pts,
                      60, agent.output)
    stamps = [ts for ts, _ in busy]
    assert stamps == sorted(stamps) and len(set(stamps)) == len(stamps)
    assert all(0 <= value <= 100 for _, value in busy)

    # The engine runs on GPUs 0 and 1 (its processes hold memory there), not on GPU 2.
    engine = wait_until(lambda: Engine.objects.filter(host=host).exclude(gpu_uuids=[]).first(),
                        60, agent.output)
    assert sorted(engine.gpu_uuids) == sorted([gpus[0].uuid, gpus[1].uuid])
    assert engine.simulated and engine.config.get("block_size")
    idle_mem = series(api, "gpu.mem_used_bytes", gpus[2].uuid)[-1][1]
    busy_mem = series(api, "gpu.mem_used_bytes", gpus[0].uuid)[-1][1]
    assert busy_mem > 10 * idle_mem  # vLLM reserves its share of the engine's GPUs

    running = wait_until(lambda: series(api, "engine.requests_running", engine.id), 60)
    assert all(value >= 0 for _, value in running)
    p99 = wait_until(lambda: series(api, "engine.ttft_seconds", engine.id, quantile="0.99"),
                     90, agent.output)
    assert all(value > 0 for _, value in p99)

    hosts = api.get("/api/v1/hosts/").json()["results"]
    assert [(h["hostname"], h["online"], h["simulated"]) for h in hosts] == [
        ("e2e-host", True, True)]
    assert agent.stop() == 0
    assert "Traceback" not in agent.output()
