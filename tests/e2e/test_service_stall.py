"""End to end: a replica whose engine loop wedges leaves its service's router and comes back.

Every process is real (tests/support/sim_service.py): the ASGI server, an agent supervising
three simulated vLLM replicas, an agent running the real vllm-router, the controller's tick
on a thread. Under steady client load through the router, one replica's engines freeze
(``POST /sim/stall``: /health still 200, /metrics frozen, as a real vLLM whose EngineCore
hangs). Pitwall's stall verdict takes it out of rotation, the router stops listing it, the
event records the requests it held, the other replicas serve every request sent after, and
once resumed it is back in the router.
"""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from controlplane.fleet.models import ServiceEvent, ServiceEventKind
from tests.support.live import server_env
from tests.support.sim_service import ROUTER, SimServiceStack

pytestmark = [pytest.mark.slow(seconds=45),
              pytest.mark.skipif(not ROUTER.exists(), reason="vllm-router is not installed")]
STALL_S = 3  # the verdict's span: the least PITWALL_SERVICE_STALL_S takes (default 10)


@pytest.fixture
def stack(empty_samples, tmp_path, settings):
    settings.PITWALL = {**settings.PITWALL, "SERVICE_STALL_S": STALL_S}
    running = SimServiceStack(tmp_path, server_env(), tick_s=1.0).start()
    yield running
    running.stop()


def test_a_stalled_replica_leaves_the_router_its_requests_counted_and_returns(stack):
    service = stack.create_service()
    load = stack.start_load()
    # steady load first: each replica answers through the router
    stack.wait_until_each_replica_answered()

    stall = stack.stall(replica=2)  # the last of slots 0, 1, 2
    print(f"\nstall: {stall.figures()}")

    event = stall.event
    assert event["why"] == "stalled", stack.explain()
    # the requests the frozen engine held, from its newest engine row
    assert event["held"] == event["running"] + event["waiting"] >= 1
    assert event["held"] == (stall.held_at_stall["requests_running"]
                             + stall.held_at_stall["requests_waiting"])
    assert stall.verdict_at - stall.stalled_at >= STALL_S  # never before its span
    assert stall.failed_after_unlisted == [], stack.explain()
    # the other replicas served while it stood still
    sent = load.between(stall.unlisted_at, stall.resumed_at)
    assert sent and all(not s.error for s in sent)
    assert ServiceEvent.objects.filter(
        service=service, deployment__replica=2, kind=ServiceEventKind.INTO_ROTATION,
        at__gte=datetime.fromtimestamp(stall.resumed_at, UTC)).exists(), stack.explain()
    load.stop()
    # the requests it held when it froze finished once it was resumed
    assert load.failed() == [], [f.error for f in load.failed()[:5]]
    assert stack.controller.errors == []
