"""The service pages: the list, the form (same checks and words as the API), the page with
its replicas (placement reasons, rotation, traffic, start phases), placement's skipped hosts,
rollouts, events and revisions; deletion after a confirmation; host labels on the host page;
a replica's deployment page that sends its reader to the service."""

from __future__ import annotations

import re
import time

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Permission
from django.test import Client

from controlplane.audit.models import AuditEntry
from controlplane.fleet import replica_facts, routing, services
from controlplane.fleet.models import (
    Deployment,
    Rollout,
    ScaleDecision,
    Service,
    ServiceEvent,
    ServiceEventKind,
)
from tests.support.roles import user_with_role
from tests.support.service_fleet import LLAMA, ServiceFleet, service_fleet


@pytest.fixture
def fleet(db) -> ServiceFleet:
    return service_fleet()


@pytest.fixture
def deployer(db) -> Client:
    client = Client()
    client.force_login(user_with_role("dora", "deployer"))
    return client


def form_body(fleet: ServiceFleet, **changes) -> dict:
    """What the browser posts for a valid 4-replica service."""
    body = {"name": "llama", "model": LLAMA, "vllm_version": "0.33.0", "replicas": "4",
            "args": "--max-num-seqs 128 --enable-prefix-caching",
            "env": "VLLM_LOGGING_LEVEL=INFO", "drain_timeout_s": "60",
            "selector": "pool=online", "gpu_model": "H100",
            "router_host": str(fleet.router.pk), "router_port": "9000",
            "router_policy": "power_of_two", "strategy": "rolling", "max_unavailable": "1",
            "max_surge": "1", "canary_window_s": "600", "reason": "first rollout"}
    return {**body, **changes}


@pytest.fixture
def llama(fleet) -> Service:
    service = Service(name="llama", model=LLAMA, vllm_version="0.33.0",
                      args={"max_num_seqs": 128}, env={"HF_TOKEN": "hf_secret"}, replicas=6,
                      selector={"pool": "online"}, router_host=fleet.router)
    services.save(service, reason="first rollout")
    return service


def field_errors(html: str, field: str) -> str:
    """The messages under one field (its div holds the input, the help and the errors)."""
    block = re.search(rf'<div class="field[^"]*" data-field="{field}">(.*?)</div>', html, re.S)
    errors = re.search(r'<ul class="errorlist[^>]*>(.*?)</ul>', block.group(1), re.S) if (
        block) else None
    return errors.group(1) if errors else ""


def test_a_deployer_creates_a_service_in_the_form_and_lands_on_its_placement(deployer, fleet):
    reply = deployer.post("/services/new/", form_body(fleet), follow=True)
    html = reply.content.decode()
    service = Service.objects.get()
    assert reply.redirect_chain[-1][0] == f"/services/{service.pk}/"
    assert "created: 4 of 4 replicas placed" in html
    assert service.args == {"max_num_seqs": 128, "enable_prefix_caching": True}
    assert service.selector == {"pool": "online"} and service.env == {
        "VLLM_LOGGING_LEVEL": "INFO"}
    assert sorted(Deployment.objects.values_list("host__hostname", flat=True)) == [
        "gpu-a", "gpu-b", "gpu-c", "gpu-d"]
    for d in Deployment.objects.all():
        assert f'data-deployment-id="{d.pk}"' in html and d.placement_reason in html
    assert 'data-skipped="gpu-e"' in html and "labels: pool=batch, not pool=online" in html


@pytest.mark.parametrize(("changes", "field", "said"), [
    ({"selector": "pool online"}, "selector", "line 1: write key=value"),
    ({"selector": "Pool=online"}, "selector", "key &#x27;Pool&#x27;"),
    ({"args": '{"max_num_seq": 64}'}, "args", "did you mean max_num_seqs?"),
    ({"args": "--max-num-seq 64"}, "args", "max_num_seqs"),
    ({"replicas": "0"}, "replicas", "from 1 to 64"),
    ({"name": "Llama_8B"}, "name", "a-z 0-9 -"),
    ({"env": "LD_PRELOAD=/tmp/x.so"}, "env", "LD_PRELOAD"),
])
def test_bad_input_is_refused_under_its_field_and_nothing_is_stored(deployer, fleet, changes,
                                                                     field, said):
    reply = deployer.post("/services/new/", form_body(fleet, **changes))
    assert reply.status_code == 400
    html = reply.content.decode()
    assert said in field_errors(html, field), html[html.find('id="form-errors"'):][:2000]
    assert f"<code>{field}</code>" in html  # the summary on top names the field
    assert not Service.objects.exists() and not Deployment.objects.exists()


