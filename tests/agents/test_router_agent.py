"""End to end: a real agent run with --router against the real server serves a service's
vllm-router, with the service's replicas in rotation as its workers (here: simulated vLLM
servers), reports it back, and takes a replica out within a tick of the control plane's
decision reaching it. The rotation is set by hand here, as routing.sync would set it: the
controller's own tests cover when it does."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator

import pytest
from django.db.models import F

from controlplane.fleet import routing
from controlplane.fleet.models import Deployment, Host
from controlplane.fleet.service_models import Service
from controlplane.fleet.tokens import issue_agent_token
from tests.support.live import Process, free_port, sim_agent, start_server
from tests.support.polling import wait_until

pytestmark = pytest.mark.slow(seconds=15)
MODEL = "meta-llama/Llama-3.1-8B-Instruct"
TIMEOUT_S = 60.0
_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def get_json(url: str) -> dict:
    with _OPENER.open(url, timeout=10) as reply:
        return json.loads(reply.read())


def complete(port: int) -> int:
    body = json.dumps({"model": MODEL, "prompt": "hello", "max_tokens": 2}).encode()
    request = urllib.request.Request(f"http://127.0.0.1:{port}/v1/completions", body,
                                     {"Content-Type": "application/json"})
    with _OPENER.open(request, timeout=30) as reply:
        reply.read()
        return reply.status


def router_workers(port: int) -> list[str] | None:
    try:
        return sorted(w["url"] for w in get_json(f"http://127.0.0.1:{port}/workers")["workers"])
    except OSError:
        return None


@pytest.fixture
def replicas() -> Iterator[list[int]]:
    """Two simulated vLLM servers: the replicas the router sends to."""
    ports = [free_port(), free_port()]
    procs = [subprocess.Popen([sys.executable, "-m", "agents.sim.vllm_server", "--port",
                               str(port), "--model", MODEL, "--load", "0"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
             for port in ports]
    yield ports
    for proc in procs:
        proc.terminate()
        proc.wait(timeout=TIMEOUT_S)


@pytest.fixture
def router_stack(empty_samples, tmp_path) -> Iterator[Process]:
    port = free_port()
    token_file = tmp_path / "token"
    token_file.write_text(issue_agent_token("router-host")[0])
    server = start_server(port, tmp_path / "server.log")
    agent = sim_agent(port, token_file, "router-host", tmp_path / "spool", gpus=1,
                      interval=0.5, extra=("--router", "--log-level", "info"),
                      log=tmp_path / "agent.log")
    yield agent
    agent.stop()
    server.stop()


def service_with_replicas(router_host: Host, ports: list[int]) -> Service:
    gpu_host = Host.objects.create(hostname="gpu-a", inventory={"address": "127.0.0.1"})
    service = Service.objects.create(name="llama", model=MODEL, vllm_version="0.33.0",
                                     replicas=2, router_host=router_host,
                                     router_port=free_port(), router_policy="round_robin")
    for slot, port in enumerate(ports):
        Deployment.objects.create(host=gpu_host, name=f"llama-{slot}", model=MODEL, port=port,
                                  vllm_version="0.33.0", service=service, replica=slot,
                                  state="ready", running_revision=1)
    return service


def explain(agent: Process, service: Service) -> str:
    host = Host.objects.get(pk=service.router_host_id)
    return (f"router host config_version {host.config_version}; specs "
            f"{routing.router_specs(host.pk)}; router lists {router_workers(service.router_port)}"
            f"; reported {Service.objects.get(pk=service.pk).router_status}\n{agent.output()}")


def set_rotation(service: Service, ports: list[int]) -> None:
    service.replica_set.update(in_rotation=False)
    service.replica_set.filter(port__in=ports).update(in_rotation=True)
    routing.bump_router(service)


def test_the_router_agent_serves_the_replicas_in_rotation_and_follows_them(router_stack,
                                                                            replicas):
    agent = router_stack
    host = wait_until(lambda: Host.objects.filter(
        hostname="router-host", inventory__roles=["router"]).first(), TIMEOUT_S, agent.output)
    service = service_with_replicas(host, replicas)
    urls = sorted(f"http://127.0.0.1:{port}" for port in replicas)
    set_rotation(service, replicas)

    def reported() -> dict | None:
        status = Service.objects.get(pk=service.pk).router_status
        return status if status.get("state") == "ready" and sorted(
            status.get("workers", [])) == urls else None

    status = wait_until(reported, TIMEOUT_S, agent.output)
    assert status["port"] == service.router_port and status["healthy"] is True
    assert router_workers(service.router_port) == urls
    assert all(complete(service.router_port) == 200 for _ in range(4))

    # Out of rotation: the router drops it within a batch and a fetch, no restart.
    pid = status["pid"]
    started = time.monotonic()
    set_rotation(service, replicas[:1])
    kept = [f"http://127.0.0.1:{replicas[0]}"]
    wait_until(lambda: router_workers(service.router_port) == kept, TIMEOUT_S,
               lambda: explain(agent, service), every=0.02)
    took = time.monotonic() - started
    print(f"replica out of rotation -> out of the router: {took:.2f} s")
    status = wait_until(lambda: (s := Service.objects.get(pk=service.pk).router_status)
                        .get("workers") == kept and s, TIMEOUT_S, agent.output)
    assert status["pid"] == pid
    assert complete(service.router_port) == 200

    # The service leaves this host: its router stops.
    Service.objects.filter(pk=service.pk).update(router_host=None)
    Host.objects.filter(pk=host.pk).update(config_version=F("config_version") + 1)
    wait_until(lambda: router_workers(service.router_port) is None, TIMEOUT_S, agent.output)
