"""Deployments created, changed, disabled and deleted in the browser's forms (Django's client):
the service's checks with the API's words, the field named, nothing stored from a refused
form, revisions as the API makes them, and the permissions: a plain deployer (no
fleet.deploy_code) is refused what the API refuses them, a viewer or operator gets 403."""

from __future__ import annotations

import re

import pytest
from django.contrib.auth import get_user_model
from django.test import Client

from controlplane.audit.models import AuditEntry
from controlplane.fleet import deployments
from controlplane.fleet.models import Deployment, DeploymentRevision, Host
from controlplane.web.forms import MAX_ARGS_TEXT, MAX_ENV_TEXT
from tests.api.deploying import deployment_writer

NEW = "/deployments/new/"
API = "/api/v1/deployments/"


def form_body(host: Host, **changes) -> dict:
    """A valid form for GPU 0 of `host`, as a browser posts it (text fields)."""
    body = {"host": host.pk, "name": "llama-8b", "enabled": "on",
            "model": "meta-llama/Llama-3.1-8B-Instruct", "port": "8000", "gpu_indices": "0",
            "vllm_version": "0.33.0",
            "args": '{"max_num_seqs": 128, "enable_prefix_caching": true}',
            "cpus": "0-3", "numa_node": "", "env": "VLLM_LOGGING_LEVEL=INFO",
            "drain_timeout_s": "60", "reason": "first rollout"}
    return {**body, **changes}


def signed_in(username: str) -> Client:
    client = Client()
    client.force_login(get_user_model().objects.get(username=username))
    return client


@pytest.fixture
def writer(page_fleet):
    """A deployer without fleet.deploy_code: the API client and the page client of one user."""
    return deployment_writer("dana", deploy_code=False), signed_in("dana")


@pytest.fixture
def code_writer(page_fleet):
    return deployment_writer("cody", deploy_code=True), signed_in("cody")


def field_errors(html: str, field: str) -> list[str]:
    """The messages the form shows under one field."""
    block = re.search(rf'data-field="{field}">(.*?)</div>', html, re.S)
    assert block, f"no field {field}"
    return [re.sub(r"<[^>]+>", "", m) for m in re.findall(r"<li>(.*?)</li>", block.group(1))]


def unescape(text: str) -> str:
    return text.replace("&#x27;", "'").replace("&quot;", '"').replace("&lt;", "<") \
        .replace("&gt;", ">").replace("&amp;", "&")


def test_a_deployer_creates_a_deployment_as_revision_one(code_writer, page_fleet):
    _, page = code_writer
    form = page.get(NEW).content.decode()
    assert 'id="deployment-form"' in form
    assert 'name="vllm_version" value="0.33.0"' in form  # the API's default, filled in
    reply = page.post(NEW, form_body(page_fleet.host))
    made = Deployment.objects.get()
    assert reply.status_code == 302 and reply["Location"] == f"/deployments/{made.pk}/"
    assert (made.gpu_indices, made.cpus, made.env) == ([0], [0, 1, 2, 3],
                                                       {"VLLM_LOGGING_LEVEL": "INFO"})
    assert made.args == {"max_num_seqs": 128, "enable_prefix_caching": True}
    revision = DeploymentRevision.objects.get(deployment=made)
    assert (revision.revision, revision.author.username, revision.reason) == (
        1, "cody", "first rollout")
    # The audit log records it, as it does for the API.
    entry = AuditEntry.objects.get(target_type="deployment", target_id=str(made.pk))
    assert (entry.action, entry.actor, entry.via) == ("created", "cody", "session")
    assert "INFO" not in str(entry.changes["env"])  # a secret: redacted in the log too


def test_flags_are_read_as_the_agent_reads_them(code_writer, page_fleet):
    _, page = code_writer
    page.post(NEW, form_body(page_fleet.host, args="--max-num-seqs 64 --enable-prefix-caching "
                                                   "--gpu-memory-utilization 0.85"))
    assert Deployment.objects.get().args == {"max_num_seqs": 64, "enable_prefix_caching": True,
                                             "gpu_memory_utilization": 0.85}


