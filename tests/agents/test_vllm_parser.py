"""parse_metrics over the reference /metrics samples: names, engines, renames, malformed text.

Expected values are read from the same files by a full, independent prometheus_client parse
(tests/agents/vllm_samples.py), not copied from the code under test.
"""

from __future__ import annotations

import pytest

from agents.collectors.vllm_names import (
    COUNTER_PARTS,
    COUNTERS,
    GAUGE_PARTS,
    GAUGES,
    HISTOGRAMS,
)
from agents.collectors.vllm_parse import VllmMetricsError, parse_metrics
from tests.agents.vllm_samples import (
    MALFORMED,
    REAL_0_32,
    bounds,
    defined_families,
    label_sets,
    sample_names,
    sample_text,
    series,
    set_value,
    without,
)

V0 = "v0-sample.txt"
V0_10 = "v1-synthetic-vllm-0.10.2.txt"
V0_33 = "v1-synthetic-vllm-0.33.0.txt"
DP2 = "v1-synthetic-vllm-0.33.0-dp2.txt"
E2E_INF = 'vllm:e2e_request_latency_seconds_bucket{engine="0",le="+Inf"'
E2E_COUNT = "vllm:e2e_request_latency_seconds_count"


def _histogram_matches_file(text: str, reading, family: str, engine: str) -> None:
    assert reading.source == family
    assert list(reading.le) == bounds(text, family, engine)
    finite = [series(text, family + "_bucket", engine=engine, le=_le(bound))
              for bound in reading.le]
    assert list(reading.cumulative) == [*finite, series(text, family + "_bucket", engine=engine,
                                                        le="+Inf")]
    assert reading.sum == series(text, family + "_sum", engine=engine)


def _le(bound: float) -> str:
    return repr(float(bound))  # how prometheus_client writes a bound: 0.001, 10.0


@pytest.mark.parametrize("name", [n for n in sample_names() if n != MALFORMED])
def test_every_wellformed_sample_parses_into_engines_with_running_requests(name):
    text = sample_text(name)
    engines = parse_metrics(text)
    assert engines
    for engine, readings in engines.items():
        labels = {"engine": engine} if "engine" in label_sets(
            text, "vllm:num_requests_running")[0] else {}
        assert readings.gauges["requests_running"] == series(
            text, "vllm:num_requests_running", **labels)


def test_the_docs_excerpt_is_refused_naming_the_line_and_what_is_wrong():
    text = sample_text(MALFORMED)
    first_bad = next(number for number, line in enumerate(text.splitlines(), 1)
                     if line.startswith("$"))
    with pytest.raises(VllmMetricsError) as refused:
        parse_metrics(text)
    message = str(refused.value)
    assert f"line {first_bad}:" in message
    assert "invalid metric name" in message
    assert "$ curl http://0.0.0.0:8000/metrics" in message


def test_v0_names_map_to_the_catalog_keys_on_engine_0():
    text = sample_text(V0)
    engines = parse_metrics(text)
    assert list(engines) == ["0"]  # V0 has no engine label
    v0 = engines["0"]
    assert v0.model == label_sets(text, "vllm:num_requests_running")[0]["model_name"]
    assert v0.gauges == {
        "requests_running": series(text, "vllm:num_requests_running"),
        "requests_waiting": series(text, "vllm:num_requests_waiting"),
        "kv_cache_usage": series(text, "vllm:gpu_cache_usage_perc"),
    }  # and nothing from num_requests_swapped / cpu_cache_usage_perc
    assert {key: c.value for key, c in v0.counters.items()} == {
        "preemptions": series(text, "vllm:num_preemptions_total"),
        "prompt_tokens": series(text, "vllm:prompt_tokens_total"),
        "generation_tokens": series(text, "vllm:generation_tokens_total"),
        "requests_finished": series(text, "vllm:request_success_total"),
        "finished_stop": series(text, "vllm:request_success_total", finished_reason="stop"),
    }  # V0 had no admission_rejections and no prefix-cache counters: absent; and it prints a
    # finished_reason only once a request finished so (this page has only "stop")


