"""The real engine itself: the tiny model loads, answers, and reports vLLM's metrics."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.real_vllm


def test_the_tiny_model_answers_a_completion(real_vllm):
    reply = real_vllm.complete(max_tokens=8)
    assert reply["usage"]["completion_tokens"] == 8


def test_its_metrics_carry_the_families_pitwall_reads(real_vllm):
    text = real_vllm.metrics()
    for family in ("vllm:num_requests_running", "vllm:kv_cache_usage_perc",
                   "vllm:num_preemptions_total", "vllm:time_to_first_token_seconds"):
        assert f"# TYPE {family} " in text, family