@pytest.mark.parametrize(("field", "form", "api"), [
    ("args", {"args": '{"max_num_seq": 64}'}, {"args": {"max_num_seq": 64}}),
    ("args", {"args": '{"swap_space": 4}'}, {"args": {"swap_space": 4}}),
    ("gpu_indices", {"gpu_indices": "0, 5"}, {"gpu_indices": [0, 5]}),
    ("port", {"port": "80"}, {"port": 80}),
    ("cpus", {"cpus": "0-8"}, {"cpus": list(range(9))}),
    # (The API refuses "cpus": null, though its docs say null is unbound: left out instead.)
    ("numa_node", {"numa_node": "3", "cpus": ""}, {"numa_node": 3, "cpus": None}),
    ("env", {"env": "TMPDIR=/" + "t" * 80}, {"env": {"TMPDIR": "/" + "t" * 80}}),
    ("env", {"env": "LD_PRELOAD=/x.so"}, {"env": {"LD_PRELOAD": "/x.so"}}),
    ("model", {"model": "--trust-remote-code"}, {"model": "--trust-remote-code"}),
    ("drain_timeout_s", {"drain_timeout_s": "0"}, {"drain_timeout_s": 0}),
])
def test_a_refused_field_is_named_with_the_apis_message_and_nothing_is_stored(
        code_writer, page_fleet, field, form, api):
    api_client, page = code_writer
    reply = page.post(NEW, form_body(page_fleet.host, **form))
    assert reply.status_code == 400
    html = reply.content.decode()
    assert 'id="form-errors"' in html and f"<code>{field}</code>" in html
    body = {"host": page_fleet.host.pk, "name": "llama-8b", "model": "m", "port": 8000,
            "gpu_indices": [0], "vllm_version": "0.33.0", "cpus": [0, 1, 2, 3], **api}
    body = {name: value for name, value in body.items() if value is not None}
    refused = api_client.post(API, body, format="json")
    assert refused.status_code == 400, refused.json()
    assert field in refused.json(), refused.json()
    assert [unescape(m) for m in field_errors(html, field)] == refused.json()[field]
    assert not Deployment.objects.exists() and not DeploymentRevision.objects.exists()


def test_text_the_form_cannot_read_is_named_before_any_check(code_writer, page_fleet):
    _, page = code_writer
    reply = page.post(NEW, form_body(page_fleet.host, args="--max-num-seq 64", gpu_indices="a",
                                     env="no equals sign"))
    html = unescape(reply.content.decode())
    assert reply.status_code == 400
    assert field_errors(html, "args") == ["unknown argument 'max_num_seq' "
                                          "(did you mean max_num_seqs?)"]
    assert field_errors(html, "gpu_indices") == ["GPU indices separated by commas, e.g. 0, 1"]
    assert field_errors(html, "env") == ["line 1: write NAME=value"]
    assert not Deployment.objects.exists()


def test_text_beyond_any_real_config_is_refused_unread(code_writer, page_fleet):
    _, page = code_writer
    reply = page.post(NEW, form_body(page_fleet.host, args="--max-num-seqs 1 " * 5000,
                                     env="A=" + "x" * MAX_ENV_TEXT))
    html = reply.content.decode()
    assert reply.status_code == 400
    assert f"at most {MAX_ARGS_TEXT} characters" in field_errors(html, "args")[0]
    assert field_errors(html, "env") == [f"at most {MAX_ENV_TEXT} characters"]
    assert not Deployment.objects.exists()


def test_a_port_or_name_taken_on_the_host_is_refused(code_writer, page_fleet):
    _, page = code_writer
    page.post(NEW, form_body(page_fleet.host))
    reply = page.post(NEW, form_body(page_fleet.host, gpu_indices="1", cpus=""))
    assert reply.status_code == 400 and "already exists" in reply.content.decode()
    assert Deployment.objects.count() == 1


