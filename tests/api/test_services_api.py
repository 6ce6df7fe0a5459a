"""/api/v1/services/: a model on many replicas, placed by Pitwall, changed through the service
only; its replicas, placement, rollouts, events and revisions as the API shows them."""

from __future__ import annotations

import time

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Permission
from rest_framework.test import APIClient

from controlplane.fleet import routing
from controlplane.fleet.models import (
    Deployment,
    Rollout,
    ScaleDecision,
    Service,
    ServiceEvent,
    ServiceEventKind,
    ServiceRevision,
    TokenScope,
)
from controlplane.fleet.tokens import issue_api_token
from tests.support.clients import bearer_client
from tests.support.roles import user_with_role
from tests.support.service_fleet import LLAMA, ServiceFleet, llama_service, service_fleet

URL = "/api/v1/services/"
REDACTED = "<redacted>"


@pytest.fixture
def fleet(db) -> ServiceFleet:
    return service_fleet()


@pytest.fixture
def deployer(db) -> APIClient:
    user_with_role("dora", "deployer")
    return bearer_client(issue_api_token("dora", name="tests"))


@pytest.fixture
def viewer(db) -> APIClient:
    user_with_role("vic", "viewer")
    return bearer_client(issue_api_token("vic", name="tests"))


@pytest.fixture
def llama(deployer, fleet) -> dict:
    reply = deployer.post(URL, llama_service(fleet.router), format="json")
    assert reply.status_code == 201, reply.json()
    return reply.json()


def service_writer(username: str) -> APIClient:
    """May create and change services, but not deploy code-loading settings."""
    user = get_user_model().objects.create_user(username)
    user.user_permissions.set(Permission.objects.filter(
        content_type__app_label="fleet",
        codename__in=["view_host", "view_service", "add_service", "change_service"]))
    return bearer_client(issue_api_token(username, name="tests"))


def test_a_deployer_creates_a_service_and_its_replicas_are_placed_with_reasons(llama, fleet):
    assert (llama["revision"], llama["replicas"], llama["unplaced"]) == (1, 4, 0)
    replicas = llama["replica_set"]
    assert [r["slot"] for r in replicas] == [0, 1, 2, 3]
    assert [r["name"] for r in replicas] == ["llama-0", "llama-1", "llama-2", "llama-3"]
    # Spread: one replica on each host of the pool, never the batch or the offline host.
    assert sorted(r["hostname"] for r in replicas) == ["gpu-a", "gpu-b", "gpu-c", "gpu-d"]
    for r in replicas:
        assert r["placement_reason"].startswith(f"host {r['hostname']}: 1 free H100 on NUMA")
        assert r["in_rotation"] is False and r["state"] == "unknown"
        assert r["time_to_ready_s"] is None and r["traffic_share"] is None
    cached = next(r for r in replicas if r["hostname"] == "gpu-b")
    assert "weights cached (16.1 GB)" in cached["placement_reason"]
    skipped = llama["placement"]["skipped"]
    assert skipped["gpu-e"] == "labels: pool=batch, not pool=online"
    assert skipped["gpu-f"] == "offline"
    assert "router-1" in skipped
    assert llama["env"] == {"VLLM_LOGGING_LEVEL": REDACTED}
    assert llama["router_hostname"] == "router-1" and llama["rollout"] is None
    made = Deployment.objects.filter(service_id=llama["id"])
    assert made.count() == 4 and all(d.env == {"VLLM_LOGGING_LEVEL": "INFO"} for d in made)
    revision = ServiceRevision.objects.get(service_id=llama["id"])
    assert (revision.author.username, revision.reason) == ("dora", "first rollout")
    assert ServiceEvent.objects.filter(service_id=llama["id"],
                                       kind=ServiceEventKind.PLACED).exists()


def test_replicas_no_host_can_take_are_unplaced_with_each_hosts_reason(deployer, fleet):
    reply = deployer.post(URL, llama_service(fleet.router, replicas=10), format="json")
    assert reply.status_code == 201, reply.json()
    body = reply.json()
    # Four hosts of two GPUs: eight replicas, two left over.
    assert (body["unplaced"], len(body["replica_set"])) == (2, 8)
    assert body["placement"]["unplaced"] == 2
    assert body["placement"]["summary"].startswith("unplaced: 2 of 10 replicas")
    assert "0 free GPUs, needs 1" in body["placement"]["skipped"]["gpu-a"]


