"""The /metrics text of vLLM 0.33 (V1 engine), fed by the simulated engine.

Names, HELP texts, types, label names and buckets are those of vLLM 0.33.0
(vllm/v1/metrics/loggers.py and buckets.py), in its order; the http_* families are what
prometheus-fastapi-instrumentator adds to vLLM's API server. Rendering goes through
prometheus_client on a registry of our own, so the text format is the real one (counters as
``_total`` plus ``_created``, OpenMetrics when the scraper asks for it). Nothing that vLLM does
not export is added here: the simulation shows itself on /v1/models and /sim/state instead.
As in vLLM, the spec_decode_* families exist only with a speculative config and
lora_requests_info only with LoRA on.
"""

from __future__ import annotations

import gzip
import itertools
import math
import time
from dataclasses import dataclass
from typing import Any

import prometheus_client as prom
from prometheus_client.exposition import choose_encoder

from agents.sim.engine_model import EngineConfig, Request, StepStats

REQUEST_LATENCY = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0,
                   60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0)
TIME_TO_FIRST_TOKEN = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0,
                       2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0)
INTER_TOKEN_LATENCY = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5,
                       5.0, 7.5, 10.0, 20.0, 40.0, 80.0)
ITERATION_TOKENS = (1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384)
REQUEST_PARAMS_N = (1, 2, 5, 10, 20)
REQUEST_NUM_PREEMPTIONS = (1, 2, 3, 4, 5, 10, 20)
HTTP_HIGHR = (0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1.0, 1.5, 2.0, 2.5, 3.0, 3.5, 4.0,
              4.5, 5.0, 7.5, 10.0, 30.0, 60.0)
HTTP_FEW = (0.1, 0.5, 1.0)

FINISH_REASONS = ("stop", "length", "abort", "error", "repetition")
WAITING_REASONS = ("capacity", "deferred")
SLEEP_STATES = ("awake", "weights_offloaded", "discard_all")
PROMPT_SOURCES = ("local_compute", "local_cache_hit", "external_kv_transfer")
CACHED_SOURCES = ("device", "host", "p2p", "disk", "external_unspecified")
ADMISSION_REASONS = ("max_num_queued_reqs", "max_num_queued_tokens")


# Chance that a draft token is accepted, given the ones before it were: typical figures for
# each speculative method (EAGLE's papers, vLLM's benchmarks); others get DEFAULT_ACCEPTANCE.
ACCEPTANCE = {"ngram": 0.45, "eagle": 0.7, "eagle3": 0.75, "mtp": 0.8, "draft_model": 0.6}
DEFAULT_ACCEPTANCE = 0.6


@dataclass(frozen=True)
class SpecDecode:
    """vLLM's --speculative-config, as far as its metrics go."""

    num_speculative_tokens: int
    acceptance: float = DEFAULT_ACCEPTANCE

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> SpecDecode:
        k = int(config.get("num_speculative_tokens", 1))
        if k < 1:
            raise ValueError("num_speculative_tokens must be at least 1")
        return cls(k, ACCEPTANCE.get(str(config.get("method", "")), DEFAULT_ACCEPTANCE))

    @property
    def mean_accepted(self) -> float:
        """Accepted tokens per draft: position i is accepted with probability p**i."""
        p = self.acceptance
        return sum(p ** i for i in range(1, self.num_speculative_tokens + 1))


def request_tokens_buckets(max_model_len: int) -> list[int]:
    """vLLM's build_1_2_5_buckets(max_model_len): 1, 2, 5, 10, 20, ... up to the limit."""
    series = (m * 10**e for e in range(20) for m in (1, 2, 5))
    return list(itertools.takewhile(lambda bound: bound <= max_model_len, series))