@pytest.fixture
def llama(page_fleet) -> Deployment:
    d = Deployment(host=page_fleet.host, name="llama-8b", model="meta-llama/Llama-3.1-8B-Instruct",
                   port=8000, gpu_indices=[0], vllm_version="0.33.0",
                   args={"max_num_seqs": 128}, env={"HF_TOKEN": "hf_secret"})
    deployments.save(d, reason="first rollout")
    return d


def edit_body(d: Deployment, **changes) -> dict:
    """The edit form as the page fills it (env values redacted), with `changes`."""
    body = {"name": d.name, "enabled": "on", "model": d.model, "port": str(d.port),
            "gpu_indices": ", ".join(map(str, d.gpu_indices)), "vllm_version": d.vllm_version,
            "args": '{"max_num_seqs": 128}', "cpus": "", "numa_node": "",
            "env": f"HF_TOKEN={deployments.REDACTED}", "drain_timeout_s": "60", "reason": ""}
    return {**body, **changes}


def test_an_edit_bumps_the_revision_naming_what_changed_and_keeps_secret_values(
        writer, llama):
    _, page = writer
    form = page.get(f"/deployments/{llama.pk}/edit/").content.decode()
    assert "hf_secret" not in form and f"HF_TOKEN={deployments.REDACTED}" in unescape(form)
    reply = page.post(f"/deployments/{llama.pk}/edit/", edit_body(
        llama, args='{"max_num_seqs": 256}', reason="KV has headroom"))
    assert reply.status_code == 302
    llama.refresh_from_db()
    assert llama.revision == 2 and llama.env == {"HF_TOKEN": "hf_secret"}
    newest = llama.revisions.order_by("-revision").first()
    assert (newest.changed, newest.reason, newest.author.username) == (
        ["args"], "KV has headroom", "dana")
    # Saving the same form again changes nothing: no revision (the API's no-op).
    again = page.post(f"/deployments/{llama.pk}/edit/", edit_body(
        llama, args='{"max_num_seqs": 256}'), follow=True)
    assert "Nothing changed" in again.content.decode()
    assert Deployment.objects.get(pk=llama.pk).revision == 2


def test_the_host_of_a_deployment_cannot_be_changed_from_the_form(writer, llama, page_fleet):
    _, page = writer
    page.post(f"/deployments/{llama.pk}/edit/",
              edit_body(llama, host=page_fleet.sim_host.pk, port="8001"))
    llama.refresh_from_db()
    assert llama.host_id == page_fleet.host.pk and llama.port == 8001


def test_disable_then_enable_are_revisions(writer, llama):
    _, page = writer
    page.post(f"/deployments/{llama.pk}/enabled/", {"enabled": "0"})
    llama.refresh_from_db()
    assert (llama.enabled, llama.revision) == (False, 2)
    html = page.get(f"/deployments/{llama.pk}/").content.decode()
    assert 'id="enable-deployment"' in html
    page.post(f"/deployments/{llama.pk}/enabled/", {"enabled": "1"})
    llama.refresh_from_db()
    assert (llama.enabled, llama.revision) == (True, 3)
    assert llama.revisions.get(revision=2).changed == ["enabled"]


def test_enabling_onto_a_gpu_another_deployment_took_says_why(writer, llama, page_fleet):
    _, page = writer
    page.post(f"/deployments/{llama.pk}/enabled/", {"enabled": "0"})
    deployments.save(Deployment(host=page_fleet.host, name="other", model="m", port=8001,
                                gpu_indices=[0], vllm_version="0.33.0"))
    reply = page.post(f"/deployments/{llama.pk}/enabled/", {"enabled": "1"}, follow=True)
    assert "Not enabled: gpu_indices: GPU 0 is already used by deployment" in unescape(
        reply.content.decode())
    assert not Deployment.objects.get(pk=llama.pk).enabled


