from __future__ import annotations

import re

from tests.web.helpers import assert_sends_to_login, chart_lines, chart_metrics, page_config


def engine_path(engine) -> str:
    return f"/engines/{engine.id}/"


def test_it_sends_anonymous_visitors_to_the_login_page(page_fleet):
    assert_sends_to_login(engine_path(page_fleet.engine))


def test_an_unknown_engine_is_not_found(operator_client, page_fleet):
    assert operator_client.get("/engines/999999/").status_code == 404


def test_it_charts_load_cache_tokens_and_latency(operator_client, page_fleet):
    response = operator_client.get(engine_path(page_fleet.engine))
    assert response.status_code == 200
    assert {"engine.requests_running", "engine.requests_waiting", "engine.kv_cache_usage",
            "engine.prefix_cache_hit_rate", "engine.preemptions_per_s",
            "engine.prompt_tokens_per_s", "engine.generation_tokens_per_s",
            "engine.ttft_seconds", "engine.itl_seconds",
            "engine.e2e_seconds"} <= chart_metrics(response)


def test_each_latency_chart_draws_p50_p90_and_p99(operator_client, page_fleet):
    response = operator_client.get(engine_path(page_fleet.engine))
    for chart in ("ttft", "itl", "e2e"):
        lines = chart_lines(response, chart)
        assert [(line["quantile"], line["label"]) for line in lines] == [
            (0.5, "p50"), (0.9, "p90"), (0.99, "p99")]
        assert {line["entity"] for line in lines} == {str(page_fleet.engine.id)}


def test_it_shows_the_config_in_effect_as_a_table(operator_client, page_fleet):
    html = operator_client.get(engine_path(page_fleet.engine)).content.decode()
    row = re.search(r'<div data-config-key="max_num_seqs">.*?</div>', html, re.S).group(0)
    assert '<code class="v">256</code>' in row
    assert 'data-config-key="gpu_memory_utilization"' in html


def test_the_flags_read_from_the_servers_command_line_are_rows_of_their_own(
        operator_client, page_fleet):
    engine = page_fleet.engine
    engine.config = {**engine.config, "vllm_version": "0.33.0",
                     "args": {"max_num_batched_tokens": 4096, "enforce_eager": True}}
    engine.save()
    html = operator_client.get(engine_path(engine)).content.decode()
    row = re.search(r'<div data-config-key="args.max_num_batched_tokens">.*?</div>', html,
                    re.S).group(0)
    assert '<code class="v">4096</code>' in row
    assert 'data-config-key="args.enforce_eager"' in html
    assert 'data-config-key="args"' not in html and 'data-config-key="vllm_version"' in html


def test_it_shows_the_current_figures(operator_client, latest_samples):
    html = operator_client.get(engine_path(latest_samples.engine)).content.decode()
    assert 'data-field="requests_waiting" data-fmt="num">3<' in html
    assert 'data-field="kv_cache_usage" data-fmt="ratio">42%<' in html


def test_it_subscribes_to_its_engine_group(operator_client, page_fleet):
    config = page_config(operator_client.get(engine_path(page_fleet.engine)))
    assert config["groups"] == [f"engine:{page_fleet.engine.id}"]


def test_a_simulated_engine_is_labelled_simulated(operator_client, page_fleet):
    assert b">simulated</span>" in operator_client.get(engine_path(page_fleet.sim_engine)).content
    assert b">simulated</span>" not in operator_client.get(engine_path(page_fleet.engine)).content


def test_it_lists_only_its_own_hosts_gpus(operator_client, page_fleet):
    """An engine stored with another host's GPU UUID (before ingest refused one) shows the
    GPUs of its own host alone."""
    page_fleet.engine.gpu_uuids = ["GPU-a1", page_fleet.sim_gpu.uuid]
    page_fleet.engine.save(update_fields=["gpu_uuids"])
    response = operator_client.get(engine_path(page_fleet.engine))
    assert [g.uuid for g in response.context["gpus"]] == ["GPU-a1"]
