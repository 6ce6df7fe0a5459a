"""The simulated vLLM engine, stepped with injected time: scheduling, KV cache, preemption."""

from __future__ import annotations

import pytest

from agents.sim.engine_model import (
    GIB,
    ClientLoad,
    EngineConfig,
    EngineModel,
    RequestSpec,
    SyntheticLoad,
    params_from_model_name,
)
from tests.agents.engine_recorder import Recorder


def run(engine: EngineModel, seconds: float, every: float = 0.5) -> list[tuple[int, int, float]]:
    """Advance in slices; record (running, waiting, kv usage) after each."""
    seen = []
    t = engine.now
    while t < seconds:
        t += every
        engine.advance(t)
        seen.append((len(engine.running), len(engine.waiting), engine.kv_cache_usage))
    return seen


def test_the_engine_preempts_when_the_kv_cache_runs_out():
    # 24 GiB x 0.8 leaves about 2 GiB of KV after an 8B model's weights: ~1,100 blocks.
    config = EngineConfig(gpu_mem_bytes=24 * GIB, gpu_memory_utilization=0.8)
    sink = Recorder()
    engine = EngineModel(config, sink=sink)
    for _ in range(64):
        engine.submit(RequestSpec(prompt_tokens=1000, max_tokens=2000, output_tokens=2000), 0.0)
    seen = run(engine, 3600.0)
    assert sink.total("preemptions") > 0
    assert max(kv for _, _, kv in seen) <= 1.0
    assert len(sink.finished) == 64  # recomputed after preemption, every request completes
    assert sum(r.preemptions for r in sink.finished) == sink.total("preemptions")


def test_a_roomy_kv_cache_never_preempts():
    sink = Recorder()
    engine = EngineModel(EngineConfig(), sink=sink)
    for _ in range(64):
        engine.submit(RequestSpec(prompt_tokens=1000, max_tokens=2000, output_tokens=2000), 0.0)
    run(engine, 600.0)
    assert sink.total("preemptions") == 0 and len(sink.finished) == 64


def test_running_is_capped_at_max_num_seqs_and_the_rest_wait():
    config = EngineConfig(max_num_seqs=8)
    engine = EngineModel(config)
    for _ in range(40):
        engine.submit(RequestSpec(prompt_tokens=100, max_tokens=500, output_tokens=500), 0.0)
    running, waiting, _ = run(engine, 1.0)[-1]
    assert running == config.max_num_seqs
    assert waiting == 40 - config.max_num_seqs
    assert max(r for r, _, _ in run(engine, 600.0)) == config.max_num_seqs


def ttft_of_a_long_prompt(max_num_batched_tokens: int) -> float:
    config = EngineConfig(max_num_batched_tokens=max_num_batched_tokens)
    engine = EngineModel(config)
    for _ in range(32):  # requests already decoding share each step's token budget
        engine.submit(RequestSpec(prompt_tokens=200, max_tokens=2000, output_tokens=2000), 0.0)
    engine.advance(2.0)
    long = engine.submit(RequestSpec(prompt_tokens=7000, max_tokens=10, output_tokens=10), 2.0)
    while long.generated == 0:
        engine.advance(engine.now + 0.1)
    return long.first_token_ts - long.arrival


def test_a_larger_token_budget_lowers_ttft_for_long_prompts():
    assert ttft_of_a_long_prompt(8192) < ttft_of_a_long_prompt(512)


def test_synthetic_load_arrives_at_its_rate_and_finishes_by_stop_or_length():
    sink = Recorder()
    config = EngineConfig()
    engine = EngineModel(config, load=SyntheticLoad(4.0, config.max_model_len, seed=7),
                         sink=sink)
    run(engine, 300.0)
    arrived = len(sink.finished) + len(engine.running) + len(engine.waiting)
    assert 0.9 * 1200 < arrived < 1.1 * 1200  # 4/s for 300 s, within 3 standard deviations
    assert {r.finish_reason for r in sink.finished} == {"stop", "length"}
    assert all(r.generated <= r.max_tokens for r in sink.finished)
    assert 0.1 < sink.total("prefix_hits") / sink.total("prefix_queries") < 0.6