def test_the_v0_cache_config_becomes_engine_0s_config():
    text = sample_text(V0)
    (labels,) = label_sets(text, "vllm:cache_config_info")
    assert parse_metrics(text)["0"].config == labels


def test_new_names_win_over_the_deprecated_ones_printed_beside_them():
    # Make every deprecated series differ from its replacement, so the test tells them apart.
    text = sample_text(V0_10)
    text = set_value(text, "vllm:gpu_cache_usage_perc", 0.99)
    text = set_value(text, "vllm:gpu_prefix_cache_hits_total", 7.0)
    text = set_value(text, "vllm:gpu_prefix_cache_queries_total", 11.0)
    text = set_value(text, "vllm:time_per_output_token_seconds_sum", 1.5)
    readings = parse_metrics(text)["0"]
    assert readings.gauges["kv_cache_usage"] == series(text, "vllm:kv_cache_usage_perc")
    assert readings.counters["prefix_cache_hits"].value == series(
        text, "vllm:prefix_cache_hits_total")
    assert readings.counters["prefix_cache_queries"].value == series(
        text, "vllm:prefix_cache_queries_total")
    _histogram_matches_file(text, readings.histograms["itl_seconds"],
                            "vllm:inter_token_latency_seconds", "0")


def test_deprecated_names_are_read_when_the_new_ones_are_missing():
    text = without(sample_text(V0_10), "vllm:kv_cache_usage_perc", "vllm:prefix_cache_",
                   "vllm:inter_token_latency_seconds")
    readings = parse_metrics(text)["0"]
    assert readings.gauges["kv_cache_usage"] == series(text, "vllm:gpu_cache_usage_perc")
    assert readings.counters["prefix_cache_hits"].source == "vllm:gpu_prefix_cache_hits"
    assert readings.counters["prefix_cache_hits"].value == series(
        text, "vllm:gpu_prefix_cache_hits_total")
    _histogram_matches_file(text, readings.histograms["itl_seconds"],
                            "vllm:time_per_output_token_seconds", "0")


def test_a_single_engine_page_fills_every_engine_key():
    text = sample_text(V0_33)
    engines = parse_metrics(text)
    assert list(engines) == ["0"]
    readings = engines["0"]
    assert readings.model == "Qwen/Qwen3-8B" == label_sets(
        text, "vllm:kv_cache_usage_perc")[0]["model_name"]
    assert set(readings.gauges) == set(GAUGES) | set(GAUGE_PARTS)
    # No spec_decode counters without --speculative-config, which this page was not run with.
    spec = {"spec_draft_tokens", "spec_accepted_tokens"}
    assert set(readings.counters) == set(COUNTERS) - spec | set(COUNTER_PARTS)
    assert readings.counters["requests_finished"].value == series(
        text, "vllm:request_success_total", engine="0")  # summed over finished_reason
    assert readings.counters["admission_rejections"].value == series(
        text, "vllm:admission_rejections_total")  # summed over reason
    families = {"ttft_seconds": "vllm:time_to_first_token_seconds",
                "itl_seconds": "vllm:inter_token_latency_seconds",
                "e2e_seconds": "vllm:e2e_request_latency_seconds",
                "queue_seconds": "vllm:request_queue_time_seconds",
                "prefill_seconds": "vllm:request_prefill_time_seconds",
                "iteration_tokens": "vllm:iteration_tokens_total",
                "prompt_length_tokens": "vllm:request_prompt_tokens",
                "generation_length_tokens": "vllm:request_generation_tokens",
                "prefill_kv_computed_tokens": "vllm:request_prefill_kv_computed_tokens"}
    assert set(readings.histograms) == set(families)
    for key, family in families.items():
        _histogram_matches_file(text, readings.histograms[key], family, "0")


