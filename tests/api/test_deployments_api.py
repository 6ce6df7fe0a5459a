"""/api/v1/deployments/: desired configs, checked before any agent sees them, and versioned."""

from __future__ import annotations

from controlplane.fleet.models import Deployment, DeploymentRevision, Host
from tests.api.deploying import llama

URL = "/api/v1/deployments/"


def version(host: Host) -> int:
    return Host.objects.values_list("config_version", flat=True).get(pk=host.pk)


def test_staff_creates_a_deployment_as_revision_one_with_author_and_reason(staff, gpu_host):
    reply = staff.post(URL, llama(gpu_host.host), format="json")
    assert reply.status_code == 201, reply.json()
    body = reply.json()
    assert body["revision"] == 1 and body["status"]["state"] == "unknown"
    assert "reason" not in body
    rev = DeploymentRevision.objects.get(deployment_id=body["id"])
    assert (rev.revision, rev.author.username, rev.reason) == (1, "carol", "first rollout")
    assert rev.config["args"]["max_num_seqs"] == 128
    assert version(gpu_host.host) == 1


def test_an_argument_the_vllm_version_no_longer_has_is_refused_and_nothing_is_stored(
        staff, gpu_host):
    body = llama(gpu_host.host, vllm_version="0.33.0",
                 args={"max_num_seqs": 128, "swap_space": 4})
    reply = staff.post(URL, body, format="json")
    assert reply.status_code == 400
    assert any("swap_space" in m for m in reply.json()["args"])
    assert not Deployment.objects.exists() and version(gpu_host.host) == 0


def test_a_misspelt_argument_is_refused_with_a_suggestion(staff, gpu_host):
    reply = staff.post(URL, llama(gpu_host.host, args={"max_num_seq": 64}), format="json")
    assert reply.status_code == 400
    assert any("max_num_seqs" in m for m in reply.json()["args"])


def test_gpus_the_host_lacks_or_too_few_for_the_parallelism_are_refused(staff, gpu_host):
    missing = staff.post(URL, llama(gpu_host.host, gpu_indices=[0, 5],
                                    args={"tensor_parallel_size": 2}), format="json")
    assert missing.status_code == 400
    assert any("no GPU 5" in m for m in missing.json()["gpu_indices"])
    short = staff.post(URL, llama(gpu_host.host, args={"tensor_parallel_size": 2}),
                       format="json")
    assert short.status_code == 400
    assert any("tensor_parallel_size" in m for m in short.json()["gpu_indices"])


def test_a_gpu_taken_by_another_deployment_is_refused(staff, gpu_host):
    assert staff.post(URL, llama(gpu_host.host), format="json").status_code == 201
    second = staff.post(URL, llama(gpu_host.host, name="qwen", port=8001), format="json")
    assert second.status_code == 400
    assert any("llama-8b" in m for m in second.json()["gpu_indices"])


def test_cpus_numa_node_env_and_port_are_checked_against_the_host(staff, gpu_host):
    reply = staff.post(URL, llama(gpu_host.host, cpus=[0, 99], numa_node=4, port=80,
                                  env={"CUDA_VISIBLE_DEVICES": "1"}), format="json")
    assert reply.status_code == 400
    errors = reply.json()
    assert "no CPU 99" in errors["cpus"][0]
    assert "no NUMA node 4" in errors["numa_node"][0]
    assert "1024" in errors["port"][0]
    assert "CUDA_VISIBLE_DEVICES" in errors["env"][0]


def test_a_tmpdir_too_long_for_vllms_sockets_is_refused_before_vllm_would_exit(
        staff, gpu_host):
    too_long = "/var/lib/pitwall-agent/deployments/llama-8b/scratch/tmp/sockets/x" + "y" * 6
    reply = staff.post(URL, llama(gpu_host.host, env={"TMPDIR": too_long}), format="json")
    assert reply.status_code == 400 and "107 characters" in reply.json()["env"][0]
    assert not Deployment.objects.exists()
    fits = staff.post(URL, llama(gpu_host.host, env={"TMPDIR": too_long[:70]}), format="json")
    assert fits.status_code == 201


def test_a_change_is_a_new_revision_naming_what_changed_and_a_no_op_is_none(staff, gpu_host):
    created = staff.post(URL, llama(gpu_host.host), format="json").json()
    detail = f"{URL}{created['id']}/"
    args = {**created["args"], "max_num_seqs": 256}
    changed = staff.patch(detail, {"args": args, "reason": "KV has headroom"}, format="json")
    assert changed.status_code == 200 and changed.json()["revision"] == 2
    same = staff.patch(detail, {"args": args}, format="json")
    assert same.json()["revision"] == 2
    revisions = staff.get(f"{detail}revisions/").json()
    assert [r["revision"] for r in revisions] == [2, 1]
    assert revisions[0]["changed"] == ["args"] and revisions[0]["reason"] == "KV has headroom"
    assert version(gpu_host.host) == 2


def test_revert_brings_back_an_earlier_config_as_a_new_revision(staff, gpu_host):
    created = staff.post(URL, llama(gpu_host.host), format="json").json()
    detail = f"{URL}{created['id']}/"
    staff.patch(detail, {"args": {**created["args"], "max_num_seqs": 512}}, format="json")
    reverted = staff.post(f"{detail}revert/", {"revision": 1}, format="json")
    assert reverted.status_code == 200
    assert reverted.json()["revision"] == 3 and reverted.json()["args"]["max_num_seqs"] == 128
    assert staff.get(f"{detail}revisions/").json()[0]["reason"] == "revert to revision 1"
    missing = staff.post(f"{detail}revert/", {"revision": 9}, format="json")
    assert missing.status_code == 400 and "no revision 9" in missing.json()["revision"][0]


def test_a_deployment_cannot_move_to_another_host(staff, gpu_host, fleet):
    created = staff.post(URL, llama(gpu_host.host), format="json").json()
    moved = staff.patch(f"{URL}{created['id']}/", {"host": fleet.online_host.pk},
                        format="json")
    assert moved.status_code == 400 and "another host" in moved.json()["host"][0]


def test_users_who_are_not_staff_read_but_do_not_change_deployments(api, staff, gpu_host):
    created = staff.post(URL, llama(gpu_host.host), format="json").json()
    assert api.get(URL).json()["count"] == 1
    assert api.post(URL, llama(gpu_host.host, name="other", port=8002),
                    format="json").status_code == 403
    assert api.delete(f"{URL}{created['id']}/").status_code == 403


def test_anonymous_and_agent_tokens_are_refused(anonymous, gpu_host):
    assert anonymous.get(URL).status_code in (401, 403)
    assert gpu_host.agent.get(URL).status_code == 401


def test_deleting_a_deployment_bumps_the_hosts_config_version(staff, gpu_host):
    created = staff.post(URL, llama(gpu_host.host), format="json").json()
    assert staff.delete(f"{URL}{created['id']}/").status_code == 204
    assert version(gpu_host.host) == 2 and not Deployment.objects.exists()
