"""The simulated vLLM server over real HTTP: its /metrics against vLLM 0.33's, its endpoints."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from agents.sim.engine_model import EngineConfig
from agents.sim.vllm_cli import main, parse_args, parse_known
from agents.sim.vllm_exposition import cache_config_labels
from agents.sim.vllm_server import SimOptions, SimVllm, start
from tests.support.polling import wait_until

SAMPLES = Path(__file__).parent / "fixtures" / "vllm-metrics"
SAMPLE = "v1-synthetic-vllm-0.33.0.txt"
SAMPLE_DP2 = "v1-synthetic-vllm-0.33.0-dp2.txt"
STATE_KEYS = {"simulated", "pid", "gpu_indices", "gpu_memory_utilization",
              "weights_bytes_per_gpu", "kv_cache_usage", "busy_fraction", "requests_running",
              "requests_waiting",
              "processes", "cpus", "cpu_throttled_pct"}
REPO = Path(__file__).resolve().parents[2]
# The tests that serve HTTP: the simulated vLLM in threads of its own, or as a process.
starts_a_server = pytest.mark.slow(seconds=1)


def options(**engine: Any) -> SimOptions:
    # The samples come from Qwen3-8B with max_model_len 32768 (the token-count buckets
    # depend on it); no synthetic load, so only the test's requests move the counters.
    settings = {"model": "Qwen/Qwen3-8B", "max_model_len": 32768, **engine}
    return SimOptions(engine=EngineConfig(**settings), port=0, load=0.0, seed=1)


@pytest.fixture
def sim_vllm_url() -> Iterator[str]:
    running = start(options())
    yield f"http://127.0.0.1:{running.port}"
    running.close()


def get(url: str) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=30) as reply:
            return reply.status, reply.read()
    except urllib.error.HTTPError as error:
        return error.code, error.read()


def post(url: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    request = urllib.request.Request(url, json.dumps(body).encode(),
                                     {"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=60) as reply:
            return reply.status, json.loads(reply.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


def complete(base: str, **body: Any) -> dict[str, Any]:
    status, reply = post(f"{base}/v1/completions", {"model": "Qwen/Qwen3-8B", **body})
    assert status == 200, reply
    return reply


def scrape(base: str) -> str:
    status, body = get(f"{base}/metrics")
    assert status == 200
    return body.decode()


def families(text: str) -> dict[str, tuple[str, str, frozenset[str]]]:
    """Family name -> (type, HELP, label names), as prometheus_client parses the text."""
    return {f.name: (f.type, f.documentation,
                     frozenset(k for s in f.samples for k in s.labels if k != "le"))
            for f in text_string_to_metric_families(text)}


def buckets(text: str) -> dict[str, list[str]]:
    """Histogram -> the `le` bounds of its first series, in order."""
    out: dict[str, list[str]] = {}
    for family in text_string_to_metric_families(text):
        if family.type == "histogram":
            first = family.samples[0].labels
            out[family.name] = [s.labels["le"] for s in family.samples
                                if s.name.endswith("_bucket")
                                and {**s.labels, "le": ""} == {**first, "le": ""}]
    return out


def engine_labels(text: str) -> dict[str, set[str]]:
    return {f.name: {s.labels["engine"] for s in f.samples if "engine" in s.labels}
            for f in text_string_to_metric_families(text)}


def value(text: str, sample: str, **labels: str) -> float:
    return sum(s.value for f in text_string_to_metric_families(text) for s in f.samples
               if s.name == sample and labels.items() <= s.labels.items())


def exercise(base: str) -> str:
    """Touch the endpoints vLLM's http_* series label, then scrape."""
    complete(base, prompt="The pit wall calls the stop.", max_tokens=3)
    assert get(f"{base}/v1/models")[0] == 200
    return scrape(base)


@starts_a_server
def test_metrics_have_exactly_the_families_types_help_and_labels_of_vllm_0_33(sim_vllm_url):
    mine, vllm = families(exercise(sim_vllm_url)), families((SAMPLES / SAMPLE).read_text())
    assert set(mine) == set(vllm)
    assert {n: f for n, f in mine.items() if f != vllm[n]} == {}


@starts_a_server
def test_every_histogram_has_the_bucket_bounds_of_vllm_0_33(sim_vllm_url):
    mine, vllm = buckets(exercise(sim_vllm_url)), buckets((SAMPLES / SAMPLE).read_text())
    assert mine == vllm


@starts_a_server
def test_token_count_buckets_follow_max_model_len_as_in_vllm():
    running = start(options(max_model_len=8192))
    try:
        bounds = buckets(exercise(f"http://127.0.0.1:{running.port}"))
    finally:
        running.close()
    assert [float(b) for b in bounds["vllm:request_prompt_tokens"][:-1]][-3:] == [
        1000.0, 2000.0, 5000.0]