# (attribute, name, HELP, extra label and its values | buckets), in vLLM's registration order.
_GAUGES = (
    ("running", "vllm:num_requests_running", "Number of requests in model execution batches.",
     None),
    ("waiting", "vllm:num_requests_waiting", "Number of requests waiting to be processed.", None),
    ("waiting_by_reason", "vllm:num_requests_waiting_by_reason",
     "Number of waiting requests by reason. Reason labels: 'capacity' = waiting for scheduling "
     "capacity; 'deferred' = deferred by transient constraints (LoRA budget, KV transfer, "
     "blocked status). Sum of all reasons equals vllm:num_requests_waiting.",
     ("reason", WAITING_REASONS)),
    ("sleep_state", "vllm:engine_sleep_state",
     "Engine sleep state; awake = 0 means engine is sleeping; awake = 1 means engine is awake; "
     "weights_offloaded = 1 means sleep level 1; discard_all = 1 means sleep level 2.",
     ("sleep_state", SLEEP_STATES)),
    ("kv_usage", "vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", None),
)
_CACHED_HELP = (
    "Prefix-cache hit tokens by the cache tier that supplied them: device (local HBM), host "
    "(offloaded to DRAM), disk, p2p (transferred from another vLLM instance) or "
    "external_unspecified. Counted at admission; sums to vllm:prefix_cache_hits + "
    "vllm:external_prefix_cache_hits.")
_COUNTERS = (
    ("prefix_queries", "vllm:prefix_cache_queries",
     "Prefix cache queries, in terms of number of queried tokens.", None),
    ("prefix_hits", "vllm:prefix_cache_hits",
     "Prefix cache hits, in terms of number of cached tokens.", None),
    ("ext_queries", "vllm:external_prefix_cache_queries",
     "External prefix cache queries from KV connector cross-instance cache sharing, in terms "
     "of number of queried tokens.", None),
    ("ext_hits", "vllm:external_prefix_cache_hits",
     "External prefix cache hits from KV connector cross-instance cache sharing, in terms of "
     "number of cached tokens.", None),
    ("mm_queries", "vllm:mm_cache_queries",
     "Multi-modal cache queries, in terms of number of queried items.", None),
    ("mm_hits", "vllm:mm_cache_hits", "Multi-modal cache hits, in terms of number of cached "
     "items.", None),
    ("preemptions", "vllm:num_preemptions", "Cumulative number of preemption from the engine.",
     None),
    ("prompt_tokens", "vllm:prompt_tokens", "Number of prefill tokens processed.", None),
    ("prompt_by_source", "vllm:prompt_tokens_by_source", "Number of prompt tokens by source.",
     ("source", PROMPT_SOURCES)),
    ("prompt_cached", "vllm:prompt_tokens_cached",
     "Number of cached prompt tokens (local + external).", None),
    ("cached_by_source", "vllm:prompt_tokens_cached_by_source", _CACHED_HELP,
     ("source", CACHED_SOURCES)),
    ("generation_tokens", "vllm:generation_tokens", "Number of generation tokens processed.",
     None),
    ("success", "vllm:request_success", "Count of successfully processed requests.",
     ("finished_reason", FINISH_REASONS)),
)
_HISTOGRAMS = (
    ("prompt_len", "vllm:request_prompt_tokens", "Number of prefill tokens processed.", "tokens"),
    ("generation_len", "vllm:request_generation_tokens", "Number of generation tokens processed.",
     "tokens"),
    ("iteration_tokens", "vllm:iteration_tokens_total",
     "Histogram of number of tokens per engine_step.", ITERATION_TOKENS),
    ("max_generation", "vllm:request_max_num_generation_tokens",
     "Histogram of maximum number of requested generation tokens.", "tokens"),
    ("params_n", "vllm:request_params_n", "Histogram of the n request parameter.",
     REQUEST_PARAMS_N),
    ("params_max_tokens", "vllm:request_params_max_tokens",
     "Histogram of the max_tokens request parameter.", "tokens"),
    ("ttft", "vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.",
     TIME_TO_FIRST_TOKEN),
    ("itl", "vllm:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.",
     INTER_TOKEN_LATENCY),
    ("tpot", "vllm:request_time_per_output_token_seconds",
     "Histogram of time_per_output_token_seconds per request.", INTER_TOKEN_LATENCY),
    ("e2e", "vllm:e2e_request_latency_seconds", "Histogram of e2e request latency in seconds.",
     REQUEST_LATENCY),
    ("queue", "vllm:request_queue_time_seconds",
     "Histogram of time spent in WAITING phase for request.", REQUEST_LATENCY),
    ("inference", "vllm:request_inference_time_seconds",
     "Histogram of time spent in RUNNING phase for request.", REQUEST_LATENCY),
    ("prefill", "vllm:request_prefill_time_seconds",
     "Histogram of time spent in PREFILL phase for request.", REQUEST_LATENCY),
    ("decode", "vllm:request_decode_time_seconds",
     "Histogram of time spent in DECODE phase for request.", REQUEST_LATENCY),
    ("num_preemptions", "vllm:request_num_preemptions",
     "Histogram of the number of times a request was preempted.", REQUEST_NUM_PREEMPTIONS),
    ("prefill_kv_computed", "vllm:request_prefill_kv_computed_tokens",
     "Histogram of new KV tokens computed during prefill (excluding cached tokens).", "tokens"),
)
_LABELS = ["model_name", "engine"]
# vLLM's API server leaves these out of the http_* metrics; /sim/state is ours, not vLLM's.
HTTP_EXCLUDED = frozenset({"/metrics", "/health", "/load", "/ping", "/version", "/server_info",
                           "/sim/state"})
