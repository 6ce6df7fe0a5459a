"""End to end: a service scaled to zero when idle and back to one replica by a request, every
process real (tests/support/sim_service.py: the ASGI server, an agent with simulated GPUs
supervising the replica, an agent running the real vllm-router, the controller's tick on a
thread). With ``min_replicas`` 0 the router is started with a retry budget that holds a request
while it has no worker. The service idles for a minute and goes to zero: its replica leaves the
router, then the host. Clients then send requests to the router with no worker: the router
holds them in its retries, counts their tries, the autoscaler starts a replica on that, and
the held requests are answered once it joins the router. The cold start is what a client saw:
from its request to its answer, with the simulated replica taking ``STARTUP_S`` to start."""

from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass

import pytest

from controlplane.fleet import placement
from controlplane.fleet.models import ScaleDecision, ScaleState, Service
from controlplane.fleet.scaling_policy import Direction
from tests.support.live import server_env
from tests.support.polling import wait_until
from tests.support.sim_service import MODEL, NO_PROXY, REPLICA_ENV, ROUTER, SimServiceStack

pytestmark = [pytest.mark.slow(seconds=120),
              pytest.mark.skipif(not ROUTER.exists(), reason="vllm-router is not installed")]
# A start of a few seconds, as a small model's replica with its weights cached on the host
# (the simulated vLLM sleeps it through its start phases).
STARTUP_S = 5
# One-minute windows (the shortest), no cool-downs: idle for a minute is enough to go to zero.
SCALING = {"in_window_s": 60, "out_window_s": 60, "in_cooldown_s": 0, "out_cooldown_s": 0,
           "zero_hold_s": 120}
CLIENTS = 3  # requests sent at zero, at once
STEP_S = 180  # deadlines only: a minute to fill, a minute's alignment, the step itself


@dataclass
class Held:
    start: float
    end: float = 0.0
    outcome: str = ""  # "200", or what the client saw instead

    @property
    def waited_s(self) -> float:
        return self.end - self.start


def send(router_port: int, held: Held) -> None:
    body = json.dumps({"model": MODEL, "prompt": "hello", "max_tokens": 16}).encode()
    request = urllib.request.Request(f"http://127.0.0.1:{router_port}/v1/completions", body,
                                     {"Content-Type": "application/json"})
    try:
        with NO_PROXY.open(request, timeout=SCALING["zero_hold_s"] + 60) as reply:
            reply.read()
            held.outcome = str(reply.status)
    except urllib.error.HTTPError as refused:
        held.outcome = f"HTTP {refused.code}: {refused.read()[:200]!r}"
    except OSError as failed:
        held.outcome = f"failed: {failed}"
    held.end = time.time()


def fits(service: Service) -> bool:
    """Whether placement would find the service's first replica a GPU now."""
    hosts = placement.hosts_for(service)
    return bool(placement.place(placement.need_for(service, hosts, 1), hosts).slots)


@pytest.fixture
def stack(empty_samples, tmp_path):
    running = SimServiceStack(tmp_path, server_env(), replicas=1, tick_s=1.0).start()
    yield running
    running.stop()


def test_an_idle_service_goes_to_zero_and_a_held_request_brings_a_replica_back(stack):
    service = stack.create_service(
        "zeroed", env={**REPLICA_ENV, "PITWALL_SIM_STARTUP_S": str(STARTUP_S)},
        scaling_mode="auto", min_replicas=0, max_replicas=1, scaling=SCALING)
    created_at = time.time()

    to_zero = wait_until(lambda: ScaleDecision.objects.filter(
        service=service, direction=Direction.IN, state=ScaleState.DONE).first(), STEP_S,
        stack.explain, every=1)
    assert (to_zero.replicas_before, to_zero.replicas_after) == (1, 0)
    wait_until(lambda: stack.router_workers() == [] and stack.replica_rows() == [], 60,
               stack.explain)
    at_zero = time.time()
    assert Service.objects.get(pk=service.pk).replicas == 0
    # The replica drains and stops, and its GPU reports its memory released, seconds later;
    # until then no host fits a replica (a request sent then waits out a failed step's
    # cool-down). A service at zero is one idle for a while: the request comes after that.
    wait_until(lambda: fits(service), 60, stack.explain, every=0.5)
    gpu_free = time.time()

    held = [Held(time.time()) for _ in range(CLIENTS)]
    clients = [threading.Thread(target=send, args=(stack.router_port, h), daemon=True)
               for h in held]
    for client in clients:
        client.start()
    for client in clients:
        client.join(SCALING["zero_hold_s"] + 90)

    [from_zero] = ScaleDecision.objects.filter(service=service, direction=Direction.OUT)
    assert (from_zero.replicas_before, from_zero.replicas_after, from_zero.state) == (
        0, 1, ScaleState.DONE), (from_zero.reason, from_zero.detail)
    assert from_zero.evidence[0]["name"] == "router_tries_without_a_replica"
    sent = held[0].start
    cold = [h.waited_s for h in held]
    print(f"\nscale to zero: idle to zero {to_zero.at.timestamp() - created_at:.0f} s after "
          f"creation (out of the router and gone {at_zero - to_zero.at.timestamp():.1f} s "
          f"after the decision, its GPU free {gpu_free - at_zero:.1f} s later); from zero: "
          f"decided {from_zero.at.timestamp() - sent:.1f} s "
          f"after the request, the replica served {from_zero.ready_s} s after the decision "
          f"(simulated start {STARTUP_S} s); cold start (request sent -> answered): "
          f"{min(cold):.1f} to {max(cold):.1f} s over {CLIENTS} requests; outcomes "
          f"{[h.outcome for h in held]}")
    assert [h.outcome for h in held] == ["200"] * CLIENTS, stack.explain()
    assert max(cold) < SCALING["zero_hold_s"]
    assert stack.controller.errors == []
