"""End to end: a service scaled on its demand, every process real (tests/support/sim_service.py:
the ASGI server, two agents with simulated GPUs supervising the replicas, an agent running the
real vllm-router, the controller's tick on a thread). Six clients queue on one replica that
runs two sequences at a time: in ``recommend`` mode the autoscaler only records that a replica
should be added; switched to ``auto`` through the API, it adds one on the other host, which
joins the router and serves. The load falls to one client: the autoscaler takes a replica out of the
router, then removes it. No client request fails in either step."""

from __future__ import annotations

import time

import pytest

from controlplane.fleet.models import Deployment, ScaleDecision, ScaleState
from controlplane.fleet.scaling_policy import Direction
from tests.support.live import server_env
from tests.support.polling import wait_until
from tests.support.sim_service import ROUTER, SimServiceStack, call

pytestmark = [pytest.mark.slow(seconds=260),
              pytest.mark.skipif(not ROUTER.exists(), reason="vllm-router is not installed")]
# Windows of one minute (the shortest, whole minutes), no cool-down before a scale-out, and one
# client's load (about one request running over two replicas) counted as idle.
SCALING = {"waiting_per_replica": 1, "out_window_s": 60, "in_window_s": 60,
           "out_cooldown_s": 0, "in_cooldown_s": 60, "idle_running_per_replica": 2}
STEP_S = 240  # a deadline only: a minute to fill, a minute's alignment, the step itself


@pytest.fixture
def stack(empty_samples, tmp_path):
    running = SimServiceStack(tmp_path, server_env(), replicas=1, hosts=2, tick_s=1.0).start()
    yield running
    running.stop()


def decided(service, direction: str, state: str = ScaleState.DONE):
    return lambda: ScaleDecision.objects.filter(
        service=service, direction=direction, state=state).first()


def test_demand_adds_a_replica_and_idle_removes_one_with_no_request_failed(stack):
    service = stack.create_service("scaled", args={"max_num_seqs": 2},
                                   scaling_mode="recommend", min_replicas=1, max_replicas=2,
                                   scaling=SCALING)
    busy = stack.start_load(clients=6)
    advice = wait_until(decided(service, Direction.OUT, ScaleState.RECOMMENDED), STEP_S,
                        stack.explain, every=1)
    assert (advice.replicas_before, advice.replicas_after) == (1, 2)
    assert len(stack.replica_rows()) == 1 and advice.deployment_id is None  # only shown
    call("PATCH", f"{stack.base}/api/v1/services/{service.pk}/",
         {"scaling_mode": "auto", "reason": "take the advice"}, token=stack.api_token)
    out = wait_until(decided(service, Direction.OUT), STEP_S, stack.explain, every=1)
    assert (out.replicas_before, out.replicas_after) == (1, 2)
    assert {f["name"]: f["held"] for f in out.evidence}["waiting_per_replica"]
    added = Deployment.objects.select_related("host").get(pk=out.deployment_id)
    assert added.host.hostname != stack.replica_rows()[0].host.hostname  # spread
    stack.wait_until_each_replica_answered()
    busy.stop()

    quiet = stack.start_load(clients=1)
    quiet_from = time.time()
    inward = wait_until(decided(service, Direction.IN), STEP_S, stack.explain, every=1)
    assert (inward.replicas_before, inward.replicas_after) == (2, 1)
    wait_until(lambda: len(stack.router_workers() or []) == 1, 60, stack.explain)
    time.sleep(3)  # requests sent after the removal, to the replica left
    quiet.stop()

    print(f"\nautoscaling: recommended after {advice.at.timestamp() - busy.sent[0].start:.0f} s"
          f" of queue, taken {out.at.timestamp() - advice.at.timestamp():.0f} s later in auto "
          f"mode, serving {out.ready_s} s after the decision; in after "
          f"{inward.at.timestamp() - quiet_from:.0f} s of one client; "
          f"{len(busy.sent)} + {len(quiet.sent)} requests")
    assert busy.failed() == [] and quiet.failed() == [], [
        s.error for s in busy.failed() + quiet.failed()][:5]
    assert len(stack.replica_rows()) == 1
    assert stack.controller.errors == []