def test_the_same_seed_gives_the_same_traffic():
    def trace(seed: int) -> list[tuple[int, int]]:
        sink = Recorder()
        engine = EngineModel(EngineConfig(), load=SyntheticLoad(4.0, 8192, seed=seed), sink=sink)
        run(engine, 20.0)
        return [(r.prompt_tokens, r.generated) for r in sink.finished]

    assert trace(3) == trace(3)
    assert trace(3) != trace(4)


def test_request_timestamps_are_ordered_and_ttft_covers_the_queue():
    sink = Recorder()
    engine = EngineModel(EngineConfig(max_num_seqs=4), sink=sink)
    for _ in range(12):
        engine.submit(RequestSpec(prompt_tokens=500, max_tokens=50, output_tokens=50), 0.0)
    run(engine, 120.0)
    for r in sink.finished:
        assert r.scheduled_ts is not None
        assert r.arrival <= r.scheduled_ts < r.first_token_ts <= r.last_token_ts
        assert r.last_token_ts == r.finished_ts
    assert max(r.scheduled_ts for r in sink.finished) > 0.0  # the last 8 queued behind 4
    ttfts = [t for step in sink.steps for t in step.ttfts]
    assert sorted(ttfts) == sorted(r.first_token_ts - r.arrival for r in sink.finished)


def test_busy_fraction_is_zero_when_idle_and_one_under_load():
    engine = EngineModel(EngineConfig())
    engine.advance(10.0)
    assert engine.busy_fraction(10.0) == 0.0
    for _ in range(8):
        engine.submit(RequestSpec(prompt_tokens=100, max_tokens=2000, output_tokens=2000), 10.0)
    engine.advance(12.0)
    assert engine.busy_fraction(12.0) == 1.0


def test_kv_capacity_follows_memory_utilization_and_tensor_parallelism():
    small, large = EngineConfig(gpu_memory_utilization=0.5), EngineConfig()
    assert 0 < small.num_gpu_blocks < large.num_gpu_blocks
    tp2 = EngineConfig(tensor_parallel_size=2)
    assert tp2.weights_bytes_per_gpu * 2 == large.weights_bytes_per_gpu
    assert tp2.num_gpu_blocks > large.num_gpu_blocks


def test_a_model_too_big_for_one_gpu_is_refused_and_fits_with_tensor_parallelism():
    with pytest.raises(ValueError, match="KV cache"):
        EngineConfig(model="meta-llama/Llama-3.1-70B-Instruct").check()
    EngineConfig(model="meta-llama/Llama-3.1-70B-Instruct", tensor_parallel_size=4).check()


def test_model_size_is_read_from_the_model_name():
    assert params_from_model_name("meta-llama/Llama-3.1-70B-Instruct") == 70e9
    assert params_from_model_name("Qwen/Qwen2.5-0.5B-Instruct") == 0.5e9
    assert params_from_model_name("HuggingFaceTB/SmolLM2-135M") == 135e6
    assert params_from_model_name("mistralai/Mixtral-8x7B-v0.1") == 56e9
    assert params_from_model_name("some/unnamed-model") == 8e9


def test_coasting_gives_the_same_requests_and_metrics_as_stepping_one_by_one():
    def run(coast: bool) -> Recorder:
        sink = Recorder()
        engine = EngineModel(EngineConfig(), load=SyntheticLoad(6.0, 8192, seed=5), sink=sink)
        if not coast:
            engine._coast = lambda until: False  # type: ignore[method-assign]
        for t in range(1, 121):
            engine.advance(float(t))
        return sink

    fast, slow = run(True), run(False)
    flat = lambda sink: [x for r in sink.finished  # noqa: E731
                         for x in (r.arrival, r.first_token_ts, r.finished_ts, r.generated)]
    assert flat(fast) == pytest.approx(flat(slow))
    assert fast.total("generation_tokens") == slow.total("generation_tokens")
    itls = lambda sink: sum(len(s.itls) + sum(n for _, n in s.itl_runs)  # noqa: E731
                            for s in sink.steps)
    assert itls(fast) == itls(slow)


def test_a_long_prompt_is_prefilled_in_chunks_of_at_most_max_num_batched_tokens():
    # vLLM V1: running requests first, then waiting ones, all within the token budget.
    sink = Recorder()
    engine = EngineModel(EngineConfig(max_num_batched_tokens=1024), sink=sink)
    engine.submit(RequestSpec(prompt_tokens=5000, max_tokens=4, output_tokens=4), 0.0)
    engine.advance(10.0)
    assert max(step.tokens for step in sink.steps) <= 1024
    assert [step.tokens for step in sink.steps[:5]] == [1024, 1024, 1024, 1024, 904]
    assert sink.steps[4].ttfts and not any(step.ttfts for step in sink.steps[:4])


