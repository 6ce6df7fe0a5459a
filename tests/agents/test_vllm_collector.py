"""VllmCollector: rates and histogram deltas between scrapes, restarts, failures, inventory.

Pages come through an injected fetch and time through an injected clock; the second page of a
pair is the first one with known increments added (tests/agents/vllm_samples.py), so every
expected figure is increment / dt, worked out here from the increments.
"""

from __future__ import annotations

import bisect
import json

import pytest

from agents.collectors.vllm import VllmCollector
from agents.protocol import wire_keys
from tests.agents.vllm_samples import (
    MALFORMED,
    REAL_0_32,
    bounds,
    bump,
    label_sets,
    observe,
    sample_text,
    series,
    set_value,
)

URL = "http://127.0.0.1:8000/metrics"
V0_33 = "v1-synthetic-vllm-0.33.0.txt"
DP2 = "v1-synthetic-vllm-0.33.0-dp2.txt"
TTFT = "vllm:time_to_first_token_seconds"


class Pages:
    """A fetch that answers each call with the next page, or raises it if it is an error."""

    def __init__(self, *pages: str | Exception) -> None:
        self._pages = iter(pages)
        self.calls: list[tuple[str, float]] = []

    def __call__(self, url: str, timeout: float) -> str:
        self.calls.append((url, timeout))
        page = next(self._pages)
        if isinstance(page, Exception):
            raise page
        return page


def _collector(*pages: str | Exception, times: tuple[float, ...] = (100.0, 102.5, 105.0, 110.0),
               warnings: list[str] | None = None, url: str = URL) -> VllmCollector:
    clock = iter(times)
    sink = warnings if warnings is not None else []
    return VllmCollector(url, fetch=Pages(*pages), clock=lambda: next(clock), warn=sink.append,
                         models_fetch=lambda url, timeout: '{"data": [{"owned_by": "vllm"}]}')


def _by_name(samples: list[dict]) -> dict[str, dict]:
    return {sample["name"]: sample for sample in samples}


@pytest.mark.parametrize("name", [V0_33, REAL_0_32])
def test_the_first_scrape_has_gauges_but_no_rates_or_histograms(name):
    text = sample_text(name)
    (first,) = _collector(text).collect()
    assert first == {"name": "vllm:8000/0", "up": 1,
                     "requests_running": series(text, "vllm:num_requests_running"),
                     "requests_waiting": series(text, "vllm:num_requests_waiting"),
                     "kv_cache_usage": series(text, "vllm:kv_cache_usage_perc"),
                     "requests_waiting_capacity": series(
                         text, "vllm:num_requests_waiting_by_reason", reason="capacity"),
                     "requests_waiting_deferred": series(
                         text, "vllm:num_requests_waiting_by_reason", reason="deferred")}


def test_rates_are_the_counter_increase_over_the_monotonic_interval():
    before = sample_text(V0_33)
    after = bump(before, "vllm:prompt_tokens_total", 300)
    after = bump(after, "vllm:generation_tokens_total", 1000)
    after = bump(after, "vllm:num_preemptions_total", 2)
    after = bump(after, "vllm:request_success_total", 3, finished_reason="stop")
    after = bump(after, "vllm:request_success_total", 1, finished_reason="length")
    after = bump(after, "vllm:admission_rejections_total", 5, reason="max_num_queued_reqs")
    collector = _collector(before, after, times=(100.0, 102.5))
    collector.collect()
    (sample,) = collector.collect()
    dt = 2.5
    assert sample["prompt_tokens_per_s"] == pytest.approx(300 / dt)
    assert sample["generation_tokens_per_s"] == pytest.approx(1000 / dt)
    assert sample["preemptions_per_s"] == pytest.approx(2 / dt)
    assert sample["requests_finished_per_s"] == pytest.approx((3 + 1) / dt)
    assert sample["admission_rejections_per_s"] == pytest.approx(5 / dt)


