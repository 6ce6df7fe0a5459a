"""A service of the tiny model on real vLLM, scaled by Pitwall's autoscaler: under eight
streaming clients through the router its one replica (two sequences at a time) queues. In
``recommend`` mode the autoscaler records that a replica should be added and adds none;
switched to ``auto`` through the API, it adds the second replica, which serves. When the load
falls to one client, the autoscaler takes a replica out of the router and removes it while
that client goes on. Not one request fails at the client in either step.

The stack is service_stack.py's: the control plane's ASGI server, the agent supervising the
replicas and the real vllm-router, and the controller's tick, which runs the autoscaler."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from controlplane.fleet.models import Deployment, ScaleDecision, ScaleState, Service
from controlplane.fleet.scaling_policy import Direction
from tests.real_vllm.service_stack import create_service, explain, listed_workers
from tests.support.polling import wait_until
from tests.support.service_load import ServiceLoad

pytestmark = pytest.mark.real_vllm
# Two sequences at a time: eight clients that send again at once leave about six requests
# waiting on one replica. (Six clients pausing 0.2 s between requests of 16 tokens queued too
# little on a warm engine: the tiny model answers one in about 0.1 s.)
ARGS = {"enforce_eager": True, "dtype": "float32", "max_model_len": 512, "block_size": 32,
        "max_num_seqs": 2}
# The shortest windows (one whole minute each), no cool-down before a scale-out, a queue of
# more than one request per replica as demand, and one client's load (about one request
# running) as idle.
SCALING = {"waiting_per_replica": 1, "out_window_s": 60, "in_window_s": 60,
           "out_cooldown_s": 0, "in_cooldown_s": 60, "idle_running_per_replica": 2}
CLIENTS, MAX_TOKENS = 8, 32
# Deadlines only: a replica of vLLM's CPU build starts in 30-60 s on these 2 cores, and each
# decision waits for a whole minute of evidence and the minute's turn.
START_S, STEP_S = 600, 420


def decided(service: Service, direction: str, state: str = ScaleState.DONE):
    return lambda: ScaleDecision.objects.filter(
        service=service, direction=direction, state=state).first()


def answered_by_each(load: ServiceLoad, service: Service, since: float) -> bool:
    """Whether each replica in the router finished a request sent since ``since``."""
    status = Service.objects.get(pk=service.pk).router_status or {}
    per_worker = (status.get("metrics") or {}).get("per_worker") or {}
    listed = listed_workers(service.router_port)
    done = len(load.between(since, float("inf")))
    return len(listed) == 2 and done > 0 and all(
        (per_worker.get(url) or {}).get("processed", 0) > 0 for url in listed)


def test_demand_adds_a_real_replica_and_idle_removes_it_with_no_request_failed(
        service_stack, vllm_install, tmp_path):
    api, agent, controller = service_stack
    service = create_service(api, agent, vllm_install, tmp_path, ARGS, replicas=1,
                             drain_timeout_s=60, scaling_mode="recommend", min_replicas=1,
                             max_replicas=2, scaling=SCALING)
    router_port = service.router_port
    why = explain(agent)
    wait_until(lambda: len(listed_workers(router_port)) == 1, START_S, why, every=2)

    url = f"http://127.0.0.1:{router_port}"
    busy = ServiceLoad(url, str(vllm_install.model), clients=CLIENTS, prompt_tokens=32,
                       max_tokens=MAX_TOKENS, pause_s=0.0).start()
    try:
        advice = wait_until(decided(service, Direction.OUT, ScaleState.RECOMMENDED), START_S,
                            why, every=2)
        assert Deployment.objects.filter(service=service).count() == 1  # only shown
        taken = api.patch(f"/api/v1/services/{service.pk}/",
                          {"scaling_mode": "auto", "reason": "take the advice"}, format="json")
        assert taken.status_code == 200, taken.json()
        out = wait_until(decided(service, Direction.OUT), START_S, why, every=2)
        serving_at = time.time()
        wait_until(lambda: answered_by_each(busy, service, serving_at), STEP_S, why, every=2)
    finally:
        busy.stop()
    quiet = ServiceLoad(url, str(vllm_install.model), clients=1, prompt_tokens=32,
                        max_tokens=16).start()
    quiet_from = time.time()
    try:
        inward = wait_until(decided(service, Direction.IN), STEP_S, why, every=2)
        wait_until(lambda: len(listed_workers(router_port)) == 1, 120, why, every=1)
        wait_until(lambda: Deployment.objects.filter(service=service).count() == 1, 180, why)
        time.sleep(3)  # requests sent after the removal, to the replica left
    finally:
        quiet.stop()
    assert controller.errors == [], controller.errors

    evidence = {f["name"]: f for f in out.evidence}
    failed = busy.failed() + quiet.failed()
    figures = {
        "requests": len(busy.sent) + len(quiet.sent), "failed": len(failed),
        "recommended_after_load_s": round(advice.at.timestamp() - busy.sent[0].start, 1),
        "out_after_load_s": round(out.at.timestamp() - busy.sent[0].start, 1),
        "waiting_per_replica": evidence["waiting_per_replica"]["value"],
        "kv_usage": evidence["kv_usage"]["value"], "new_replica_ready_s": out.ready_s,
        "in_after_one_client_s": round(inward.at.timestamp() - quiet_from, 1)}
    print(f"\nreal autoscaling: {figures}")
    if path := os.environ.get("PITWALL_AUTOSCALING_FIGURES"):
        Path(path).write_text(json.dumps(figures, indent=2))
    assert (advice.replicas_before, advice.replicas_after) == (1, 2)
    assert (out.replicas_before, out.replicas_after) == (1, 2)
    assert evidence["waiting_per_replica"]["held"] and evidence["kv_usage"]["held"]
    assert (inward.replicas_before, inward.replicas_after) == (2, 1)
    assert failed == [], [s.error for s in failed[:10]]
