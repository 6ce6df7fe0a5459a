"""/api/v1/deployments/: desired configs, checked before any agent sees them, and versioned."""

from __future__ import annotations

import json

import pytest

from controlplane.fleet.models import Deployment, DeploymentRevision, Host
from tests.api import deploying
from tests.api.deploying import llama

# Fixtures: may change deployments without, and with, fleet.deploy_code.
writer, code_writer = deploying.writer, deploying.code_writer

URL = "/api/v1/deployments/"
REDACTED = "<redacted>"  # what every reader sees of an env value


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


def test_cpus_null_means_unbound_as_the_schema_says(staff, gpu_host):
    created = staff.post(URL, llama(gpu_host.host, cpus=[0, 1]), format="json")
    assert created.status_code == 201, created.json()
    detail = f"{URL}{created.json()['id']}/"
    unbound = staff.patch(detail, {"cpus": None}, format="json")
    assert unbound.status_code == 200, unbound.json()
    assert unbound.json()["cpus"] is None and Deployment.objects.get().cpus is None


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


def test_a_deployment_cannot_move_to_another_host(staff, gpu_host, mixed_fleet):
    created = staff.post(URL, llama(gpu_host.host), format="json").json()
    moved = staff.patch(f"{URL}{created['id']}/", {"host": mixed_fleet.online_host.pk},
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


# --- options in values, loader variables, code-loading arguments, secrets --------------------

@pytest.mark.parametrize(("changes", "field", "needle"), [
    ({"model": "--middleware=evilmod.app"}, "model", "read as an option"),
    ({"args": {"served_model_name": ["m", "--tool-parser-plugin", "/tmp/p.py"]}}, "args",
     "served_model_name"),
    ({"args": {"tokenizer": "--chat-template=/tmp/t.jinja"}}, "args", "tokenizer"),
])
def test_a_value_that_would_read_as_an_option_is_refused_naming_the_field(
        staff, gpu_host, changes, field, needle):
    reply = staff.post(URL, llama(gpu_host.host, **changes), format="json")
    assert reply.status_code == 400, reply.json()
    assert any(needle in m for m in reply.json()[field])
    assert not Deployment.objects.exists()


@pytest.mark.parametrize("name", ["LD_PRELOAD", "PYTHONPATH", "LD_AUDIT", "BASH_ENV",
                                  "PYTHONSTARTUP", "LD_ANYTHING"])
def test_loader_variables_in_env_are_refused_by_default(code_writer, gpu_host, name):
    reply = code_writer.post(URL, llama(gpu_host.host, env={name: "/tmp/x"}), format="json")
    assert reply.status_code == 400
    [message] = reply.json()["env"]
    assert name in message and "PITWALL_DEPLOY_ALLOW_LOADER_ENV" in message


def test_allowed_loader_variables_still_need_the_deploy_code_permission(
        writer, code_writer, gpu_host, settings):
    settings.PITWALL = {**settings.PITWALL, "DEPLOY_ALLOW_LOADER_ENV": True}
    body = llama(gpu_host.host, env={"LD_PRELOAD": "/opt/libfast.so"})
    refused = writer.post(URL, body, format="json")
    assert refused.status_code == 403 and "LD_PRELOAD" in str(refused.json()["env"])
    assert not Deployment.objects.exists()
    made = code_writer.post(URL, body, format="json")
    assert made.status_code == 201, made.json()
    assert made.json()["code_loading_env"] == ["LD_PRELOAD"]


@pytest.mark.parametrize("env", [{"hf_token": "x"}, {"A-B": "x"}, {"1A": "x"}, {"": "x"},
                                 {"A": "x" * 4097}, {f"V{i}": "x" for i in range(65)},
                                 {"A": 1}, {"A": "nul\u0000"}])
def test_env_names_values_and_count_are_bounded(staff, gpu_host, env):
    reply = staff.post(URL, llama(gpu_host.host, env=env), format="json")
    assert reply.status_code == 400 and reply.json()["env"]


def test_code_loading_arguments_need_the_deploy_code_permission(writer, code_writer, gpu_host):
    body = llama(gpu_host.host, args={"max_num_seqs": 64, "trust_remote_code": True})
    refused = writer.post(URL, body, format="json")
    assert refused.status_code == 403
    assert any("trust_remote_code" in m and "fleet.deploy_code" in m
               for m in refused.json()["args"])
    assert not Deployment.objects.exists()
    made = code_writer.post(URL, body, format="json")
    assert made.status_code == 201 and made.json()["code_loading_args"] == ["trust_remote_code"]
    detail = f"{URL}{made.json()['id']}/"
    assert writer.get(detail).json()["code_loading_args"] == ["trust_remote_code"]
    # Changes that cannot change which code runs stay open to every writer...
    tuned = writer.patch(detail, {"args": {"max_num_seqs": 32, "trust_remote_code": True},
                                  "enabled": False}, format="json")
    assert tuned.status_code == 200, tuned.json()
    # ...but not what remote code is loaded from, while it is trusted.
    other = writer.patch(detail, {"model": "evil/model-with-code"}, format="json")
    assert other.status_code == 403 and "model" in other.json()
    # Turning it off is always allowed; bringing it back (a revert) is not.
    off = writer.patch(detail, {"args": {"max_num_seqs": 32}}, format="json")
    assert off.status_code == 200 and off.json()["code_loading_args"] == []
    back = writer.post(f"{detail}revert/", {"revision": 1}, format="json")
    assert back.status_code == 403 and "trust_remote_code" in str(back.json())
    assert code_writer.post(f"{detail}revert/", {"revision": 1},
                            format="json").status_code == 200


def test_env_values_are_write_only_for_every_user(staff, api, gpu_host):
    body = llama(gpu_host.host, env={"HF_TOKEN": "hf_s3cret", "VLLM_LOGGING_LEVEL": "INFO"})
    made = staff.post(URL, body, format="json")
    assert made.status_code == 201
    assert made.json()["env"] == {"HF_TOKEN": REDACTED, "VLLM_LOGGING_LEVEL": REDACTED}
    detail = f"{URL}{made.json()['id']}/"
    for client in (staff, api):
        for url in (URL, detail, f"{detail}revisions/"):
            reply = client.get(url)
            assert reply.status_code == 200 and "hf_s3cret" not in reply.content.decode()
    assert staff.get(detail).json()["env"]["HF_TOKEN"] == REDACTED
    stored = DeploymentRevision.objects.get(deployment_id=made.json()["id"]).config
    assert "hf_s3cret" not in json.dumps(stored) and stored["env"]["HF_TOKEN"] == REDACTED
    # The host's agent, and nobody else, gets the value.
    [spec] = gpu_host.agent.get("/api/v1/agent/config").json()["deployments"]
    assert spec["env"] == {"HF_TOKEN": "hf_s3cret", "VLLM_LOGGING_LEVEL": "INFO"}


def test_sending_the_placeholder_back_keeps_the_value_and_revisions_say_what_changed(
        staff, gpu_host):
    made = staff.post(URL, llama(gpu_host.host, env={"HF_TOKEN": "hf_a", "LEVEL": "INFO"}),
                      format="json").json()
    detail = f"{URL}{made['id']}/"
    # What an edit form does: the whole config back, as read, with one thing changed.
    shown = staff.get(detail).json()
    writable = {k: shown[k] for k in ("host", "name", "enabled", "model", "port",
                                      "gpu_indices", "vllm_version", "args", "cpus",
                                      "numa_node", "env", "drain_timeout_s")}
    put = staff.put(detail, {**writable, "args": {**shown["args"], "max_num_seqs": 64}},
                    format="json")
    assert put.status_code == 200, put.json()
    assert Deployment.objects.get(pk=made["id"]).env == {"HF_TOKEN": "hf_a", "LEVEL": "INFO"}
    level = staff.patch(detail, {"env": {"HF_TOKEN": REDACTED, "LEVEL": "DEBUG"}},
                        format="json")
    assert level.status_code == 200 and level.json()["revision"] == 3
    rotated = staff.patch(detail, {"env": {"HF_TOKEN": "hf_b", "LEVEL": REDACTED}},
                          format="json")
    assert rotated.json()["revision"] == 4
    assert Deployment.objects.get(pk=made["id"]).env == {"HF_TOKEN": "hf_b", "LEVEL": "DEBUG"}
    same = staff.patch(detail, {"env": {"HF_TOKEN": REDACTED, "LEVEL": REDACTED}},
                       format="json")
    assert same.json()["revision"] == 4  # nothing changed: no revision
    changed = [r["changed"] for r in staff.get(f"{detail}revisions/").json()]
    assert changed[:3] == [["env", "env.HF_TOKEN"], ["env", "env.LEVEL"], ["args"]]
    unknown = staff.patch(detail, {"env": {"NEW_SECRET": REDACTED}}, format="json")
    assert unknown.status_code == 400 and "NEW_SECRET" in unknown.json()["env"][0]


def test_a_revert_keeps_the_current_secret_values(staff, gpu_host):
    made = staff.post(URL, llama(gpu_host.host, env={"HF_TOKEN": "hf_a"}), format="json").json()
    detail = f"{URL}{made['id']}/"
    staff.patch(detail, {"env": {"HF_TOKEN": "hf_b"}, "args": {"max_num_seqs": 8}},
                format="json")
    assert staff.post(f"{detail}revert/", {"revision": 1}, format="json").status_code == 200
    reverted = Deployment.objects.get(pk=made["id"])
    assert reverted.args["max_num_seqs"] == 128 and reverted.env == {"HF_TOKEN": "hf_b"}
    # A value no longer held cannot come back from a revision, which never kept it.
    staff.patch(detail, {"env": {}}, format="json")
    lost = staff.post(f"{detail}revert/", {"revision": 1}, format="json")
    assert lost.status_code == 400 and "HF_TOKEN" in lost.json()["env"][0]
