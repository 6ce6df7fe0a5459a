"""Which vLLM /metrics families feed which engine.* catalog keys, across vLLM releases.

Each key lists its source families in order of preference: the current name first, then the
names older releases used (V0 engine, early V1). When a server emits both (vLLM 0.10-0.12
still emitted the deprecated names beside the new ones), the first one present wins.
Family names are as prometheus_client reports them: counters without their `_total`.
"""

from __future__ import annotations

import re

# Gauges, taken as they are.
GAUGES: dict[str, tuple[str, ...]] = {
    "requests_running": ("vllm:num_requests_running",),
    "requests_waiting": ("vllm:num_requests_waiting",),
    # A 0-1 fraction despite "perc". gpu_cache_usage_perc: V0 and V1 until 0.12.
    "kv_cache_usage": ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"),
}

# Gauges split by one label, read one label value at a time: key -> (families, label, value).
# waiting_by_reason came in vLLM 0.20 (capacity + deferred = num_requests_waiting); before it
# the keys are absent. A reason a release does not print is absent too, never 0.
GAUGE_PARTS: dict[str, tuple[tuple[str, ...], str, str]] = {
    f"requests_waiting_{reason}": (("vllm:num_requests_waiting_by_reason",), "reason", reason)
    for reason in ("capacity", "deferred")
}

# Counters, summed over their other labels (finished_reason, reason) per engine. The agent
# sends most of them as per-second rates; the two prefix-cache counters only feed
# prefix_cache_hit_rate, and the two spec_decode ones also feed spec_acceptance_rate.
# gpu_prefix_cache_* counted blocks, prefix_cache_* counts tokens: both were renamed in the
# same release, so a hit rate never mixes the two units.
COUNTERS: dict[str, tuple[str, ...]] = {
    "preemptions": ("vllm:num_preemptions",),
    "prompt_tokens": ("vllm:prompt_tokens",),
    "generation_tokens": ("vllm:generation_tokens",),
    "requests_finished": ("vllm:request_success",),
    "admission_rejections": ("vllm:admission_rejections",),  # recent vLLM (0.32 has it)
    "prefix_cache_queries": ("vllm:prefix_cache_queries", "vllm:gpu_prefix_cache_queries"),
    "prefix_cache_hits": ("vllm:prefix_cache_hits", "vllm:gpu_prefix_cache_hits"),
    # Only with --speculative-config; V0 (spec_decode_num_*_tokens_total) has the same names.
    "spec_draft_tokens": ("vllm:spec_decode_num_draft_tokens",),
    "spec_accepted_tokens": ("vllm:spec_decode_num_accepted_tokens",),
}

# Counters split by one label, as GAUGE_PARTS. request_success's finished_reason: stop,
# length, abort in every release; error only in recent ones (0.10.2 lacks it), and V0 prints a
# reason only once a request has finished so. (repetition, in 0.32+, stays in the sum only.)
COUNTER_PARTS: dict[str, tuple[tuple[str, ...], str, str]] = {
    f"finished_{reason}": (("vllm:request_success",), "finished_reason", reason)
    for reason in ("stop", "length", "abort", "error")
}

# Counter -> the catalog rate key it is sent as.
RATES: dict[str, str] = {
    "preemptions": "preemptions_per_s",
    "prompt_tokens": "prompt_tokens_per_s",
    "generation_tokens": "generation_tokens_per_s",
    "requests_finished": "requests_finished_per_s",
    "admission_rejections": "admission_rejections_per_s",
    **{key: f"{key}_per_s" for key in COUNTER_PARTS},
    "spec_draft_tokens": "spec_draft_tokens_per_s",
    "spec_accepted_tokens": "spec_accepted_tokens_per_s",
}

HISTOGRAMS: dict[str, tuple[str, ...]] = {
    "ttft_seconds": ("vllm:time_to_first_token_seconds",),
    # time_per_output_token_seconds measured the same thing (V0, V1 until 0.12). Not to be
    # confused with request_time_per_output_token_seconds, a per-request average.
    "itl_seconds": ("vllm:inter_token_latency_seconds", "vllm:time_per_output_token_seconds"),
    "e2e_seconds": ("vllm:e2e_request_latency_seconds",),
    "queue_seconds": ("vllm:request_queue_time_seconds",),
    "prefill_seconds": ("vllm:request_prefill_time_seconds",),
    # Token counts, not seconds. iteration_tokens_total is a histogram despite its name.
    "iteration_tokens": ("vllm:iteration_tokens_total",),
    "prompt_length_tokens": ("vllm:request_prompt_tokens",),
    "generation_length_tokens": ("vllm:request_generation_tokens",),
    "prefill_kv_computed_tokens": ("vllm:request_prefill_kv_computed_tokens",),  # 0.13+
}

# Only with --enable-lora: a gauge whose value is the time it was last set and whose labels
# hold the adapters (comma-separated names) and max_lora. Each new label set is a new series
# and the old ones stay, so the newest one (highest value) is the current state. V0 printed
# it without LoRA too, with max_lora="0": that is no LoRA, so absent.
LORA_INFO = "vllm:lora_requests_info"
LORA_KEYS = {"lora_running": "running_lora_adapters", "lora_waiting": "waiting_lora_adapters"}
MAX_LORA_LABEL = "max_lora"

# Every gauge key a reading may hold, in the order the collector sends them.
GAUGE_KEYS = (*GAUGES, *GAUGE_PARTS, *LORA_KEYS)

# A gauge of value 1 whose labels carry the cache config (block_size, num_gpu_blocks, ...).
CACHE_CONFIG = "vllm:cache_config_info"

# Labels that say whose series it is, not what it measures.
ENGINE_LABEL = "engine"  # the data-parallel rank; absent before V1 added it
MODEL_LABEL = "model_name"
DEFAULT_ENGINE = "0"


def wanted_families() -> tuple[str, ...]:
    names = [CACHE_CONFIG, LORA_INFO]
    for table in (GAUGES, COUNTERS, HISTOGRAMS):
        for families in table.values():
            names.extend(families)
    for parts in (GAUGE_PARTS, COUNTER_PARTS):
        names.extend(family for families, _label, _value in parts.values()
                     for family in families)
    return tuple(dict.fromkeys(names))


def _wanted_line_pattern() -> re.Pattern[str]:
    # A HELP/TYPE line or a sample of a family we map. The suffixes are what the text format
    # adds to a family name; `_created` is left out on purpose (its own gauge family in V1).
    names = "|".join(re.escape(name) for name in wanted_families())
    return re.compile(
        rf"\n((?:# (?:HELP|TYPE) )?(?:{names})(?:_total|_bucket|_sum|_count)?[ \t{{][^\n]*)")


# The two patterns below find lines by the "\n" before them, so search "\n" + text; group 1 is
# the line, and a match's start is the line's offset in the text. (A leading literal lets the
# regex engine jump from newline to newline; `^` with re.MULTILINE tries every character,
# which cost 3-6 times as much on a 60 KB page.)

# Lines worth parsing: about a third of a vLLM 0.33 page (220 of 640 lines).
WANTED_LINE = _wanted_line_pattern()

# Lines that do not even look like a comment, a blank or `name{...} value` / `name value`:
# `$ curl ...`, `...`, an HTML error page. They are handed to the parser, which says why.
SUSPECT_LINE = re.compile(
    r"\n(?=[^#a-zA-Z_: \t\r\n]|[ \t\r]+[^ \t\r\n]|[a-zA-Z_:][a-zA-Z0-9_:]*+(?![ \t{]))([^\n]*)")
