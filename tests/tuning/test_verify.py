"""The verdict on equal windows before and after a change: the diagnosis's target decides,
guards veto."""

from __future__ import annotations

from controlplane.tuning.verify import judge

BEFORE = {"generation_tokens_per_s": 1500.0, "ttft_p99_s": 40.0, "itl_p99_s": 0.2,
          "preemptions_per_s": 0.95, "requests_waiting": 188.0, "kv_cache_usage": 0.96,
          "gpu_util_pct": 97.0}


def after(**changes) -> dict:
    return {**BEFORE, **changes}


def test_preemptions_gone_at_the_cost_of_some_itl_is_an_improvement():
    verdict, summary = judge("kv_pressure", BEFORE, after(preemptions_per_s=0.0,
                                                           itl_p99_s=0.244))
    assert verdict == "improved"
    assert "preemptions_per_s 0.95 -> 0 (-100%)" in summary and "itl_p99_s 0.2 -> 0.244" in summary


def test_throughput_down_by_a_fifth_vetoes_the_target():
    verdict, _ = judge("kv_pressure", BEFORE, after(preemptions_per_s=0.0,
                                                     generation_tokens_per_s=1100.0))
    assert verdict == "regressed"


def test_the_target_moving_the_wrong_way_is_a_regression():
    assert judge("prefill_ttft", BEFORE, after(ttft_p99_s=48.0))[0] == "regressed"


def test_a_small_move_is_unchanged():
    assert judge("concurrency_cap", BEFORE, after(requests_waiting=180.0))[0] == "unchanged"


def test_a_diagnosis_without_a_target_is_judged_by_its_guards_only():
    assert judge("foreign_memory", BEFORE, after())[0] == "unchanged"
    assert judge("foreign_memory", BEFORE, after(ttft_p99_s=80.0))[0] == "regressed"


def test_a_metric_missing_on_one_side_is_not_compared():
    verdict, summary = judge("prefill_itl", BEFORE, after(itl_p99_s=None))
    assert verdict == "unchanged" and "itl_p99_s 0.2 -> n/a" in summary


def test_itl_half_again_worse_for_a_drained_queue_is_the_trade_not_a_regression():
    # Measured end to end (tests/e2e/test_tuning_loop.py): KV room for more sequences.
    verdict, _ = judge("kv_pressure", BEFORE, after(
        preemptions_per_s=0.0, generation_tokens_per_s=2282.0, ttft_p99_s=0.68,
        itl_p99_s=0.31))
    assert verdict == "improved"


def test_a_latency_much_worse_with_nothing_gained_elsewhere_is_a_regression():
    verdict, _ = judge("prefill_itl", BEFORE, after(itl_p99_s=0.15, ttft_p99_s=90.0))
    assert verdict == "regressed"


def test_a_latency_that_fell_by_a_larger_factor_than_the_other_grew_is_the_trade():
    # Measured on a real vLLM, its KV cap raised 20 -> 80 blocks: TTFT p99 5.8 times shorter
    # (-83 %), ITL p99 1.97 times longer (+97 %): as shares, 83 < 97.
    verdict, _ = judge("kv_pressure", BEFORE, after(
        preemptions_per_s=0.43, generation_tokens_per_s=1500.0 * 1.28,
        ttft_p99_s=40.0 / 5.78, itl_p99_s=0.2 * 1.97))
    assert verdict == "improved"


def test_a_latency_that_grew_by_a_larger_factor_than_the_other_fell_is_a_regression():
    verdict, _ = judge("kv_pressure", BEFORE, after(
        preemptions_per_s=0.0, ttft_p99_s=40.0 / 1.8, itl_p99_s=0.2 * 2.0))
    assert verdict == "regressed"