def test_preemption_takes_the_newest_running_request_and_requeues_it_first():
    # vLLM V1 (FCFS): the victim is running.pop(), put back at the front of the queue.
    config = EngineConfig(gpu_mem_bytes=24 * GIB, gpu_memory_utilization=0.8)
    engine = EngineModel(config)
    requests = [engine.submit(RequestSpec(1000, 3000, 3000), 0.0) for _ in range(20)]
    while not any(r.preemptions for r in requests):
        engine.advance(engine.now + 0.5)
    victims = [r for r in requests if r.preemptions]
    running = engine.running
    assert all(requests.index(v) > requests.index(r) for v in victims for r in running)
    assert engine.waiting[0] is victims[-1] or engine.waiting[0] in victims


def test_coasting_gives_the_same_first_tokens_when_a_chunk_leaves_one_prompt_token():
    # A 16-token budget shared with decodes cuts 100-token prompts into chunks of every size:
    # a step that computes a prompt's last token gives its first token, never a decode.
    def run(coast: bool) -> list[float]:
        sink = Recorder()
        config = EngineConfig(max_num_seqs=4, max_num_batched_tokens=16)
        load = ClientLoad(6, 0.5, config.max_model_len, seed=2, spec=RequestSpec(100, 32, 32))
        engine = EngineModel(config, load=load, sink=sink)
        if not coast:
            engine._coast = lambda until: False  # type: ignore[method-assign]
        engine.advance(60.0)
        assert all(r.scheduled_ts < r.first_token_ts for r in sink.finished)
        return [t for r in sink.finished for t in (r.first_token_ts, r.finished_ts)]

    assert run(True) == pytest.approx(run(False))


def test_closed_loop_clients_keep_at_most_their_number_in_the_engine():
    config = EngineConfig(max_num_seqs=4)
    sink = Recorder()
    engine = EngineModel(config, load=ClientLoad(6, 0.5, config.max_model_len, seed=1,
                                                 spec=RequestSpec(50, 40, 40)), sink=sink)
    seen = run(engine, 120.0, every=0.05)
    assert max(r + w for r, w, _ in seen) <= 6
    assert max(r for r, _, _ in seen) == 4 and any(w for _, w, _ in seen)
    # Each client's next request arrives after its last one finished.
    assert len(sink.finished) > 100


def test_clients_that_spend_time_outside_the_engine_leave_it_below_the_cap_on_average():
    """More clients than the cap, yet the queue empties now and then: requests finish and
    come back in bursts (what vLLM 0.32 showed under a cap, see test_sim_matches_real_shapes)."""
    config = EngineConfig(max_num_seqs=4)
    engine = EngineModel(config, load=ClientLoad(10, 0.5, config.max_model_len, seed=1,
                                                 spec=RequestSpec(50, 40, 40)))
    seen = run(engine, 300.0, every=1.0)
    running = [r for r, _, _ in seen]
    waiting = [w for _, w, _ in seen]
    assert max(running) == 4 and sum(running) / len(running) < 3.8
    assert sum(waiting) / len(waiting) > 0.5 and waiting.count(0) > len(waiting) / 4


def test_queue_time_starts_when_the_scheduler_takes_the_request_between_steps():
    # vLLM's queue time runs from its QUEUED event (the engine loop takes new requests between
    # steps) to the first schedule; its TTFT from the arrival.
    sink = Recorder()
    engine = EngineModel(EngineConfig(max_num_seqs=1), sink=sink)
    engine.submit(RequestSpec(prompt_tokens=4000, max_tokens=2, output_tokens=2), 0.0)
    engine.advance(0.001)  # the first step is in flight
    late = engine.submit(RequestSpec(prompt_tokens=10, max_tokens=2, output_tokens=2), 0.002)
    engine.advance(10.0)
    first_step_end = sink.steps[0].end
    assert late.queued_ts == first_step_end > late.arrival
    assert late.scheduled_ts >= late.queued_ts
    assert late.first_token_ts - late.arrival > (late.scheduled_ts - late.queued_ts) + (
        late.first_token_ts - late.scheduled_ts)
