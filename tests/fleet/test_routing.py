"""Rotation: which replicas the router sends requests to, decided by the controller from the
agents' reports and the engines' rows; and the router agent's side of the protocol (its
config's routers, its status report) through the real endpoints."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.conf import settings

from controlplane.fleet import routing
from controlplane.fleet.models import (
    DeploymentState,
    Gpu,
    Host,
    Service,
    ServiceEvent,
    ServiceEventKind,
)
from controlplane.fleet.tokens import issue_agent_token
from tests.fleet.controller_support import (
    Agents,
    Clock,
    engine,
    engine_rows,
    hosts,
    make_service,
    replicas,
    report,
    router_host,
)
from tests.support.clients import bearer_client
from tests.telemetry.rollup_data import insert_rows


@pytest.fixture
def placed(db):
    """Three replicas on three hosts, all ready on their revision, in rotation."""
    fleet = hosts(3)
    router = router_host()
    service = make_service(router, replicas=3)
    agents, clock = Agents(service, router), Clock()
    agents.step()
    clock.tick()
    return service, router, agents, clock, fleet


def in_rotation(service: Service) -> list[bool]:
    return [d.in_rotation for d in replicas(service)]


def events(service: Service, kind: str) -> list[ServiceEvent]:
    return list(ServiceEvent.objects.filter(service=service, kind=kind).order_by("id"))


def test_ready_replicas_enter_rotation_and_the_router_host_fetches_them(placed):
    service, router, _, _, fleet = placed
    assert in_rotation(service) == [True, True, True]
    assert len(events(service, ServiceEventKind.INTO_ROTATION)) == 3
    [spec] = routing.router_specs(router.pk)
    ports = [d.port for d in replicas(service)]
    addresses = [d.host.inventory["address"] for d in replicas(service)]
    assert spec == {"service_id": service.pk, "service": "llama", "port": 9000,
                    "policy": "power_of_two", "model": service.model,
                    "workers": [f"http://{a}:{p}" for a, p in zip(addresses, ports,
                                                                   strict=True)]}
    # a host whose agent does not run --router routes nothing
    assert routing.router_specs(fleet[0].pk) == []


def test_a_rotation_change_bumps_the_router_host_and_nothing_else_does(placed):
    service, router, _, clock, _ = placed
    version = Host.objects.get(pk=router.pk).config_version
    clock.tick()
    assert Host.objects.get(pk=router.pk).config_version == version  # nothing changed
    d = replicas(service)[1]
    report(d, DeploymentState.DRAINING, d.revision)
    clock.tick()
    assert Host.objects.get(pk=router.pk).config_version == version + 1
    assert in_rotation(service) == [True, False, True]
    [out] = events(service, ServiceEventKind.OUT_OF_ROTATION)
    assert out.deployment_id == d.pk and out.data["why"] == routing.Why.DRAINING


def test_a_stalled_replica_leaves_rotation_within_one_tick_with_the_requests_it_held(placed):
    service, router, _, clock, _ = placed
    stalled, healthy, _ = replicas(service)
    stall_s = settings.PITWALL["SERVICE_STALL_S"]
    next_tick = clock.now + timedelta(seconds=3)
    # no token and no finished request for longer than the stall time, requests held
    engine_rows(stalled, next_tick - timedelta(seconds=stall_s + 2), next_tick,
                requests_running=3.0, requests_waiting=2.0, generation_tokens_per_s=0.0,
                requests_finished_per_s=0.0)
    engine_rows(healthy, next_tick - timedelta(seconds=stall_s + 2), next_tick,
                requests_running=3.0, requests_waiting=2.0, generation_tokens_per_s=420.0,
                requests_finished_per_s=1.5)
    clock.tick(3)
    assert in_rotation(service) == [False, True, True]
    [out] = events(service, ServiceEventKind.OUT_OF_ROTATION)
    assert out.data["why"] == routing.Why.STALLED
    assert (out.data["held"], out.data["running"], out.data["waiting"]) == (5.0, 3.0, 2.0)
    assert "held 5 requests (3 running, 2 waiting)" in out.message
    [spec] = routing.router_specs(router.pk)
    assert routing.worker_url(stalled) not in spec["workers"]
    # it finishes a request: it is moving again, and goes back in
    engine_rows(stalled, clock.now + timedelta(seconds=1), clock.now + timedelta(seconds=3),
                requests_running=2.0, requests_waiting=0.0, generation_tokens_per_s=80.0,
                requests_finished_per_s=0.5)
    clock.tick(3)
    assert in_rotation(service) == [True, True, True]
    assert events(service, ServiceEventKind.INTO_ROTATION)[-1].deployment_id == stalled.pk


def test_a_replica_without_progress_for_less_than_the_stall_time_stays(placed):
    service, _, _, clock, _ = placed
    d = replicas(service)[0]
    next_tick = clock.now + timedelta(seconds=3)
    engine_rows(d, next_tick - timedelta(seconds=settings.PITWALL["SERVICE_STALL_S"] - 4),
                next_tick, requests_running=3.0, requests_waiting=0.0,
                generation_tokens_per_s=0.0, requests_finished_per_s=0.0)
    clock.tick(3)
    assert in_rotation(service) == [True, True, True]


def test_each_reason_to_leave_rotation_is_named(placed):
    service, _, _, clock, fleet = placed
    a, b, c = replicas(service)
    Host.objects.filter(pk=a.host_id).update(
        last_seen=clock.now - timedelta(seconds=settings.PITWALL["ONLINE_WINDOW_S"] + 5))
    Gpu.objects.filter(host_id=b.host_id, index=b.gpu_indices[0]).update(present=False)
    report(c, DeploymentState.CRASHED, c.revision, restarts=1, error="exit 1")
    # the rotation alone: a tick would also heal the replica whose GPU is lost
    assert routing.sync(service, clock.now)
    notes = {d.replica: d.rotation_note for d in replicas(service)}
    assert notes[0].startswith(routing.Why.HOST_OFFLINE)
    assert notes[1] == f"{routing.Why.GPU_LOST}: GPU {b.gpu_indices[0]}"
    assert notes[2] == f"{routing.Why.NOT_READY} (crashed)"
    whys = sorted(e.data["why"] for e in events(service, ServiceEventKind.OUT_OF_ROTATION))
    assert whys == sorted([routing.Why.HOST_OFFLINE, routing.Why.GPU_LOST,
                           routing.Why.NOT_READY])


def test_a_gpu_that_nvml_reports_lost_takes_its_replica_out(placed):
    service, _, _, clock, _ = placed
    d = replicas(service)[0]
    gpu = Gpu.objects.get(host_id=d.host_id, index=d.gpu_indices[0])
    insert_rows("gpu", [{"gpu_id": gpu.pk, "ts": clock.now, "lost": 1}])
    assert routing.sync(service, clock.now)
    assert in_rotation(service) == [False, True, True]
    assert replicas(service)[0].rotation_note.startswith(routing.Why.GPU_LOST)


def test_a_replica_running_an_older_revision_is_not_routed(placed):
    service, _, _, clock, _ = placed
    d = replicas(service)[2]
    report(d, DeploymentState.READY, d.revision - 1 if d.revision > 1 else 99)
    clock.tick()
    assert in_rotation(service) == [True, True, False]
    assert replicas(service)[2].rotation_note.startswith(routing.Why.OLD_REVISION)


# -- the router agent's side, through the endpoints -------------------------------------------


def router_agent(router: Host):
    token, _ = issue_agent_token(router.hostname)
    return bearer_client(token)


def router_report(service: Service, **changes) -> dict:
    return {"service_id": service.pk, "state": "ready", "pid": 4242, "port": 9000,
            "workers": ["http://10.0.0.97:8000"], "healthy": True, "error": "",
            "log_tail": ["INFO router started"],
            "metrics": {"requests_total": 1234, "per_worker": {
                "http://10.0.0.97:8000": {"processed": 600, "running": 2, "healthy": 1}}},
            "at": 1780000000.5, **changes}


def test_the_router_agents_config_carries_its_routers(placed):
    service, router, _, _, _ = placed
    config = router_agent(router).get("/api/v1/agent/config").json()
    assert [r["service_id"] for r in config["routers"]] == [service.pk]
    assert len(config["routers"][0]["workers"]) == 3


def test_the_router_agent_reports_its_routers_status(placed):
    service, router, _, _, _ = placed
    reply = router_agent(router).post("/api/v1/agent/status", {
        "deployments": [], "routers": [router_report(service)]}, format="json")
    assert reply.status_code == 200 and reply.json() == {"stored": 0, "routers": 1}
    service.refresh_from_db()
    assert service.router_status["workers"] == ["http://10.0.0.97:8000"]
    assert service.router_status["metrics"]["per_worker"]["http://10.0.0.97:8000"][
        "processed"] == 600
    assert service.router_reported_at is not None


def test_another_hosts_router_report_is_refused_and_nothing_of_it_stored(placed):
    service, _, _, _, fleet = placed
    before = Service.objects.get(pk=service.pk).router_status
    d = replicas(service)[0]
    token, _ = issue_agent_token(d.host.hostname)
    reply = bearer_client(token).post("/api/v1/agent/status", {
        "deployments": [{"id": d.pk, "state": "crashed", "revision": d.revision}],
        "routers": [router_report(service)]}, format="json")
    assert reply.status_code == 403 and "routed by another host" in reply.json()["detail"]
    service.refresh_from_db()
    assert service.router_status == before != {}
    assert replicas(service)[0].state == DeploymentState.READY  # the report's half too


@pytest.mark.parametrize(("changes", "field"), [
    ({"state": "Ready; rm -rf"}, "state"),
    ({"workers": ["http://" + "a" * 400]}, "workers"),
    ({"workers": [f"http://10.0.0.1:{p}" for p in range(300)]}, "workers"),
    ({"metrics": {"requests_total": -1}}, "metrics"),
    ({"log_tail": ["x"] * 201}, "log_tail"),
    ({"service_id": 0}, "service_id"),
])
def test_a_bad_router_report_is_a_400_naming_the_field(placed, changes, field):
    service, router, _, _, _ = placed
    reply = router_agent(router).post("/api/v1/agent/status", {
        "deployments": [], "routers": [router_report(service, **changes)]}, format="json")
    assert reply.status_code == 400
    assert field in reply.json()["routers"]["0"]
    service.refresh_from_db()
    assert service.router_status["workers"] != ["http://10.0.0.97:8000"]


def test_a_status_report_without_routers_answers_as_before(placed):
    service, router, _, _, _ = placed
    d = replicas(service)[0]
    token, _ = issue_agent_token(d.host.hostname)
    reply = bearer_client(token).post("/api/v1/agent/status", {"deployments": [
        {"id": d.pk, "state": "ready", "revision": d.revision}]}, format="json")
    assert reply.status_code == 200 and reply.json() == {"stored": 1}
    assert engine(d).name == d.engine_name
