"""``GET /api/v1/export/prometheus``: the fleet's newest values as a Prometheus target.

Samples go in through the real ingest app; the exposition is read back with
``prometheus_client``'s parser and checked with ``promtool``.
"""

from __future__ import annotations

import gzip
import time

import pytest
from django.conf import settings
from prometheus_client.parser import text_string_to_metric_families
from rest_framework.test import APIClient

from agents.protocol import METRICS, metrics_of
from controlplane.api.views.export import WINDOW_MAX_S
from controlplane.fleet.models import Deployment, Engine, Host
from controlplane.fleet.tokens import issue_agent_token, issue_api_token
from controlplane.telemetry.export import shard_of
from tests.support.clients import bearer_client
from tests.support.prometheus import accepted_export_lint, promtool_check
from tests.support.roles import user_with_role
from tests.telemetry.factories import batch, sample

URL = "/api/v1/export/prometheus"
MODEL = "meta-llama/Llama-3.1-8B-Instruct"
OTHER_MODEL = "Qwen/Qwen3-32B"


def post_samples(ingest, token: str, hostname: str, samples: list[dict], **inventory) -> None:
    for item in samples:
        for i, gpu in enumerate(item["gpus"]):
            gpu["uuid"] = f"GPU-{hostname}-{i}"
    code, reply = ingest.post(batch(1, samples=samples, hostname=hostname, **inventory), token)
    assert code == 200, reply


@pytest.fixture
def fleet(ingest, host_token):
    """gpu-node-1 (2 GPUs, an engine of MODEL): an older and a newer sample; gpu-node-2 (2
    GPUs, an engine of OTHER_MODEL on its GPU 1); gpu-node-3 reported before the online
    window only."""
    now = time.time()
    older, newer = sample(now - 3), sample(now - 1)
    older["gpus"][0]["fan_pct"] = 40.0  # in the older row only: absent from the newest
    newer["gpus"][0].update(util_pct=45.7, power_w=312.5)
    newer["engines"][0]["ttft_seconds"] = {"le": [0.1, 0.5, 1.0], "counts": [1, 0, 2, 1],
                                           "sum": 2.5}
    post_samples(ingest, host_token, "gpu-node-1", [older, newer])

    token2, _ = issue_agent_token("gpu-node-2")
    other = sample(now - 1, hostname="gpu-node-2")
    other["engines"][0]["kv_cache_usage"] = 0.75
    engine = {"name": "vllm:8000/0", "url": "http://127.0.0.1:8000/metrics",
              "model": OTHER_MODEL, "gpu_uuids": ["GPU-gpu-node-2-1"], "config": {}}
    code, reply = ingest.post({**batch(1, samples=[other], hostname="gpu-node-2"),
                               "host": {**batch(hostname="gpu-node-2")["host"],
                                        "engines": [engine]}}, token2)
    assert code == 200, reply

    token3, _ = issue_agent_token("gpu-node-3")
    gone = now - settings.PITWALL["ONLINE_WINDOW_S"] - 30
    post_samples(ingest, token3, "gpu-node-3", [sample(gone, hostname="gpu-node-3")])
    return now


@pytest.fixture
def reader(transactional_db) -> APIClient:
    user_with_role("prometheus", "viewer")
    return bearer_client(issue_api_token("prometheus", name="scraper", scope="read"))


def scrape(client: APIClient, **params) -> str:
    response = client.get(URL, params)
    assert response.status_code == 200, response.content
    assert response["Content-Type"] == "text/plain; version=0.0.4; charset=utf-8"
    return response.content.decode()


def families(text: str) -> dict:
    return {f.name: f for f in text_string_to_metric_families(text)}


def samples_of(text: str, name: str) -> dict[tuple, float]:
    """{sorted label items: value} of one family's samples called ``name``."""
    found = families(text)
    family = found[name.removesuffix("_bucket").removesuffix("_sum").removesuffix("_count")]
    return {tuple(sorted(s.labels.items())): s.value for s in family.samples if s.name == name}


