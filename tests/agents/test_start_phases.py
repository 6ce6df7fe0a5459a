"""A start's phases read from vLLM's own lines: the real vLLM 0.32 CPU build's start-up logs
(tests/agents/fixtures, recorded from `vllm serve` of the tiny model), the GPU build's messages
as vLLM 0.32's source formats them, and the supervisor reporting them for each start."""

from __future__ import annotations

from pathlib import Path

import pytest

from agents.sim.engine_model import EngineConfig
from agents.sim.start_lines import format_line, start_lines, uvicorn_lines
from agents.supervisor.phases import PHASES, PhaseTail, StartPhases
from agents.supervisor.process import LogTail
from controlplane.fleet.deployments import START_PHASES
from tests.agents.test_supervisor import Host, deployment
from tests.agents.test_supervisor_processes import deployment as sim_deployment
from tests.agents.test_supervisor_processes import (
    free_port,
    ready,
    supervisors,  # noqa: F401 - a fixture
    until,
)

FIXTURES = Path(__file__).parent / "fixtures"


class LineClock:
    """Each line is read one second after the one before."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def read(lines: list[str], clock: LineClock) -> tuple[StartPhases, dict[str, str]]:
    """Feed the lines, line i at second i + 1; -> the phases and the line each phase took."""
    phases, tail = StartPhases(0.0, clock), LogTail(maxlen=1000)
    tail_for_start = PhaseTail(tail, phases)
    taken: dict[str, str] = {}
    for i, line in enumerate(lines):
        clock.now = i + 1.0
        before = phases.snapshot()
        tail_for_start.append(line)
        taken.update({phase: line for phase, at in phases.snapshot().items()
                      if before.get(phase) != at})
    return phases, taken


def fixture(name: str) -> list[str]:
    return (FIXTURES / name).read_text().splitlines()


def test_the_real_cpu_builds_eager_start_has_weights_kv_cache_and_ready():
    lines = fixture("vllm_0.32_cpu_start_eager.log")
    phases, taken = read(lines, LineClock())
    assert set(phases.snapshot()) == {"process_start", "weights_loaded", "kv_profiled",
                                      "api_ready"}  # no CUDA graphs on a CPU
    assert "Loading weights took 0.01 seconds" in taken["weights_loaded"]
    assert "CPU KV cache size: 524,288 tokens" in taken["kv_profiled"]
    assert taken["api_ready"] == "INFO:     Application startup complete."
    assert phases.ready_by == "log"
    at = phases.snapshot()
    assert at["api_ready"] == lines.index("INFO:     Application startup complete.") + 1
    assert 0 < at["weights_loaded"] < at["kv_profiled"] < at["api_ready"]


def test_the_real_cpu_builds_compiled_start_has_the_same_phases():
    phases, taken = read(fixture("vllm_0.32_cpu_start_compiled.log"), LineClock())
    assert set(phases.snapshot()) == {"process_start", "weights_loaded", "kv_profiled",
                                      "api_ready"}
    assert "Loading weights took 0.00 seconds" in taken["weights_loaded"]


def test_lines_after_ready_move_nothing():
    lines = fixture("vllm_0.32_cpu_start_eager.log")
    ready = lines.index("INFO:     Application startup complete.")
    phases, _ = read(lines, LineClock())
    again, _ = read([*lines[:ready + 1], *lines[:ready]], LineClock())
    assert again.snapshot() == phases.snapshot()


def gpu_line(process: str, where: str, message: str) -> str:
    return format_line(process, 4242, where, message, 1764770000.0)


# vLLM 0.32's messages as its source formats them (v1/worker/gpu_model_runner.py,
# gpu_worker.py, model_loader/default_loader.py, v1/core/kv_cache_utils.py), two TP workers.
GPU_START = [
    gpu_line("Worker_TP0", "default_loader.py:502", "Loading weights took 11.90 seconds"),
    gpu_line("Worker_TP1", "default_loader.py:502", "Loading weights took 12.40 seconds"),
    gpu_line("Worker_TP0", "gpu_model_runner.py:5150",
             "Model loading took 7.5 GiB memory and 12.700000 seconds"),
    gpu_line("Worker_TP1", "gpu_model_runner.py:5150",
             "Model loading took 7.5 GiB memory and 12.900000 seconds"),
    gpu_line("Worker_TP0", "gpu_worker.py:760", "Available KV cache memory: 61.32 GiB"),
    gpu_line("EngineCore", "kv_cache_utils.py:2328",
             "GPU KV cache size: 1,004,672 tokens, Maximum concurrency for 8,192 tokens per "
             "request: 122.64x"),
    gpu_line("Worker_TP0", "gpu_model_runner.py:6582",
             "Graph capturing finished in 9 secs, took 0.52 GiB"),
    gpu_line("Worker_TP1", "gpu_model_runner.py:6582",
             "Graph capturing finished in 10 secs, took 0.52 GiB"),
    gpu_line("EngineCore", "core.py:403",
             "init engine (profile, create kv cache, warmup model) took 31.02 s"),
    gpu_line("APIServer", "entry.py:140", "Starting vLLM server on http://0.0.0.0:8000"),
    *uvicorn_lines(4242),
]


def test_a_gpu_start_takes_the_last_worker_to_finish_each_phase():
    phases, _ = read(GPU_START, LineClock())
    assert phases.snapshot() == {"process_start": 0.0, "weights_loaded": 4.0,
                                 "kv_profiled": 6.0, "graphs_captured": 8.0,
                                 "api_ready": 13.0}


@pytest.mark.parametrize("line", [
    "Loading weights took 1 seconds",  # not a vLLM log line: no logger prefix
    "(APIServer pid=1) INFO 12-05 21:59:31 [entry.py:140] Starting vLLM server on http://x:1",
    "INFO:     Waiting for application startup.",
    "(Worker pid=1) INFO 12-05 21:59:28 [cpu_model_runner.py:68] Starting to load model m...",
    "(EngineCore pid=1) INFO 12-05 21:59:29 [utils.py:347] Using LBHNC KV cache layout.",
])
def test_lines_that_end_no_phase_are_ignored(line):
    phases, _ = read([line], LineClock())
    assert phases.snapshot() == {"process_start": 0.0}


def test_the_simulated_vllm_prints_lines_that_end_every_phase():
    engine = EngineConfig(tensor_parallel_size=2)
    lines = [format_line(process, 7, where, message, 1764770000.0)
             for _, process, where, message in start_lines(engine, 60.0, "127.0.0.1", 8000,
                                                           eager=False)]
    phases, _ = read([*lines, *uvicorn_lines(7)], LineClock())
    assert set(phases.snapshot()) == set(PHASES)
    eager = start_lines(engine, 60.0, "127.0.0.1", 8000, eager=True)
    assert not any("Graph capturing" in message for *_, message in eager)


def test_the_control_plane_stores_the_phases_the_agent_reports():
    assert START_PHASES == PHASES


def test_the_supervisor_reports_the_phases_of_the_current_start():
    host = Host()
    host.sup.set_desired([deployment()])
    host.tick()  # spawned at 1001
    assert host.status()["phases"] == {"process_start": 1001.0}
    host.healthy.add(8000)
    ready = host.tick()
    assert ready["phases"] == {"process_start": 1001.0, "api_ready": 1002.0}
    assert ready["log_tail"][-1] == ("[pitwall] revision 4 ready 1.0 s after start "
                                     "(by GET /health 200)")
    host.processes[-1].code = 1  # a crash: the phases of the start that ran stay
    assert host.tick()["phases"]["process_start"] == 1001.0
    while host.status()["restarts"] == 0:  # backing off, then started again
        host.tick()
    assert host.status()["phases"] == {"process_start": host.now}  # a new start's phases


def test_a_line_that_said_ready_first_wins_over_the_health_probe():
    host = Host()
    host.sup.set_desired([deployment()])
    host.tick()
    instance = host.sup.instances[12]
    assert instance.phases is not None
    host.now += 0.5
    host.sup.runtime.clock = lambda: host.now
    tail = PhaseTail(instance.tail, instance.phases)  # as the process's reader holds it
    tail.append(GPU_START[0])
    tail.append("INFO:     Application startup complete.")
    host.healthy.add(8000)
    ready = host.tick()
    assert ready["phases"]["api_ready"] == 1001.5
    assert ready["log_tail"][-1].endswith(
        "(weights 0.5 s, by the log's 'Application startup complete.')")


def test_a_start_that_fails_reports_no_phases():
    host = Host()
    host.fail_spawn = OSError("no such program: vllm")
    host.sup.set_desired([deployment()])
    assert host.tick()["phases"] == {}


# --- a real simulated vLLM under the supervisor -----------------------------------------------

@pytest.mark.slow(seconds=6)
def test_a_simulated_replicas_start_has_every_phase_in_order(supervisors):  # noqa: F811
    sup, port = supervisors(), free_port()
    # A 3 s start: the phases spread over it as the simulation prints vLLM's lines.
    sup.set_desired([sim_deployment(port, env={"PITWALL_SIM_LOAD": "0",
                                               "PITWALL_SIM_STARTUP_S": "3"})])
    (status,) = until(sup, lambda s: ready(s) and "api_ready" in s[0]["phases"])
    at = status["phases"]
    assert list(at) == list(PHASES)
    times = [at[phase] for phase in PHASES]
    assert times == sorted(times)
    # The simulation prints each line at its share of the 3 s: weights at half of it, ready at
    # its end (no upper bounds: a loaded machine stretches the interpreter's own start).
    assert at["weights_loaded"] - at["process_start"] > 1.0
    assert at["api_ready"] - at["process_start"] > 2.5
    assert any("ready" in line and "after start" in line for line in status["log_tail"])
