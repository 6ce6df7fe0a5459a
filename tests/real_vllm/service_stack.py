"""A real service's stack for the real-vLLM suite: the control plane's ASGI server, one agent
(``--supervise --router``) supervising real vLLM replicas and the real vllm-router on this
host, and the service controller's tick on a thread (as beat runs it every 2 s). The fixture
``service_stack`` (conftest.py) starts it; the helpers read what it did."""

from __future__ import annotations

import json
import sys
import urllib.request
from pathlib import Path
from typing import Any

from controlplane.fleet.models import (
    Deployment,
    Host,
    Rollout,
    ScaleDecision,
    Service,
    ServiceEvent,
)
from tests.real_vllm.engine import VERSION, Install, engine_vars
from tests.support.live import Process, free_port, start_server
from tests.support.polling import wait_until
from tests.support.sim_service import Controller
from tests.tuning.loop import agent_token_file

TICK_S = 1.0


def create_service(api, agent: Process, install: Install, tmp_path: Path, args: dict,
                   **fields: Any) -> Service:
    """The service "tiny" of the tiny model, its router on a free port of this host, created
    through the API once the agent has registered the host as a router host."""
    host = wait_until(lambda: Host.objects.filter(
        hostname="cpu-host", inventory__roles__contains=["router"]).first(), 120, agent.output)
    made = api.post("/api/v1/services/", {
        "name": "tiny", "model": str(install.model), "vllm_version": VERSION, "args": args,
        "env": engine_vars(tmp_path / "engine"), "router_host": host.pk,
        "router_port": free_port(), **fields}, format="json")
    assert made.status_code == 201, made.json()
    return Service.objects.get(pk=made.json()["id"])


def explain(agent: Process, name: str = "tiny"):
    def text() -> str:
        service = Service.objects.filter(name=name).first()
        replicas = list(Deployment.objects.filter(service=service).values(
            "replica", "state", "revision", "running_revision", "in_rotation",
            "rotation_note", "error")) if service else []
        events = list(ServiceEvent.objects.filter(service=service).values_list(
            "kind", "message")[:12]) if service else []
        rollouts = list(Rollout.objects.filter(service=service).values(
            "state", "phase", "detail")) if service else []
        decisions = list(ScaleDecision.objects.filter(service=service).values_list(
            "direction", "state", "reason")[:8]) if service else []
        router = service.router_status if service else {}
        return (f"{agent.output()[-4000:]}\nreplicas: {replicas}\nevents: {events}\n"
                f"rollouts: {rollouts}\nscale decisions: {decisions}\n"
                f"router: {json.dumps(router)[:1500]}")
    return text


def router_workers(port: int) -> list[str]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/workers", timeout=5) as reply:
        return [w["url"] for w in json.loads(reply.read())["workers"]]


def listed_workers(port: int) -> list[str]:
    """The router's workers; none while it is not up yet (a new service's router starts with
    its first replica's placement)."""
    try:
        return router_workers(port)
    except OSError:
        return []


def serving(service: Service, count: int, revision: int) -> bool:
    replicas = Deployment.objects.filter(service=service, state="ready", in_rotation=True,
                                         running_revision__gte=1)
    ready = [d for d in replicas if d.revision == d.running_revision]
    listed = listed_workers(service.router_port)
    return service.revision == revision and len(ready) == count and len(listed) == count


def start_stack(tmp_path: Path, vllm: str) -> tuple[Process, Process, Controller]:
    """The server, the agent and the controller; stop them in the reverse order."""
    token_file = agent_token_file(tmp_path, "cpu-host")
    port, base = free_port(), free_port()
    server = start_server(port, tmp_path / "server.log")
    agent = Process([sys.executable, "-m", "agents", "run", "--server",
                     f"http://127.0.0.1:{port}", "--token-file", str(token_file),
                     "--hostname", "cpu-host", "--gpu-backend", "none", "--supervise",
                     "--vllm-command", f"{vllm} serve", "--router",
                     "--router-command", str(Path(sys.executable).parent / "vllm-router"),
                     "--port-range", f"{base}-{base + 9}", "--interval", "1",
                     "--spool-dir", str(tmp_path / "spool")], log=tmp_path / "agent.log")
    return server, agent, Controller(TICK_S).start()
