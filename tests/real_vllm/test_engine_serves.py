"""The real engine itself (the 0.32 CPU build): the tiny model loads, answers and reports vLLM's
metrics; the agent's vLLM collector scrapes them under a load driven here; and the agent reads
the server's /version and the flags of its API server's command line (vLLM renames its other
processes; the listener must keep its own). One engine serves them all (conftest's
``real_vllm``, started with ENGINE_FLAGS): each vLLM start costs 25-90 s on 2 busy cores."""

from __future__ import annotations

import psutil
import pytest

from agents.collectors.process import ProcessCollector
from agents.collectors.vllm import VllmCollector
from agents.collectors.vllm_names import GAUGES, HISTOGRAMS, RATES
from agents.loop import Sampler, Sources
from agents.vllm_args import parse_version
from tests.real_vllm.engine import VERSION
from tests.real_vllm.sim import SimVllm, assert_same_families, families

pytestmark = pytest.mark.real_vllm

REQUESTS, TOKENS = 12, 24


def test_the_tiny_model_answers_a_completion(real_vllm):
    reply = real_vllm.complete(max_tokens=8)
    assert reply["usage"]["completion_tokens"] == 8


def test_its_metrics_carry_the_families_pitwall_reads(real_vllm):
    text = real_vllm.metrics()
    for family in ("vllm:num_requests_running", "vllm:kv_cache_usage_perc",
                   "vllm:num_preemptions_total", "vllm:time_to_first_token_seconds"):
        assert f"# TYPE {family} " in text, family


def test_the_simulated_metrics_match_the_real_servers_but_for_the_listed_reasons(
        real_vllm, tmp_path):
    real_vllm.load(8, 16, 4)  # histograms and counters with samples in them
    sim = SimVllm(tmp_path, "--load", "2")
    try:
        simulated = families(sim.metrics())
    finally:
        sim.stop()
    assert_same_families(families(real_vllm.metrics()), simulated)


def test_the_process_collector_attributes_the_whole_real_process_tree_to_the_engine(
        real_vllm):
    """vLLM V1 serves from three processes (the API server that listens, its EngineCore, the
    worker the EngineCore starts) plus multiprocessing's resource tracker: all of them are
    the engine's, with their memory and, once two samples apart, their CPU."""
    collector = ProcessCollector()
    pids = collector.find_engine_pids(real_vllm.port)
    collector.collect({"vllm": pids}, {})
    real_vllm.load(8, 32, 4)  # the engine works between the two samples
    samples = {s["pid"]: s for s in collector.collect({"vllm": pids}, {})}
    # Their titles (setproctitle) are in the command line; comm is cut at 15 characters.
    names = {pid: " ".join(psutil.Process(pid).cmdline()) for pid in pids}
    api_server = real_vllm.process.proc.pid
    assert api_server in pids and "vllm serve" in names[api_server]
    assert any(name.startswith("VLLM::EngineCore") for name in names.values()), names
    assert any(name.startswith("VLLM::Worker") for name in names.values()), names
    assert set(samples) == set(pids)
    assert all(s["engine"] == "vllm" and s["rss_bytes"] > 0 for s in samples.values())
    # The worker runs the model: it, not the API server, carries most of the memory.
    worker = next(pid for pid, name in names.items() if name.startswith("VLLM::Worker"))
    assert samples[worker]["rss_bytes"] > samples[api_server]["rss_bytes"] / 2
    assert sum(s.get("cpu_pct", 0) for s in samples.values()) > 0


def test_the_collector_reads_every_catalog_metric_the_real_server_has(real_vllm):
    warnings: list[str] = []
    collector = VllmCollector(f"{real_vllm.url}/metrics", timeout=10, warn=warnings.append)
    collector.collect()  # the baseline: gauges only
    assert real_vllm.load(REQUESTS, TOKENS, 4) == [200] * REQUESTS
    shared = "the same prefix " * 20  # 262 tokens: two whole KV blocks, so the second one hits
    real_vllm.complete(shared, 4)
    real_vllm.complete(shared, 4)
    [sample] = collector.collect()
    assert warnings == []
    assert collector.simulated is False
    assert sample["name"] == f"vllm:{real_vllm.port}/0" and sample["up"] == 1
    assert set(GAUGES) <= sample.keys()
    assert 0 <= sample["kv_cache_usage"] <= 1
    # No --speculative-config here: no spec_decode rates (test_vllm_signals_real has them).
    assert set(RATES.values()) - {"spec_draft_tokens_per_s",
                                  "spec_accepted_tokens_per_s"} <= sample.keys()
    assert sample["admission_rejections_per_s"] == 0  # no queue limit set
    assert sample["generation_tokens_per_s"] > 0 and sample["prompt_tokens_per_s"] > 0
    assert sample["preemptions_per_s"] == 0  # a 1 GiB cache holds 4 short requests
    assert 0 < sample["prefix_cache_hit_rate"] <= 1
    assert sum(sample["iteration_tokens"]["counts"]) > 0  # engine steps, not requests
    for key in set(HISTOGRAMS) - {"itl_seconds", "iteration_tokens"}:
        # every request that finished since the baseline, once, in each per-request histogram
        assert sum(sample[key]["counts"]) == REQUESTS + 2, key
    # one inter-token gap per token after a request's first
    assert sum(sample["itl_seconds"]["counts"]) == REQUESTS * (TOKENS - 1) + 2 * (4 - 1)
    [entry] = collector.inventory()
    assert entry["name"] == sample["name"] and entry["simulated"] is False
    assert entry["model"] == str(real_vllm.install.model)
    assert int(entry["config"]["block_size"]) > 0 and int(entry["config"]["num_gpu_blocks"]) > 0


def test_the_agent_reads_the_real_servers_version_and_flags(real_vllm):
    sampler = Sampler(Sources(engines=[VllmCollector(f"{real_vllm.url}/metrics", timeout=10)],
                              processes=ProcessCollector()), warn=lambda message: None)
    sampler.sample()
    [entry] = sampler.inventory()["engines"]
    config = entry["config"]
    # "0.32.0+cpu": the CPU build's local version, which the catalog reads as 0.32.0
    assert parse_version(config["vllm_version"])[:3] == parse_version(VERSION)[:3]
    # engine.BASE_ARGS (--enforce-eager --dtype float32 --max-model-len 512) and conftest's
    # ENGINE_FLAGS; not the model, --host or --port
    assert config["args"] == {"max_num_seqs": 8, "max_num_batched_tokens": 1024,
                              "enforce_eager": True, "dtype": "float32", "max_model_len": 512}
    assert int(config["block_size"]) > 0  # cache_config_info, as before