def hostnames(text: str) -> set[str]:
    return {s.labels["hostname"] for f in families(text).values() for s in f.samples}


def test_newest_values_with_names_labels_help_and_type(fleet, reader):
    text = scrape(reader)
    found = families(text)
    util = found["pitwall_gpu_util_pct"]
    assert util.type == "gauge"
    assert util.documentation == (f"{METRICS['gpu.util_pct'].description} (%)")
    assert samples_of(text, "pitwall_gpu_util_pct") == {
        (("gpu_index", "0"), ("gpu_uuid", "GPU-gpu-node-1-0"), ("hostname", "gpu-node-1")): 45.7,
        (("gpu_index", "1"), ("gpu_uuid", "GPU-gpu-node-1-1"), ("hostname", "gpu-node-1")): 91.0,
        (("gpu_index", "0"), ("gpu_uuid", "GPU-gpu-node-2-0"), ("hostname", "gpu-node-2")): 90.0,
        (("gpu_index", "1"), ("gpu_uuid", "GPU-gpu-node-2-1"), ("hostname", "gpu-node-2")): 91.0,
    }
    # float4 values are written in their shortest exact form, as stored
    assert 'gpu_index="0"} 45.7\n' in text
    assert samples_of(text, "pitwall_host_mem_used_bytes") == {
        (("hostname", "gpu-node-1"),): 2**33, (("hostname", "gpu-node-2"),): 2**33}
    assert samples_of(text, "pitwall_engine_kv_cache_usage") == {
        (("engine", "vllm:8000/0"), ("hostname", "gpu-node-1"), ("model", MODEL)): 0.25,
        (("engine", "vllm:8000/0"), ("hostname", "gpu-node-2"), ("model", OTHER_MODEL)): 0.75,
    }


def test_rates_say_they_need_no_rate_and_units_are_in_help(ingest, host_token, reader):
    item = sample(time.time())
    item["host"]["net_rx_bps"] = 1250.0
    post_samples(ingest, host_token, "gpu-node-1", [item])
    found = families(scrape(reader))
    assert found["pitwall_host_net_rx_bps"].type == "gauge"
    assert found["pitwall_host_net_rx_bps"].documentation.endswith(
        "(bytes/s; a per-second rate already: no rate())")
    assert found["pitwall_host_load1"].documentation == "1-minute load average"  # no unit


def test_offline_entities_and_absent_metrics_are_left_out(fleet, reader):
    text = scrape(reader)
    assert hostnames(text) == {"gpu-node-1", "gpu-node-2"}  # gpu-node-3 is offline
    found = families(text)
    # absent from every newest row: no family, never a 0
    assert "pitwall_gpu_fan_pct" not in found  # only in gpu-node-1's older row
    assert "pitwall_engine_requests_waiting" not in found
    assert "pitwall_gpu_xid_last" not in found
    # array metrics (per-core CPU) and processes are not exported
    assert "pitwall_host_cpu_core_pct" not in found
    assert not any(name.startswith("pitwall_proc_") for name in found)
    # power only where sent
    assert samples_of(text, "pitwall_gpu_power_w") == {
        (("gpu_index", "0"), ("gpu_uuid", "GPU-gpu-node-1-0"), ("hostname", "gpu-node-1")):
            312.5}


def test_histograms_are_cumulative_buckets_summed_over_the_window(fleet, reader):
    text = scrape(reader, histograms="window")
    family = families(text)["pitwall_engine_ttft_seconds"]
    assert family.type == "histogram"
    assert "the last 60 s" in family.documentation
    node1 = {"engine": "vllm:8000/0", "hostname": "gpu-node-1", "model": MODEL}
    mine = [s for s in family.samples if s.labels.get("hostname") == "gpu-node-1"]
    buckets = {s.labels["le"]: s.value for s in mine if s.name.endswith("_bucket")}
    # per-interval deltas [3, 2, 1, 0] and [1, 0, 2, 1] summed: [4, 2, 3, 1], cumulative
    assert buckets == {"0.1": 4, "0.5": 6, "1.0": 9, "+Inf": 10}
    totals = {s.name: s.value for s in mine if not s.name.endswith("_bucket")}
    assert totals == {"pitwall_engine_ttft_seconds_count": 10,
                      "pitwall_engine_ttft_seconds_sum": pytest.approx(1.9 + 2.5)}
    for s in mine:
        assert {k: v for k, v in s.labels.items() if k != "le"} == node1
    # every engine's count is its +Inf bucket
    for host in ("gpu-node-1", "gpu-node-2"):
        of = [s for s in family.samples if s.labels["hostname"] == host]
        inf = [s.value for s in of if s.labels.get("le") == "+Inf"]
        count = [s.value for s in of if s.name.endswith("_count")]
        assert inf == count and len(count) == 1
    assert "pitwall_engine_itl_seconds" not in families(text)  # never sent