@pytest.mark.parametrize("name", [V0_33, REAL_0_32])
def test_histogram_deltas_are_per_bucket_with_one_more_count_than_bounds(name):
    before = sample_text(name)
    after = observe(before, TTFT, 0.09, times=2)  # lands in the le=0.1 bucket
    after = observe(after, TTFT, 0.3, times=1)
    after = observe(after, TTFT, 5000.0, times=4)  # above every bound: +Inf
    collector = _collector(before, after)
    collector.collect()
    (sample,) = collector.collect()
    le = bounds(before, TTFT)
    counts = [0] * (len(le) + 1)
    for value, times in ((0.09, 2), (0.3, 1), (5000.0, 4)):
        counts[bisect.bisect_left(le, value)] += times
    assert sample["ttft_seconds"]["le"] == le
    assert sample["ttft_seconds"]["counts"] == counts
    assert len(sample["ttft_seconds"]["counts"]) == len(le) + 1
    assert sample["ttft_seconds"]["sum"] == pytest.approx(2 * 0.09 + 0.3 + 4 * 5000.0)
    assert sum(sample["itl_seconds"]["counts"]) == 0  # nothing observed there


def test_prefix_cache_hit_rate_is_hits_over_queries_in_the_interval():
    before = sample_text(V0_33)
    after = bump(bump(before, "vllm:prefix_cache_queries_total", 400),
                 "vllm:prefix_cache_hits_total", 100)
    collector = _collector(before, after)
    collector.collect()
    assert collector.collect()[0]["prefix_cache_hit_rate"] == pytest.approx(100 / 400)


def test_no_prefix_cache_queries_in_the_interval_leaves_the_hit_rate_absent():
    text = sample_text(V0_33)
    collector = _collector(text, text)
    collector.collect()
    (sample,) = collector.collect()
    assert "prefix_cache_hit_rate" not in sample
    assert sample["prompt_tokens_per_s"] == 0.0  # a rate of nothing is still a rate


def test_a_counter_that_went_down_counts_from_zero_as_the_engine_restarted():
    before = sample_text(V0_33)
    after = set_value(before, "vllm:prompt_tokens_total", 50.0)
    collector = _collector(before, after, times=(100.0, 102.0))
    collector.collect()
    assert collector.collect()[0]["prompt_tokens_per_s"] == pytest.approx(50.0 / 2.0)


def _fresh_ttft(text: str, *observations: float) -> str:
    """The page of an engine whose TTFT histogram holds just these observations."""
    for labels in label_sets(text, TTFT + "_bucket"):
        text = set_value(text, TTFT + "_bucket", 0.0, le=labels["le"])
    text = set_value(set_value(text, TTFT + "_count", 0.0), TTFT + "_sum", 0.0)
    for value in observations:
        text = observe(text, TTFT, value)
    return text


def test_a_histogram_whose_buckets_went_down_restarted_and_counts_from_zero():
    before = sample_text(V0_33)
    after = _fresh_ttft(before, 0.05, 3.0)
    collector = _collector(before, after)
    collector.collect()
    histogram = collector.collect()[0]["ttft_seconds"]
    le = bounds(before, TTFT)
    counts = [0] * (len(le) + 1)
    counts[bisect.bisect_left(le, 0.05)] += 1
    counts[bisect.bisect_left(le, 3.0)] += 1
    assert histogram["counts"] == counts
    assert histogram["sum"] == pytest.approx(3.05)


def test_a_histogram_whose_sum_went_down_restarted_even_if_no_bucket_did():
    # Before: one slow request. After a restart: two fast ones, which fill every bucket the
    # slow one did, so only the sum shows the restart.
    text = sample_text(V0_33)
    collector = _collector(_fresh_ttft(text, 7.0), _fresh_ttft(text, 0.05, 0.05))
    collector.collect()
    histogram = collector.collect()[0]["ttft_seconds"]
    assert histogram["sum"] == pytest.approx(0.1)
    assert sum(histogram["counts"]) == 2


