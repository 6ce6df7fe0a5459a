"""The flags of a vLLM server Pitwall does not run, end to end over real processes: the
simulated vLLM started with `vllm serve`'s flags, the agent's real process collector (real
psutil) and vLLM collector (real HTTP), its inventory entry, and through the real ingest the
stored Engine.config that tuning reads."""

from __future__ import annotations

import sys
import urllib.request
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import psutil
import pytest

from agents.batch import BatchBuilder
from agents.collectors.process import ProcessCollector
from agents.collectors.vllm import VllmCollector
from agents.loop import Sampler, Sources
from agents.sim.vllm_server import VLLM_VERSION
from tests.support.live import Process, free_port
from tests.support.polling import wait_until

pytestmark = pytest.mark.slow(seconds=5)

HOSTNAME = "cmdline-node"
FLAGS = ["--max-num-seqs", "64", "--max-num-batched-tokens", "4096",
         "--gpu-memory-utilization", "0.85"]
BUDGET = {"max_num_seqs": 64, "max_num_batched_tokens": 4096, "gpu_memory_utilization": 0.85}


class Sim:
    def __init__(self, log: Path) -> None:
        self.port = free_port()
        self.process = Process([sys.executable, "-m", "agents.sim.vllm_server", "--port",
                                str(self.port), "--model", "Qwen/Qwen3-8B", *FLAGS,
                                "--load", "0", "--frobnicate", "7"], log=log)
        wait_until(self._healthy, 30, lambda: f"the simulated vLLM did not start:\n"
                   f"{self.process.output()}")

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/metrics"

    def _healthy(self) -> bool:
        if self.process.proc.poll() is not None:
            raise AssertionError(f"it exited:\n{self.process.output()}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/health", timeout=2) as r:
                return r.status == 200
        except OSError:
            return False


@pytest.fixture
def sim(tmp_path) -> Iterator[Sim]:
    server = Sim(tmp_path / "sim.log")
    yield server
    server.process.stop()


class CountingPsutil:
    """Real psutil, with each process's command line reads counted."""

    def __init__(self) -> None:
        self.cmdline_reads = 0
        counts = self

        class Process(psutil.Process):
            def cmdline(self) -> list[str]:
                counts.cmdline_reads += 1
                return super().cmdline()

        self.Process = Process

    def __getattr__(self, name: str):
        return getattr(psutil, name)


def agent(url: str, ps: CountingPsutil | None = None) -> Sampler:
    """The agent's sampler as `--vllm-metrics-url URL` builds it (no GPUs here)."""
    return Sampler(Sources(engines=[VllmCollector(url, timeout=5)], hostname=HOSTNAME,
                           processes=ProcessCollector(psutil_module=ps)),
                   warn=lambda message: None)


def test_the_agent_reports_the_flags_and_version_of_a_server_it_does_not_run(sim):
    ps = CountingPsutil()
    sampler = agent(sim.url, ps)
    builder = BatchBuilder()
    first = builder.build([sampler.sample()], sampler.inventory())
    [entry] = first["host"]["engines"]
    assert entry["name"] == f"vllm:{sim.port}/0" and entry["simulated"] is True
    # only catalog flags: not the model, --port, --load (the simulation's) or --frobnicate
    assert entry["config"]["args"] == BUDGET
    assert entry["config"]["vllm_version"] == VLLM_VERSION
    assert entry["config"]["block_size"] == "16"  # cache_config_info's labels, as before
    assert ps.cmdline_reads == 1
    for _ in range(3):
        assert "host" not in builder.build([sampler.sample()], sampler.inventory())
    assert ps.cmdline_reads == 1  # once per process, not every interval


def test_the_stored_engine_config_holds_them_and_tuning_reads_them(sim, ingest):
    from controlplane.fleet.models import Engine
    from controlplane.fleet.tokens import issue_agent_token
    from controlplane.tuning.diagnoses import arg, assumed
    from controlplane.tuning.facts import Facts

    token, host = issue_agent_token(HOSTNAME)
    sampler = agent(sim.url)
    code, reply = ingest.post(BatchBuilder().build([sampler.sample()], sampler.inventory()),
                              token)
    assert code == 200 and not reply["ignored"], reply
    engine = Engine.objects.get(host=host)
    assert engine.config["args"] == BUDGET and engine.config["vllm_version"] == VLLM_VERSION

    now = datetime.now(UTC)
    facts = Facts(deployment=None, host=host, gpus=[], engine_config=engine.config,
                  start=now, end=now)
    assert facts.vllm_version == VLLM_VERSION
    assert (arg(facts, "max_num_seqs"), arg(facts, "max_num_batched_tokens")) == (64, 4096)
    assert not assumed(facts, "max_num_seqs") and not assumed(facts, "max_num_batched_tokens")


def test_a_command_line_it_may_not_read_is_left_out_said_once_and_not_retried(sim):
    ps = CountingPsutil()

    class Hidden(ps.Process):  # as under /proc mounted with hidepid
        def cmdline(self) -> list[str]:
            super().cmdline()  # counted
            raise psutil.AccessDenied(self.pid)

    ps.Process = Hidden
    warnings: list[str] = []
    processes = ProcessCollector(psutil_module=ps, warn=warnings.append)
    for _ in range(3):
        assert processes.find_engine_pids(sim.port)
        assert processes.listener_commands(sim.port) == {}
    assert ps.cmdline_reads == 1
    assert len(warnings) == 1 and "cannot read its command line" in warnings[0]
