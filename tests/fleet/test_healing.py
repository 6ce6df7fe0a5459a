"""Healing: a replica whose GPU is lost, whose host stays offline, or that crashes again and
again is replaced on another host by the controller's tick; each replacement is an event and
an alert. Not the replica a rollout has in hand, and not twice for crashing."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.conf import settings

from controlplane.alerts.evaluate import evaluate
from controlplane.alerts.models import Alert, AlertRule, AlertState
from controlplane.fleet import healing, rollouts
from controlplane.fleet.models import (
    DeploymentState,
    Gpu,
    Host,
    Rollout,
    RolloutState,
    ServiceEvent,
    ServiceEventKind,
)
from tests.fleet.controller_support import (
    Agents,
    Clock,
    change_args,
    hosts,
    make_service,
    replicas,
    report,
    router_host,
    run,
)
from tests.telemetry.rollup_data import insert_rows


@pytest.fixture
def spare(db):
    """Two replicas on four hosts: room elsewhere for a replacement."""
    fleet = hosts(4)
    router = router_host()
    service = make_service(router, replicas=2)
    agents, clock = Agents(service, router), Clock()
    run(clock, agents, lambda: all(d.in_rotation for d in replicas(service)))
    return service, agents, clock, fleet


def healed(service) -> list[ServiceEvent]:
    return list(ServiceEvent.objects.filter(service=service, kind=ServiceEventKind.HEALED)
                .order_by("id"))


def test_a_replica_whose_gpu_is_gone_is_replaced_on_another_host(spare):
    service, _, clock, _ = spare
    lost = replicas(service)[0]
    Gpu.objects.filter(host_id=lost.host_id, index=lost.gpu_indices[0]).update(present=False)
    result = clock.tick()
    assert result.healed == 1
    now = replicas(service)[0]
    assert now.replica == 0 and now.pk != lost.pk and now.host_id != lost.host_id
    assert now.host_id != replicas(service)[1].host_id  # spread: not beside the other one
    [event] = healed(service)
    assert event.data["why"] == f"GPU lost: GPU {lost.gpu_indices[0]} of {lost.host.hostname} " \
                                "is lost"
    assert event.data["old_host"] == lost.host.hostname and event.deployment_id == now.pk
    # alerted by the default pack
    rule = AlertRule.objects.get(pack_key="service-disrupted")
    evaluate(clock.now, rule_ids=[rule.pk])
    alert = Alert.objects.get(rule=rule, target=f"service:{service.pk}")
    assert alert.state == AlertState.FIRING and alert.value == 1
    assert alert.labels["service"] == "llama"


def test_a_gpu_that_nvml_reports_lost_is_healed_too(spare):
    service, _, clock, _ = spare
    lost = replicas(service)[1]
    gpu = Gpu.objects.get(host_id=lost.host_id, index=lost.gpu_indices[0])
    insert_rows("gpu", [{"gpu_id": gpu.pk, "ts": clock.now, "lost": 1}])
    clock.tick()
    assert replicas(service)[1].host_id != lost.host_id
    assert healed(service)[0].data["why"].startswith("GPU lost")


def test_a_replica_whose_host_stays_offline_is_replaced_after_the_heal_delay(spare):
    service, _, clock, _ = spare
    gone = replicas(service)[0]
    window, delay = settings.PITWALL["ONLINE_WINDOW_S"], settings.PITWALL["HEAL_OFFLINE_S"]
    # offline, but not for long enough: out of rotation, not moved
    Host.objects.filter(pk=gone.host_id).update(
        last_seen=clock.now - timedelta(seconds=window + delay - 10))
    clock.tick(1)
    assert replicas(service)[0].pk == gone.pk and not replicas(service)[0].in_rotation
    assert healed(service) == []
    clock.tick(15)
    moved = replicas(service)[0]
    assert moved.pk != gone.pk and moved.host_id != gone.host_id
    assert healed(service)[0].data["why"].startswith(
        f"host offline: {gone.host.hostname} has not reported for")


def test_a_crash_loop_is_replaced_once_and_not_walked_around_the_fleet(spare):
    service, _, clock, _ = spare
    d = replicas(service)[1]
    report(d, DeploymentState.CRASHED, d.revision, restarts=2, error="exit 1")
    clock.tick()
    assert healed(service) == []  # two restarts: not yet a loop
    report(d, DeploymentState.BACKING_OFF, d.revision, restarts=3, error="exit 1: CUDA error")
    clock.tick()
    moved = replicas(service)[1]
    assert moved.pk != d.pk
    [event] = healed(service)
    assert event.data["why"] == (f"crash loop: 3 restarts and backing_off on {d.host.hostname} "
                                 "(exit 1: CUDA error)")
    # the replacement crashes as well: the config is at fault, not the host
    report(moved, DeploymentState.CRASHED, moved.revision, restarts=5, error="exit 1")
    clock.tick()
    assert replicas(service)[1].pk == moved.pk and len(healed(service)) == 1


def test_the_replica_a_rollout_has_in_hand_is_left_to_the_rollout(spare):
    service, agents, clock, _ = spare
    change_args(service, max_num_seqs=256)
    run(clock, agents, lambda: Rollout.objects.get(service=service).phase
        == rollouts.Phase.CHECKING)
    rollout = Rollout.objects.get(service=service)
    current, other = (replicas(service)[0], replicas(service)[1])
    assert rollout.current_id == current.pk
    for d in (current, other):
        Gpu.objects.filter(host_id=d.host_id, index=d.gpu_indices[0]).update(present=False)
    assert [e.data["old_deployment"] for e in healing.heal(service, clock.now)] == [other.pk]
    assert replicas(service)[0].pk == current.pk
    clock.tick()  # the rollout's check sees its replica out of rotation: rolled back
    rollout.refresh_from_db()
    assert rollout.state == RolloutState.ROLLED_BACK
    assert "llama-0 left the router's rotation during its check: GPU lost" in rollout.detail


def test_no_host_to_take_it_leaves_the_replica_where_it_is(db):
    fleet = hosts(1)
    service = make_service(router_host(), replicas=2)
    agents, clock = Agents(service, None), Clock()
    run(clock, agents, lambda: all(d.state == DeploymentState.READY
                                   for d in replicas(service)))
    lost = replicas(service)[0]
    Gpu.objects.filter(host_id=fleet[0].pk, index=lost.gpu_indices[0]).update(present=False)
    assert clock.tick().healed == 0
    assert replicas(service)[0].pk == lost.pk and healed(service) == []
    service.refresh_from_db()
    assert "unplaced: 1 of 1 replicas" in service.placement["summary"]