_ADMISSION_HELP = "Number of admission attempts rejected by a queue limit, by reason."
_CACHE_CONFIG_HELP = "Information of the LLMEngine CacheConfig"
_HTTP_SIZE_HELP = ("Content length of {} by handler. Only value of header is respected. "
                   "Otherwise ignored. No percentile calculated. ")


def cache_config_labels(config: EngineConfig) -> dict[str, str]:
    """vLLM's CacheConfig as the labels of vllm:cache_config_info (str() of each field)."""
    blocks, bs = config.num_gpu_blocks, config.block_size
    labels = dict.fromkeys(
        ("cache_hit_alignment_tokens", "kv_cache_memory_bytes", "kv_offloading_size",
         "mamba_block_size", "mamba_page_size_padded", "num_cpu_blocks",
         "num_gpu_blocks_override", "prefix_match_unit", "replayssm_buffer_len",
         "simple_cpu_offload_num_blocks", "skip_page_size_padded", "sliding_window"), "None")
    labels.update(dict.fromkeys(
        ("enable_mamba_shared_prefix_checkpoint", "is_attention_free",
         "kv_sharing_fast_prefill", "swa_bounded_replay", "use_kda_recoverssm",
         "use_replayssm", "user_specified_block_size"), "False"))
    labels.update(
        _block_size_resolved="True", block_size=str(bs), cache_dtype="auto",
        effective_attention_block_size=str(bs), enable_prefix_caching="True",
        gpu_memory_utilization=str(config.gpu_memory_utilization), hash_block_size=str(bs),
        kv_cache_dtype_skip_layers="[]", kv_cache_layout="NHD",
        kv_cache_max_concurrency=str(blocks * bs / config.max_model_len),
        kv_cache_size_tokens=str(blocks * bs), kv_offloading_backend="native",
        mamba_cache_dtype="auto", mamba_cache_mode="none", mamba_ssm_cache_dtype="auto",
        num_gpu_blocks=str(blocks), num_gpu_blocks_override=str(config.num_gpu_blocks_override),
        prefix_cache_retention_interval="0",
        prefix_caching_hash_algo="sha256")
    return labels


