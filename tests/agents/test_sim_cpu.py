"""The CPU side of the simulated vLLM: what serving costs the CPUs, and what a shortage
costs the GPU; the modeled per-role CPU reaching the agent's proc.* rows."""

from __future__ import annotations

import os

from agents.loop import Sampler, Sources
from agents.sim.cpu_model import CpuBudget, CpuModel
from agents.sim.engine_model import EngineConfig, EngineModel, RequestSpec, SyntheticLoad
from agents.sim.process_roles import PSEUDO_PID_BASE, overlay
from agents.sim.vllm_server import SimOptions, SimVllm
from tests.agents.engine_recorder import Recorder

SMALL = EngineConfig(model="meta-llama/Llama-3.2-1B-Instruct", max_num_seqs=512,
                     max_model_len=4096)


def run_load(cpu: CpuModel | None, seconds: float = 120.0,
             rate: float = 6.0) -> tuple[EngineModel, Recorder]:
    sink, config = Recorder(), EngineConfig()
    engine = EngineModel(config, load=SyntheticLoad(rate, config.max_model_len, seed=3),
                         sink=sink, cpu=cpu)
    for t in range(1, int(seconds) + 1):
        engine.advance(float(t))
    return engine, sink


def finished_times(sink: Recorder) -> list[tuple[float, float]]:
    return [(r.first_token_ts, r.finished_ts) for r in sink.finished]


def test_with_enough_cpu_the_engine_behaves_exactly_as_without_a_cpu_model():
    _, plain = run_load(None)
    _, modeled = run_load(CpuModel(CpuBudget(cpus=8)))
    assert finished_times(modeled) == finished_times(plain)
    assert modeled.total("generation_tokens") == plain.total("generation_tokens")


def test_a_cpu_bound_engine_core_is_pinned_at_a_full_core_while_its_gpu_waits():
    # A 1B model with 500 sequences: the engine core's work per step outlasts the GPU's.
    cpu = CpuModel(CpuBudget(cpus=8))
    engine = EngineModel(SMALL, cpu=cpu)
    for _ in range(500):
        engine.submit(RequestSpec(prompt_tokens=64, max_tokens=2000, output_tokens=2000), 0.0)
    engine.advance(3.0)  # short contexts yet: the GPU's step is a few ms
    assert engine.busy_fraction(engine.now) < 0.85
    assert cpu.usage(engine.now)["engine_core"][0] >= 95.0


def test_a_cgroup_quota_below_a_core_throttles_and_idles_the_gpu():
    cpu = CpuModel(CpuBudget(cpus=2, quota_cores=0.6))
    engine, starved = run_load(cpu)
    _, fed = run_load(CpuModel(CpuBudget(cpus=2)))
    usage = cpu.usage(engine.now)
    assert engine.busy_fraction(engine.now) < 0.85
    assert usage["throttled_pct"] > 50 and usage["engine_core"][0] < 70
    assert len(starved.finished) < len(fed.finished)  # less served: the queue grows


def test_cpu_contention_on_the_instances_cpus_slows_its_steps():
    cpu = CpuModel(CpuBudget(cpus=1, contention=0.5))
    engine, starved = run_load(cpu)
    _, fed = run_load(CpuModel(CpuBudget(cpus=1)))
    assert engine.busy_fraction(engine.now) < 0.85
    ttft = lambda sink: sorted(r.first_token_ts - r.arrival for r in sink.finished)[  # noqa: E731
        int(0.9 * len(sink.finished))]
    assert ttft(starved) > ttft(fed)


def test_api_server_count_spreads_the_api_cpu_over_its_processes():
    one, four = CpuModel(CpuBudget(cpus=8)), CpuModel(CpuBudget(cpus=8, api_server_count=4))
    e1, _ = run_load(one, rate=8.0)
    e4, _ = run_load(four, rate=8.0)
    per_one, per_four = one.usage(e1.now)["api_server"], four.usage(e4.now)["api_server"]
    assert per_one > 0 and abs(per_four * 4 - per_one) < 0.25 * per_one
    assert abs(one.api_cpu_s - four.api_cpu_s) < 1e-6 * one.api_cpu_s + 1e-9


