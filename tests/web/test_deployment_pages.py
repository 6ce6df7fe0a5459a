"""The deployment pages: what runs where, what the agent reports, the revisions and a revert.

``signed_in`` is an operator who is not staff: reads, gets 403 for a revert; ``lead`` is staff."""

from __future__ import annotations

import pytest
from django.test import Client
from django.utils import timezone

from controlplane.fleet import deployments
from controlplane.fleet.models import Deployment, Host


@pytest.fixture
def crashed_llama(page_fleet) -> Deployment:
    d = Deployment(host=page_fleet.host, name="llama-8b", model="meta-llama/Llama-3.1-8B-Instruct",
                   port=8000, gpu_indices=[0], vllm_version="0.33.0",
                   args={"max_num_seqs": 128})
    deployments.save(d, reason="first rollout")
    d.args = {"max_num_seqs": 256}
    deployments.save(d, reason="KV has headroom")
    Deployment.objects.filter(pk=d.pk).update(
        state="crashed", running_revision=1, restarts=3, exit_code=1, error="exited with code 1",
        reported_at=timezone.now(), log_tail=["INFO loading weights", "CUDA out of memory"],
        running_argv=["vllm", "serve", "meta-llama/Llama-3.1-8B-Instruct", "--port", "8000"])
    d.refresh_from_db()
    return d


def test_the_list_shows_each_deployment_with_its_state_and_the_revision_running(
        operator_client, crashed_llama):
    html = operator_client.get("/deployments/").content.decode()
    assert "llama-8b" in html and 'data-state="crashed"' in html
    assert "(runs 1)" in html


def test_a_deployment_page_shows_the_log_tail_the_error_and_the_revisions(
        operator_client, crashed_llama, page_fleet):
    html = operator_client.get(f"/deployments/{crashed_llama.pk}/").content.decode()
    assert "CUDA out of memory" in html and "exited with code 1" in html
    assert "revision 2 not applied yet" in html
    assert 'data-revision="2"' in html and "KV has headroom" in html
    assert 'data-action="revert"' not in html  # read-only for an operator who is not staff
    assert f'href="/engines/{page_fleet.engine.pk}/"' in html  # its engine's charts
    assert "What the engine reports" in html and "block_size" in html


def test_an_operator_who_is_not_staff_cannot_revert(operator_client, crashed_llama):
    reply = operator_client.post(f"/deployments/{crashed_llama.pk}/revert/", {"revision": 1})
    assert reply.status_code == 403
    assert Deployment.objects.get(pk=crashed_llama.pk).revision == 2


def test_staff_revert_to_an_earlier_revision_from_the_page(lead, crashed_llama):
    html = lead.get(f"/deployments/{crashed_llama.pk}/").content.decode()
    assert 'data-action="revert"' in html
    reply = lead.post(f"/deployments/{crashed_llama.pk}/revert/", {"revision": 1}, follow=True)
    assert "as revision 3" in reply.content.decode()
    reverted = Deployment.objects.get(pk=crashed_llama.pk)
    assert (reverted.revision, reverted.args) == (3, {"max_num_seqs": 128})


def test_anonymous_visitors_are_sent_to_the_login_page(crashed_llama):
    reply = Client().get("/deployments/")
    assert reply.status_code == 302 and "/login" in reply["Location"]


@pytest.fixture
def suggestion(crashed_llama):
    from controlplane.tuning.models import Suggestion

    Deployment.objects.filter(pk=crashed_llama.pk).update(running_revision=2, state="ready")
    now = timezone.now()
    return Suggestion.objects.create(
        deployment=crashed_llama, kind="kv_pressure", revision=crashed_llama.revision,
        confidence=0.9,
        severity=0.8, changes=[{"field": "args.max_num_seqs", "current": 256, "proposed": 192}],
        reasoning="KV cache averaged 97% with 0.80 preemptions/s.", expected="No preemptions.",
        evidence=[{"metric": "engine.kv_cache_usage", "stat": "avg", "value": 0.97,
                   "threshold": ">= 0.9", "entity": "host", "entity_id": crashed_llama.host_id,
                   "start": now.isoformat(), "end": now.isoformat()}])