def test_each_data_parallel_engine_is_an_engine_with_its_own_values():
    text = sample_text(DP2)
    engines = parse_metrics(text)
    assert list(engines) == ["0", "1"]
    for engine, readings in engines.items():
        assert readings.gauges == {
            "requests_running": series(text, "vllm:num_requests_running", engine=engine),
            "requests_waiting": series(text, "vllm:num_requests_waiting", engine=engine),
            "kv_cache_usage": series(text, "vllm:kv_cache_usage_perc", engine=engine),
            **{key: series(text, family, engine=engine, **{label: value})
               for key, ((family,), label, value) in GAUGE_PARTS.items()},
        }
        assert readings.counters["generation_tokens"].value == series(
            text, "vllm:generation_tokens_total", engine=engine)
        assert readings.counters["requests_finished"].value == series(
            text, "vllm:request_success_total", engine=engine)
        _histogram_matches_file(text, readings.histograms["ttft_seconds"],
                                "vllm:time_to_first_token_seconds", engine)
    assert engines["0"].gauges != engines["1"].gauges  # the file does tell them apart


def test_series_without_an_engine_label_count_once_on_engine_0():
    engines = parse_metrics(sample_text(DP2))
    assert "admission_rejections" in engines["0"].counters
    assert "admission_rejections" not in engines["1"].counters


def test_each_engine_gets_its_own_cache_config_without_engine_and_model():
    # Give engine 1 a config of its own, so that mixing the two up would show.
    lines = sample_text(DP2).splitlines()
    for number, line in enumerate(lines):
        if line.startswith("vllm:cache_config_info{") and 'engine="1"' in line:
            lines[number] = line.replace('num_gpu_blocks="', 'num_gpu_blocks="1')
    text = "\n".join(lines)
    engines = parse_metrics(text)
    for labels in label_sets(text, "vllm:cache_config_info"):
        engine = labels.pop("engine")
        assert engines[engine].config == labels
    assert engines["0"].config["num_gpu_blocks"] != engines["1"].config["num_gpu_blocks"]


def test_a_page_without_vllm_metrics_has_no_engines():
    text = sample_text(V0_33)
    assert parse_metrics(text[: text.index("# HELP vllm:")]) == {}


def test_an_html_error_page_is_refused_naming_its_first_line():
    with pytest.raises(VllmMetricsError, match=r"line 1: .*<html>"):
        parse_metrics("<html><body>502 Bad Gateway</body></html>\n")


def test_a_broken_line_in_a_mapped_family_is_refused_with_its_line_number():
    lines = sample_text(V0_33).splitlines()
    number = next(n for n, line in enumerate(lines, 1)
                  if line.startswith("vllm:kv_cache_usage_perc{"))
    lines[number - 1] = lines[number - 1].rsplit(" ", 1)[0] + " not-a-number"
    with pytest.raises(VllmMetricsError, match=rf"line {number}: .*not-a-number"):
        parse_metrics("\n".join(lines))


def test_a_bucket_bound_that_is_not_a_number_is_refused_naming_the_family():
    text = sample_text(V0_33).replace('le="0.001"', 'le="fast"')
    with pytest.raises(VllmMetricsError, match="time_to_first_token_seconds.*'fast'"):
        parse_metrics(text)


def test_a_histogram_cut_before_its_inf_bucket_uses_its_count_line():
    text = without(sample_text(V0_33), E2E_INF)
    # 5 observations above the last finite bound, so +Inf differs from that bucket.
    text = set_value(text, E2E_COUNT, series(text, E2E_COUNT) + 5)
    histogram = parse_metrics(text)["0"].histograms["e2e_seconds"]
    assert histogram.cumulative[-1] == series(text, E2E_COUNT)
    assert histogram.cumulative[-1] == histogram.cumulative[-2] + 5


def test_a_histogram_with_neither_inf_bucket_nor_count_is_absent():
    text = without(sample_text(V0_33), E2E_INF, E2E_COUNT)
    histograms = parse_metrics(text)["0"].histograms
    assert "e2e_seconds" not in histograms
    assert "ttft_seconds" in histograms


def test_a_not_a_number_gauge_is_absent_rather_than_sent():
    text = set_value(sample_text(V0_33), "vllm:kv_cache_usage_perc", float("nan"))
    readings = parse_metrics(text)["0"]
    assert "kv_cache_usage" not in readings.gauges
    assert "requests_running" in readings.gauges


@pytest.mark.parametrize("defs_file", ["defs_v0_0.6.6.post1.tsv", "defs_0.10.2.tsv",
                                       "defs_0.11.0.tsv", "defs_0.13.0.tsv",
                                       "defs_0.20.0.tsv", "defs_0.33.0.tsv"])
