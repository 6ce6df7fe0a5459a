"""parse_families reuses prometheus_client's names and labels for blocks it parsed before and
reads only their values: checked against a full prometheus_client parse of the same text."""

from __future__ import annotations

import math

import pytest
from prometheus_client.parser import text_string_to_metric_families

from agents.collectors import vllm_text
from agents.collectors.vllm_text import VllmMetricsError, parse_families
from tests.agents.vllm_samples import sample_text

# A label value with a space, a `}`, a comma and an escaped quote: the value follows the block.
MODEL = r'model_name="my model} x, \"q\""'

PAGE = """# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",%(model)s} %(running)s
vllm:num_requests_running{engine="1",%(model)s} %(running1)s %(stamp)s
# HELP vllm:kv_cache_usage_perc KV-cache usage. 1 means 100 percent usage.
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",%(model)s} %(kv)s
# TYPE vllm:prompt_tokens counter
vllm:prompt_tokens_total{engine="0",%(model)s} %(prompt)s
# TYPE vllm:e2e_request_latency_seconds histogram
vllm:e2e_request_latency_seconds_bucket{engine="0",le="0.5",%(model)s} %(b1)s
vllm:e2e_request_latency_seconds_bucket{engine="0",le="+Inf",%(model)s} %(b2)s
vllm:e2e_request_latency_seconds_sum{engine="0",%(model)s} %(sum)s
vllm:e2e_request_latency_seconds_count{engine="0",%(model)s} %(b2)s
"""

VALUES = [
    {"running": "3", "running1": "1", "stamp": "1700000000000", "kv": "0.25", "prompt": "10",
     "b1": "1", "b2": "2", "sum": "0.75"},
    {"running": "4.0", "running1": "NaN", "stamp": "1700000001500", "kv": "1e-3",
     "prompt": "1.2e+06", "b1": "5", "b2": "+Inf", "sum": "-Inf"},
    {"running": "-0", "running1": "+7", "stamp": "1700000002000", "kv": "nan", "prompt": "inf",
     "b1": "Infinity", "b2": "12", "sum": "3.5E2"},
]


def page(values: dict[str, str]) -> str:
    return PAGE % {"model": MODEL, **values}


def full_parse(text: str) -> dict[str, list[tuple]]:
    """prometheus_client's own reading of the whole text, NaN made comparable."""
    return {family.name: [_comparable(s) for s in family.samples]
            for family in text_string_to_metric_families(text)}


def _comparable(sample) -> tuple:
    value = "nan" if isinstance(sample.value, float) and math.isnan(sample.value) else sample.value
    return (sample.name, sample.labels, value, type(sample.value), sample.timestamp)


def parser_calls(monkeypatch) -> list[str]:
    """Records every text that vllm_text hands to prometheus_client."""
    calls: list[str] = []

    def counting(text: str):
        calls.append(text)
        return text_string_to_metric_families(text)

    monkeypatch.setattr(vllm_text, "text_string_to_metric_families", counting)
    return calls


def test_a_page_seen_again_with_new_values_reads_them_as_prometheus_client_does(monkeypatch):
    memo: dict = {}
    parse_families(page(VALUES[0]), memo)
    calls = parser_calls(monkeypatch)
    for values in VALUES[1:]:
        text = page(values)
        got = parse_families(text, memo)
        assert {name: [_comparable(s) for s in samples] for name, samples in got.items()} == \
            full_parse(text)
    assert calls == []  # the values were read without the parser: the cache was used
    labels = got["vllm:num_requests_running"][0].labels
    assert labels["model_name"] == 'my model} x, "q"'


def test_a_real_page_with_every_value_changed_reads_as_a_full_parse():
    text = sample_text("v1-synthetic-vllm-0.33.0-dp2.txt")
    changed = "\n".join(_next_value(line) for line in text.splitlines()) + "\n"
    memo: dict = {}
    parse_families(text, memo)
    got = parse_families(changed, memo)
    expected = full_parse(changed)
    assert got  # the page has families we map
    for name, samples in got.items():
        assert [_comparable(s) for s in samples] == expected[name]


def _next_value(line: str) -> str:
    if line.startswith("#") or " " not in line:
        return line
    identity, _, value = line.rpartition(" ")
    return f"{identity} {float(value) + 1.5}"


@pytest.mark.parametrize("odd", [
    'vllm:num_requests_running{engine="0", model_name="m"}\t%s',  # a tab, a space in the block
    'vllm:num_requests_running{engine="0",model_name="m"}  %s',  # two spaces before the value
    'vllm:num_requests_running{engine="0",model_name="m"} %s 17 18',  # three tokens
])
def test_a_line_the_fast_path_cannot_split_goes_to_the_full_parser(monkeypatch, odd):
    header = "# TYPE vllm:num_requests_running gauge\n"
    memo: dict = {}
    parse_families(header + odd % "1" + "\n", memo)
    calls = parser_calls(monkeypatch)
    text = header + odd % "2" + "\n"
    got = parse_families(text, memo)
    assert calls  # prometheus_client read it again
    assert [_comparable(s) for s in got["vllm:num_requests_running"]] == \
        full_parse(text)["vllm:num_requests_running"]


@pytest.mark.parametrize("bad", ["1_0", "abc", "0x10"])
def test_a_bad_value_on_a_known_line_is_refused_naming_the_line(bad):
    good = page(VALUES[0])
    memo: dict = {}
    parse_families(good, memo)
    text = good.replace(' 0.25\n', f' {bad}\n')
    number = next(n for n, line in enumerate(text.splitlines(), 1) if line.endswith(f" {bad}"))
    with pytest.raises(VllmMetricsError) as refused:
        parse_families(text, memo)
    assert f"line {number}:" in str(refused.value)
    assert "vllm:kv_cache_usage_perc{engine=" in str(refused.value)


@pytest.mark.parametrize("where", [0, 3])
def test_a_line_that_is_no_metric_is_refused_with_its_line_number(where):
    lines = page(VALUES[0]).splitlines()
    lines.insert(where, "<html>Bad Gateway</html>")
    with pytest.raises(VllmMetricsError) as refused:
        parse_families("\n".join(lines) + "\n", {})
    assert f"line {where + 1}:" in str(refused.value)
    assert "Bad Gateway" in str(refused.value)
