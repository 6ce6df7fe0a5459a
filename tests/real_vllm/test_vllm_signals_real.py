"""vLLM's finer signals (requests by finish and wait reason, speculative decoding, LoRA, batch
and length histograms) on the real 0.32 CPU server run with speculative decoding (ngram) and
LoRA on: the agent's collector reads them, and the simulated vLLM given the same flags prints
the same vllm:* families with the same types and labels."""

from __future__ import annotations

import json

import pytest

from agents.collectors.vllm import VllmCollector
from tests.real_vllm.engine import RealVllm, post_json
from tests.real_vllm.sim import SimVllm, assert_same_families, families

pytestmark = pytest.mark.real_vllm

SPEC = {"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 3,
        "prompt_lookup_min": 1}
FLAGS = ("--enable-lora", "--max-loras", "1", "--speculative-config", json.dumps(SPEC))
REPEATS = 3


@pytest.fixture(scope="module")
def spec_lora_vllm(vllm_install, tmp_path_factory):
    engine = RealVllm(vllm_install, tmp_path_factory.mktemp("vllm-spec-lora"), FLAGS)
    engine.wait_ready()
    yield engine
    engine.stop()


def greedy_repeats(engine: RealVllm) -> None:
    """Greedy completions of a repeating prompt: the tiny model repeats too, so the ngram
    proposer's drafts get accepted."""
    for _ in range(REPEATS):
        post_json(f"{engine.url}/v1/completions",
                  {"model": str(engine.install.model), "prompt": "a b c a b c a b c a b c",
                   "max_tokens": 32, "temperature": 0, "ignore_eos": True}, 120)


def test_the_collector_reads_speculative_decoding_and_lora_from_the_real_server(
        spec_lora_vllm):
    warnings: list[str] = []
    collector = VllmCollector(f"{spec_lora_vllm.url}/metrics", timeout=10,
                              warn=warnings.append)
    collector.collect()
    greedy_repeats(spec_lora_vllm)
    [sample] = collector.collect()
    assert warnings == []
    assert sample["spec_draft_tokens_per_s"] > 0
    assert 0 < sample["spec_accepted_tokens_per_s"] <= sample["spec_draft_tokens_per_s"]
    assert 0 < sample["spec_acceptance_rate"] <= 1
    assert (sample["lora_running"], sample["lora_waiting"]) == (0, 0)  # LoRA on, no adapter
    assert sample["finished_length_per_s"] > 0  # ignore_eos: every one ran to max_tokens
    assert sample["finished_error_per_s"] == 0  # 0.32 prints the error reason
    assert sum(sample["generation_length_tokens"]["counts"]) == REPEATS
    assert sum(sample["iteration_tokens"]["counts"]) > 0


def test_the_simulation_with_the_same_flags_prints_the_same_families(spec_lora_vllm,
                                                                    tmp_path):
    spec_lora_vllm.load(4, 16, 2)
    sim = SimVllm(tmp_path, "--load", "2", *FLAGS)
    try:
        simulated = families(sim.metrics())
    finally:
        sim.stop()
    real = families(spec_lora_vllm.metrics())
    assert {"vllm:spec_decode_num_draft_tokens", "vllm:lora_requests_info"} <= real.keys()
    assert_same_families(real, simulated)