@starts_a_server
def test_data_parallel_2_labels_every_engine_series_engine_0_and_engine_1():
    running = start(SimOptions(**{**vars(options()), "data_parallel_size": 2}))
    try:
        text = exercise(f"http://127.0.0.1:{running.port}")
    finally:
        running.close()
    vllm = (SAMPLES / SAMPLE_DP2).read_text()
    assert engine_labels(text) == engine_labels(vllm)
    assert families(text) == families(vllm)
    assert {"0", "1"} in engine_labels(text).values()


def test_closed_loop_clients_are_shared_among_the_data_parallel_ranks():
    opts = SimOptions(**{**vars(options()), "data_parallel_size": 2, "clients": 5,
                         "client_outside_s": 0.2})
    sim = SimVllm(opts, clock=lambda: 100.0)
    sim.tick()
    assert [engine.load.clients for engine in sim.engines] == [3, 2]
    assert all(engine.load.closed_loop for engine in sim.engines)


@starts_a_server
def test_a_completion_answers_in_openai_format_and_moves_the_counters(sim_vllm_url):
    before = scrape(sim_vllm_url)
    reply = complete(sim_vllm_url, prompt=list(range(100, 137)), max_tokens=7)
    # The HTTP counters are recorded after the response is written, as vLLM's instrumentator
    # does: a scrape at once may come before them.
    completions = {"handler": "/v1/completions", "status": "2xx"}

    def counted() -> str | None:
        text = scrape(sim_vllm_url)
        moved = value(text, "http_requests_total", **completions) > value(
            before, "http_requests_total", **completions)
        return text if moved else None

    after = wait_until(counted, 10, lambda: "the completion was never counted")
    assert reply["object"] == "text_completion" and reply["model"] == "Qwen/Qwen3-8B"
    assert reply["usage"] == {"prompt_tokens": 37, "completion_tokens": 7, "total_tokens": 44,
                              "prompt_tokens_details": None}
    choice = reply["choices"][0]
    assert choice["finish_reason"] == "length" and choice["text"]

    def moved(sample: str, **labels: str) -> float:
        return value(after, sample, **labels) - value(before, sample, **labels)

    assert moved("vllm:prompt_tokens_total") == 37
    assert moved("vllm:generation_tokens_total") == 7
    assert moved("vllm:request_success_total", finished_reason="length") == 1
    assert moved("vllm:time_to_first_token_seconds_count") == 1
    assert moved("vllm:inter_token_latency_seconds_count") == 6
    assert moved("vllm:e2e_request_latency_seconds_count") == 1
    assert moved("http_requests_total", handler="/v1/completions", status="2xx") == 1


@starts_a_server
def test_a_repeated_prompt_hits_the_prefix_cache(sim_vllm_url):
    prompt = "You are the race engineer. " * 40
    complete(sim_vllm_url, prompt=prompt, max_tokens=2)
    before = scrape(sim_vllm_url)
    complete(sim_vllm_url, prompt=prompt, max_tokens=2)
    after = scrape(sim_vllm_url)
    hits = value(after, "vllm:prefix_cache_hits_total") - value(
        before, "vllm:prefix_cache_hits_total")
    queries = value(after, "vllm:prefix_cache_queries_total") - value(
        before, "vllm:prefix_cache_queries_total")
    assert 0 < hits < queries


@starts_a_server
def test_a_model_the_server_does_not_serve_is_404_and_a_too_long_request_is_400(sim_vllm_url):
    assert post(f"{sim_vllm_url}/v1/completions", {"model": "other", "prompt": "hi"})[0] == 404
    status, reply = post(f"{sim_vllm_url}/v1/completions",
                         {"prompt": [1] * 30000, "max_tokens": 5000})
    assert status == 400 and "maximum context length" in reply["error"]["message"]


@starts_a_server
def test_models_lists_the_served_model_owned_by_the_simulator(sim_vllm_url):
    status, body = get(f"{sim_vllm_url}/v1/models")
    model = json.loads(body)["data"][0]
    assert status == 200 and model["id"] == "Qwen/Qwen3-8B"
    assert model["owned_by"] == "pitwall-sim"


@starts_a_server
def test_health_is_503_while_starting_then_200():
    now = [100.0]
    running = start(SimOptions(**{**vars(options()), "startup_seconds": 30.0}),
                    clock=lambda: now[0])
    base = f"http://127.0.0.1:{running.port}"
    try:
        starting = get(f"{base}/health")[0], get(f"{base}/metrics")[0]
        now[0] += 31.0
        ready = get(f"{base}/health")[0], get(f"{base}/metrics")[0]
    finally:
        running.close()
    assert starting == (503, 503)
    assert ready == (200, 200)


