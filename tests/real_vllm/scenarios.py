"""Real scenarios: each tuning diagnosis the CPU build of vLLM can show, made to happen on a real
engine serving the tiny model, as Pitwall sees it through its agents.

A scenario is an engine (its vLLM arguments, and whether Pitwall runs it or only watches it),
a load, an optional perturbation and the suggestion a tuning pass should make from what the
engine reported: its kind and the change it proposes. tests/real_vllm/test_diagnoses_real.py
holds the tuning pass to them; tests/real_vllm/record_shapes.py records what the engines'
gauges did, for the simulated vLLM to be held to; a benchmark scorecard can run them too.

Two paths, as in production: a *deployment* is created through the API and run by an agent
with ``--supervise``; a *watched* engine is started by hand, as an operator would (systemd, a
script: `RealVllm`), and an agent without ``--supervise`` finds it by its metrics URL.

================  ======  ==========  ==========================================  ================
scenario          engine  path        load; perturbation                          expected
================  ======  ==========  ==========================================  ================
over_provisioned  roomy   watched     none                                        over_provisioned
healthy           roomy   watched     2 clients, short prompts, paced             none
cpu_starvation    roomy   watched     6 clients, 400-token prompts; the engine    cpu_starvation
                                      bound to one CPU beside 2 busy neighbours
prefill_itl       roomy   watched     18 clients of 1,800-token prompts, 2 of     prefill_itl,
                                      128-token generations                       budget lowered
concurrency_cap   capped  deployment  12 clients, max_num_seqs 4                  concurrency_cap,
                                                                                  max_num_seqs up
prefill_ttft      budget  deployment  6 clients of 1,800-token prompts, a         prefill_ttft,
                                      256-token budget                            budget raised
kv_pressure       kv      deployment  14 clients of 150 tokens, 20 KV blocks      kv_pressure
================  ======  ==========  ==========================================  ================

Each scenario's load runs through one whole rollup minute, and the tuning pass reads that
minute alone (60-second windows); scenarios on different engines may share a minute, where
their loads do not disturb each other (an idle engine beside a loaded one).
"""

from __future__ import annotations

import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, ExitStack
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from functools import partial
from pathlib import Path
from typing import Any

from django.conf import settings
from django.test import override_settings
from django.utils import timezone

from agents import vllm_args
from agents.collectors.process import ProcessCollector
from controlplane.fleet.models import Deployment, Host
from controlplane.telemetry.rollups import refresh as build
from controlplane.telemetry.rollups.refresh import floor
from controlplane.tuning import service
from controlplane.tuning.diagnoses import REFERENCE
from controlplane.tuning.facts import Facts, Server, gather
from controlplane.tuning.models import Kind, State, Suggestion
from tests.real_vllm.engine import (
    READY_TIMEOUT_S,
    VERSION,
    Clients,
    Install,
    Load,
    RealVllm,
    engine_vars,
    starve_cpu,
)
from tests.support.live import Process, free_port, start_server
from tests.support.polling import wait_until
from tests.tuning.loop import SHORT_WINDOWS, WINDOW_S, agent_token_file, staff_api

# What every engine here needs (engine.BASE_ARGS, as a deployment's arguments); the context
# is each engine's own.
COMMON = {"enforce_eager": True, "dtype": "float32"}


@dataclass(frozen=True)
class EngineSpec:
    """A vLLM server of the tiny model: its arguments as a deployment carries them, and
    whether it is started by hand and only watched (else: a deployment)."""

    name: str
    args: dict[str, Any]
    watched: bool

    @property
    def argv(self) -> list[str]:
        return vllm_args.to_argv(self.args, VERSION)


# The tiny model's context (max_position_embeddings) is 2048; a budget over 2048 is what
# prefill_itl may lower (diagnoses.MIN_BATCHED_TOKENS).
ROOMY = EngineSpec("roomy", {**COMMON, "max_model_len": 2048,
                             "max_num_batched_tokens": 32768}, watched=True)
CAPPED = EngineSpec("capped", {**COMMON, "max_model_len": 512, "max_num_seqs": 4},
                    watched=False)
BUDGET = EngineSpec("budget", {**COMMON, "max_model_len": 2048,
                               "max_num_batched_tokens": 256}, watched=False)
# As tests/real_vllm/test_tuning_loop_real.py: 20 blocks of 32 tokens (640).
KV = EngineSpec("kv", {**COMMON, "max_model_len": 512, "block_size": 32,
                       "num_gpu_blocks_override": 20}, watched=False)


