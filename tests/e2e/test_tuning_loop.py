"""End to end: a real agent process runs a mis-tuned deployment (a simulated vLLM whose KV
cache is too small for its traffic); its telemetry is ingested and rolled up; a tuning pass
suggests more GPU memory for the KV cache; an operator accepts through the API; the agent
applies it by a graceful restart; follow-up marks it applied and verifies it on equal windows
before and after: preemptions are gone. Windows are a minute long here (production: 10)."""

from __future__ import annotations

import time

import pytest

from controlplane.fleet.models import Deployment, Gpu, Host
from controlplane.tuning import service
from controlplane.tuning.models import Suggestion
from tests.support.live import free_port, sim_agent, start_server
from tests.support.polling import wait_until
from tests.tuning.loop import (
    agent_token_file,
    rolled_up_follow_up,
    rolled_up_pass,
    short_windows,
    staff_api,
)

# Real processes or minutes of work: `make test` runs them, `make test-fast` leaves them
# out; seconds: about what each test takes (slow tests start first, the longest first).
pytestmark = pytest.mark.slow(seconds=220)


@pytest.fixture
def tuning_stack(empty_samples, tmp_path, settings):
    short_windows(settings)
    api = staff_api()
    token_file = agent_token_file(tmp_path, "tuned-host")
    port = free_port()
    server = start_server(port, tmp_path / "server.log")
    agent = sim_agent(port, token_file, "tuned-host", tmp_path / "spool", gpus=1, interval=1,
                      extra=("--supervise",), log=tmp_path / "agent.log")
    yield api, agent
    agent.stop()
    server.stop()


def test_accept_apply_verify_through_a_real_agent(tuning_stack):
    api, agent = tuning_stack
    host = Host.objects.get(hostname="tuned-host")
    wait_until(lambda: Gpu.objects.filter(host=host).exists(), 60, agent.output)
    made = api.post("/api/v1/deployments/", {
        "host": host.pk, "name": "llama-8b", "model": "meta-llama/Llama-3.1-8B-Instruct",
        "port": free_port(), "gpu_indices": [0], "vllm_version": "0.33.0",
        "args": {"gpu_memory_utilization": 0.27}, "drain_timeout_s": 5,
        "env": {"PITWALL_SIM_LOAD": "8", "PITWALL_SIM_SEED": "3"}}, format="json")
    assert made.status_code == 201, made.json()
    pk = made.json()["id"]
    wait_until(lambda: Deployment.objects.filter(pk=pk, state="ready").exists(), 60,
               agent.output)

    # A minute of pressure, rolled up: the pass suggests the free GPU memory for the KV cache.
    wait_until(lambda: Suggestion.objects.filter(kind="kv_pressure").exists()
               or rolled_up_pass() and False, 240, agent.output, every=5)
    s = Suggestion.objects.get(kind="kv_pressure")
    assert s.changes == [{"field": "args.gpu_memory_utilization", "current": 0.27,
                          "proposed": 0.95}], s.reasoning

    accepted = api.post(f"/api/v1/suggestions/{s.pk}/accept/")
    assert accepted.status_code == 200 and accepted.json()["revision_after"] == 2
    wait_until(lambda: Deployment.objects.filter(pk=pk, state="ready", running_revision=2)
               .exists(), 60, agent.output)
    running = Deployment.objects.get(pk=pk).running_argv
    assert running[running.index("--gpu-memory-utilization") + 1] == "0.95"

    assert service.follow_up()["applied"] == 1
    time.sleep(1)
    s = wait_until(lambda: rolled_up_follow_up()["verified"]
                   and Suggestion.objects.get(pk=s.pk), 240, agent.output, every=5)
    v = s.verification
    assert s.state == "improved", v["summary"]
    assert v["before"]["preemptions_per_s"] > 0.1 and v["after"]["preemptions_per_s"] < 0.05
    assert "preemptions_per_s" in v["summary"]
    assert agent.stop() == 0 and "Traceback" not in agent.output()