def test_a_clock_that_did_not_move_keeps_the_older_baseline():
    first = sample_text(V0_33)
    second = bump(first, "vllm:prompt_tokens_total", 100)
    third = bump(second, "vllm:prompt_tokens_total", 100)
    collector = _collector(first, second, third, times=(100.0, 100.0, 104.0))
    collector.collect()
    assert "prompt_tokens_per_s" not in collector.collect()[0]
    assert collector.collect()[0]["prompt_tokens_per_s"] == pytest.approx(200 / 4.0)


def test_changed_bucket_bounds_leave_the_histogram_out_for_one_interval():
    before = sample_text(V0_33)
    upgraded = before.replace(f'{TTFT}_bucket{{engine="0",le="0.001"',
                              f'{TTFT}_bucket{{engine="0",le="0.002"')
    later = observe(upgraded, TTFT, 0.0015)
    collector = _collector(before, upgraded, later)
    collector.collect()
    second = collector.collect()[0]
    assert "ttft_seconds" not in second
    assert "e2e_seconds" in second
    third = collector.collect()[0]
    assert third["ttft_seconds"]["le"][0] == 0.002
    assert third["ttft_seconds"]["counts"][0] == 1


def test_each_data_parallel_engine_has_its_own_name_and_rates():
    before = sample_text(DP2)
    after = bump(before, "vllm:generation_tokens_total", 500, engine="1")
    after = observe(after, TTFT, 0.2, engine="1")
    collector = _collector(before, after, times=(100.0, 101.0))
    assert [s["name"] for s in collector.collect()] == ["vllm:8000/0", "vllm:8000/1"]
    samples = _by_name(collector.collect())
    assert samples["vllm:8000/0"]["generation_tokens_per_s"] == 0.0
    assert samples["vllm:8000/1"]["generation_tokens_per_s"] == pytest.approx(500.0)
    assert sum(samples["vllm:8000/0"]["ttft_seconds"]["counts"]) == 0
    assert sum(samples["vllm:8000/1"]["ttft_seconds"]["counts"]) == 1
    for engine in ("0", "1"):
        assert samples[f"vllm:8000/{engine}"]["requests_running"] == series(
            before, "vllm:num_requests_running", engine=engine)


def test_an_unreachable_server_is_down_with_one_warning_line_naming_url_and_reason(capsys):
    collector = VllmCollector(URL, fetch=Pages(ConnectionRefusedError(111, "Connection refused"),
                                               ConnectionRefusedError(111, "Connection refused")))
    assert collector.collect() == [{"name": "vllm:8000/0", "up": 0}]
    assert collector.collect() == [{"name": "vllm:8000/0", "up": 0}]
    err = capsys.readouterr().err
    assert err.count("\n") == 1  # once, not every interval
    assert URL in err and "Connection refused" in err
    assert "Traceback" not in err


def test_a_failed_scrape_reports_every_engine_seen_before_as_down():
    collector = _collector(sample_text(DP2), TimeoutError("timed out"))
    collector.collect()
    assert collector.collect() == [{"name": "vllm:8000/0", "up": 0},
                                   {"name": "vllm:8000/1", "up": 0}]


def test_the_scrape_after_a_failure_differences_across_the_gap():
    before = sample_text(V0_33)
    after = observe(bump(before, "vllm:prompt_tokens_total", 600), TTFT, 0.2, times=3)
    warnings: list[str] = []
    collector = _collector(before, OSError("network is unreachable"), after,
                           times=(100.0, 104.0), warnings=warnings)
    collector.collect()
    collector.collect()
    (sample,) = collector.collect()
    assert sample["prompt_tokens_per_s"] == pytest.approx(600 / 4.0)
    assert sum(sample["ttft_seconds"]["counts"]) == 3  # no request lost to the gap
    assert len(warnings) == 2 and "recovered" in warnings[1]