@dataclass(frozen=True)
class Change:
    """A change the finding must propose: the field, raised (+1) or lowered (-1)."""

    field: str
    direction: int


Perturbation = Callable[[list[int]], AbstractContextManager]


@dataclass(frozen=True)
class Scenario:
    name: str
    engine: EngineSpec
    clients: tuple[Clients, ...]
    expected: Kind | None  # None: no suggestion
    change: Change | None = None
    perturbation: Perturbation | None = None  # given the engine's pids, for the minute
    # Seconds before its minute the load starts, so that a queue it builds is there at the
    # minute's first sample; 0 where an idle minute of the same engine comes before it.
    lead_s: float = 0.0
    # The service's own latency objectives (settings -> ms) over OBJECTIVES, for its minute.
    objectives: tuple[tuple[str, int], ...] = ()


# -- the scenarios --------------------------------------------------------------------------

RAISE_SEQS = Change("args.max_num_seqs", +1)
RAISE_BUDGET = Change("args.max_num_batched_tokens", +1)
LOWER_BUDGET = Change("args.max_num_batched_tokens", -1)
LONG_PROMPT = 1800  # tokens: most of the roomy and budget engines' 2048 context
# The ITL objective of an interactive service, which prefill_itl breaks: over the roomy
# engine's ITL p99 under light load (105-175 ms measured, the tail being other processes'
# time slices), well under what steps of long prompts make it. Those scale with the
# machine, not with the objective: 950-2,340 ms on a 2-core Xeon, 312 ms on a 2-core EPYC
# (whose API server, not the engine, then held the prompts back: 2.5 requests running of
# 20 clients), over OBJECTIVES' 700 ms on one machine and under it on the other.
INTERACTIVE_ITL = (("TUNING_ITL_P99_OBJECTIVE_MS", 150),)

SCENARIOS: dict[str, Scenario] = {s.name: s for s in (
    Scenario("over_provisioned", ROOMY, (), Kind.OVER_PROVISIONED),
    Scenario("healthy", ROOMY, (Clients(2, 60, 16, pause_s=0.5),), None),
    Scenario("cpu_starvation", ROOMY, (Clients(6, 400, 32),), Kind.CPU_STARVATION,
             perturbation=starve_cpu),
    # Long prompts in every step beside decodes that wait for those steps: about 900
    # prefill tokens per step for each prefilling client, as many as the budget takes (a
    # step is 16 ms per 1,000 tokens). 6 clients made steps of 5,400 tokens and 10 of 9,000
    # under a 16,384 budget: ITL p99 296-411 ms, too close to the objective.
    # An interactive service: its ITL objective (INTERACTIVE_ITL) is the one that long prompts
    # break, on any machine.
    Scenario("prefill_itl", ROOMY, (Clients(18, LONG_PROMPT, 1), Clients(2, 30, 128)),
             Kind.PREFILL_ITL, LOWER_BUDGET, objectives=INTERACTIVE_ITL),
    # Three times the cap: a queue that the KV cache (1 GiB, a few per cent used) would hold.
    Scenario("concurrency_cap", CAPPED, (Clients(12, 30, 64),), Kind.CONCURRENCY_CAP,
             RAISE_SEQS, lead_s=3),
    # Each prompt takes 8 steps of the budget while the next ones wait: queued for the
    # budget, running below any cap.
    Scenario("prefill_ttft", BUDGET, (Clients(6, LONG_PROMPT, 16),), Kind.PREFILL_TTFT,
             RAISE_BUDGET, lead_s=3),
    # As test_tuning_loop_real.py: 3.5x what the cache holds.
    Scenario("kv_pressure", KV, (Clients(14, 18, 150),), Kind.KV_PRESSURE,
             Change("args.num_gpu_blocks_override", +1), lead_s=3),
)}


Slot = tuple[Scenario, ...]  # scenarios that share a minute, on engines of their own


