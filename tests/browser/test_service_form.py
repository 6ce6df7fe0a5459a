"""A deployer in a real browser creates a 4-replica service on a fleet made in the database:
the form first refuses bad fields, each under its own with the service's words and nothing
stored; then the service page shows where each replica went and why, and why each other host
took none. Then, once agents and the router reported, the replicas' rotation, traffic share
and start phases, in light and in dark mode."""

from __future__ import annotations

import time
from datetime import timedelta

import pytest
from django.contrib.auth import get_user_model
from django.utils import timezone

from controlplane.accounts.roles import assign_role
from controlplane.fleet import routing, services
from controlplane.fleet.models import Deployment, Host, Service
from tests.browser.helpers import ARTIFACTS, shot
from tests.support.service_fleet import LLAMA, service_fleet

# A browser and real processes: `make test` runs it, `make test-fast` leaves it out.
pytestmark = pytest.mark.slow(seconds=6)

DARK_BG = "rgb(15, 19, 24)"  # pitwall.css --bg in dark mode


def field_errors(tab, field: str) -> str:
    return tab.inner_text(f"#service-form [data-field='{field}'] .errorlist")


def seen_now(*hostnames: str) -> None:
    """The server's online window is a few seconds (tests/browser/conftest.py): the hosts
    report again, as their agents would, right before placement reads them."""
    Host.objects.filter(hostname__in=hostnames).update(last_seen=timezone.now())


def test_a_deployer_creates_a_four_replica_service_and_sees_its_placement(page, browser_stack):
    assign_role(get_user_model().objects.get(username=browser_stack.username), "deployer")
    fleet = service_fleet()
    online = [h.hostname for h in fleet.online] + [fleet.batch.hostname, fleet.router.hostname]

    page.goto(f"{browser_stack.base}/services/")
    page.click("#new-service")
    page.fill("#id_name", "llama")
    page.fill("#id_model", LLAMA)
    page.fill("#id_replicas", "4")
    page.fill("#id_args", "--max-num-seq 128 --enable-prefix-caching")
    page.fill("#id_selector", "pool online")
    page.fill("#id_gpu_model", "H100")
    page.select_option("#id_router_host", str(fleet.router.id))
    page.click("#save-button")
    page.wait_for_selector("#form-errors")

    assert "max_num_seqs" in field_errors(page, "args")
    assert "line 1: write key=value" in field_errors(page, "selector")
    summary = page.inner_text("#form-errors")
    assert "args" in summary and "selector" in summary
    assert page.input_value("#id_args") == "--max-num-seq 128 --enable-prefix-caching"
    assert not Service.objects.exists() and not Deployment.objects.exists()
    shot(page, "service-form-error")

    page.fill("#id_args", "--max-num-seqs 128 --enable-prefix-caching")
    page.fill("#id_selector", "pool=online")
    page.fill("#id_env", "VLLM_LOGGING_LEVEL=INFO")
    page.fill("#id_reason", "first rollout")
    seen_now(*online)
    page.click("#save-button")
    page.wait_for_selector("#replica-table")

    service = Service.objects.get()
    assert "created: 4 of 4 replicas placed" in page.inner_text("#messages")
    assert page.locator("#unplaced").count() == 0
    rows = page.locator("#replica-table tr[data-deployment-id]")
    assert rows.count() == 4
    replicas = list(service.replica_set.select_related("host").order_by("replica"))
    assert sorted(d.host.hostname for d in replicas) == ["gpu-a", "gpu-b", "gpu-c", "gpu-d"]
    reasons = page.locator("[data-field=placement_reason]").all_inner_texts()
    assert reasons == [d.placement_reason for d in replicas]
    assert any("weights cached (16.1 GB)" in r for r in reasons)
    skipped = page.inner_text("#skipped-hosts")
    assert "gpu-e" in skipped and "labels: pool=batch, not pool=online" in skipped
    assert "gpu-f" in skipped and "offline" in skipped
    shot(page, "service-placed")

    # The agents start the replicas and the router spreads requests over three of them.
    t0 = time.time() - 120
    for i, d in enumerate(replicas):
        Deployment.objects.filter(pk=d.pk).update(
            state="ready" if i < 3 else "starting", running_revision=1, in_rotation=i < 3,
            rotation_note="" if i < 3 else "not ready (starting)",
            state_since=timezone.now() - timedelta(seconds=60),
            start_phases={"process_start": t0, "weights_loaded": t0 + 18 + i,
                          "kv_profiled": t0 + 24 + i, "graphs_captured": t0 + 39 + i,
                          **({"api_ready": t0 + 41 + i} if i < 3 else {})})
    per_worker = {routing.worker_url(d): {"processed": n, "running": 1}
                  for d, n in zip(replicas[:3], (500, 300, 200), strict=True)}
    Service.objects.filter(pk=service.pk).update(
        router_reported_at=timezone.now(), router_status={
            "state": "ready", "healthy": True, "port": 9000, "workers": list(per_worker),
            "metrics": {"requests_total": 1000, "per_worker": per_worker}})
    page.reload()
    first = page.locator(f"#replica-table tr[data-deployment-id='{replicas[0].pk}']")
    assert first.locator("[data-field=traffic_share]").inner_text() == "50.0 %"
    assert first.locator("[data-field=time_to_ready]").inner_text() == "41.0 s"
    last = page.locator(f"#replica-table tr[data-deployment-id='{replicas[3].pk}']")
    assert "not ready (starting)" in last.inner_text() and "starting" in last.inner_text()
    shot(page, "service-running-light")
    page.emulate_media(color_scheme="dark")
    assert page.evaluate("getComputedStyle(document.body).backgroundColor") == DARK_BG
    shot(page, "service-running-dark")