def test_remote_numa_cpus_cost_more_cpu_for_the_same_work():
    near, far = CpuModel(CpuBudget(cpus=8)), CpuModel(CpuBudget(cpus=8, numa_remote=True))
    run_load(near)
    run_load(far)
    assert far.api_cpu_s > 1.2 * near.api_cpu_s


def test_the_server_takes_its_cpus_from_its_real_affinity_and_reports_per_role_cpu():
    clock = [100.0]
    sim = SimVllm(SimOptions(load=6.0, seed=1, api_server_count=2), lambda: clock[0])
    for t in range(101, 131):
        clock[0] = float(t)
        sim.tick()
    state = sim.state()
    assert state["cpus"] == sorted(os.sched_getaffinity(0))
    assert [(p["role"], p["index"]) for p in state["processes"]] == [
        ("engine_core", 0), ("api_server", 0), ("api_server", 1)]
    assert state["processes"][0]["cpu_pct"] > 50  # busy: the engine loop polls a full core
    assert 0 < state["processes"][1]["cpu_pct"] < 100


def test_an_explicit_cpu_list_and_contention_reach_the_cpu_model():
    sim = SimVllm(SimOptions(cpus=[3, 1], cpu_contention=0.5, cpu_quota=4.0), lambda: 0.0)
    assert sim.cpus == [1, 3] and sim.cpu.budget.cores == 1.0


STATE = {"pid": 10, "processes": [{"role": "engine_core", "index": 0, "cpu_pct": 99.0},
                                  {"role": "api_server", "index": 0, "cpu_pct": 40.0},
                                  {"role": "api_server", "index": 1, "cpu_pct": 41.0}]}


def test_the_overlay_gives_the_real_pid_the_engine_core_and_pseudo_pids_the_api_servers():
    rows = [{"pid": 10, "engine": "vllm:8000/0", "cpu_pct": 3.0, "rss_bytes": 5,
             "cpu_affinity": [0, 1], "numa_nodes": [0]},
            {"pid": 20, "engine": "vllm:9000/0", "cpu_pct": 7.0}]
    out = overlay(rows, "vllm:8000/0", STATE)
    assert out[0]["pid"] == 10 and out[0]["cpu_pct"] == 99.0 and out[0]["rss_bytes"] == 5
    assert out[1] == {"pid": 20, "engine": "vllm:9000/0", "cpu_pct": 7.0}  # not simulated
    pseudo = out[2:]
    assert [p["cpu_pct"] for p in pseudo] == [40.0, 41.0]
    assert all(PSEUDO_PID_BASE <= p["pid"] < 2**31 and p["cpu_affinity"] == [0, 1]
               and set(p) == {"pid", "engine", "cpu_pct", "cpu_affinity", "numa_nodes"}
               for p in pseudo)
    assert len({p["pid"] for p in pseudo}) == 2


class FakeEngine:
    url, port = "http://127.0.0.1:8000/metrics", 8000

    def __init__(self, simulated: bool) -> None:
        self.simulated = simulated

    def collect(self) -> list[dict]:
        return [{"name": "vllm:8000/0", "up": 1}]

    def inventory(self) -> list[dict]:
        return [{"name": "vllm:8000/0"}]


class FakeProcesses:
    def find_engine_pids(self, port: int) -> list[int]:
        return [10]

    def collect(self, engine_pids: dict, gpu_mem: dict) -> list[dict]:
        return [{"pid": 10, "engine": "vllm:8000/0", "cpu_pct": 3.0}]


def sample_processes(simulated: bool) -> list[dict]:
    sources = Sources(engines=[FakeEngine(simulated)], processes=FakeProcesses(),
                      sim_state=lambda engine: STATE)
    return Sampler(sources, warn=lambda message: None).sample()["processes"]


def test_the_agent_reports_modeled_cpu_for_simulated_engines_only():
    assert [p["cpu_pct"] for p in sample_processes(True)] == [99.0, 40.0, 41.0]
    assert sample_processes(False) == [{"pid": 10, "engine": "vllm:8000/0", "cpu_pct": 3.0}]