# -- the stack and the run ------------------------------------------------------------------
#
# The objectives at the scale of the tiny model on two shared cores, between what its light
# load and its symptoms measured (vLLM 0.32, the agents, the server and the other engines on
# the same cores): light load has a TTFT p99 of 0.23-0.33 s and a queue makes it 2-6 s, hence
# 1 s. The ITL objective leaves a budget raise room: prefill_ttft's needs ITL p99 under 0.72
# of it, and its engine's was 130-190 ms alone, 397-408 ms with `make test-schema` beside it
# (a 300 ms objective left no room for the raise there), hence 700 ms; the interactive
# service of prefill_itl has its own (INTERACTIVE_ITL).
OBJECTIVES = {"ALERT_TTFT_P99_OBJECTIVE_MS": 1000, "TUNING_ITL_P99_OBJECTIVE_MS": 700}
WATCH_HOST, DEPLOY_HOST = "cpu-watch", "cpu-deploy"
MINUTE = timedelta(minutes=1)
# After a minute ends: the agents' last samples of it land and the rollup settles
# (ROLLUP_SETTLE_S 2).
SETTLE = timedelta(seconds=6)


def pitwall_settings(base: dict) -> dict:
    """A scenario run's PITWALL: minute windows (the idle one too) and OBJECTIVES."""
    return {**base, **SHORT_WINDOWS, "TUNING_IDLE_WINDOW_S": WINDOW_S, **OBJECTIVES}


class Stack:
    """A control plane on the current database and the engines of some scenarios: each
    watched engine started by hand, with an agent that only watches it (host WATCH_HOST);
    each other a deployment created through the API and run by an agent with --supervise
    (host DEPLOY_HOST). All of them start at once."""

    def __init__(self, found: Install, workdir: Path, schedule: tuple[Slot, ...]) -> None:
        self.found, self.workdir = found, workdir
        self.engines = list({s.engine.name: s.engine for slot in schedule for s in slot}.values())
        self.processes: list[Process] = []  # stopped in reverse order
        self.watched: dict[str, RealVllm] = {}
        self.deployments: dict[str, int] = {}

    def __enter__(self) -> Stack:
        try:
            self._start()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _start(self) -> None:
        port = free_port()
        self.processes.append(start_server(port, self.workdir / "server.log"))
        self.server_url = f"http://127.0.0.1:{port}"
        for spec in (e for e in self.engines if e.watched):
            engine = RealVllm(self.found, self.workdir / spec.name, spec.argv, base_args=())
            self.watched[spec.name] = engine
            self.processes.append(engine.process)
        if self.watched:
            urls = [a for e in self.watched.values() for a in ("--vllm-metrics-url",
                                                               f"{e.url}/metrics")]
            self._agent(WATCH_HOST, urls)
        deployed = [e for e in self.engines if not e.watched]
        if deployed:
            self._agent(DEPLOY_HOST, ["--supervise", "--vllm-command",
                                      f"{self.found.vllm} serve"])
            self._deploy(deployed)

    def _agent(self, hostname: str, flags: list[str]) -> None:
        home = self.workdir / hostname
        home.mkdir()
        self.processes.append(Process(
            [sys.executable, "-m", "agents", "run", "--server", self.server_url,
             "--token-file", str(agent_token_file(home, hostname)), "--hostname", hostname,
             "--gpu-backend", "none", "--interval", "1", "--spool-dir", str(home / "spool"),
             *flags], log=home / "agent.log"))

    def _deploy(self, specs: list[EngineSpec]) -> None:
        api = staff_api()
        host = wait_until(lambda: Host.objects.filter(hostname=DEPLOY_HOST).first(), 60,
                          self.explain)
        for spec in specs:
            made = api.post("/api/v1/deployments/", {
                "host": host.pk, "name": spec.name, "model": str(self.found.model),
                "port": free_port(), "gpu_indices": [], "vllm_version": VERSION,
                "drain_timeout_s": 5, "args": spec.args,
                "env": engine_vars(self.workdir / spec.name)}, format="json")
            assert made.status_code == 201, made.json()
            self.deployments[spec.name] = made.json()["id"]

    def wait_ready(self, spec: EngineSpec) -> None:
        if spec.watched:
            self.watched[spec.name].wait_ready()
            return
        wait_until(lambda: Deployment.objects.filter(pk=self.deployments[spec.name],
                                                     state="ready").exists(),
                   READY_TIMEOUT_S, self.explain, every=1)

    def port(self, spec: EngineSpec) -> int:
        if spec.watched:
            return self.watched[spec.name].port
        return Deployment.objects.get(pk=self.deployments[spec.name]).port

    def url(self, spec: EngineSpec) -> str:
        return f"http://127.0.0.1:{self.port(spec)}"

    def pids(self, spec: EngineSpec) -> list[int]:
        return ProcessCollector().find_engine_pids(self.port(spec))

    def server(self, spec: EngineSpec) -> Server:
        if spec.watched:
            return Server(Host.objects.get(hostname=WATCH_HOST).pk, self.port(spec))
        return Server.of(Deployment.objects.select_related("host").get(
            pk=self.deployments[spec.name]))

    def suggestions(self, spec: EngineSpec) -> list[Suggestion]:
        """The server's open suggestions: after a pass, exactly what it found."""
        if spec.watched:
            mine = Suggestion.objects.filter(
                deployment__isnull=True, engine__host__hostname=WATCH_HOST,
                engine__name__startswith=f"vllm:{self.port(spec)}/")
        else:
            mine = Suggestion.objects.filter(deployment_id=self.deployments[spec.name])
        return list(mine.filter(state=State.OPEN).order_by("kind"))

    def explain(self) -> str:
        logs = [p.log for p in self.processes if p.log is not None]
        return "\n".join(f"--- {log}\n{log.read_text(errors='replace')[-3000:]}"
                         for log in logs if log.exists())

    def close(self) -> None:
        """Agents first: the supervising one drains and stops its deployments."""
        for process in sorted(self.processes, key=lambda p: "agents" not in p.argv):
            process.stop(timeout=90)


