"""A deployer in a real browser: the deployment form refuses bad fields naming each one, then
creates, edits (arguments added through the structured editor), disables and deletes (after
a confirmation page); and the fleet page's totals follow
the agent live, in light and in dark mode (prefers-color-scheme emulated through CDP)."""

from __future__ import annotations

import math
import time
import urllib.request

import orjson
import pytest
from django.contrib.auth import get_user_model

from controlplane.accounts.roles import assign_role
from controlplane.fleet.models import Deployment, DeploymentRevision, Host
from tests.browser.helpers import ARTIFACTS, Agent, shot
from tests.support.polling import wait_until
from tests.telemetry import factories

# A browser and real processes: `make test` runs them, `make test-fast` leaves them out;
# seconds: about what each test takes (slow tests start first, the longest first).
pytestmark = pytest.mark.slow(seconds=4)

DARK_BG = "rgb(15, 19, 24)"  # pitwall.css --bg in dark mode
LIGHT_BG = "rgb(245, 246, 248)"


def field_errors(tab, field: str) -> str:
    return tab.inner_text(f"#deployment-form [data-field='{field}'] .errorlist")


def test_a_deployer_fixes_what_the_form_refused_then_creates_edits_disables_and_deletes(
        page, browser_stack):
    assign_role(get_user_model().objects.get(username=browser_stack.username), "deployer")
    browser_stack.agent("browser-deploy-1").send(util_pct=20.0)
    host = Host.objects.get(hostname="browser-deploy-1")

    page.goto(f"{browser_stack.base}/deployments/")
    page.click("#new-deployment")
    page.select_option("#id_host", str(host.id))
    page.fill("#id_name", "llama-8b")
    page.fill("#id_model", "meta-llama/Llama-3.1-8B-Instruct")
    page.fill("#id_port", "8000")
    page.fill("#id_gpu_indices", "0, 7")
    page.fill("#id_args", '{"max_num_seq": 64, "enable_prefix_caching": true}')
    page.fill("#id_env", "LD_PRELOAD=/tmp/x.so")
    page.click("#save-button")
    page.wait_for_selector("#form-errors")

    assert "the host has no GPU 7" in field_errors(page, "gpu_indices")
    assert "did you mean max_num_seqs?" in field_errors(page, "args")
    assert "LD_PRELOAD makes vLLM load code" in field_errors(page, "env")
    summary = page.inner_text("#form-errors")
    assert "gpu_indices" in summary and "args" in summary and "env" in summary
    assert page.input_value("#id_args") == '{"max_num_seq": 64, "enable_prefix_caching": true}'
    assert page.input_value("#id_vllm_version") == "0.33.0"  # the default, kept
    assert not Deployment.objects.exists()
    shot(page, "deployment-form-error-light")
    page.emulate_media(color_scheme="dark")
    assert page.evaluate("getComputedStyle(document.body).backgroundColor") == DARK_BG
    shot(page, "deployment-form-error-dark")
    page.emulate_media(color_scheme="light")

    page.fill("#id_gpu_indices", "0")
    page.fill("#id_args", "--max-num-seqs 64 --enable-prefix-caching")
    # The structured editor adds an argument of the version's catalog, typed, as a flag here.
    page.select_option("#arg-pick", "max_model_len")
    page.fill("#arg-value", "8192")
    page.click("#arg-add")
    assert page.input_value("#id_args") == ("--max-num-seqs 64 --enable-prefix-caching "
                                            "--max-model-len 8192")
    page.fill("#id_env", "VLLM_LOGGING_LEVEL=INFO")
    page.fill("#id_reason", "first rollout")
    page.click("#save-button")
    page.wait_for_selector("#deployment-actions")
    made = Deployment.objects.get()
    assert "created as revision 1" in page.inner_text("#messages")
    assert made.args == {"max_num_seqs": 64, "enable_prefix_caching": True,
                         "max_model_len": 8192}

    # Editing: the form holds the arguments as JSON; the editor sets one, typed.
    page.click("#edit-deployment")
    page.select_option("#arg-pick", "enable_prefix_caching")
    page.uncheck("#arg-value")
    page.click("#arg-add")
    page.select_option("#arg-pick", "gpu_memory_utilization")
    page.fill("#arg-value", "0.85")
    page.click("#arg-add")
    shot(page, "deployment-edit-arguments")
    page.click("#save-button")
    page.wait_for_selector("#deployment-actions")
    assert Deployment.objects.get().args == {"max_num_seqs": 64, "enable_prefix_caching": False,
                                             "max_model_len": 8192,
                                             "gpu_memory_utilization": 0.85}
    assert "Saved as revision 2" in page.inner_text("#messages")

    page.click("#disable-deployment")
    page.wait_for_selector("#enable-deployment")
    assert "disabled as revision 3" in page.inner_text("#messages")
    page.emulate_media(color_scheme="dark")
    shot(page, "deployment-disabled-dark")
    page.emulate_media(color_scheme="light")
    assert DeploymentRevision.objects.filter(deployment=made).count() == 3

    page.click("#delete-deployment")
    page.wait_for_selector("#confirm-delete")
    assert Deployment.objects.exists()  # asking deletes nothing
    page.click("#confirm-delete")
    page.wait_for_selector("#messages")
    assert "deleted" in page.inner_text("#messages")
    assert not Deployment.objects.exists()


