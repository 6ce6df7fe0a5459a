"""The controller's rotation against a real vllm-router (the PyPI wheel's binary) in front of
two simulated vLLM servers: the worker URLs Pitwall writes are the ones the router keeps
(``router_lists`` compares them string for string), and a replica taken out of rotation gets
no more requests through the router.

The router agent's part (agents/router) is played here by the smallest loop that does what it
does: make the router's worker list equal the spec's workers, then report the list the router
answers. Its own tests cover the process; this one covers the contract between the two.
"""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from datetime import timedelta
from pathlib import Path

import pytest

from agents.sim.vllm_server import RunningServer, SimOptions, start
from controlplane.fleet import routing
from controlplane.fleet.models import DeploymentState, Host
from tests.fleet.controller_support import Clock, make_service, replicas, report
from tests.support.service_fleet import gpu_host, router_host

ROUTER = shutil.which("vllm-router", path=str(Path(sys.executable).parent))
pytestmark = [pytest.mark.slow(seconds=4),
              pytest.mark.skipif(ROUTER is None, reason="vllm-router is not installed")]
NO_PROXY = urllib.request.build_opener(urllib.request.ProxyHandler({}))
STARTUP_POLLS = 300  # 0.1 s apart: the router binds in well under a second


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def call(method: str, url: str, body: dict | None = None) -> dict:
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(url, data=data, method=method,
                                     headers={"Content-Type": "application/json"})
    with NO_PROXY.open(request, timeout=30) as reply:
        text = reply.read().decode()
    return json.loads(text) if text.strip().startswith(("{", "[")) else {}


class Router:
    """A vllm-router process with no worker, and the router agent's one move."""

    def __init__(self) -> None:
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.process = subprocess.Popen(
            [ROUTER, "--host", "127.0.0.1", "--port", str(self.port), "--policy",
             "round_robin", "--worker-urls", "--log-level", "warning"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        for _ in range(STARTUP_POLLS):
            try:
                self.workers()
                return
            except OSError:
                assert self.process.poll() is None, "vllm-router exited at start"
                time.sleep(0.1)
        raise AssertionError("vllm-router did not answer /workers")

    def workers(self) -> list[str]:
        return [w["url"] if isinstance(w, dict) else w
                for w in call("GET", f"{self.base}/workers").get("workers", [])]

    def follow(self, spec: dict) -> list[str]:
        """Make the worker list the spec's; the list the router then answers."""
        have, want = set(self.workers()), set(spec["workers"])
        for url in sorted(want - have):
            call("POST", f"{self.base}/add_worker?url={urllib.parse.quote(url, safe='')}")
        for url in sorted(have - want):
            call("POST", f"{self.base}/remove_worker?url={urllib.parse.quote(url, safe='')}")
        return self.workers()

    def complete(self, model: str) -> None:
        call("POST", f"{self.base}/v1/completions",
             {"model": model, "prompt": "the pit wall", "max_tokens": 2})

    def close(self) -> None:
        self.process.terminate()
        self.process.wait()


def served(server: RunningServer) -> float:
    """Completions the simulated vLLM finished, from its /metrics as vLLM counts them."""
    with NO_PROXY.open(f"http://127.0.0.1:{server.port}/metrics", timeout=30) as reply:
        text = reply.read().decode()
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith("vllm:request_success_total{"))


@pytest.fixture
def servers():
    running = [start(SimOptions(port=0, load=0.0, seed=i)) for i in range(2)]
    yield running
    for server in running:
        server.close()


@pytest.fixture
def router():
    process = Router()
    yield process
    process.close()


def test_a_real_router_follows_the_rotation(db, servers, router):
    # each host's port range is its simulated server's port: placement gives the replica it
    for i, server in enumerate(servers):
        host = gpu_host(f"gpu-{'ab'[i]}", {"pool": "online"},
                        port_range=(server.port, server.port))
        Host.objects.filter(pk=host.pk).update(inventory={**host.inventory,
                                                          "address": "127.0.0.1"})
    routes = router_host()
    service = make_service(routes, replicas=2)
    assert sorted(d.port for d in replicas(service)) == sorted(s.port for s in servers)
    for d in replicas(service):
        report(d, DeploymentState.READY, d.revision)
    clock = Clock()
    clock.tick()
    [spec] = routing.router_specs(routes.pk)
    listed = router.follow(spec)
    assert sorted(listed) == sorted(spec["workers"])  # kept exactly as Pitwall writes them
    routing.record_router_status(routes.pk, [{"service_id": service.pk, "state": "ready",
                                              "workers": listed}])
    service.refresh_from_db()
    assert all(routing.router_lists(service, d, clock.now - timedelta(minutes=1))
               for d in replicas(service))
    # replica 1 drains: out of rotation, out of the router, and the router sends it nothing
    kept, out = sorted(replicas(service), key=lambda d: d.port != servers[0].port)
    report(out, DeploymentState.DRAINING, out.revision)
    clock.tick()
    [spec] = routing.router_specs(routes.pk)
    assert router.follow(spec) == spec["workers"] == [routing.worker_url(kept)]
    model = call("GET", f"http://127.0.0.1:{servers[0].port}/v1/models")["data"][0]["id"]
    before = [served(s) for s in servers]
    for _ in range(6):
        router.complete(model)
    after = [served(s) for s in servers]
    assert after[0] - before[0] == 6 and after[1] == before[1]
