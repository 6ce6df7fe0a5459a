"""The agent's vLLM collector scraping the real 0.32 CPU server under a load driven here."""

from __future__ import annotations

import pytest

from agents.collectors.vllm import VllmCollector
from agents.collectors.vllm_names import GAUGES, HISTOGRAMS, RATES

pytestmark = pytest.mark.real_vllm

REQUESTS, TOKENS = 12, 24


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