def post_sample(agent: Agent, util_pct: float, waiting: int, tokens_per_s: float) -> None:
    """A batch whose engine reports requests waiting and tokens generated (the shared agent
    helper's sample has neither)."""
    agent.seq += 1
    sample = factories.sample(hostname=agent.hostname, gpus=agent.gpus)
    for gpu in sample["gpus"]:
        gpu["util_pct"] = util_pct
    sample["engines"][0].update(requests_waiting=waiting, generation_tokens_per_s=tokens_per_s)
    body = factories.batch(seq=agent.seq, boot_id=agent.boot_id, samples=[sample],
                           with_inventory=False, hostname=agent.hostname, gpus=agent.gpus)
    request = urllib.request.Request(
        f"{agent.base}/api/v1/ingest", data=orjson.dumps(body), method="POST",
        headers={"Authorization": f"Bearer {agent.token}", "Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=30) as reply:
        reply.read()


def total(tab, name: str) -> str:
    return tab.inner_text(f"#fleet-totals [data-total='{name}']")


def test_the_fleet_totals_follow_the_agent_live_in_light_and_dark(page, browser_stack):
    agent = browser_stack.agent("browser-totals-1")
    agent.send(util_pct=20.0)
    post_sample(agent, util_pct=85.0, waiting=6, tokens_per_s=1234.0)
    page.reload()
    page.wait_for_selector("body[data-ready='1']")
    assert (total(page, "gpus_busy"), total(page, "gpus")) == ("2", "2")
    assert total(page, "requests_waiting") == "6"
    assert total(page, "generation_tokens_per_s") == "1234"
    wait_until(lambda: page.get_attribute("#live-status", "data-state") == "live", 30,
               lambda: "the page never went live")
    assert page.evaluate("getComputedStyle(document.body).backgroundColor") == LIGHT_BG
    shot(page, "fleet-totals-light")

    post_sample(agent, util_pct=10.0, waiting=2, tokens_per_s=300.0)
    wait_until(lambda: total(page, "gpus_busy") == "0" and total(page, "requests_waiting") == "2"
               and total(page, "generation_tokens_per_s") == "300",
               30, lambda: f"the totals never followed: {page.inner_text('#fleet-totals')}")
    page.emulate_media(color_scheme="dark")
    assert page.evaluate("getComputedStyle(document.body).backgroundColor") == DARK_BG
    shot(page, "fleet-totals-dark")


def test_the_host_charts_take_the_dark_colours(page, browser_stack):
    agent = browser_stack.agent("browser-dark-1")
    now = time.time()
    for i in range(40):  # two minutes of a GPU going up and down: lines to look at
        agent.send(util_pct=50.0 + 40.0 * math.sin(i / 6), ts=now - 120 + 3 * i)
    host = Host.objects.get(hostname="browser-dark-1")
    page.emulate_media(color_scheme="dark")
    page.goto(f"{browser_stack.base}/hosts/{host.id}/")
    page.wait_for_selector("body[data-ready='1']")
    page.wait_for_selector(".plot[data-state='drawn']")
    grid = page.evaluate("getComputedStyle(document.documentElement)"
                         ".getPropertyValue('--chart-grid').trim()")
    assert grid == "#262d35"
    shot(page, "host-charts-dark")
    gpu_charts = page.locator(".charts").nth(1)  # CPU and memory first, then the GPUs'
    gpu_charts.screenshot(path=str(ARTIFACTS / "host-gpu-charts-dark.png"))
    page.emulate_media(color_scheme="light")  # the charts redraw in the light colours
    page.wait_for_timeout(300)
    gpu_charts.screenshot(path=str(ARTIFACTS / "host-gpu-charts-light.png"))
    shot(page, "host-charts-light")