@dataclass
class Outcome:
    """What one scenario's minute showed: the facts the pass read, the suggestions it left
    open on the scenario's server, and how the load's requests ended."""

    scenario: Scenario
    start: datetime
    facts: Facts
    suggestions: list[Suggestion]
    engine_ids: list[int]
    load: dict[str, int] = field(default_factory=dict)

    @property
    def kinds(self) -> set[str]:
        return {s.kind for s in self.suggestions}


def run(stack: Stack, schedule: tuple[Slot, ...]) -> dict[str, Outcome]:
    """Each slot's scenarios through one whole minute, the slots back to back: a scenario's
    load starts ``lead_s`` before its minute (while the previous slot's runs), its
    perturbation with the minute, both end with it, and a tuning pass judges the minute once
    it settled (during the next one)."""
    for slot in schedule:
        for scenario in slot:
            stack.wait_ready(scenario.engine)
    lead = max(s.lead_s for slot in schedule for s in slot)
    first = _next_minute(timezone.now() + timedelta(seconds=lead + 1))
    with Running(stack) as running:
        for at, _, action in sorted(_timeline(running, schedule, first),
                                    key=lambda event: event[:2]):
            _sleep_until(at)
            action()
    return running.outcomes


def _timeline(running: Running, schedule: tuple[Slot, ...], first: datetime):
    """(when, order at the same instant: ends first, judging last, what to do)."""
    for i, slot in enumerate(schedule):
        start = first + i * MINUTE
        for scenario in slot:
            yield start - timedelta(seconds=scenario.lead_s), 1, partial(running.load, scenario)
            if scenario.perturbation is not None:
                yield start, 1, partial(running.perturb, scenario)
            yield start + MINUTE, 0, partial(running.end, scenario)
        yield start + MINUTE + SETTLE, 2, partial(running.judge, slot, start)


class Running:
    """The loads and perturbations under way, and the outcomes judged so far; whatever is
    still under way ends on exit."""

    def __init__(self, stack: Stack) -> None:
        self.stack = stack
        self.loads: dict[str, Load] = {}
        self.perturbed: dict[str, ExitStack] = {}
        self.outcomes: dict[str, Outcome] = {}

    def __enter__(self) -> Running:
        return self

    def __exit__(self, *exc: object) -> None:
        for perturbed in self.perturbed.values():
            perturbed.close()
        for load in self.loads.values():
            load.halt()

    def load(self, scenario: Scenario) -> None:
        if scenario.clients:
            self.loads[scenario.name] = Load(self.stack.url(scenario.engine),
                                             str(self.stack.found.model),
                                             scenario.clients).start()

    def perturb(self, scenario: Scenario) -> None:
        assert scenario.perturbation is not None
        perturbed = self.perturbed[scenario.name] = ExitStack()
        perturbed.enter_context(scenario.perturbation(self.stack.pids(scenario.engine)))

    def end(self, scenario: Scenario) -> None:
        if (perturbed := self.perturbed.pop(scenario.name, None)) is not None:
            perturbed.close()
        if (load := self.loads.get(scenario.name)) is not None:
            load.halt()

    def judge(self, slot: Slot, start: datetime) -> None:
        """The tuning pass over the slot's minute, as the beat task would run it then."""
        end = start + MINUTE
        build.catch_up()
        with override_settings(PITWALL={**settings.PITWALL, **_objectives_of(slot)}):
            service.tuning_pass(now=end)
        for scenario in slot:
            server = self.stack.server(scenario.engine)
            facts = gather([server], start, end)[server.key]
            load = self.loads.pop(scenario.name, None)
            self.outcomes[scenario.name] = Outcome(
                scenario, start, facts, self.stack.suggestions(scenario.engine),
                facts.engine_ids, load.join() if load is not None else {})