def test_delete_asks_first_then_deletes_and_bumps_the_config_version(writer, llama):
    _, page = writer
    version = Host.objects.get(pk=llama.host_id).config_version
    confirm = page.get(f"/deployments/{llama.pk}/delete/").content.decode()
    assert 'id="confirm-delete"' in confirm and "csrfmiddlewaretoken" in confirm
    assert Deployment.objects.filter(pk=llama.pk).exists()  # a GET deletes nothing
    reply = page.post(f"/deployments/{llama.pk}/delete/")
    assert reply.status_code == 302 and reply["Location"] == "/deployments/"
    assert not Deployment.objects.filter(pk=llama.pk).exists()
    assert Host.objects.get(pk=llama.host_id).config_version == version + 1


def test_code_loading_needs_deploy_code_as_the_api_says(writer, code_writer, page_fleet):
    api_client, page = writer
    body = form_body(page_fleet.host, args='{"trust_remote_code": true}')
    reply = page.post(NEW, body)
    assert reply.status_code == 403
    refused = api_client.post(API, {"host": page_fleet.host.pk, "name": "llama-8b",
                                    "model": "meta-llama/Llama-3.1-8B-Instruct", "port": 8000,
                                    "gpu_indices": [0], "vllm_version": "0.33.0",
                                    "args": {"trust_remote_code": True}}, format="json")
    assert refused.status_code == 403
    assert [unescape(m) for m in field_errors(reply.content.decode(), "args")] == \
        refused.json()["args"]
    assert not Deployment.objects.exists()
    _, code_page = code_writer
    assert code_page.post(NEW, body).status_code == 302
    made = Deployment.objects.get()
    # A plain deployer may still change what cannot change the code that runs...
    edit = edit_body(made, args='{"trust_remote_code": true}', port="8002",
                     env=f"VLLM_LOGGING_LEVEL={deployments.REDACTED}")
    assert page.post(f"/deployments/{made.pk}/edit/", edit).status_code == 302
    # ...but not the model that remote code comes from.
    other = page.post(f"/deployments/{made.pk}/edit/", {**edit, "model": "evil/model"})
    assert other.status_code == 403 and field_errors(unescape(other.content.decode()), "model")
    assert Deployment.objects.get(pk=made.pk).model == "meta-llama/Llama-3.1-8B-Instruct"


def test_without_the_permissions_no_buttons_and_a_post_is_403(operator_client, llama,
                                                               page_fleet):
    html = operator_client.get(f"/deployments/{llama.pk}/").content.decode()
    assert 'id="deployment-actions"' not in html
    assert 'id="new-deployment"' not in operator_client.get("/deployments/").content.decode()
    for path, body in [(NEW, form_body(page_fleet.host, name="other", port="8001")),
                       (f"/deployments/{llama.pk}/edit/", edit_body(llama, port="8001")),
                       (f"/deployments/{llama.pk}/enabled/", {"enabled": "0"}),
                       (f"/deployments/{llama.pk}/delete/", {})]:
        assert operator_client.post(path, body).status_code == 403, path
    assert operator_client.get(NEW).status_code == 403
    assert list(Deployment.objects.values_list("revision", "enabled", "port")) == [
        (1, True, 8000)]


def test_each_permission_opens_its_own_action(page_fleet, llama):
    """fleet.change_deployment without delete: edit and disable, but no delete."""
    from django.contrib.auth.models import Permission

    user = get_user_model().objects.create_user("eve")
    user.user_permissions.set(Permission.objects.filter(
        content_type__app_label="fleet",
        codename__in=["view_host", "view_deployment", "change_deployment"]))
    page = Client()
    page.force_login(user)
    html = page.get(f"/deployments/{llama.pk}/").content.decode()
    assert 'id="edit-deployment"' in html and 'id="delete-deployment"' not in html
    assert page.post(f"/deployments/{llama.pk}/delete/").status_code == 403
    assert page.get(NEW).status_code == 403
    assert page.post(f"/deployments/{llama.pk}/enabled/", {"enabled": "0"}).status_code == 302