def test_the_router_host_is_chosen_among_the_hosts_serving_routers(deployer, fleet):
    html = deployer.get("/services/new/").content.decode()
    select = re.search(r'<select name="router_host".*?</select>', html, re.S).group(0)
    assert "router-1" in select and "gpu-a" not in select
    reply = deployer.post("/services/new/", form_body(fleet,
                                                      router_host=str(fleet.online[0].pk)))
    assert reply.status_code == 400
    assert "Select a valid choice" in field_errors(reply.content.decode(), "router_host")
    assert not Service.objects.exists()


def test_the_list_counts_ready_in_rotation_and_unplaced_replicas(operator_client, llama):
    first = llama.replica_set.order_by("replica").first()
    Deployment.objects.filter(pk=first.pk).update(state="ready", in_rotation=True)
    html = operator_client.get("/services/").content.decode()
    row = re.search(rf'<tr data-service-id="{llama.pk}".*?</tr>', html, re.S).group(0)
    assert 'data-field="ready">1<' in row and 'data-field="in_rotation">1<' in row
    # Six wanted on four hosts of two GPUs each: all six fit.
    assert 'data-field="replicas">6<' in row and 'data-unplaced="0"' in row
    assert 'id="new-service"' not in html  # an operator creates nothing


def test_the_page_shows_unplaced_replicas_in_red_with_each_hosts_reason(deployer, fleet):
    service = Service(name="big", model=LLAMA, vllm_version="0.33.0", replicas=10,
                      selector={"pool": "online"})
    services.save(service)
    html = deployer.get(f"/services/{service.pk}/").content.decode()
    assert 'id="unplaced"' in html and "2 of 10 replicas unplaced" in html
    assert "0 free GPUs, needs 1" in html
    list_html = deployer.get("/services/").content.decode()
    assert 'class="n unplaced" data-field="unplaced">2<' in list_html


def test_the_page_shows_rotation_traffic_and_start_phases_of_each_replica(operator_client,
                                                                           llama):
    replicas = list(llama.replica_set.select_related("host").order_by("replica"))
    t0 = time.time() - 100
    Deployment.objects.filter(pk=replicas[0].pk).update(
        state="ready", in_rotation=True, start_phases={
            "process_start": t0, "weights_loaded": t0 + 20, "kv_profiled": t0 + 25,
            "graphs_captured": t0 + 40, "api_ready": t0 + 42.5})
    Deployment.objects.filter(pk=replicas[1].pk).update(
        state="ready", rotation_note="stalled: requests held, no token for 10 s")
    per_worker = {routing.worker_url(replicas[0]): {"processed": 300},
                  routing.worker_url(replicas[1]): {"processed": 100}}
    Service.objects.filter(pk=llama.pk).update(router_status={
        "state": "ready", "workers": list(per_worker), "healthy": True,
        "metrics": {"requests_total": 400, "per_worker": per_worker}})
    html = operator_client.get(f"/services/{llama.pk}/").content.decode()
    row0 = re.search(rf'<tr data-deployment-id="{replicas[0].pk}".*?</tr>', html, re.S)[0]
    row1 = re.search(rf'<tr data-deployment-id="{replicas[1].pk}".*?</tr>', html, re.S)[0]
    assert "in rotation" in row0 and 'data-field="time_to_ready">42.5 s' in row0
    assert 'title="weights loaded: 20.0 s"' in row0 and 'style="width:47.1%"' in row0
    assert 'data-field="traffic_share">75.0 %' in row0 and 'style="width:75.0%"' in row0
    assert "stalled: requests held, no token for 10 s" in row1
    assert 'data-field="traffic_share">25.0 %' in row1
    assert "requests_total" not in html and ">400<" in html  # the router's count
    assert "hf_secret" not in html and "&lt;redacted&gt;" in html
    assert 'id="edit-service"' not in html and 'data-action="revert"' not in html


def test_rollouts_and_events_are_listed_newest_first(operator_client, llama):
    Rollout.objects.create(service=llama, from_revision=1, to_revision=2, strategy="rolling",
                           state="rolled_back", detail="TTFT p99 doubled on llama-0")
    Rollout.objects.create(service=llama, from_revision=2, to_revision=3, strategy="rolling",
                           phase="out_of_router", current=llama.replica_set.first())
    ServiceEvent.objects.create(service=llama, kind=ServiceEventKind.OUT_OF_ROTATION,
                                message="llama-1 stalled: 7 requests held")
    html = operator_client.get(f"/services/{llama.pk}/").content.decode()
    assert 'id="running-rollout"' in html and "out of router" in html
    assert "TTFT p99 doubled on llama-0" in html
    assert html.index("llama-1 stalled: 7 requests held") < html.index("placed 6 of 6")
    assert 'data-event-kind="out_of_rotation"' in html


