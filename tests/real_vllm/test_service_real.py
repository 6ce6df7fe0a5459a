"""A service of two real vLLM replicas behind a real vllm-router, under steady client load
through the router: a change rolls through both without one failed request at the client, and
a replica whose EngineCore is stopped (SIGSTOP: /health still answers 200) leaves the router's
rotation within seconds of Pitwall's stall verdict.

The whole path is real (service_stack.py): the control plane's ASGI server, the agent
(``--supervise --router``) supervising both vLLMs and the router, the router's worker list
changed live by the agent, and the controller's ticks."""

from __future__ import annotations

import json
import os
import signal
import time
import urllib.request
from datetime import UTC, datetime
from pathlib import Path

import psutil
import pytest
from prometheus_client.parser import text_string_to_metric_families

from controlplane.fleet.models import (
    Deployment,
    Rollout,
    Service,
    ServiceEvent,
    ServiceEventKind,
)
from tests.real_vllm.service_stack import create_service, explain, router_workers, serving
from tests.support.live import Process
from tests.support.polling import wait_until
from tests.support.service_load import ServiceLoad, ttft_p99

pytestmark = pytest.mark.real_vllm
ARGS = {"enforce_eager": True, "dtype": "float32", "max_model_len": 512, "block_size": 32,
        "max_num_seqs": 8}
STEADY = 24  # requests answered before the change, and after the rollout: steady state
STALL_TRIES = 5


def engine_core(pid: int) -> psutil.Process:
    """The EngineCore process of the vLLM API server ``pid``."""
    for child in psutil.Process(pid).children(recursive=True):
        if "EngineCore" in child.name() or "EngineCore" in " ".join(child.cmdline()):
            return child
    raise AssertionError(f"no EngineCore under {pid}")


def test_a_change_rolls_through_real_replicas_without_a_failed_request_and_a_stalled_one_leaves(
        service_stack, vllm_install, tmp_path):
    api, agent, controller = service_stack
    service = create_service(api, agent, vllm_install, tmp_path, ARGS, replicas=2,
                             drain_timeout_s=30)
    wait_until(lambda: serving(Service.objects.get(pk=service.pk), 2, 1), 600,
               explain(agent), every=2)

    load = ServiceLoad(f"http://127.0.0.1:{service.router_port}", str(vllm_install.model),
                       clients=6, prompt_tokens=32, max_tokens=16).start()
    try:
        answered(load, time.time(), agent)
        changed_at = time.time()
        patched = api.patch(f"/api/v1/services/{service.pk}/",
                            {"args": {**ARGS, "max_num_seqs": 16},
                             "reason": "more sequences per step"}, format="json")
        assert patched.status_code == 200, patched.json()
        rollout = wait_until(lambda: Rollout.objects.filter(
            service=service, to_revision=2).exclude(state="running").first(), 900,
            explain(agent), every=2)
        rolled_at = time.time()
        assert rollout.state == "succeeded", explain(agent)()
        answered(load, rolled_at, agent)
        stall = stall_one_replica(service, load, agent)
    finally:
        load.stop()
    assert controller.errors == [], controller.errors

    steady = load.between(0, changed_at)
    during = load.between(changed_at, rolled_at)
    failed = load.failed(0, stall["stopped_at"])
    figures = {
        "requests": len(load.between(0, stall["stopped_at"])), "failed": len(failed),
        "rollout_s": round(rolled_at - changed_at, 1),
        "ttft_p99_steady_s": ttft_p99(steady), "ttft_p99_rollout_s": ttft_p99(during),
        "requests_during_rollout": len(during), "checks": checks(service), **stall["figures"]}
    print(f"\nreal service: {figures}")
    if out := os.environ.get("PITWALL_SERVICE_FIGURES"):
        Path(out).write_text(json.dumps(figures, indent=2))
    assert failed == [], [f.error for f in failed[:10]]
    for d in Deployment.objects.filter(service=service):
        assert d.running_revision == d.revision and "--max-num-seqs" in d.running_argv
        assert d.running_argv[d.running_argv.index("--max-num-seqs") + 1] == "16"
    assert stall["figures"]["out_of_rotation_s"] is not None, explain(agent)()


def checks(service: Service) -> list[str]:
    """The rollout's verdicts on each changed replica, with the figures they judged: how far
    apart two healthy CPU replicas on one shared machine read."""
    return list(ServiceEvent.objects.filter(
        service=service, kind=ServiceEventKind.REPLICA_CHANGED, data__has_key="verdict")
        .order_by("at").values_list("message", flat=True))


def answered(load: ServiceLoad, since: float, agent: Process) -> None:
    """Wait for STEADY requests sent since ``since`` to be answered: a span of steady load."""
    wait_until(lambda: len(load.between(since, float("inf"))) >= STEADY, 300, agent.output,
               every=1)


def stall_one_replica(service: Service, load: ServiceLoad, agent: Process) -> dict:
    """SIGSTOP one replica's EngineCore under load while it holds requests; when the router
    stops listing it, and what Pitwall recorded. The EngineCore is continued afterwards, so
    the held requests finish.

    vLLM's request gauges come from its EngineCore: stopped while idle, the engine reads idle
    for ever (the requests then sent to it wait in its API server, which counts none of them),
    and no stall is seen. So the stop comes when the gauges show a request running, and is
    tried again (continued first) if the engine read idle all the same."""
    victim = Deployment.objects.filter(service=service).order_by("replica").first()
    url = f"http://{victim.host.inventory.get('address', '127.0.0.1')}:{victim.port}"
    core = engine_core(victim.pid)
    for _ in range(STALL_TRIES):
        wait_until(lambda: running(url) > 0, 120, explain(agent), every=0.05)
        core.send_signal(signal.SIGSTOP)
        stopped_at = time.time()
        if running(url) > 0:
            break
        core.send_signal(signal.SIGCONT)
    try:
        wait_until(lambda: url not in router_workers(service.router_port), 300,
                   explain(agent), every=0.2)
        out_at = time.time()
        event = wait_until(lambda: ServiceEvent.objects.filter(
            service=service, deployment=victim, kind=ServiceEventKind.OUT_OF_ROTATION,
            at__gte=datetime.fromtimestamp(stopped_at, UTC)).first(), 30, explain(agent))
    finally:
        core.send_signal(signal.SIGCONT)
    verdict_at = event.at.timestamp()
    return {"stopped_at": stopped_at, "figures": {
        "stall_to_verdict_s": round(verdict_at - stopped_at, 1),
        "verdict_to_router_s": round(out_at - verdict_at, 1),
        "out_of_rotation_s": round(out_at - stopped_at, 1),
        "held_requests": event.data.get("held"),
        "failed_while_stalled": len(load.failed(stopped_at, out_at + 5))}}


def running(url: str) -> float:
    """vllm:num_requests_running on the replica's /metrics (its API server answers while its
    EngineCore is stopped)."""
    with urllib.request.urlopen(f"{url}/metrics", timeout=5) as reply:
        text = reply.read().decode()
    return sum(sample.value for family in text_string_to_metric_families(text)
               for sample in family.samples if sample.name == "vllm:num_requests_running")
