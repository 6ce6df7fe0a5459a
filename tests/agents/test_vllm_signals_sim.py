"""The simulated vLLM shows the signals beyond load and latency as vLLM 0.33 does: the
spec_decode_* families only with --speculative-config, lora_requests_info only with
--enable-lora, the LoRA budget deferring waiting requests, and the agent's collector reading
every new catalog key from it.

The simulation runs on an injected clock, so minutes of traffic take milliseconds.
"""

from __future__ import annotations

import pytest
from prometheus_client.parser import text_string_to_metric_families

from agents.collectors.vllm import VllmCollector
from agents.protocol import metrics_of
from agents.sim.engine_model import EngineConfig, EngineModel
from agents.sim.vllm_cli import parse_known
from agents.sim.vllm_exposition import SpecDecode
from agents.sim.vllm_server import SimOptions, SimVllm
from agents.sim.workload import RequestSpec, SyntheticLoad
from tests.agents.vllm_samples import defined_families

SPEC_FAMILIES = {"vllm:spec_decode_num_drafts", "vllm:spec_decode_num_draft_tokens",
                 "vllm:spec_decode_num_accepted_tokens",
                 "vllm:spec_decode_num_accepted_tokens_per_pos"}
ADAPTERS = {"sql": "/loras/sql", "chat": "/loras/chat", "code": "/loras/code"}


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def sim(clock: Clock, spec: SpecDecode | None = None, max_loras: int = 0,
        load: float = 6.0) -> SimVllm:
    engine = EngineConfig(model="Qwen/Qwen3-8B", max_model_len=32768, max_loras=max_loras,
                          max_num_seqs=8)
    server = SimVllm(SimOptions(engine=engine, load=load, seed=3, spec=spec,
                                lora_modules=dict(ADAPTERS) if max_loras else {}), clock)
    server.tick()  # the engines start now, at 0: later times have traffic behind them
    return server


def page(server: SimVllm) -> str:
    return server.scrape("", "")[0].decode()


def families(text: str) -> dict[str, list]:
    return {f.name: f.samples for f in text_string_to_metric_families(text)
            if f.name.startswith("vllm:")}


def total(text: str, sample: str) -> float:
    return sum(s.value for samples in families(text).values() for s in samples
               if s.name == sample)


def test_without_the_flags_there_are_no_spec_decode_or_lora_families():
    clock = Clock()
    server = sim(clock)
    clock.now = 30.0
    names = set(families(page(server)))
    assert not names & SPEC_FAMILIES
    assert "vllm:lora_requests_info" not in names
    assert "vllm:num_requests_waiting_by_reason" in names


def test_spec_decode_counters_follow_the_decoded_tokens():
    clock = Clock()
    spec = SpecDecode(num_speculative_tokens=3, acceptance=0.7)
    server = sim(clock, spec)
    clock.now = 120.0
    text = page(server)
    assert set(families(text)) >= SPEC_FAMILIES
    drafts = total(text, "vllm:spec_decode_num_drafts_total")
    draft_tokens = total(text, "vllm:spec_decode_num_draft_tokens_total")
    accepted = total(text, "vllm:spec_decode_num_accepted_tokens_total")
    assert drafts > 100
    assert draft_tokens == 3 * drafts
    assert 0 < accepted <= draft_tokens
    # Each draft yields its accepted tokens plus one: together, every decode token.
    decoded = total(text, "vllm:generation_tokens_total") - total(
        text, "vllm:request_prompt_tokens_count") - sum(
        len(e.running) for e in server.engines if e.running)  # at most one first token each
    assert drafts + accepted == pytest.approx(decoded, rel=0.05)
    assert accepted / draft_tokens == pytest.approx(spec.mean_accepted / 3, rel=0.01)
    positions = {s.labels["position"]: s.value for s in families(text)[
        "vllm:spec_decode_num_accepted_tokens_per_pos"] if s.name.endswith("_total")}
    assert list(positions) == ["0", "1", "2"]
    assert positions["0"] >= positions["1"] >= positions["2"] > 0


def test_the_collector_reads_an_acceptance_rate_from_the_simulation():
    clock = Clock()
    spec = SpecDecode(num_speculative_tokens=4, acceptance=0.6)
    server, sample = collected(clock, spec=spec)
    assert sample["spec_acceptance_rate"] == pytest.approx(spec.mean_accepted / 4, rel=0.02)
    assert sample["spec_draft_tokens_per_s"] > sample["spec_accepted_tokens_per_s"] > 0


