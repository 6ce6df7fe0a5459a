"""`make run`'s service: one model on several simulated replicas behind a real vllm-router.

A host of its own (``sim-router``, this machine) runs an agent with ``--router``: it starts
vLLM's router for the service, and Pitwall keeps the router's workers equal to the routable
replicas. Pitwall places the replicas on the simulated hosts' GPUs that the standalone demo
engines leave free, and a steady client load (agents/sim/router_load.py) goes through the
router, so the service page shows each replica's share of the traffic.
"""

from __future__ import annotations

import os
from pathlib import Path

from agents import vllm_args
from agents.children import Child, python
from controlplane.fleet import services
from controlplane.fleet.models import Host, Service

ROUTER_HOSTNAME = "sim-router"
SERVICE_NAME = "llama-8b"
MODEL = "meta-llama/Llama-3.1-8B-Instruct"
REPLICAS = 4
# Two simulated GPUs a replica; no load of its own (the router's clients are its load).
ARGS = {"tensor_parallel_size": 2, "max_num_seqs": 64}
ENV = {"PITWALL_SIM_LOAD": "0"}
LOAD_RATE = "6"  # requests per second through the router


def router_port() -> int:
    return int(os.environ.get("PITWALL_DEMO_ROUTER_PORT", 18900))


def router_agent(url: str, token_file: Path, workdir: Path) -> Child:
    return Child("router-agent", [
        python(), "-m", "agents", "run", "--server", url, "--token-file", str(token_file),
        "--hostname", ROUTER_HOSTNAME, "--gpu-backend", "none", "--router",
        "--interval", "1", "--spool-dir", str(workdir / "spool")])


def load_generator() -> Child:
    return Child("router-load", [
        python(), "-m", "agents.sim.router_load", "--url", f"http://127.0.0.1:{router_port()}",
        "--model", MODEL, "--rate", LOAD_RATE, "--report-s", "300"])


def ensure_service() -> bool:
    """The demo service, once the router's host has reported its role; an existing one is
    left as the operator left it. False while the router host has not reported yet."""
    if Service.objects.filter(name=SERVICE_NAME).exists():
        return True
    router = Host.objects.filter(hostname=ROUTER_HOSTNAME).first()
    if router is None or "router" not in (router.inventory.get("roles") or []):
        return False
    services.save(Service(
        name=SERVICE_NAME, model=MODEL, vllm_version=vllm_args.DEFAULT_VERSION, args=ARGS,
        env=ENV, replicas=REPLICAS, selector={"pool": "online"}, router_host=router,
        router_port=router_port(), drain_timeout_s=10),
        reason="make run: the demo service behind vLLM's router")
    return True
