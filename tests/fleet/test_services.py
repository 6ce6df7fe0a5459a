"""services.py against the database: a new service places its replicas and records why; a
replica is changed only through its service; revisions and reverts; scaling; the deploy_code
rule; the router host's checks; bad input named by field with nothing stored; healing's
replace; delete."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Permission
from django.core.exceptions import ValidationError
from django.utils import timezone

from controlplane.fleet import deployments, services
from controlplane.fleet.models import (
    Deployment,
    DeploymentRevision,
    Gpu,
    Host,
    Rollout,
    Service,
    ServiceEvent,
    ServiceEventKind,
    ServiceRevision,
)
from tests.support.roles import user_with_role

pytestmark = pytest.mark.django_db

GIB = 2**30
LLAMA = "meta-llama/Llama-3.1-8B-Instruct"


def gpu_host(name: str, gpus: int = 2, *, labels: dict | None = None, online: bool = True,
             cached: bool = False, roles: list[str] | None = None) -> Host:
    host = Host.objects.create(
        hostname=name, cpu_count=16, last_seen=timezone.now() if online else None,
        numa_nodes=[{"id": 0, "cpus": list(range(8))}, {"id": 1, "cpus": list(range(8, 16))}],
        inventory={"labels": labels or {}, "port_range": [8000, 8099],
                   "roles": roles or [],
                   "hf_models": [{"repo": LLAMA, "bytes": 16 * 10**9}] if cached else []})
    for i in range(gpus):
        Gpu.objects.create(uuid=f"GPU-{name}-{i}", host=host, index=i, name="NVIDIA H100",
                           mem_total_bytes=80 * GIB, numa_node=i)
    return host


@pytest.fixture
def fleet() -> dict[str, Host]:
    return {"a": gpu_host("a", labels={"zone": "r1"}), "b": gpu_host("b", labels={"zone": "r2"}),
            "router": gpu_host("router", gpus=0, roles=["router"])}


@pytest.fixture
def deployer():
    return user_with_role("dee", "deployer")


@pytest.fixture
def writer():
    """May change services, but not deploy code-loading configs."""
    user = get_user_model().objects.create_user("wes")
    user.user_permissions.set(Permission.objects.filter(
        content_type__app_label="fleet",
        codename__in=["add_service", "change_service", "delete_service", "view_service"]))
    return get_user_model().objects.get(pk=user.pk)


def llama(router: Host | None = None, **changes) -> Service:
    fields = {"name": "llama", "model": LLAMA, "vllm_version": "0.11.0",
              "args": {"max_num_seqs": 128, "gpu_memory_utilization": 0.9},
              "env": {"HF_TOKEN": "hf_secret"}, "replicas": 2, "router_host": router,
              "router_port": 9000}
    return Service(**{**fields, **changes})


def versions(*hosts: Host) -> list[int]:
    return [Host.objects.get(pk=h.pk).config_version for h in hosts]


def test_a_new_service_places_its_replicas_and_records_why(fleet, deployer):
    before = versions(fleet["a"], fleet["b"], fleet["router"])
    service = llama(fleet["router"])
    made = services.save(service, deployer, "first")
    assert (made.revision, made.reason, made.author) == (1, "first", deployer)
    assert made.config["env"] == {"HF_TOKEN": deployments.REDACTED}
    replicas = list(Deployment.objects.filter(service=service).order_by("replica"))
    assert [(d.name, d.replica, d.host.hostname) for d in replicas] == [
        ("llama-0", 0, "a"), ("llama-1", 1, "b")]
    for d in replicas:
        assert (d.model, d.args, d.env, d.gpu_indices, d.port) == (
            LLAMA, service.args, {"HF_TOKEN": "hf_secret"}, [0], 8000)
        assert (d.cpus, d.numa_node, d.in_rotation) == (list(range(8)), 0, False)
        assert d.placement_reason.startswith(f"host {d.host.hostname}: 1 free H100 on NUMA 0")
        revision = DeploymentRevision.objects.get(deployment=d)
        assert revision.author is None and "service llama (revision 1 by dee)" in revision.reason
    service.refresh_from_db()
    assert (service.unplaced, service.placement["placed"]) == (0, 2)
    assert service.placement["summary"] == "placed 2 of 2 replicas: a, b"
    [event] = ServiceEvent.objects.filter(service=service)
    assert event.kind == ServiceEventKind.PLACED
    assert event.message.startswith("placed 2 of 2 replicas: host a: 1 free H100")
    assert all(now > then for now, then in zip(versions(fleet["a"], fleet["b"], fleet["router"]),
                                               before, strict=True))


def test_replicas_that_fit_nowhere_are_counted_with_each_hosts_reason(fleet, deployer):
    service = llama(replicas=6)
    services.save(service, deployer)
    service.refresh_from_db()
    assert Deployment.objects.filter(service=service).count() == 4
    assert service.unplaced == 2
    assert service.placement["skipped"]["a"].startswith("0 free GPUs, needs 1")
    unplaced = ServiceEvent.objects.get(service=service, kind=ServiceEventKind.UNPLACED)
    assert unplaced.message.startswith("unplaced: 2 of 6 replicas: host a: 0 free GPUs")
    assert "host router: no GPUs" in unplaced.message
    # The controller retries: the same verdict is not recorded twice.
    services.scale(service)
    assert ServiceEvent.objects.filter(service=service, kind=ServiceEventKind.UNPLACED).count() == 1
    # A host that comes: the two left are placed there.
    gpu_host("c")
    services.scale(service)
    service.refresh_from_db()
    assert service.unplaced == 0
    assert sorted(Deployment.objects.filter(service=service, host__hostname="c")
                  .values_list("replica", flat=True)) == [4, 5]


def test_a_replica_is_changed_only_through_its_service(fleet, deployer):
    service = llama()
    services.save(service, deployer)
    replica = Deployment.objects.get(service=service, replica=0)
    revision = replica.revision
    message = ("replica of service 'llama': change the service instead "
               f"(/api/v1/services/{service.pk}/)")
    replica.args = {"max_num_seqs": 4}
    with pytest.raises(deployments.OwnedByService) as refused:
        deployments.save(replica, deployer, "tweak")
    assert refused.value.message_dict == {"service": [message]}
    replica.service = None  # clearing it on the instance frees nothing
    with pytest.raises(deployments.OwnedByService):
        deployments.save(replica, deployer)
    with pytest.raises(deployments.OwnedByService):
        deployments.revert(Deployment.objects.get(pk=replica.pk), 1, deployer)
    with pytest.raises(deployments.OwnedByService):
        deployments.delete(Deployment.objects.get(pk=replica.pk))
    other = Service.objects.create(name="other", model="m", vllm_version="0.11.0")
    with pytest.raises(deployments.OwnedByService):
        deployments.delete(Deployment.objects.get(pk=replica.pk), owner=other)
    stored = Deployment.objects.get(pk=replica.pk)
    assert (stored.revision, stored.args, stored.service_id) == (
        revision, service.args, service.pk)


def test_revisions_record_what_changed_and_revert_keeps_env_values(fleet, deployer):
    service = llama()
    services.save(service, deployer)
    service.selector, service.env = {"zone": "r1"}, {"HF_TOKEN": deployments.REDACTED}
    second = services.save(service, deployer, "only r1")
    assert second.changed == ["selector"]
    assert Service.objects.get(pk=service.pk).env == {"HF_TOKEN": "hf_secret"}
    assert services.save(service, deployer) is None  # nothing changed: no revision
    third = services.revert(service, 1, deployer)
    assert (third.revision, third.changed, third.reason) == (3, ["selector"],
                                                             "revert to revision 1")
    stored = Service.objects.get(pk=service.pk)
    assert (stored.selector, stored.env) == ({}, {"HF_TOKEN": "hf_secret"})
    # A value the service no longer holds cannot come back from a revision.
    stored.env = {}
    services.save(stored, deployer, "no token")
    with pytest.raises(ValidationError) as refused:
        services.revert(stored, 1, deployer)
    assert "HF_TOKEN" in refused.value.message_dict["env"][0]
    with pytest.raises(ValidationError) as missing:
        services.revert(stored, 99, deployer)
    assert list(missing.value.message_dict) == ["revision"]
    assert ServiceRevision.objects.filter(service=stored).count() == 4


def test_a_change_of_the_replica_config_starts_a_rollout(fleet, deployer):
    service = llama()
    services.save(service, deployer)
    service.args = {**service.args, "max_num_seqs": 64}
    services.save(service, deployer, "smaller batches")
    rollout = Rollout.objects.get(service=service)
    assert (rollout.from_revision, rollout.to_revision, rollout.started_by) == (1, 2, deployer)
    # Not a replica field: no rollout.
    service.canary_window_s = 900
    services.save(service, deployer)
    assert Rollout.objects.filter(service=service).count() == 1


def test_scaling_down_removes_the_highest_slots_and_up_places_the_missing(fleet, deployer):
    gpu_host("c")
    service = llama(fleet["router"], replicas=3)
    services.save(service, deployer)
    router_version = versions(fleet["router"])
    service.replicas = 1
    services.save(service, deployer, "quiet night")
    assert list(Deployment.objects.filter(service=service).values_list("name", flat=True)) == [
        "llama-0"]
    removed = ServiceEvent.objects.filter(service=service, message__startswith="scaled to 1")
    assert removed.get().message == ("scaled to 1 replicas: removed replica 2 on host c, "
                                     "replica 1 on host b")
    assert versions(fleet["router"])[0] > router_version[0]
    service.replicas = 4
    services.save(service, deployer, "busy day")
    placed = Deployment.objects.filter(service=service).order_by("replica")
    assert [d.replica for d in placed] == [0, 1, 2, 3]
    assert len({d.host_id for d in placed}) == 3  # spread: the fourth shares a host


def test_a_writer_without_deploy_code_may_not_write_code_loading_config(fleet, writer):
    service = llama(args={"trust_remote_code": True})
    with pytest.raises(deployments.CodeNotPermitted) as refused:
        services.save(service, writer)
    assert "trust_remote_code" in refused.value.message_dict["args"][0]
    assert (Service.objects.count(), Deployment.objects.count()) == (0, 0)
    # Once someone allowed it, the writer may scale it: no code of the writer's choosing.
    allowed = llama(args={"trust_remote_code": True}, replicas=1)
    services.save(allowed, None)
    allowed.replicas = 2
    services.save(allowed, writer, "more")
    assert Deployment.objects.filter(service=allowed).count() == 2
    allowed.model = "other/model"
    with pytest.raises(deployments.CodeNotPermitted):
        services.save(allowed, writer)


def test_the_router_host_must_serve_routers_on_a_free_port(fleet, deployer):
    with pytest.raises(ValidationError) as refused:
        services.save(llama(fleet["a"]), deployer)
    assert refused.value.message_dict == {"router_host": [
        "host 'a' does not serve routers: its inventory reports no role 'router' (run its "
        "agent with --router)"]}
    plain = Deployment(host=fleet["router"], name="sidecar", model="m", port=9000,
                       gpu_indices=[], vllm_version="0.11.0", args={})
    deployments.save(plain)
    with pytest.raises(ValidationError) as taken:
        services.save(llama(fleet["router"]), deployer)
    assert taken.value.message_dict == {"router_port": [
        "port 9000 is used on the router host by deployment 'sidecar'"]}
    services.save(llama(fleet["router"], router_port=9001, replicas=1), deployer)
    with pytest.raises(ValidationError) as other:
        services.save(llama(fleet["router"], name="qwen", router_port=9001), deployer)
    assert other.value.message_dict == {"router_port": [
        "port 9001 is used on the router host by the router of service 'llama'"]}
    assert Service.objects.count() == 1


@pytest.mark.parametrize(("field", "value"), [
    ("name", "Bad_Name"), ("name", "x" * 61), ("name", "-lead"),
    ("model", "--evil"), ("model", ""), ("model", "m" * 301),
    ("vllm_version", "banana"), ("args", {"nope": 1}), ("args", []),
    ("env", {"lower": "x"}), ("env", {"LD_PRELOAD": "/tmp/x.so"}),
    ("drain_timeout_s", 0), ("replicas", 0), ("replicas", 65), ("replicas", True),
    ("selector", {"Bad Key": "x"}), ("selector", {"pool": "a b"}), ("selector", []),
    ("gpu_model", "g" * 121), ("router_port", 80), ("router_policy", "fastest"),
    ("strategy", "yolo"), ("max_unavailable", 0), ("max_surge", -1),
    ("canary_window_s", 59), ("canary_window_s", 86401),
])
def test_bad_input_names_the_field_and_stores_nothing(fleet, deployer, field, value):
    with pytest.raises(ValidationError) as refused:
        services.save(llama(**{field: value}), deployer)
    assert list(refused.value.message_dict) == [field]
    assert (Service.objects.count(), ServiceRevision.objects.count(),
            Deployment.objects.count()) == (0, 0, 0)


def test_a_name_taken_by_a_service_or_by_a_deployment_of_a_replicas_shape(fleet, deployer):
    services.save(llama(replicas=1), deployer)
    with pytest.raises(ValidationError) as twice:
        services.save(llama(), deployer)
    assert twice.value.message_dict == {"name": ["a service named 'llama' exists"]}
    deployments.save(Deployment(host=fleet["b"], name="qwen-3", model="m", port=8050,
                                gpu_indices=[1], vllm_version="0.11.0", args={}))
    with pytest.raises(ValidationError) as shaped:
        services.save(llama(name="qwen"), deployer)
    assert "deployment 'qwen-3' exists" in shaped.value.message_dict["name"][0]


def test_replace_moves_a_lost_replica_to_another_host(fleet, deployer):
    gpu_host("c", labels={"zone": "r1"})
    service = llama(fleet["router"])
    services.save(service, deployer)
    lost = Deployment.objects.get(service=service, replica=0)
    assert lost.host.hostname == "a"
    router_version = versions(fleet["router"])[0]
    made = services.replace(lost, "host offline: a has not reported for 120 s")
    assert (made.name, made.replica, made.host.hostname) == ("llama-0", 0, "c")
    assert not Deployment.objects.filter(pk=lost.pk).exists()
    event = ServiceEvent.objects.get(service=service, kind=ServiceEventKind.HEALED)
    assert event.message == ("replica 0 moved from host a to host c: host offline: a has not "
                             "reported for 120 s")
    assert (event.deployment_id, event.data["old_host"], event.data["new_host"]) == (
        made.pk, "a", "c")
    assert versions(fleet["router"])[0] > router_version


def test_replace_with_no_other_host_keeps_the_lost_replica(fleet, deployer):
    service = llama(replicas=4)  # every GPU of a and b
    services.save(service, deployer)
    lost = Deployment.objects.get(service=service, replica=0)
    assert services.replace(lost, "GPU lost: GPU 0 of a is lost") is None
    assert Deployment.objects.filter(pk=lost.pk).exists()
    service.refresh_from_db()
    assert service.placement["skipped"][lost.host.hostname] == (
        "avoided: the replica being replaced was here")
    assert not ServiceEvent.objects.filter(service=service, kind=ServiceEventKind.HEALED)


def test_delete_takes_the_replicas_off_their_hosts_and_the_router_off_its_host(fleet,
                                                                               deployer):
    service = llama(fleet["router"])
    services.save(service, deployer)
    before = versions(fleet["a"], fleet["b"], fleet["router"])
    services.delete(service, deployer)
    assert (Service.objects.count(), Deployment.objects.count()) == (0, 0)
    assert all(now > then for now, then in zip(versions(fleet["a"], fleet["b"], fleet["router"]),
                                               before, strict=True))


def test_a_cpu_fleet_takes_several_replicas_on_one_machine(deployer):
    cpu = gpu_host("cpu-box", gpus=0, roles=["router"])
    service = llama(cpu, replicas=2)
    services.save(service, deployer)
    placed = list(Deployment.objects.filter(service=service).order_by("replica"))
    assert [(d.host_id, d.gpu_indices, d.cpus, d.port) for d in placed] == [
        (cpu.pk, [], None, 8000), (cpu.pk, [], None, 8001)]


def test_placement_leaves_the_router_port_and_other_deployments_alone(deployer):
    box = gpu_host("box", gpus=2, roles=["router"])
    box.inventory["port_range"] = [9000, 9002]
    box.save()
    deployments.save(Deployment(host=box, name="mine", model="m", port=9001, gpu_indices=[0],
                                vllm_version="0.11.0", args={}))
    service = llama(box, replicas=1, router_port=9000)
    services.save(service, deployer)
    replica = Deployment.objects.get(service=service)
    assert (replica.port, replica.gpu_indices) == (9002, [1])


def test_an_offline_fleet_places_nothing_and_says_so(deployer):
    gpu_host("gone", online=False)
    Host.objects.filter(hostname="gone").update(last_seen=timezone.now() - timedelta(days=1))
    service = llama(replicas=1)
    services.save(service, deployer)
    service.refresh_from_db()
    assert service.unplaced == 1
    assert service.placement["summary"] == "unplaced: 1 of 1 replicas: host gone: offline"