def collected(clock: Clock, **settings) -> tuple[SimVllm, dict]:
    """The collector's second sample of a simulation, 10 s after its first, 60 s in."""
    server = sim(clock, **settings)
    scrapes = iter((60.0, 70.0))

    def fetch(url: str, timeout: float) -> str:
        clock.now = next(scrapes)
        return page(server)

    reader = VllmCollector("http://127.0.0.1:8000/metrics", fetch=fetch, clock=clock,
                           warn=lambda _: None,
                           models_fetch=lambda url, t: '{"data": []}')
    reader.collect()
    (sample,) = reader.collect()
    return server, sample


def test_lora_info_names_the_adapters_of_running_and_waiting_requests():
    clock = Clock()
    server = sim(clock, max_loras=1, load=20.0)
    clock.now = 60.0
    info = families(page(server))["vllm:lora_requests_info"]
    newest = max(info, key=lambda s: s.value)
    running = {r.lora for e in server.engines for r in e.running if r.lora}
    waiting = {r.lora for e in server.engines for r in e.waiting if r.lora}
    assert newest.labels == {"max_lora": "1", "running_lora_adapters": ",".join(sorted(running)),
                             "waiting_lora_adapters": ",".join(sorted(waiting))}
    assert len(running) <= 1


def test_the_lora_budget_defers_requests_for_other_adapters_and_lets_others_pass():
    engine = EngineModel(EngineConfig(max_loras=1, max_num_seqs=8))
    for lora in ("sql", "code", None, "sql"):
        engine.submit(RequestSpec(100, 400, 400, lora=lora), 0.0)
    engine.advance(0.5)
    assert sorted(str(r.lora) for r in engine.running) == ["None", "sql", "sql"]
    assert [r.lora for r in engine.waiting] == ["code"]
    assert engine.waiting_deferred() == 1


def test_every_new_engine_signal_reaches_the_collector_from_a_simulation_with_both_flags():
    clock = Clock()
    _, sample = collected(clock, spec=SpecDecode(3), max_loras=2)
    new = {m.key for m in metrics_of("engine")} - {
        "up", "requests_running", "requests_waiting", "kv_cache_usage", "prefix_cache_hit_rate",
        "preemptions_per_s", "prompt_tokens_per_s", "generation_tokens_per_s",
        "requests_finished_per_s", "admission_rejections_per_s", "ttft_seconds", "itl_seconds",
        "e2e_seconds", "queue_seconds"}
    assert len(new) == 16
    assert new <= sample.keys()
    assert sum(sample["prefill_seconds"]["counts"]) > 0
    assert sum(sample["iteration_tokens"]["counts"]) > 0
    assert sum(sample["prompt_length_tokens"]["counts"]) > 0


def test_the_simulated_families_are_those_vllm_0_33_defines():
    clock = Clock()
    server = sim(clock, spec=SpecDecode(2), max_loras=1)
    clock.now = 30.0
    names = {n for n in families(page(server)) if not n.endswith("_created")}
    # Spec decoding is defined outside loggers.py (the defs), cache_config_info by a helper.
    assert names - defined_families("defs_0.33.0.tsv") == SPEC_FAMILIES | {
        "vllm:cache_config_info"}


def test_the_command_line_takes_vllms_flags_for_both():
    options, ignored = parse_known([
        "--speculative-config", '{"method": "ngram", "num_speculative_tokens": 5}',
        "--enable-lora", "--max-loras", "2", "--lora-modules", "sql=/l/sql",
        '{"name": "chat", "path": "/l/chat"}'])
    assert options.spec == SpecDecode(5, 0.45)
    assert (options.engine.max_loras, options.lora_modules) == (2, {"sql": "/l/sql",
                                                                     "chat": "/l/chat"})
    assert ignored == []
    plain, _ = parse_known(["--lora-modules", "sql=/l/sql", "--max-loras", "3"])
    assert (plain.engine.max_loras, plain.lora_modules) == (0, {})  # no --enable-lora


def test_synthetic_traffic_without_adapters_draws_as_before():
    plain = SyntheticLoad(4.0, 8192, seed=11)
    again = SyntheticLoad(4.0, 8192, seed=11, loras=())
    assert [plain.draw() for _ in range(50)] == [again.draw() for _ in range(50)]
    with_loras = SyntheticLoad(4.0, 8192, seed=11, loras=("a", "b"))
    drawn = [with_loras.draw().lora for _ in range(400)]
    assert drawn.count("a") > drawn.count("b") > 0 and None in drawn