def _objectives_of(slot: Slot) -> dict[str, int]:
    """The objectives the slot's minute is judged by: its scenarios' own (one pass judges
    them all, so they must agree) over OBJECTIVES."""
    own = {s.objectives for s in slot}
    assert len(own) == 1, f"scenarios sharing a minute disagree on objectives: {own}"
    return dict(own.pop())


def _next_minute(after: datetime) -> datetime:
    return floor(after, 60) + MINUTE


def _sleep_until(moment: datetime) -> None:
    time.sleep(max(0.0, (moment - timezone.now()).total_seconds()))


def schedule(*slots: tuple[str, ...]) -> tuple[Slot, ...]:
    """Slots of scenarios by name."""
    return tuple(tuple(SCENARIOS[name] for name in slot) for slot in slots)


# Every scenario, a minute each: the idle watched engine shares the capped deployment's
# minute; no two loads share one, and the watched engine's light load follows its idle
# minute without a lead.
EVERY = (("concurrency_cap", "over_provisioned"), ("prefill_ttft",), ("healthy",),
         ("cpu_starvation",), ("prefill_itl",), ("kv_pressure",))


def expected_kinds(outcome: Outcome) -> set[str]:
    """The scenario's diagnosis, and what the host earns on its own: a host under the
    reference host (these test hosts have 2 cores of its 8) gets a readiness report on
    every server."""
    host = outcome.facts.host
    small = ((host.cpu_count or REFERENCE["cpu_count"]) < REFERENCE["cpu_count"]
             or (host.mem_total_bytes or REFERENCE["mem_total_bytes"])
             < REFERENCE["mem_total_bytes"])
    return {outcome.scenario.expected} - {None} | ({Kind.HOST_READINESS} if small else set())


def on_the_other_path(scenario: Scenario) -> Scenario:
    """The scenario with its engine watched where it was deployed, and deployed where it was
    watched (the scorecard runs both)."""
    engine = scenario.engine
    other = replace(engine, watched=not engine.watched,
                    name=f"{engine.name}-{'watched' if not engine.watched else 'deployed'}")
    return replace(scenario, engine=other)


def scorecard(found: Install, only: list[str] | None = None,
              other_path: bool = False) -> Iterator[dict[str, Any]]:
    """Every scenario (or those named) on the real vLLM, as rows of the diagnoses scorecard
    (tests/bench/diagnoses_scorecard.py), on the database Django is set up with; each on the
    other path than its own with ``other_path``."""
    slots = [tuple(n for n in slot if not only or n in only) for slot in EVERY]
    plan = schedule(*(slot for slot in slots if slot))
    if other_path:
        plan = tuple(tuple(on_the_other_path(s) for s in slot) for slot in plan)
    workdir = Path(tempfile.mkdtemp(prefix="pitwall-scenarios-"))
    # The API client's "testserver" is a host production settings do not allow.
    with (override_settings(PITWALL=pitwall_settings(settings.PITWALL),
                            ALLOWED_HOSTS=[*settings.ALLOWED_HOSTS, "testserver"]),
          Stack(found, workdir, plan) as stack):
        outcomes = run(stack, plan)
    for slot in plan:
        for scenario in slot:
            outcome, expected = outcomes[scenario.name], expected_kinds(outcomes[scenario.name])
            yield {"scenario": scenario.name, "engine": scenario.engine.name,
                   "path": "watched" if scenario.engine.watched else "deployment",
                   "expected": sorted(expected), "found": sorted(outcome.kinds),
                   "false_positives": sorted(outcome.kinds - expected),
                   # one minute judged once: found in its first minute, or not at all
                   "onset_to_suggestion_min": 1 if expected <= outcome.kinds else None}