def test_a_deployer_edits_reverts_and_deletes_after_confirming(deployer, fleet, llama):
    page = deployer.get(f"/services/{llama.pk}/edit/").content.decode()
    assert "HF_TOKEN=&lt;redacted&gt;" in page and "hf_secret" not in page
    assert 'name="name"' in page and "disabled" in re.search(r'<input[^>]*name="name"[^>]*>',
                                                              page)[0]
    body = form_body(fleet, replicas="2", args='{"max_num_seqs": 128}',
                     env="HF_TOKEN=<redacted>", reason="night")
    reply = deployer.post(f"/services/{llama.pk}/edit/", body, follow=True)
    assert "Saved as revision 2." in reply.content.decode()
    llama.refresh_from_db()
    assert llama.replicas == 2 and llama.env == {"HF_TOKEN": "hf_secret"}
    assert llama.replica_set.count() == 2

    reply = deployer.post(f"/services/{llama.pk}/revert/", {"revision": "1"}, follow=True)
    assert "Reverted to revision 1 as revision 3." in reply.content.decode()
    assert Service.objects.get().replicas == 6

    confirm = deployer.get(f"/services/{llama.pk}/delete/").content.decode()
    assert "Delete llama?" in confirm and "llama-0" in confirm
    reply = deployer.post(f"/services/{llama.pk}/delete/", follow=True)
    assert "deleted: its replicas drain and stop" in reply.content.decode()
    assert not Service.objects.exists() and not Deployment.objects.exists()


def test_an_operator_sees_no_form_and_every_write_is_a_403(operator_client, fleet, llama):
    for path in ("/services/new/", f"/services/{llama.pk}/edit/",
                 f"/services/{llama.pk}/delete/"):
        assert operator_client.get(path).status_code == 403
        assert operator_client.post(path, form_body(fleet, name="x")).status_code == 403
    assert operator_client.post(f"/services/{llama.pk}/revert/",
                                {"revision": "1"}).status_code == 403
    assert Service.objects.get().revision == 1 and Service.objects.count() == 1


def test_a_replicas_page_sends_its_reader_to_the_service(deployer, llama):
    replica = llama.replica_set.order_by("replica").first()
    t0 = time.time() - 60
    Deployment.objects.filter(pk=replica.pk).update(start_phases={
        "process_start": t0, "weights_loaded": t0 + 10, "api_ready": t0 + 30})
    html = deployer.get(f"/deployments/{replica.pk}/").content.decode()
    assert 'id="owned-by-service"' in html and f'href="/services/{llama.pk}/"' in html
    assert 'id="edit-deployment"' not in html and 'id="delete-deployment"' not in html
    assert "30.0 s" in html and "weights loaded 10.0 s" in html
    for path, body in ((f"/deployments/{replica.pk}/edit/", {"model": "x"}),
                       (f"/deployments/{replica.pk}/enabled/", {"enabled": "0"}),
                       (f"/deployments/{replica.pk}/delete/", {}),
                       (f"/deployments/{replica.pk}/revert/", {"revision": "1"})):
        reply = deployer.post(path, body, follow=True)
        assert "is a replica of service &#x27;llama&#x27;" in reply.content.decode(), path
    assert deployer.get(f"/deployments/{replica.pk}/edit/").status_code == 302
    kept = Deployment.objects.get(pk=replica.pk)
    assert kept.enabled and kept.revision == 1


def test_a_deployer_sets_host_labels_on_the_host_page(deployer, fleet):
    host = fleet.online[0]
    html = deployer.get(f"/hosts/{host.pk}/").content.decode()
    assert 'id="labels-form"' in html and "zone=rack-1" in html  # the agent's
    reply = deployer.post(f"/hosts/{host.pk}/labels/", {"labels": "pool=batch\ngpu=h100"},
                          follow=True)
    assert "Labels saved." in reply.content.decode()
    host.refresh_from_db()
    assert host.labels == {"pool": "batch", "gpu": "h100"}
    assert host.all_labels() == {"pool": "batch", "zone": "rack-1", "gpu": "h100"}
    assert AuditEntry.objects.get(target_type="host").actor == "dora"

    bad = deployer.post(f"/hosts/{host.pk}/labels/", {"labels": "pool=on line"})
    assert bad.status_code == 400
    assert "pool: the value must be at most 63" in bad.content.decode()
    host.refresh_from_db()
    assert host.labels == {"pool": "batch", "gpu": "h100"}


def test_an_operator_may_read_labels_but_not_set_them(operator_client, fleet):
    host = fleet.online[0]
    html = operator_client.get(f"/hosts/{host.pk}/").content.decode()
    assert "zone=rack-1" in html and 'id="labels-form"' not in html
    reply = operator_client.post(f"/hosts/{host.pk}/labels/", {"labels": "pool=x"})
    assert reply.status_code == 403
    host.refresh_from_db()
    assert host.labels == {}


