"""The services' replica counts and autoscaling decisions in the fleet exposition
(``GET /api/v1/export/prometheus``): the numbers and names ``/metrics`` gives them, in a
scrape of the whole fleet, shard 0 and a model's scrape, never in a host-filtered one."""

from __future__ import annotations

import pytest
from prometheus_client.exposition import generate_latest
from prometheus_client.parser import text_string_to_metric_families
from rest_framework.test import APIClient

from controlplane.fleet.metrics import ServiceScaling
from controlplane.fleet.models import Deployment, ScaleDecision, Service
from controlplane.fleet.tokens import issue_api_token
from tests.fleet.controller_support import hosts, make_service, router_host
from tests.support.clients import bearer_client
from tests.support.prometheus import promtool_check
from tests.support.roles import user_with_role
from tests.support.service_fleet import LLAMA

URL = "/api/v1/export/prometheus"
QWEN = "Qwen/Qwen3-32B"
SERVICE_FAMILIES = {"pitwall_service_replicas_desired", "pitwall_service_replicas_serving",
                    "pitwall_service_replicas_limit", "pitwall_service_scale_decisions"}


@pytest.fixture
def reader(transactional_db) -> APIClient:
    user_with_role("prometheus", "viewer")
    return bearer_client(issue_api_token("prometheus", name="scraper", scope="read"))


@pytest.fixture
def services(transactional_db) -> tuple[Service, Service]:
    """llama (auto, 2 of 1..4 replicas, one in the router's rotation, three decisions) and
    qwen (off, one replica, none in rotation, one decision), on two hosts with no telemetry:
    the scrape holds the services alone."""
    hosts(2)
    router = router_host()
    llama = make_service(router, replicas=2, scaling_mode="auto", min_replicas=1,
                         max_replicas=4)
    qwen = make_service(router, replicas=1, name="qwen", model=QWEN, router_port=9001)
    first = Deployment.objects.filter(service=llama).order_by("replica").first()
    Deployment.objects.filter(pk=first.pk).update(in_rotation=True)
    for service, direction, state in ((llama, "out", "done"), (llama, "out", "done"),
                                      (llama, "in", "held"), (qwen, "hold", "recommended")):
        ScaleDecision.objects.create(service=service, mode=service.scaling_mode,
                                     direction=direction, replicas_before=1, replicas_after=2,
                                     reason="queue", state=state)
    return llama, qwen


def scrape(client: APIClient, **params) -> str:
    response = client.get(URL, params)
    assert response.status_code == 200, response.content
    return response.content.decode()


def samples(text: str) -> dict[tuple, float]:
    """{(sample name, sorted label items): value} of the services' families in ``text``."""
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for f in text_string_to_metric_families(text) if f.name in SERVICE_FAMILIES
            for s in f.samples}


def test_replicas_limits_and_decisions_with_their_values(services, reader):
    text = scrape(reader)
    assert samples(text) == {
        ("pitwall_service_replicas_desired", (("scaling_mode", "auto"), ("service", "llama"))):
            2,
        ("pitwall_service_replicas_desired", (("scaling_mode", "off"), ("service", "qwen"))):
            1,
        ("pitwall_service_replicas_serving", (("service", "llama"),)): 1,
        ("pitwall_service_replicas_serving", (("service", "qwen"),)): 0,
        ("pitwall_service_replicas_limit", (("bound", "max"), ("service", "llama"))): 4,
        ("pitwall_service_replicas_limit", (("bound", "min"), ("service", "llama"))): 1,
        ("pitwall_service_replicas_limit", (("bound", "max"), ("service", "qwen"))): 1,
        ("pitwall_service_replicas_limit", (("bound", "min"), ("service", "qwen"))): 1,
        ("pitwall_service_scale_decisions_total",
         (("direction", "in"), ("service", "llama"), ("state", "held"))): 1,
        ("pitwall_service_scale_decisions_total",
         (("direction", "out"), ("service", "llama"), ("state", "done"))): 2,
        ("pitwall_service_scale_decisions_total",
         (("direction", "hold"), ("service", "qwen"), ("state", "recommended"))): 1,
    }
    types = {f.name: f.type for f in text_string_to_metric_families(text)}
    assert types == {**dict.fromkeys(SERVICE_FAMILIES - {"pitwall_service_scale_decisions"},
                                     "gauge"), "pitwall_service_scale_decisions": "counter"}


def test_the_text_is_what_prometheus_client_writes_for_metrics(services, reader):
    """Same names, HELP, TYPE and values as ``/metrics``' collector: byte for byte (the hosts
    sent no telemetry, so the services are the whole scrape)."""
    text = scrape(reader)
    assert text == generate_latest(ServiceScaling()).decode()
    assert "# TYPE pitwall_service_scale_decisions_total counter\n" in text
    metrics = APIClient().get("/metrics").content.decode()  # loopback: no token needed
    assert samples(metrics) == samples(text)


def test_shard_0_carries_the_services_and_the_others_do_not(services, reader):
    everything = samples(scrape(reader))
    assert samples(scrape(reader, shard="0/2")) == everything
    assert samples(scrape(reader, shard="1/2")) == {}
    # summed over the shards of a sharded job, each service counts once
    assert [bool(samples(scrape(reader, shard=f"{i}/4"))) for i in range(4)] == [
        True, False, False, False]


def test_a_model_scrape_carries_that_models_services(services, reader):
    only = samples(scrape(reader, model=QWEN))
    assert {dict(labels)["service"] for _, labels in only} == {"qwen"}
    assert only[("pitwall_service_scale_decisions_total",
                 (("direction", "hold"), ("service", "qwen"), ("state", "recommended")))] == 1
    assert {dict(labels)["service"] for _, labels in samples(scrape(reader, model=LLAMA))} == {
        "llama"}
    assert scrape(reader, model="nobody/serves-this") == ""
    assert {dict(labels)["service"]
            for _, labels in samples(scrape(reader, model=QWEN, shard="0/2"))} == {"qwen"}


@pytest.mark.parametrize("params", [{"hostname": "*"}, {"hostname": "gpu-a"},
                                    {"deployment": "llama-0"},
                                    {"hostname": "*", "shard": "0/2"},
                                    {"deployment": "llama-0", "model": LLAMA}])
def test_host_and_deployment_filters_leave_the_services_out(services, reader, params):
    assert samples(scrape(reader, **params)) == {}


@pytest.mark.parametrize("params", [{"histograms": "none"}, {"histograms": "window"},
                                    {"histogram_window_s": "30"}])
def test_the_histogram_parameters_do_not_change_them(services, reader, params):
    assert samples(scrape(reader, **params)) == samples(scrape(reader))


def test_no_service_no_family(reader):
    assert scrape(reader) == ""


def test_label_values_are_escaped(reader):
    Service.objects.create(name='we"ird\\svc\nname', model=QWEN, vllm_version="0.33.0")
    text = scrape(reader)
    assert 'service="we\\"ird\\\\svc\\nname"' in text
    assert samples(text)[("pitwall_service_replicas_serving",
                          (("service", 'we"ird\\svc\nname'),))] == 0


def test_promtool_accepts_it(services, reader):
    assert promtool_check(scrape(reader).encode()) == (0, set())