def test_every_release_defines_a_source_for_each_mapped_key(defs_file):
    defined = defined_families(defs_file)
    # What the release notes say some releases lack: admission control came in 0.33, the
    # prefix-cache counters in V1 (V0 had only a block hit-rate gauge).
    missing = {"admission_rejections"} if defs_file != "defs_0.33.0.tsv" else set()
    if defs_file.startswith("defs_v0"):
        missing |= {"prefix_cache_queries", "prefix_cache_hits"}
    else:  # V1 defines these in vllm/v1/spec_decode/metrics.py, not in loggers.py (the defs)
        missing |= {"spec_draft_tokens", "spec_accepted_tokens"}
    if defs_file in ("defs_v0_0.6.6.post1.tsv", "defs_0.10.2.tsv", "defs_0.11.0.tsv"):
        missing |= {"prefill_kv_computed_tokens"}  # came in 0.13
    if defs_file not in ("defs_0.20.0.tsv", "defs_0.33.0.tsv"):
        missing |= set(GAUGE_PARTS)  # num_requests_waiting_by_reason came in 0.20
    parts = {key: sources for key, (sources, _label, _value) in
             {**GAUGE_PARTS, **COUNTER_PARTS}.items()}
    for key, sources in {**GAUGES, **COUNTERS, **HISTOGRAMS, **parts}.items():
        assert (key in missing) != any(source in defined for source in sources), key


def test_the_preferred_name_of_every_key_is_the_newest_releases_name():
    defined = defined_families("defs_0.33.0.tsv")
    for key, sources in {**GAUGES, **COUNTERS, **HISTOGRAMS}.items():
        if key.startswith("spec_"):  # not in loggers.py: V0's names, still V1's (see above)
            assert sources[0] in defined_families("defs_v0_0.6.6.post1.tsv")
            continue
        assert sources[0] in defined


def test_a_memo_gives_the_same_readings_and_keeps_only_the_last_pages_blocks():
    first = sample_text(DP2)
    second = set_value(first, "vllm:num_requests_running", 40.0, engine="1")
    memo: dict = {}
    parse_metrics(first, memo)
    assert parse_metrics(second, memo) == parse_metrics(second)
    assert parse_metrics(second, memo)["1"].gauges["requests_running"] == 40.0
    alone: dict = {}
    parse_metrics(second, alone)
    assert memo.keys() == alone.keys()


def test_the_real_0_32_capture_gives_every_catalog_key():
    text = sample_text(REAL_0_32)
    [(engine, readings)] = parse_metrics(text).items()
    assert engine == "0"
    assert readings.gauges == {
        "requests_running": series(text, "vllm:num_requests_running"),
        "requests_waiting": series(text, "vllm:num_requests_waiting"),
        "kv_cache_usage": series(text, "vllm:kv_cache_usage_perc"),
        **{key: series(text, family, **{label: value})
           for key, ((family,), label, value) in GAUGE_PARTS.items()}}
    # Served without --speculative-config and --enable-lora: no spec_decode, no LoRA keys.
    spec = {"spec_draft_tokens", "spec_accepted_tokens"}
    assert readings.counters.keys() == set(COUNTERS) - spec | set(COUNTER_PARTS)
    assert readings.counters["requests_finished"].value == series(
        text, "vllm:request_success_total")
    assert readings.histograms.keys() == set(HISTOGRAMS)
    for key, family in (("ttft_seconds", "vllm:time_to_first_token_seconds"),
                        ("itl_seconds", "vllm:inter_token_latency_seconds"),
                        ("e2e_seconds", "vllm:e2e_request_latency_seconds"),
                        ("queue_seconds", "vllm:request_queue_time_seconds"),
                        ("prefill_seconds", "vllm:request_prefill_time_seconds")):
        _histogram_matches_file(text, readings.histograms[key], family, "0")
        assert readings.histograms[key].cumulative[-1] > 0  # captured after load
    assert readings.config["block_size"] == label_sets(text, "vllm:cache_config_info")[0][
        "block_size"]
