"""vLLM /metrics families the reference samples lack, written as vLLM prints them, and the
collector's second sample over two pages: for the tests of the signals beyond load and latency
(agents, telemetry).

None of the samples was served with --speculative-config or --enable-lora. Names, HELP and
labels are vLLM's (vllm/v1/spec_decode/metrics.py, vllm/v1/metrics/loggers.py), rendered by
prometheus_client as vLLM's own registry does.
"""

from __future__ import annotations

import prometheus_client as prom

from agents.collectors.vllm import VllmCollector

URL = "http://127.0.0.1:8000/metrics"
MODEL = "Qwen/Qwen3-8B"


def spec_decode_block(draft_tokens: float, accepted: float, drafts: float = 0.0,
                      engine: str = "0") -> str:
    """vLLM's spec-decoding counters (V1, one engine)."""
    registry = prom.CollectorRegistry()
    for name, doc, value in (
            ("vllm:spec_decode_num_drafts", "Number of spec decoding drafts.", drafts),
            ("vllm:spec_decode_num_draft_tokens", "Number of draft tokens.", draft_tokens),
            ("vllm:spec_decode_num_accepted_tokens", "Number of accepted tokens.", accepted)):
        counter = prom.Counter(name, doc, ["model_name", "engine"], registry=registry)
        counter.labels(MODEL, engine).inc(value)
    return prom.generate_latest(registry).decode()


def lora_block(*series: tuple[str, str, str, float]) -> str:
    """vllm:lora_requests_info series: (max_lora, waiting, running, set-at time) each."""
    registry = prom.CollectorRegistry()
    gauge = prom.Gauge("vllm:lora_requests_info", "Running stats on lora requests.",
                       ["max_lora", "waiting_lora_adapters", "running_lora_adapters"],
                       registry=registry)
    for max_lora, waiting, running, at in series:
        gauge.labels(max_lora, waiting, running).set(at)
    return prom.generate_latest(registry).decode()


def collector(*pages: str, times: tuple[float, ...] = (100.0, 102.0)) -> VllmCollector:
    """A collector that reads `pages` in turn, at the monotonic `times`."""
    page, clock = iter(pages), iter(times)
    return VllmCollector(URL, fetch=lambda url, timeout: next(page),
                         clock=lambda: next(clock), warn=lambda _: None,
                         models_fetch=lambda url, timeout: '{"data": []}')


def second_samples(before: str, after: str, dt: float = 2.0) -> list[dict]:
    """The engine samples of the second scrape, `dt` seconds after the first."""
    reader = collector(before, after, times=(100.0, 100.0 + dt))
    reader.collect()
    return reader.collect()


def two_scrapes(before: str, after: str, dt: float = 2.0) -> dict:
    (sample,) = second_samples(before, after, dt)
    return sample