@pytest.mark.parametrize(("changes", "field", "said"), [
    ({"name": "Llama_8B"}, "name", "a-z 0-9 -"),
    ({"args": {"max_num_seq": 64}}, "args", "max_num_seqs"),
    ({"replicas": 0}, "replicas", "from 1 to 64"),
    ({"replicas": 40000}, "replicas", ""),
    ({"selector": {"Pool": "online"}}, "selector", "key 'Pool'"),
    ({"selector": ["pool=online"]}, "selector", "an object"),
    ({"env": {"CUDA_VISIBLE_DEVICES": "1"}}, "env", "CUDA_VISIBLE_DEVICES"),
    ({"router_port": 80}, "router_port", "1024"),
    ({"router_policy": "fastest"}, "router_policy", "fastest"),
    ({"vllm_version": "latest"}, "vllm_version", "unparseable"),
    ({"model": "--trust-remote-code"}, "model", ""),
])
def test_bad_input_is_a_400_naming_the_field_and_nothing_is_stored(deployer, fleet, changes,
                                                                    field, said):
    reply = deployer.post(URL, llama_service(fleet.router, **changes), format="json")
    assert reply.status_code == 400, reply.json()
    assert any(said in m for m in reply.json()[field]), reply.json()
    assert not Service.objects.exists() and not Deployment.objects.exists()


def test_a_router_host_whose_agent_serves_no_router_is_refused(deployer, fleet):
    reply = deployer.post(URL, llama_service(fleet.online[0]), format="json")
    assert reply.status_code == 400
    assert "--router" in reply.json()["router_host"][0]
    assert not Service.objects.exists()


def test_code_loading_arguments_need_deploy_code_403_naming_the_field(fleet):
    writer = service_writer("wes")
    body = llama_service(fleet.router, args={"trust_remote_code": True})
    reply = writer.post(URL, body, format="json")
    assert reply.status_code == 403
    assert "trust_remote_code" in str(reply.json()["args"])
    assert not Service.objects.exists() and not Deployment.objects.exists()
    # The same writer may create one that loads no code.
    assert writer.post(URL, llama_service(fleet.router), format="json").status_code == 201


def test_every_role_reads_only_deployers_write(llama, viewer, api, fleet):
    assert viewer.get(URL).json()["results"][0]["name"] == "llama"
    assert viewer.get(f"{URL}{llama['id']}/events/").status_code == 200
    for client in (viewer, api):  # a viewer, an operator
        assert client.post(URL, llama_service(fleet.router, name="other"),
                           format="json").status_code == 403
        assert client.patch(f"{URL}{llama['id']}/", {"replicas": 1},
                            format="json").status_code == 403
        assert client.delete(f"{URL}{llama['id']}/").status_code == 403
        assert client.post(f"{URL}{llama['id']}/revert/", {"revision": 1},
                           format="json").status_code == 403
    assert Service.objects.get().replicas == 4


def test_each_write_needs_its_own_permission(llama, fleet):
    """add_service and change_service, but not delete_service: a DELETE is refused."""
    writer = service_writer("wes")
    reply = writer.delete(f"{URL}{llama['id']}/")
    assert reply.status_code == 403 and "fleet.delete_service" in reply.json()["detail"]
    assert Service.objects.filter(pk=llama["id"]).exists()


def test_a_read_only_token_writes_nothing(llama):
    user_with_role("root", "admin")
    client = bearer_client(issue_api_token("root", "ro", scope=TokenScope.READ))
    reply = client.patch(f"{URL}{llama['id']}/", {"replicas": 1}, format="json")
    assert reply.status_code == 403 and "read-only" in reply.json()["detail"]
    assert Service.objects.get().replicas == 4


def test_scaling_down_removes_the_highest_slots_as_a_new_revision(deployer, llama):
    reply = deployer.patch(f"{URL}{llama['id']}/", {"replicas": 2, "reason": "night"},
                           format="json")
    assert reply.status_code == 200, reply.json()
    body = reply.json()
    assert body["revision"] == 2 and [r["slot"] for r in body["replica_set"]] == [0, 1]
    revisions = deployer.get(f"{URL}{llama['id']}/revisions/").json()
    assert [r["revision"] for r in revisions] == [2, 1]
    assert revisions[0]["changed"] == ["replicas"] and revisions[0]["reason"] == "night"
    assert revisions[0]["config"]["env"] == {"VLLM_LOGGING_LEVEL": REDACTED}