class EngineSeries:
    """One engine's (data-parallel rank's) children of every family: the engine's StatsSink."""

    def __init__(self, families: dict[str, Any], model_name: str, engine: str,
                 spec: SpecDecode | None = None) -> None:
        self.one: dict[str, Any] = {}
        self.by: dict[str, dict[str, Any]] = {}
        self.spec = spec
        self._decoded = self._drafts = 0  # decode tokens so far, and the drafts they took
        self._per_pos = [0] * (spec.num_speculative_tokens if spec else 0)
        for attr, (family, extra) in families.items():
            if extra is None:
                self.one[attr] = family.labels(model_name, engine)
            else:  # vLLM creates every child up front, so zeros show before any traffic
                self.by[attr] = {v: family.labels(model_name, engine, v) for v in extra[1]}
        self.by["sleep_state"]["awake"].set(1)

    def set_state(self, running: int, waiting: int, kv_usage: float,
                  deferred: int = 0) -> None:
        """``deferred``: of the waiting requests, those the LoRA budget holds back."""
        self.one["running"].set(running)
        self.one["waiting"].set(waiting)
        self.by["waiting_by_reason"]["capacity"].set(waiting - deferred)
        self.by["waiting_by_reason"]["deferred"].set(deferred)
        self.one["kv_usage"].set(kv_usage)

    def on_step(self, step: StepStats) -> None:
        one, by = self.one, self.by
        one["iteration_tokens"].observe(step.tokens)
        for name, value in (("prefix_queries", step.prefix_queries),
                            ("prefix_hits", step.prefix_hits),
                            ("preemptions", step.preemptions),
                            ("generation_tokens", step.generation_tokens)):
            if value:
                one[name].inc(value)
        if step.prompt_tokens:
            cached = step.prompt_cached_tokens
            one["prompt_tokens"].inc(step.prompt_tokens)
            by["prompt_by_source"]["local_compute"].inc(step.prompt_tokens - cached)
            by["prompt_by_source"]["local_cache_hit"].inc(cached)
            one["prompt_cached"].inc(cached)
            by["cached_by_source"]["device"].inc(cached)
        for seconds in step.ttfts:
            one["ttft"].observe(seconds)
        itl = one["itl"]
        for seconds in step.itls:
            itl.observe(seconds)
        if self.spec is not None:
            self._speculate(step.generation_tokens - len(step.ttfts))

    def _speculate(self, decoded: int) -> None:
        """The drafts behind ``decoded`` decode tokens. The engine model decodes a token a
        step; with speculative decoding each draft yields its accepted tokens plus one, so
        the decode tokens so far took ceil(tokens / (1 + mean accepted)) drafts and the rest
        of the tokens were accepted drafts. ceil keeps accepted <= k x drafts at every scrape.
        """
        if decoded <= 0:
            return
        spec, one = self.spec, self.one
        assert spec is not None
        self._decoded += decoded
        drafts = math.ceil(self._decoded / (1 + spec.mean_accepted))
        new = drafts - self._drafts
        self._drafts = drafts
        one["spec_drafts"].inc(new)
        one["spec_draft_tokens"].inc(new * spec.num_speculative_tokens)
        one["spec_accepted"].inc(decoded - new)
        for pos, child in enumerate(self.by["spec_per_pos"].values()):
            accepted = math.floor(drafts * spec.acceptance ** (pos + 1))
            child.inc(accepted - self._per_pos[pos])
            self._per_pos[pos] = accepted

    def on_finished(self, r: Request) -> None:
        one = self.one
        scheduled = r.scheduled_ts if r.scheduled_ts is not None else r.queued_ts
        decode = r.last_token_ts - r.first_token_ts
        self.by["success"][r.finish_reason].inc()
        for name, value in (
                ("prompt_len", r.prompt_tokens), ("generation_len", r.generated),
                ("max_generation", r.max_tokens), ("params_n", 1),
                ("params_max_tokens", r.max_tokens),
                ("tpot", decode / (r.generated - 1) if r.generated > 1 else 0.0),
                ("e2e", r.finished_ts - r.arrival), ("queue", scheduled - r.queued_ts),
                ("inference", r.last_token_ts - scheduled),
                ("prefill", r.first_token_ts - scheduled), ("decode", decode),
                ("num_preemptions", r.preemptions),
                ("prefill_kv_computed", r.prompt_tokens - r.cached_tokens)):
            one[name].observe(value)


