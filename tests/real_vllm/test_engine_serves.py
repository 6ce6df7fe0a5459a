"""The real engine itself: the tiny model loads, answers, and reports vLLM's metrics."""

from __future__ import annotations

import psutil
import pytest

from agents.collectors.process import ProcessCollector
from tests.real_vllm.sim import SimVllm, assert_same_families, families

pytestmark = pytest.mark.real_vllm


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