def test_the_histogram_window_is_a_parameter(ingest, host_token, reader):
    now = time.time()
    old, new = sample(now - 100), sample(now - 1)
    old["engines"][0]["ttft_seconds"]["counts"] = [0, 0, 0, 7]
    post_samples(ingest, host_token, "gpu-node-1", [old, new])

    def count(**params) -> float:
        return samples_of(scrape(reader, **params), "pitwall_engine_ttft_seconds_count")[
            (("engine", "vllm:8000/0"), ("hostname", "gpu-node-1"), ("model", MODEL))]

    assert count(histograms="window") == 6  # the default 60 s: the newer row only
    assert count(histogram_window_s=30) == 6  # a window alone asks for one
    assert "pitwall_engine_ttft_seconds" not in families(scrape(reader, histograms="none"))
    assert count(histogram_window_s=WINDOW_MAX_S) == 13
    assert "the last 300 s" in families(scrape(reader, histogram_window_s=300))[
        "pitwall_engine_ttft_seconds"].documentation


def test_by_default_the_histograms_are_the_newest_rolled_up_minute(ingest, host_token, reader):
    from controlplane.telemetry.rollups import refresh

    minute = (time.time() // 60 - 2) * 60  # a minute that ended over a minute ago
    first, second, now = sample(minute + 10), sample(minute + 40), sample(time.time() - 1)
    second["engines"][0]["ttft_seconds"]["counts"] = [0, 0, 0, 5]
    now["engines"][0]["ttft_seconds"]["counts"] = [9, 0, 0, 0]  # not rolled up yet
    post_samples(ingest, host_token, "gpu-node-1", [first, second, now])
    engine = (("engine", "vllm:8000/0"), ("hostname", "gpu-node-1"), ("model", MODEL))
    assert "pitwall_engine_ttft_seconds" not in families(scrape(reader))  # nothing rolled up
    refresh.run()
    text = scrape(reader)
    buckets = samples_of(text, "pitwall_engine_ttft_seconds_bucket")
    # the minute's two rows, [3, 2, 1, 0] + [0, 0, 0, 5], cumulative; the newest row is not in
    assert {dict(k)["le"]: v for k, v in buckets.items()} == {
        "0.1": 3, "0.5": 5, "1.0": 6, "+Inf": 11}
    assert samples_of(text, "pitwall_engine_ttft_seconds_count") == {engine: 11}
    assert "newest minute the 1-minute rollups hold" in families(text)[
        "pitwall_engine_ttft_seconds"].documentation


def test_a_layout_change_inside_the_window_keeps_the_layout_with_most_observations(
        ingest, host_token, reader):
    now = time.time()
    a, b, c = sample(now - 3), sample(now - 2), sample(now - 1)
    a["engines"][0]["ttft_seconds"] = {"le": [0.2, 2.0], "counts": [1, 1, 0], "sum": 1.0}
    post_samples(ingest, host_token, "gpu-node-1", [a, b, c])  # b and c: [0.1, 0.5, 1.0]
    buckets = samples_of(scrape(reader, histograms="window"),
                         "pitwall_engine_ttft_seconds_bucket")
    assert {dict(k)["le"]: v for k, v in buckets.items()} == {
        "0.1": 6, "0.5": 10, "1.0": 12, "+Inf": 12}


def test_engines_of_a_deployment_carry_its_name(fleet, reader):
    host = Host.objects.get(hostname="gpu-node-1")
    Deployment.objects.create(host=host, name="llama-8b", model=MODEL, port=8000,
                              gpu_indices=[0, 1], vllm_version="0.11.0")
    Deployment.objects.create(host=host, name="unrelated", model=MODEL, port=800,
                              gpu_indices=[0], vllm_version="0.11.0")
    text = scrape(reader)
    assert samples_of(text, "pitwall_engine_up") == {
        (("deployment", "llama-8b"), ("engine", "vllm:8000/0"), ("hostname", "gpu-node-1"),
         ("model", MODEL)): 1,
        (("engine", "vllm:8000/0"), ("hostname", "gpu-node-2"), ("model", OTHER_MODEL)): 1,
    }
    only = scrape(reader, deployment="llama-8b")
    assert hostnames(only) == {"gpu-node-1"}
    assert len(samples_of(only, "pitwall_gpu_util_pct")) == 2  # the engine names no GPU: all
    assert "pitwall_engine_up" not in families(scrape(reader, deployment="nothing"))


def test_filters_by_hostname_glob_and_model(fleet, reader):
    assert hostnames(scrape(reader, hostname="gpu-node-2")) == {"gpu-node-2"}
    assert hostnames(scrape(reader, hostname="gpu-node-[12]")) == {"gpu-node-1", "gpu-node-2"}
    assert hostnames(scrape(reader, hostname="gpu-*")) == {"gpu-node-1", "gpu-node-2"}
    assert scrape(reader, hostname="cpu-*") == ""
    text = scrape(reader, model=OTHER_MODEL)
    assert hostnames(text) == {"gpu-node-2"}
    # the GPUs its engine uses, not every GPU of the host
    assert [dict(k)["gpu_uuid"] for k in samples_of(text, "pitwall_gpu_util_pct")] == [
        "GPU-gpu-node-2-1"]
    assert len(samples_of(text, "pitwall_engine_up")) == 1


def test_a_model_filter_keeps_the_gpus_of_the_engines_own_host(fleet, reader):
    """Both hosts serve the model, gpu-node-2's engine stored with a UUID of gpu-node-1 (before
    ingest refused one): each host exports the GPUs its own engine uses, no more."""
    Engine.objects.filter(host__hostname="gpu-node-1").update(
        model=OTHER_MODEL, gpu_uuids=["GPU-gpu-node-1-0"])
    Engine.objects.filter(host__hostname="gpu-node-2").update(
        gpu_uuids=["GPU-gpu-node-2-1", "GPU-gpu-node-1-1"])
    text = scrape(reader, model=OTHER_MODEL)
    assert sorted(dict(k)["gpu_uuid"] for k in samples_of(text, "pitwall_gpu_util_pct")) == [
        "GPU-gpu-node-1-0", "GPU-gpu-node-2-1"]


def test_shards_split_the_hosts_without_overlap(fleet, reader):
    shards = 4
    seen = []
    for i in range(shards):
        got = hostnames(scrape(reader, shard=f"{i}/{shards}"))
        assert got == {h for h in ("gpu-node-1", "gpu-node-2") if shard_of(h, shards) == i}
        seen += got
    assert sorted(seen) == ["gpu-node-1", "gpu-node-2"]
    assert hostnames(scrape(reader, shard="0/1")) == {"gpu-node-1", "gpu-node-2"}


@pytest.mark.parametrize("params, field", [
    ({"shard": "2/2"}, "shard"), ({"shard": "0/1025"}, "shard"), ({"shard": "1"}, "shard"),
    ({"shard": "-1/2"}, "shard"), ({"shard": "0/0"}, "shard"),
    ({"histogram_window_s": "4"}, "histogram_window_s"),
    ({"histogram_window_s": "-1"}, "histogram_window_s"),
    ({"histogram_window_s": "301"}, "histogram_window_s"),
    ({"histogram_window_s": "soon"}, "histogram_window_s"),
    ({"histogram_window_s": "0"}, "histogram_window_s"),
    ({"histograms": "hourly"}, "histograms"),
    ({"histograms": "minute", "histogram_window_s": "30"}, "histogram_window_s"),
    ({"hostname": "h" * 1001}, "hostname"), ({"model": "m" * 301}, "model"),
    ({"deployment": "d" * 101}, "deployment"),
])
def test_a_bad_parameter_is_a_400_naming_it(reader, params, field):
    response = reader.get(URL, params)
    assert response.status_code == 400
    assert list(response.json()) == [field]


def test_it_needs_a_user_with_read_rights(db):
    assert APIClient().get(URL).status_code == 401
    user_with_role("nobody", None)
    assert bearer_client(issue_api_token("nobody", name="x")).get(URL).status_code == 403
    agent, _ = issue_agent_token("gpu-node-9")
    assert bearer_client(agent).get(URL).status_code in (401, 403)
    session = APIClient()
    session.force_login(user_with_role("viewer", "viewer"))
    assert session.get(URL).status_code == 200


def test_it_is_gzipped_when_the_scraper_asks(fleet, reader):
    response = reader.get(URL, HTTP_ACCEPT_ENCODING="gzip")
    assert response.status_code == 200
    assert response["Content-Encoding"] == "gzip"
    assert "pitwall_gpu_util_pct" in gzip.decompress(response.content).decode()


def test_it_answers_prometheus_accept_header(fleet, reader):
    accept = ("application/openmetrics-text;version=1.0.0,application/openmetrics-text;"
              "version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1")
    response = reader.get(URL, HTTP_ACCEPT=accept, HTTP_ACCEPT_ENCODING="gzip")
    assert response.status_code == 200
    assert response["Content-Type"] == "text/plain; version=0.0.4; charset=utf-8"
    assert families(gzip.decompress(response.content).decode())


def test_label_values_are_escaped(ingest, reader):
    token, _ = issue_agent_token('we"ird\\host')
    item = sample(time.time(), hostname="x")
    post_samples(ingest, token, 'we"ird\\host', [item])
    text = scrape(reader)
    assert 'hostname="we\\"ird\\\\host"' in text
    assert hostnames(text) == {'we"ird\\host'}


def every_metric(ts: float) -> dict:
    """A sample holding every catalog metric of hosts, GPUs and engines."""
    item = sample(ts)
    for section, entity in (("host", "host"), ("gpus", "gpu"), ("engines", "engine")):
        targets = [item["host"]] if section == "host" else item[section]
        for target in targets:
            for m in metrics_of(entity):
                if m.kind == "histogram":
                    target[m.key] = {"le": [0.05, 0.5, 5.0], "counts": [1, 2, 3, 4], "sum": 30.0}
                elif m.array:
                    target[m.key] = [10.0, 20.0]
                elif m.key not in target:
                    target[m.key] = 1 if m.integer or m.high == 1 else 1.5
    return item


def test_promtool_accepts_the_exposition(ingest, host_token, fleet, reader):
    post_samples(ingest, host_token, "gpu-node-1", [every_metric(time.time())])
    text = scrape(reader, histograms="window")
    exported = {m.name for e in ("host", "gpu", "engine") for m in metrics_of(e) if not m.array}
    assert {f"pitwall_{name.replace('.', '_')}" for name in exported} == set(families(text))
    check = promtool_check(text.encode())
    # 3: lint findings only (1 would be an error), each accepted: the catalog's names are the
    # public contract (docs/prometheus.md).
    assert check.returncode == (3 if check.findings else 0), check
    assert check.findings <= accepted_export_lint()


def test_it_is_in_the_openapi_schema(db):
    from drf_spectacular.generators import SchemaGenerator

    schema = SchemaGenerator().get_schema(request=None, public=True)
    operation = schema["paths"]["/api/v1/export/prometheus"]["get"]
    assert list(operation["responses"]["200"]["content"]) == ["text/plain; version=0.0.4"]
    assert {p["name"] for p in operation["parameters"]} == {
        "hostname", "model", "deployment", "shard", "histograms", "histogram_window_s"}