def test_a_change_of_what_replicas_run_starts_a_rollout_shown_on_the_service(deployer, llama):
    reply = deployer.patch(f"{URL}{llama['id']}/", {"args": {"max_num_seqs": 256}},
                           format="json")
    assert reply.status_code == 200, reply.json()
    body = reply.json()
    assert body["rollout"]["state"] == "running"
    assert (body["rollout"]["from_revision"], body["rollout"]["to_revision"]) == (1, 2)
    assert body["rollout"]["started_by"] == "dora"
    rollouts = deployer.get(f"{URL}{llama['id']}/rollouts/").json()
    assert [r["to_revision"] for r in rollouts] == [2]


def test_revert_makes_a_new_revision_with_the_old_config(deployer, llama):
    deployer.patch(f"{URL}{llama['id']}/", {"replicas": 2}, format="json")
    reply = deployer.post(f"{URL}{llama['id']}/revert/", {"revision": 1, "reason": "day"},
                          format="json")
    assert reply.status_code == 200, reply.json()
    assert (reply.json()["revision"], reply.json()["replicas"]) == (3, 4)
    assert len(reply.json()["replica_set"]) == 4
    missing = deployer.post(f"{URL}{llama['id']}/revert/", {"revision": 9}, format="json")
    assert missing.status_code == 400 and "no revision 9" in missing.json()["revision"][0]


def test_the_env_placeholder_keeps_the_value_held(deployer, llama):
    reply = deployer.patch(f"{URL}{llama['id']}/", {
        "env": {"VLLM_LOGGING_LEVEL": REDACTED, "HF_HUB_OFFLINE": "1"}}, format="json")
    assert reply.status_code == 200, reply.json()
    assert Service.objects.get().env == {"VLLM_LOGGING_LEVEL": "INFO", "HF_HUB_OFFLINE": "1"}


def test_a_service_cannot_be_renamed(deployer, llama):
    reply = deployer.patch(f"{URL}{llama['id']}/", {"name": "qwen"}, format="json")
    assert reply.status_code == 400 and "renamed" in reply.json()["name"][0]
    assert Service.objects.get().name == "llama"


def test_events_are_newest_first_and_bounded(deployer, llama):
    service = Service.objects.get()
    for i in range(3):
        ServiceEvent.objects.create(service=service, kind=ServiceEventKind.HEALED,
                                    message=f"healed {i}")
    events = deployer.get(f"{URL}{llama['id']}/events/", {"limit": 2}).json()
    assert [e["message"] for e in events] == ["healed 2", "healed 1"]
    for bad in ("0", "1001", "x", "-1", "１"):
        reply = deployer.get(f"{URL}{llama['id']}/events/", {"limit": bad})
        assert reply.status_code == 400 and "limit" in reply.json()


def test_time_to_ready_and_traffic_share_come_from_the_reports(deployer, llama):
    service = Service.objects.get()
    replicas = list(service.replica_set.select_related("host").order_by("replica"))
    t0 = time.time() - 100
    Deployment.objects.filter(pk=replicas[0].pk).update(start_phases={
        "process_start": t0, "weights_loaded": t0 + 20, "kv_profiled": t0 + 25,
        "graphs_captured": t0 + 40, "api_ready": t0 + 42.5})
    per_worker = {routing.worker_url(replicas[0]): {"processed": 300, "running": 1},
                  routing.worker_url(replicas[1]): {"processed": 100, "running": 0}}
    Service.objects.filter(pk=service.pk).update(router_status={
        "state": "ready", "workers": list(per_worker),
        "metrics": {"requests_total": 400, "per_worker": per_worker}})
    body = deployer.get(f"{URL}{llama['id']}/").json()
    by_slot = {r["slot"]: r for r in body["replica_set"]}
    assert by_slot[0]["time_to_ready_s"] == 42.5
    assert by_slot[0]["start_phases"]["weights_loaded"] == t0 + 20
    assert (by_slot[0]["traffic_share"], by_slot[1]["traffic_share"]) == (75.0, 25.0)
    assert by_slot[2]["traffic_share"] == 0.0
    assert body["router_status"]["metrics"]["requests_total"] == 400


def test_deleting_a_service_removes_its_replicas(deployer, llama):
    assert deployer.delete(f"{URL}{llama['id']}/").status_code == 204
    assert not Service.objects.exists() and not Deployment.objects.exists()