def test_the_nav_links_to_services(operator_client, fleet):
    assert '<a href="/services/">Services</a>' in operator_client.get("/").content.decode()


def test_start_phases_read_in_vllms_order_skipping_what_is_missing_or_wrong():
    t0 = 1_700_000_000.0
    phases = {"api_ready": t0 + 40, "process_start": t0, "kv_profiled": "soon",
              "weights_loaded": t0 + 30, "graphs_captured": float("nan")}
    steps = replica_facts.steps(phases)
    assert [(s.phase, s.seconds, s.share) for s in steps] == [
        ("weights_loaded", 30.0, 75.0), ("api_ready", 10.0, 25.0)]
    assert replica_facts.time_to_ready(phases) == 40.0
    # On a page's common scale (its slowest start), a shorter start fills less of its bar.
    assert [s.share for s in replica_facts.steps(phases, 80.0)] == [37.5, 12.5]
    assert replica_facts.time_to_ready({"process_start": t0}) is None
    assert replica_facts.time_to_ready({"process_start": t0, "api_ready": t0 - 1}) is None
    assert replica_facts.steps({"process_start": True, "api_ready": t0}) == []
    assert replica_facts.steps(["not", "a", "dict"]) == []


def test_a_code_loading_service_without_deploy_code_is_a_403_naming_the_field(fleet):
    user = get_user_model().objects.create_user("wes")
    user.user_permissions.set(Permission.objects.filter(
        content_type__app_label="fleet",
        codename__in=["view_host", "view_service", "add_service", "change_service"]))
    client = Client()
    client.force_login(user)
    assert 'id="no-deploy-code"' in client.get("/services/new/").content.decode()
    reply = client.post("/services/new/", form_body(fleet, args="--trust-remote-code"))
    assert reply.status_code == 403
    html = reply.content.decode()
    assert "Needs the permission fleet.deploy_code." in html
    assert "trust_remote_code" in field_errors(html, "args")
    assert not Service.objects.exists() and not Deployment.objects.exists()


def test_the_deployment_list_names_each_replicas_service(operator_client, llama):
    html = operator_client.get("/deployments/").content.decode()
    assert html.count(f'data-service-id="{llama.pk}"') == 6
    assert f'replica of <a href="/services/{llama.pk}/">llama</a>' in html


def test_the_scaling_panel_shows_each_decision_with_its_evidence(operator_client, llama):
    Service.objects.filter(pk=llama.pk).update(scaling_mode="auto", min_replicas=2,
                                               max_replicas=8)
    ScaleDecision.objects.create(
        service=llama, mode="auto", direction="out", replicas_before=6, replicas_after=7,
        reason="waiting_per_replica 6 > 4 for 120 s at KV usage 0.5", state="done",
        ready_s=48.2, evidence=[{"name": "waiting_per_replica", "window_s": 120, "value": 6.0,
                                 "threshold": 4.0, "op": ">", "held": True}],
        placement={"slots": [{"reason": "host gpu-b: 1 free H100 on NUMA 0"}]})
    ScaleDecision.objects.create(
        service=llama, mode="auto", direction="config", replicas_before=7, replicas_after=7,
        reason="the queue is KV pressure", state="held")
    html = operator_client.get(f"/services/{llama.pk}/").content.decode()
    panel = html[html.index('id="scaling"'):html.index('id="events"')]
    assert "auto: 2 to 8 replicas" in panel
    assert panel.index('data-direction="config"') < panel.index('data-direction="out"')
    assert "a config change, not a replica" in panel and "6 → 7" in panel
    assert "waiting per replica over 120 s: 6 &gt; 4" in panel and "48.2 s" in panel
    assert "host gpu-b: 1 free H100 on NUMA 0" in panel


def test_the_form_sets_autoscaling_and_a_form_without_it_keeps_it(deployer, fleet):
    made = deployer.post("/services/new/", form_body(
        fleet, scaling_mode="recommend", min_replicas="2", max_replicas="6",
        scaling='{"waiting_per_replica": 8}'))
    assert made.status_code == 302, field_errors(made.content.decode(), "scaling")
    service = Service.objects.get()
    assert (service.scaling_mode, service.min_replicas, service.max_replicas,
            service.scaling) == ("recommend", 2, 6, {"waiting_per_replica": 8})
    deployer.post(f"/services/{service.pk}/edit/", form_body(
        fleet, replicas="5", scaling='{"waiting_per_replica": 8}', reason="one more"))
    service.refresh_from_db()
    assert (service.replicas, service.scaling_mode, service.max_replicas) == (5, "recommend", 6)
    refused = deployer.post(f"/services/{service.pk}/edit/", form_body(
        fleet, scaling='{"queue": 1}'))
    assert "&#x27;queue&#x27; is not a threshold" in field_errors(refused.content.decode(),
                                                               "scaling")