@starts_a_server
def test_sim_state_has_exactly_the_documented_keys():
    opts = SimOptions(**{**vars(options(tensor_parallel_size=2)), "gpu_indices": [2, 3]})
    running = start(opts)
    try:
        status, body = get(f"http://127.0.0.1:{running.port}/sim/state")
    finally:
        running.close()
    state = json.loads(body)
    assert status == 200 and set(state) == STATE_KEYS
    assert state["simulated"] is True and state["pid"] == os.getpid()
    assert state["gpu_indices"] == [2, 3]
    assert state["weights_bytes_per_gpu"] == opts.engine.weights_bytes_per_gpu
    assert 0.0 <= state["kv_cache_usage"] <= 1.0 and 0.0 <= state["busy_fraction"] <= 1.0


def test_flags_are_spelled_as_vllm_serve_spells_them():
    opts = parse_args(["--port", "8001", "--max-num-seqs", "7", "--max-num-batched-tokens",
                       "2048", "--gpu-memory-utilization", "0.5", "--tensor-parallel-size", "2",
                       "--data-parallel-size", "2", "--block-size", "32", "--max-model-len",
                       "4096", "--gpu-indices", "4,5,6,7", "--load", "0", "--seed", "9"])
    assert (opts.port, opts.data_parallel_size, opts.gpu_indices, opts.load, opts.seed) == (
        8001, 2, [4, 5, 6, 7], 0.0, 9)
    assert opts.engine == EngineConfig(max_num_seqs=7, max_num_batched_tokens=2048,
                                       gpu_memory_utilization=0.5, tensor_parallel_size=2,
                                       block_size=32, max_model_len=4096)


def test_num_gpu_blocks_override_sizes_the_kv_cache_as_in_vllm():
    opts = parse_args(["--block-size", "32", "--max-model-len", "512",
                       "--num-gpu-blocks-override", "20"])
    assert opts.engine.num_gpu_blocks == 20
    labels = cache_config_labels(opts.engine)
    assert (labels["num_gpu_blocks"], labels["num_gpu_blocks_override"],
            labels["kv_cache_size_tokens"]) == ("20", "20", "640")


def test_a_model_too_big_for_the_gpu_fails_at_startup_like_vllm(capsys):
    assert main(["--model", "meta-llama/Llama-3.1-70B-Instruct", "--port", "0"]) == 1
    assert "KV cache" in capsys.readouterr().err


@starts_a_server
def test_the_module_serves_from_the_command_line_and_stops_on_sigterm():
    process = subprocess.Popen(
        [sys.executable, "-m", "agents.sim.vllm_server", "--port", "0", "--load", "0"],
        cwd=REPO, stderr=subprocess.PIPE, text=True)
    try:
        banner = process.stderr.readline()  # "... on http://127.0.0.1:PORT (simulated, ...)"
        url = banner.split(" on ", 1)[1].split(" ", 1)[0]
        assert get(f"{url}/health")[0] == 200
    finally:
        process.terminate()
        code = process.wait(timeout=30)
    assert code == 0


def test_flags_of_vllm_serve_the_simulation_does_not_model_are_accepted_and_named():
    opts, ignored = parse_known(["--model", "Qwen/Qwen3-8B", "--enforce-eager", "--dtype",
                                 "half", "--no-enable-prefix-caching", "--kv-cache-dtype=fp8",
                                 "-tp", "2", "--max-num-seqs", "8", "--swap-space", "-1"])
    assert ignored == ["--enforce-eager", "--dtype", "--no-enable-prefix-caching",
                       "--kv-cache-dtype", "--swap-space"]
    assert (opts.engine.tensor_parallel_size, opts.engine.max_num_seqs) == (2, 8)


def test_the_simulated_gpus_default_to_cuda_visible_devices(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,3")
    assert parse_args([]).gpu_indices == [2, 3]
    assert parse_args(["--gpu-indices", "5"]).gpu_indices == [5]


def test_the_load_and_seed_come_from_the_environment_when_no_flag_gives_them(monkeypatch):
    from agents.sim.vllm_cli import parse_args

    monkeypatch.setenv("PITWALL_SIM_LOAD", "12.5")
    monkeypatch.setenv("PITWALL_SIM_SEED", "7")
    options = parse_args(["--model", "m"])
    assert (options.load, options.seed) == (12.5, 7)
    assert parse_args(["--load", "2"]).load == 2.0  # a flag wins


def test_a_malformed_environment_knob_is_an_error(monkeypatch):
    from agents.sim.vllm_cli import parse_args

    monkeypatch.setenv("PITWALL_SIM_LOAD", "lots")
    with pytest.raises(SystemExit, match="PITWALL_SIM_LOAD"):
        parse_args([])
