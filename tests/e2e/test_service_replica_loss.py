"""End to end: a replica's host is lost under load; the clients see no failed request.

Every process is real (tests/support/sim_service.py): the ASGI server, two agents with
simulated GPUs each supervising one of the service's two simulated vLLM replicas, an agent
running the real vllm-router, the controller's tick on a thread. Under steady client load
through the router (non-streamed completions), one GPU host is killed whole: its agent and its
replica's vLLM, SIGKILL, at a moment the replica holds requests. The requests it held and
those the router sends it before Pitwall takes it out are retried by vllm-router on the other
replica (its default retries; measured: the connection errors open its circuit breaker for
the dead worker, and no client saw one). Once the host is past its online window Pitwall takes
the replica out of the router, healing places a replacement on the surviving host (a healed
event naming the cause), and the replacement joins the router and answers the clients.
"""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from controlplane.fleet.models import Deployment, ServiceEvent, ServiceEventKind
from controlplane.telemetry.ingest.writer import LAST_SEEN_EVERY_S
from tests.support.live import server_env
from tests.support.polling import wait_until
from tests.support.sim_service import ROUTER, TURN_S, SimServiceStack, call

pytestmark = [pytest.mark.slow(seconds=30),
              pytest.mark.skipif(not ROUTER.exists(), reason="vllm-router is not installed")]
# Short, so the loss is seen in seconds (defaults: 30 s and 60 s), but longer than ingest's
# refresh of last_seen (at most every LAST_SEEN_EVERY_S) and a late report: at 4 s both hosts
# went offline between refreshes, again and again, and healing tried to move both replicas.
ONLINE_WINDOW_S = int(LAST_SEEN_EVERY_S) + 3
HEAL_OFFLINE_S = 0  # replaced as soon as it is offline


@pytest.fixture
def stack(empty_samples, tmp_path, settings):
    windows = {"ONLINE_WINDOW_S": ONLINE_WINDOW_S, "HEAL_OFFLINE_S": HEAL_OFFLINE_S}
    settings.PITWALL = {**settings.PITWALL, **windows}  # the controller's thread
    env = {**server_env(), **{f"PITWALL_{k}": str(v) for k, v in windows.items()}}
    running = SimServiceStack(tmp_path, env, replicas=2, hosts=2, tick_s=1.0).start()
    yield running
    running.stop()


def test_a_lost_replica_host_costs_no_client_request_and_is_replaced_elsewhere(stack):
    service = stack.create_service("loss")
    first = stack.replica_rows()
    assert len({d.host_id for d in first}) == 2, stack.explain()  # one replica per host
    load = stack.start_load()
    stack.wait_until_each_replica_answered()

    victim, survivor = first[1], first[0]
    url = stack.url(victim)
    held = wait_until(lambda: _holding(url), TURN_S, stack.explain, every=0.02)
    lost_at = stack.lose_host(victim.host.hostname)

    unlisted_at = stack.poll_workers(lambda listed: url not in listed, "left the router")
    healed = wait_until(lambda: ServiceEvent.objects.filter(
        service=service, kind=ServiceEventKind.HEALED,
        at__gte=datetime.fromtimestamp(lost_at, UTC)).first(), TURN_S, stack.explain)
    assert healed.data["why"].startswith("host offline"), healed.message
    assert healed.data["replica"] == victim.replica
    assert (healed.data["old_host"], healed.data["new_host"]) == (
        victim.host.hostname, survivor.host.hostname)
    replacement = Deployment.objects.get(pk=healed.data["new_deployment"])
    new_url = stack.url(replacement)
    listed_at = stack.poll_workers(lambda listed: new_url in listed, "joined the router")
    wait_until(stack.serving, TURN_S, stack.explain, every=0.5)
    stack.wait_until_each_replica_answered()  # the replacement answers the clients too
    replacement.refresh_from_db()

    load.stop()
    figures = {
        "held_at_loss": held,
        "loss_to_out_of_router_s": round(unlisted_at - lost_at, 2),
        "loss_to_healed_s": round(healed.at.timestamp() - lost_at, 2),
        "loss_to_replacement_ready_s": round(replacement.state_since.timestamp() - lost_at, 2),
        "loss_to_replacement_in_router_s": round(listed_at - lost_at, 2),
        "sent_while_out_of_service": len(load.between(lost_at, listed_at)),
        "sent": len(load.sent), "failed": len(load.failed())}
    print(f"\nreplica loss: {figures}")
    assert load.failed() == [], [f.error for f in load.failed()[:5]]
    assert len(load.between(lost_at, listed_at)) >= 1  # the clients went on meanwhile
    assert not Deployment.objects.filter(pk=victim.pk).exists()
    # the surviving replica served throughout: its host never looked offline
    assert not ServiceEvent.objects.filter(
        service=service, deployment=survivor, kind=ServiceEventKind.OUT_OF_ROTATION).exists()
    assert ServiceEvent.objects.filter(service=service, kind=ServiceEventKind.HEALED).count() == 1
    assert stack.controller.errors == []


def _holding(url: str) -> int:
    """The requests the replica's engine holds now (running and waiting); 0 when idle."""
    state = call("GET", f"{url}/sim/state")
    return state["requests_running"] + state["requests_waiting"]