def test_a_deployer_labels_a_host_and_a_replicas_page_points_to_its_service(page,
                                                                             browser_stack):
    assign_role(get_user_model().objects.get(username=browser_stack.username), "deployer")
    fleet = service_fleet()
    host = fleet.online[0]
    page.goto(f"{browser_stack.base}/hosts/{host.id}/")
    assert "zone=rack-1" in page.inner_text("[data-field=agent_labels]")
    page.fill("#id_labels", "pool=online\nzone rack-9")
    page.click("#save-labels")
    page.wait_for_selector("#labels-errors")
    assert "line 2: write key=value" in page.inner_text("#labels-errors")
    assert Host.objects.get(pk=host.pk).labels == {}
    page.fill("#id_labels", "pool=batch\nzone=rack-9")
    page.click("#save-labels")
    page.wait_for_selector("#messages")
    assert "pool=batch" in page.inner_text("[data-field=all_labels]")
    assert "zone=rack-9" in page.inner_text("[data-field=all_labels]")
    assert Host.objects.get(pk=host.pk).labels == {"pool": "batch", "zone": "rack-9"}
    page.locator("#labels").screenshot(path=str(ARTIFACTS / "host-labels.png"))

    service = Service(name="qwen", model=LLAMA, vllm_version="0.33.0", replicas=1,
                      selector={"pool": "online"})
    seen_now(*(h.hostname for h in fleet.online))
    services.save(service)
    replica = service.replica_set.get()
    t0 = time.time() - 90
    Deployment.objects.filter(pk=replica.pk).update(state="ready", start_phases={
        "process_start": t0, "weights_loaded": t0 + 21, "kv_profiled": t0 + 27,
        "graphs_captured": t0 + 44, "api_ready": t0 + 46})
    page.goto(f"{browser_stack.base}/deployments/{replica.pk}/")
    assert "replica 0 of service qwen" in page.inner_text("#owned-by-service").lower()
    assert page.locator("#edit-deployment").count() == 0
    assert page.inner_text("#time-to-ready").startswith("46.0 s")
    page.click("#owned-by-service a")
    page.wait_for_url(f"{browser_stack.base}/services/{service.pk}/")
    page.go_back()
    shot(page, "replica-deployment-page")
