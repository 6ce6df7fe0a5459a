"""The simulated vLLM's wedged engine loop (POST /sim/stall, /sim/resume): the engines stand
still while the API side goes on, as a real API server does over a SIGSTOPped EngineCore."""

from __future__ import annotations

import json
import threading
import urllib.error
import urllib.request
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from agents.sim.engine_model import EngineConfig
from agents.sim.vllm_server import SimOptions, SimVllm, start
from tests.support.polling import wait_until

MODEL = "meta-llama/Llama-3.1-8B-Instruct"
# What a stalled engine must not move, and the gauges it must keep as they were.
FROZEN = ("vllm:generation_tokens_total", "vllm:request_success_total",
          "vllm:num_requests_running", "vllm:num_requests_waiting",
          "vllm:kv_cache_usage_perc")


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def options() -> SimOptions:
    return SimOptions(engine=EngineConfig(model=MODEL), port=0, load=0.0, seed=1)


def value(text: str, sample: str) -> float:
    return sum(s.value for f in text_string_to_metric_families(text) for s in f.samples
               if s.name == sample)


def frozen(sim: SimVllm) -> dict[str, float]:
    text = sim.scrape("", "")[0].decode()
    return {name: value(text, name) for name in FROZEN}


class Completion(threading.Thread):
    """One completion through SimVllm.complete, answered on a thread of its own."""

    def __init__(self, sim: SimVllm, max_tokens: int) -> None:
        super().__init__(daemon=True)
        self.sim, self.max_tokens = sim, max_tokens
        self.reply: dict[str, Any] | None = None

    def run(self) -> None:
        self.reply = self.sim.complete({"model": MODEL, "prompt": "the pit wall " * 8,
                                        "max_tokens": self.max_tokens})


def queued(sim: SimVllm, count: int) -> None:
    wait_until(lambda: sim.waiters == count, 30, lambda: f"{sim.waiters} waiting, not {count}")


def test_a_stalled_engine_holds_its_requests_and_moves_nothing_until_resumed():
    clock = Clock()
    sim = SimVllm(options(), clock)
    assert sim.ready
    first = Completion(sim, max_tokens=400)
    first.start()
    queued(sim, 1)
    clock.now = 0.05  # a few steps: the request is decoding
    sim.tick()
    held = sim.stall()
    assert held == {"stalled": True, "requests_running": 1, "requests_waiting": 0}
    before = frozen(sim)
    assert before["vllm:num_requests_running"] == 1
    assert 0 < before["vllm:generation_tokens_total"] < 400

    # A minute and a half stands still: a new request is taken and queued, nothing moves.
    second = Completion(sim, max_tokens=5)
    second.start()
    queued(sim, 2)
    clock.now = 90.0
    sim.tick()
    assert frozen(sim) == before
    assert sim.state()["requests_running"] == 1 and sim.state()["requests_waiting"] == 0
    assert first.reply is None and second.reply is None

    assert sim.resume()["stalled"] is False
    clock.now = 95.0  # both need well under a second of engine time
    sim.tick()
    for completion in (first, second):
        completion.join(30)
        assert completion.reply is not None
        assert completion.reply["usage"]["completion_tokens"] == completion.max_tokens
    after = sim.scrape("", "")[0].decode()
    assert value(after, "vllm:request_success_total") == 2
    # The stall is in their latencies: no step ran while the engine stood still.
    assert value(after, "vllm:e2e_request_latency_seconds_sum") >= 2 * 90 - 1
    assert value(after, "vllm:inter_token_latency_seconds_sum") >= 90 - 0.05


def test_resume_without_a_stall_and_a_second_stall_change_nothing():
    clock = Clock()
    sim = SimVllm(options(), clock)
    assert sim.resume() == {"stalled": False, "requests_running": 0, "requests_waiting": 0}
    assert sim.stall()["stalled"] is True
    assert sim.stall()["stalled"] is True
    assert sim.resume()["stalled"] is False


def http(method: str, url: str, body: dict[str, Any] | None = None) -> tuple[int, bytes]:
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(url, data, {"Content-Type": "application/json"},
                                     method=method)
    try:
        with urllib.request.urlopen(request, timeout=60) as reply:
            return reply.status, reply.read()
    except urllib.error.HTTPError as error:
        return error.code, error.read()


@pytest.mark.slow(seconds=1)
def test_over_http_health_answers_while_stalled_and_a_held_completion_answers_on_resume():
    running = start(options())
    base = f"http://127.0.0.1:{running.port}"
    try:
        wait_until(lambda: http("GET", f"{base}/health")[0] == 200, 30)
        status, body = http("POST", f"{base}/sim/stall")
        assert (status, json.loads(body)["stalled"]) == (200, True)
        assert http("GET", f"{base}/health")[0] == 200
        assert http("GET", f"{base}/metrics")[0] == 200
        assert http("GET", f"{base}/sim/stall")[0] == 404  # a control: POST only
        answered: list[tuple[int, bytes]] = []
        held = threading.Thread(target=lambda: answered.append(http(
            "POST", f"{base}/v1/completions",
            {"model": MODEL, "prompt": "the pit wall", "max_tokens": 4})), daemon=True)
        held.start()
        queued(running.sim, 1)
        assert answered == []  # taken, and held by the engine that stands still
        status, body = http("POST", f"{base}/sim/resume")
        assert (status, json.loads(body)["stalled"]) == (200, False)
        held.join(60)
        [(status, body)] = answered
        assert status == 200 and json.loads(body)["usage"]["completion_tokens"] == 4
    finally:
        running.close()
