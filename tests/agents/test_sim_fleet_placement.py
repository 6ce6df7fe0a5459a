"""The simulated fleet (`python -m agents.sim fleet --supervise`, real agents) against the real
server: each host reports what placement chooses by (its own port range, 127.0.0.1, its zone,
its cached models), and a deployment it runs reports the phases of its start."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from agents import vllm_args
from agents.sim import fleet
from agents.supervisor.phases import PHASES
from controlplane.fleet import deployments
from controlplane.fleet.models import Deployment, Gpu, Host
from controlplane.fleet.tokens import issue_agent_token
from tests.support.live import Process, free_port, start_server
from tests.support.polling import wait_until

pytestmark = pytest.mark.slow(seconds=20)
HOSTS = 2


@pytest.fixture
def sim_fleet(empty_samples, tmp_path: Path):
    tokens = tmp_path / "tokens"
    tokens.mkdir()
    for i in range(1, HOSTS + 1):
        (tokens / fleet.host_name(i)).write_text(issue_agent_token(fleet.host_name(i))[0])
    port = free_port()
    server = start_server(port, tmp_path / "server.log")
    running = Process([sys.executable, "-m", "agents.sim", "fleet", "--hosts", str(HOSTS),
                       "--gpus", "2", "--server", f"http://127.0.0.1:{port}",
                       "--token-dir", str(tokens), "--state-dir", str(tmp_path / "state"),
                       "--interval", "0.5", "--supervise", "--sim-start-s", "2"],
                      log=tmp_path / "fleet.log")
    yield running
    running.stop()
    server.stop()


def reported(hostname: str) -> Host | None:
    host = Host.objects.filter(hostname=hostname).first()
    return host if host is not None and "port_range" in (host.inventory or {}) else None


def test_each_simulated_host_reports_its_placement_facts_and_its_starts_phases(sim_fleet):
    one, two = (wait_until(lambda i=i: reported(fleet.host_name(i)), 60, sim_fleet.output)
                for i in (1, 2))
    assert one.inventory["port_range"] == [20100, 20199]
    assert two.inventory["port_range"] == [20200, 20299]
    assert one.inventory["address"] == two.inventory["address"] == "127.0.0.1"
    assert one.all_labels() == {"zone": "zone-a", "pool": "online"}
    assert two.all_labels() == {"zone": "zone-b", "pool": "online"}
    assert {m["repo"]: m["bytes"] for m in one.inventory["hf_models"]} == {
        "meta-llama/Llama-3.1-70B-Instruct": 141_107_412_992,
        "meta-llama/Llama-3.1-8B-Instruct": 16_060_522_496}
    assert one.inventory["roles"] == []

    wait_until(lambda: Gpu.objects.filter(host=one).count() == 2, 60, sim_fleet.output)
    replica = Deployment(host=one, name="llama-8b", model="meta-llama/Llama-3.1-8B-Instruct",
                         port=free_port(), gpu_indices=[0],
                         vllm_version=vllm_args.DEFAULT_VERSION, env={"PITWALL_SIM_LOAD": "0"})
    deployments.save(replica, reason="phases of a simulated start")

    def started() -> Deployment | None:
        found = Deployment.objects.get(pk=replica.pk)
        return found if "api_ready" in found.start_phases else None

    at = wait_until(started, 60, sim_fleet.output).start_phases
    assert set(at) == set(PHASES)  # the store keeps no order: the times do
    assert [at[p] for p in PHASES] == sorted(at[p] for p in PHASES)
    # The fleet's 2 s start: weights at about half of it, ready at its end (no upper bounds: a
    # loaded machine stretches the interpreter's own start).
    assert at["weights_loaded"] - at["process_start"] > 0.5
    assert at["api_ready"] - at["process_start"] > 1.8