def test_a_malformed_page_is_down_with_the_parse_reason():
    warnings: list[str] = []
    collector = _collector(sample_text(MALFORMED), warnings=warnings)
    assert collector.collect() == [{"name": "vllm:8000/0", "up": 0}]
    (warning,) = warnings
    assert URL in warning and "line 2" in warning and "$ curl" in warning


def test_a_server_without_vllm_metrics_is_up_without_metrics_and_says_why():
    text = sample_text(V0_33)
    warnings: list[str] = []
    collector = _collector(text[: text.index("# HELP vllm:")], warnings=warnings)
    assert collector.collect() == [{"name": "vllm:8000/0", "up": 1}]
    assert "--disable-log-stats" in warnings[0]


@pytest.mark.parametrize(("url", "port"), [("http://10.0.0.5:9000/metrics", 9000),
                                            ("http://vllm.internal/metrics", 80),
                                            ("https://vllm.internal/metrics", 443)])
def test_engine_names_carry_the_url_port_or_the_scheme_default(url, port):
    collector = _collector(sample_text(V0_33), url=url)
    assert collector.port == port
    assert collector.collect()[0]["name"] == f"vllm:{port}/0"


def test_a_url_that_is_not_http_is_refused_at_construction():
    with pytest.raises(ValueError, match="http"):
        VllmCollector("ftp://127.0.0.1/metrics")


def test_inventory_lists_model_config_and_index_of_every_engine():
    text = sample_text(DP2)
    collector = _collector(text)
    collector.collect()
    inventory = collector.inventory()
    assert [entry["name"] for entry in inventory] == ["vllm:8000/0", "vllm:8000/1"]
    configs = {labels.pop("engine"): labels
               for labels in label_sets(text, "vllm:cache_config_info")}
    for index, entry in enumerate(inventory):
        assert entry["url"] == URL
        assert entry["model"] == label_sets(text, "vllm:num_requests_running")[index]["model_name"]
        assert entry["config"] == configs[str(index)]
        assert entry["engine_index"] == index


def test_inventory_before_any_good_scrape_names_the_engine_collect_reports():
    collector = _collector(ConnectionRefusedError())
    (sample,) = collector.collect()
    assert collector.inventory() == [{"name": sample["name"], "url": URL, "model": None,
                                      "config": {}, "engine_index": 0,
                                      "simulated": False}]


@pytest.mark.parametrize("name", [V0_33, REAL_0_32])
def test_every_key_sent_is_in_the_catalog_and_the_sample_is_strict_json(name):
    before = sample_text(name)
    after = observe(bump(before, "vllm:prefix_cache_queries_total", 10), TTFT, 0.5)
    collector = _collector(before, after)
    collector.collect()
    (sample,) = collector.collect()
    catalog = wire_keys("engine")
    assert set(sample) - {"name"} <= set(catalog)
    for key, value in sample.items():
        if key != "name" and catalog[key].kind == "histogram":
            assert len(value["counts"]) == len(value["le"]) + 1
    json.dumps(sample, allow_nan=False)


def test_an_engine_is_marked_simulated_only_when_the_server_says_so():
    owners = {"vllm": False, "pitwall-sim": True}
    for owner, simulated in owners.items():
        asked: list[str] = []

        def models(url: str, timeout: float, owner=owner, asked=asked) -> str:
            asked.append(url)
            return json.dumps({"data": [{"id": "m", "owned_by": owner}]})

        collector = VllmCollector(URL, fetch=Pages(sample_text(V0_33), sample_text(V0_33)),
                                  clock=iter((1.0, 2.0)).__next__, models_fetch=models)
        collector.collect()
        collector.collect()
        assert [e["simulated"] for e in collector.inventory()] == [simulated]
        assert asked == ["http://127.0.0.1:8000/v1/models"]  # asked once, not every interval