def test_a_replica_cannot_be_changed_as_a_deployment(deployer, llama):
    replica = Deployment.objects.filter(service_id=llama["id"]).first()
    url = f"/api/v1/deployments/{replica.pk}/"
    said = f"replica of service 'llama': change the service instead (/api/v1/services/" \
           f"{llama['id']}/)"
    reply = deployer.patch(url, {"args": {"max_num_seqs": 8}}, format="json")
    assert reply.status_code == 400 and reply.json()["service"] == [said]
    reply = deployer.delete(url)
    assert reply.status_code == 400 and reply.json()["service"] == [said]
    reply = deployer.post(f"{url}revert/", {"revision": 1}, format="json")
    assert reply.status_code == 400 and reply.json()["service"] == [said]
    assert Deployment.objects.get(pk=replica.pk).args == {"max_num_seqs": 128,
                                                          "enable_prefix_caching": True}


def test_the_list_reads_in_a_fixed_number_of_queries(deployer, fleet, llama,
                                                      django_assert_max_num_queries):
    deployer.post(URL, llama_service(fleet.router, name="qwen", model=LLAMA, replicas=2,
                                     router_port=9001), format="json")
    with django_assert_max_num_queries(12):
        reply = deployer.get(URL)
    assert [s["name"] for s in reply.json()["results"]] == ["llama", "qwen"]
    assert Rollout.objects.count() == 0


def test_autoscaling_limits_and_thresholds_are_set_and_kept_as_a_revision(deployer, llama):
    reply = deployer.patch(f"{URL}{llama['id']}/", {
        "scaling_mode": "auto", "min_replicas": 2, "max_replicas": 6,
        "scaling": {"waiting_per_replica": 8, "in_window_s": 1200}}, format="json")
    assert reply.status_code == 200, reply.json()
    body = reply.json()
    assert (body["scaling_mode"], body["min_replicas"], body["max_replicas"]) == ("auto", 2, 6)
    assert body["scaling"] == {"waiting_per_replica": 8, "in_window_s": 1200}
    revision = ServiceRevision.objects.get(service_id=llama["id"], revision=2)
    assert {"scaling_mode", "min_replicas", "max_replicas", "scaling"} <= set(revision.changed)


@pytest.mark.parametrize(("change", "field", "said"), [
    ({"scaling_mode": "sometimes"}, "scaling_mode", "\"sometimes\" is not a valid choice"),
    ({"min_replicas": 4, "max_replicas": 3}, "max_replicas", "at least min_replicas (4)"),
    ({"max_replicas": 65}, "max_replicas", "from 1 to 64"),
    ({"scaling": {"queue": 3}}, "scaling", "'queue' is not a threshold"),
    ({"scaling": {"kv_pressure": 1.5}}, "scaling", "kv_pressure must be a number from 0 to 1"),
    ({"scaling": {"out_window_s": 90}}, "scaling", "whole minutes"),
    ({"scaling": {"in_cooldown_s": 1.5}}, "scaling", "a whole number of seconds"),
    ({"scaling": ["waiting_per_replica"]}, "scaling", "object"),
])
def test_bad_autoscaling_settings_are_refused_naming_them_and_nothing_is_stored(
        deployer, llama, change, field, said):
    reply = deployer.patch(f"{URL}{llama['id']}/", change, format="json")
    assert reply.status_code == 400 and said in str(reply.json()[field]), reply.json()
    service = Service.objects.get()
    assert (service.revision, service.scaling_mode, service.scaling) == (1, "off", {})


def test_the_scaling_decisions_are_read_newest_first_with_their_evidence(deployer, viewer,
                                                                        llama):
    service = Service.objects.get()
    for before in (4, 5):
        ScaleDecision.objects.create(
            service=service, mode="auto", direction="out", replicas_before=before,
            replicas_after=before + 1, reason=f"queue at {before}", state="done",
            evidence=[{"name": "waiting_per_replica", "window_s": 120, "value": 6.0,
                       "threshold": 4.0, "op": ">", "held": True}], ready_s=41.5)
    rows = viewer.get(f"{URL}{llama['id']}/scaling/").json()
    assert [r["replicas_before"] for r in rows] == [5, 4]
    assert rows[0]["evidence"][0]["threshold"] == 4.0 and rows[0]["ready_s"] == 41.5
    assert len(deployer.get(f"{URL}{llama['id']}/scaling/", {"limit": 1}).json()) == 1
    assert deployer.get(f"{URL}{llama['id']}/scaling/", {"limit": "x"}).status_code == 400