class VllmExposition:
    """The registry of one vLLM API server, with one EngineSeries per data-parallel rank."""

    def __init__(self, config: EngineConfig, data_parallel_size: int = 1,
                 spec: SpecDecode | None = None) -> None:
        self.registry = r = prom.CollectorRegistry()
        prom.GCCollector(registry=r)
        prom.PlatformCollector(registry=r)
        prom.ProcessCollector(registry=r)
        families = _spec_families(r, spec) if spec is not None else {}
        families.update(_engine_families(r, config))
        engines = [str(rank) for rank in range(data_parallel_size)]
        self.engines = [EngineSeries(families, config.model, e, spec) for e in engines]
        self.max_loras = config.max_loras
        self.lora_info = None if not config.max_loras else prom.Gauge(
            "vllm:lora_requests_info", "Running stats on lora requests.",
            ["max_lora", "waiting_lora_adapters", "running_lora_adapters"], registry=r)
        info = cache_config_labels(config)
        gauge = prom.Gauge("vllm:cache_config_info", _CACHE_CONFIG_HELP, [*info, "engine"],
                           registry=r)
        for engine in engines:
            gauge.labels(**info, engine=engine).set(1)
        self._http_families(r)

    def set_lora(self, running: set[str], waiting: set[str]) -> None:
        """What vLLM's stat logger does every step with LoRA on: a series for these adapters
        set to the time now (older label sets stay, with the time they were last set)."""
        if self.lora_info is not None:
            self.lora_info.labels(str(self.max_loras), ",".join(sorted(waiting)),
                                  ",".join(sorted(running))).set(time.time())

    def _http_families(self, r: prom.CollectorRegistry) -> None:
        self.http_requests = prom.Counter(
            "http_requests", "Total number of requests by method, status and handler.",
            ["method", "status", "handler"], registry=r)
        self.http_request_size = prom.Summary(
            "http_request_size_bytes", _HTTP_SIZE_HELP.format("incoming requests"),
            ["handler"], registry=r)
        self.http_response_size = prom.Summary(
            "http_response_size_bytes", _HTTP_SIZE_HELP.format("outgoing responses"),
            ["handler"], registry=r)
        self.http_highr = prom.Histogram(
            "http_request_duration_highr_seconds", "Latency with many buckets but no API "
            "specific labels. Made for more accurate percentile calculations. ",
            registry=r, buckets=HTTP_HIGHR)
        self.http_duration = prom.Histogram(
            "http_request_duration_seconds", "Latency with only few buckets by handler. Made "
            "to be only used if aggregation by handler is important. ",
            ["method", "handler"], registry=r, buckets=HTTP_FEW)

    def observe_http(self, method: str, path: str, status: int, request_bytes: int,
                     response_bytes: int, seconds: float) -> None:
        """What prometheus-fastapi-instrumentator records, with vLLM's excluded handlers."""
        if path in HTTP_EXCLUDED:
            return
        self.http_requests.labels(method, f"{status // 100}xx", path).inc()
        self.http_request_size.labels(path).observe(request_bytes)
        self.http_response_size.labels(path).observe(response_bytes)
        self.http_highr.observe(seconds)
        self.http_duration.labels(method, path).observe(seconds)

    def render(self, accept: str = "", accept_encoding: str = "") -> tuple[bytes, dict[str, str]]:
        """The body and headers prometheus_client's own HTTP app would answer a scrape with."""
        encoder, content_type = choose_encoder(accept)
        body, headers = encoder(self.registry), {"Content-Type": content_type}
        if "gzip" in accept_encoding:
            body, headers["Content-Encoding"] = gzip.compress(body), "gzip"
        return body, headers


def _spec_families(r: prom.CollectorRegistry, spec: SpecDecode) -> dict[str, Any]:
    """vLLM's SpecDecodingProm counters, registered before every other vllm:* family."""
    families: dict[str, Any] = {}
    for attr, name, doc in (
            ("spec_drafts", "vllm:spec_decode_num_drafts", "Number of spec decoding drafts."),
            ("spec_draft_tokens", "vllm:spec_decode_num_draft_tokens", "Number of draft tokens."),
            ("spec_accepted", "vllm:spec_decode_num_accepted_tokens",
             "Number of accepted tokens.")):
        families[attr] = (prom.Counter(name, doc, _LABELS, registry=r), None)
    positions = tuple(str(pos) for pos in range(spec.num_speculative_tokens))
    families["spec_per_pos"] = (prom.Counter(
        "vllm:spec_decode_num_accepted_tokens_per_pos", "Accepted tokens per draft position.",
        [*_LABELS, "position"], registry=r), ("position", positions))
    return families


def _engine_families(r: prom.CollectorRegistry, config: EngineConfig) -> dict[str, Any]:
    """Every vllm:* family but cache_config_info, in vLLM's order: attribute -> (family, extra)."""
    families: dict[str, Any] = {}
    for kind, table in ((prom.Gauge, _GAUGES), (prom.Counter, _COUNTERS)):
        for attr, name, doc, extra in table:
            labels = _LABELS if extra is None else [*_LABELS, extra[0]]
            families[attr] = (kind(name, doc, labels, registry=r), extra)
    admission = prom.Counter("vllm:admission_rejections", _ADMISSION_HELP,
                             ["model_name", "reason"], registry=r)  # one per server, no engine
    for reason in ADMISSION_REASONS:
        admission.labels(config.model, reason)
    tokens = request_tokens_buckets(config.max_model_len)
    for attr, name, doc, buckets in _HISTOGRAMS:
        buckets = tokens if buckets == "tokens" else buckets
        families[attr] = (prom.Histogram(name, doc, _LABELS, registry=r, buckets=buckets), None)
    return families