def test_the_tuning_page_and_the_deployment_page_show_a_suggestion_with_its_evidence(
        operator_client, suggestion):
    for url in ("/suggestions/", f"/deployments/{suggestion.deployment_id}/"):
        html = operator_client.get(url).content.decode()
        assert "KV-cache pressure" in html and "0.80 preemptions/s" in html
        assert '<td class="n">0.97</td>' in html
        assert f'href="/hosts/{suggestion.deployment.host_id}/?from=' in html
        assert 'data-action="accept"' not in html


def test_staff_accept_a_suggestion_from_the_page(lead, suggestion):
    page = f"/deployments/{suggestion.deployment_id}/"
    assert 'data-action="accept"' in lead.get(page).content.decode()
    reply = lead.post(f"/suggestions/{suggestion.pk}/accept/", {"next": page}, follow=True)
    assert "accepted: the agent applies it" in reply.content.decode()
    assert Deployment.objects.get(pk=suggestion.deployment_id).args["max_num_seqs"] == 192


def test_an_operator_who_is_not_staff_cannot_accept(operator_client, suggestion):
    assert operator_client.post(f"/suggestions/{suggestion.pk}/accept/").status_code == 403


def test_the_tuning_page_lists_what_can_be_applied_before_reports(operator_client, suggestion):
    from controlplane.tuning.models import Suggestion

    Suggestion.objects.create(
        deployment=suggestion.deployment, kind="host_readiness", revision=1, confidence=1.0,
        severity=1, changes=[], reasoning="Below the reference host.", expected="A report.",
        evidence=[])
    html = operator_client.get("/suggestions/").content.decode()
    assert html.index('data-kind="kv_pressure"') < html.index('data-kind="host_readiness"')


def test_evidence_values_read_as_a_person_reads_them():
    from controlplane.web.views.suggestions import shown

    assert shown({"metric": "host.mem_total_bytes", "stat": "inventory",
                  "value": 25280000000.0}) == "23.5 GiB"
    assert shown({"metric": "gpu.mem_used_bytes", "stat": "avg free share",
                  "value": 0.6438}) == "0.6438"
    assert shown({"metric": "proc.cpu_affinity", "value": [16, 17]}) == "16, 17"
    assert shown({"metric": "engine.itl_seconds", "value": None}) == "–"


def test_a_deployment_without_gpus_says_it_runs_the_cpu_build(operator_client, db):
    host = Host.objects.create(hostname="cpu-box")
    d = Deployment(host=host, name="tiny", model="/models/tiny", port=8000, gpu_indices=[],
                   vllm_version="0.32.0", args={"dtype": "float32"})
    deployments.save(d, reason="CPU build")

    assert "none (CPU)" in operator_client.get("/deployments/").content.decode()
    assert "no GPU (CPU build)" in operator_client.get(f"/deployments/{d.pk}/").content.decode()


def test_env_values_never_reach_a_page_and_code_loading_arguments_are_marked(
        operator_client, lead, db):
    d = Deployment(host=Host.objects.create(hostname="cpu-box"), name="custom",
                   model="org/custom-arch", port=8001,
                   gpu_indices=[], vllm_version="0.33.0",
                   args={"trust_remote_code": True, "max_num_seqs": 8},
                   env={"HF_TOKEN": "hf_page_s3cret"})
    deployments.save(d, reason="needs its own modelling code")
    d.args = {**d.args, "max_num_seqs": 16}
    d.env = {"HF_TOKEN": "hf_rotated_s3cret"}
    deployments.save(d, reason="rotate")
    for client in (operator_client, lead):
        html = client.get(f"/deployments/{d.pk}/").content.decode()
        assert "s3cret" not in html
        assert "HF_TOKEN" in html and "&lt;redacted&gt;" in html
        assert 'data-loads-code="trust_remote_code"' in html
        assert "env.HF_TOKEN" in html  # the revision says which variable changed
    assert "s3cret" not in operator_client.get("/deployments/").content.decode()
