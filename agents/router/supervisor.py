"""Run one vllm-router per service the control plane routes through this host, and keep each
router's worker list equal to the service's replicas in rotation.

The process side is the vLLM supervisor's (agents/supervisor): an ``Instance`` per router
starts it in a process group of its own, probes its /health, restarts it after a crash with
the same backoff, and drains it (SIGTERM, then SIGKILL to the group) when its port, policy or
hold changes or the service leaves this host. The worker list is applied live, never by a restart:
``POST /add_worker`` and ``/remove_worker``, then ``GET /workers`` to verify, every tick.

A tick removes first: taking a replica out of rotation is what must reach the router within
seconds of the control plane's decision (a draining or wedged replica still gets requests
until then), so every router's removals go out before anything that can wait (a probe, a
start, an add that waits for the worker's /health).

    RouterSupervisor()                 # vllm-router on PATH, else next to this Python
    RouterSupervisor(["/opt/router/bin/vllm-router"])
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agents.router import admin
from agents.router.admin import RouterAdminError, RouterMetrics, Worker
from agents.router.placeholder import Placeholders
from agents.router.spec import RouterSpec, parse_routers
from agents.supervisor.backoff import Backoff
from agents.supervisor.health import http_health
from agents.supervisor.instance import EXIT_GRACE_S, STATUS_TAIL_LINES, Instance, Runtime
from agents.supervisor.launch import LaunchPlan, inherited_env
from agents.supervisor.process import LogTail, Process
from agents.supervisor.process import spawn as spawn_process

ROUTER_PROGRAM = "vllm-router"
# The router exits at once on SIGTERM (it holds no request worth waiting for that a client
# would not retry); past this and the instance's grace, SIGKILL to its group.
DRAIN_S = 2.0
STARTUP_TIMEOUT_S = 60.0  # it binds within a second; a minute covers a loaded host
# How long the router waits for an added worker's /health (and its probe's own timeout)
# before refusing it; the agent asks again on its next tick. Short, as the agent's loop waits
# on the call: a replica goes into rotation only once its own /health answered.
WORKER_WAIT_S = 2
METRICS_EVERY_S = 5.0
# A worker's circuit opens after this many failures in a row, fewer than a request's 5 tries,
# so a request whose first tries met a dead worker has tries left for a live one. It stays
# open this long before the router tries the worker again (the default is 60 s): a replica
# that is dead is out of the router sooner by the control plane's verdict.
CIRCUIT_FAILURES = 3
CIRCUIT_OPEN_S = 10
# A router that holds requests at zero replicas (hold_flags): the router's own first backoff and
# growth, and the longest backoff, which is what a held request may wait after a worker joins.
RETRY_INITIAL_BACKOFF_MS = 50
RETRY_BACKOFF_MULTIPLIER = 1.5
RETRY_MAX_BACKOFF_MS = 2000
# With no worker listed, the page is read every tick: its count of tries that found no worker
# is how the control plane learns a request waits for a first replica.
METRICS_IDLE_EVERY_S = 1.0
MAX_ERROR_CHARS = 1000  # what the control plane stores of a report's error
_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")  # the router colours its log lines


def default_command() -> list[str]:
    """vllm-router on PATH, else the one installed beside this Python (a virtualenv the
    agent runs from without being activated)."""
    found = shutil.which(ROUTER_PROGRAM)
    if found is None:
        beside = Path(sys.executable).parent / ROUTER_PROGRAM
        found = str(beside) if beside.exists() else ROUTER_PROGRAM
    return [found]


def router_argv(command: list[str], spec: RouterProcess, workers: list[str],
                prometheus_port: int) -> list[str]:
    # The router's health checks stay at their defaults and are not what takes a replica out:
    # a wedged vLLM answers /health with 200 (the control plane's stall verdict does). Retries
    # stay on (5 tries), so a request a dead or draining replica refuses goes to another; the
    # circuit breaker opens sooner than its default, as power_of_two prefers a dead worker (it
    # holds nothing): at 10 failures two requests it held spent all their tries on it.
    return [*command, "--host", "0.0.0.0", "--port", str(spec.port), "--policy", spec.policy,
            "--cb-failure-threshold", str(CIRCUIT_FAILURES),
            "--cb-timeout-duration-secs", str(CIRCUIT_OPEN_S),
            "--worker-urls", *workers,
            "--prometheus-port", str(prometheus_port), "--prometheus-host", "127.0.0.1",
            "--log-level", "warning",
            "--worker-startup-timeout-secs", str(WORKER_WAIT_S),
            "--worker-startup-check-interval", "1",
            "--health-check-timeout-secs", str(WORKER_WAIT_S),
            *hold_flags(spec.hold_s)]


def hold_flags(hold_s: int) -> list[str]:
    """The retry budget that holds a request for about ``hold_s`` seconds while the router
    has no worker (none for 0: the router's defaults, 5 tries within half a second).

    vllm-router 0.1.17 refuses a request it has no worker for at once (503 "No available
    workers"); its queue (--queue-size) only holds requests past --max-concurrent-requests,
    not those. Its retry loop holds them: each try that finds no worker is followed by a
    backoff, and a worker added meanwhile takes the next try. The first backoffs stay the
    router's own (50 ms, x1.5), so a live replica's failure is retried as quickly as before;
    they stop growing at RETRY_MAX_BACKOFF_MS, which bounds how long a held request waits
    after its replica joins."""
    if hold_s <= 0:
        return []
    return ["--retry-max-retries", str(hold_retries(hold_s)),
            "--retry-initial-backoff-ms", str(RETRY_INITIAL_BACKOFF_MS),
            "--retry-backoff-multiplier", str(RETRY_BACKOFF_MULTIPLIER),
            "--retry-max-backoff-ms", str(RETRY_MAX_BACKOFF_MS)]


def hold_retries(hold_s: float) -> int:
    """The tries whose backoffs add up to ``hold_s`` (the router's jitter, 20% either way,
    averages out over them)."""
    tries, held_s, backoff_s = 1, 0.0, RETRY_INITIAL_BACKOFF_MS / 1000
    while held_s < hold_s:
        held_s += min(backoff_s, RETRY_MAX_BACKOFF_MS / 1000)
        backoff_s *= RETRY_BACKOFF_MULTIPLIER
        tries += 1
    return tries


def free_port() -> int:
    """A loopback port nobody holds now, for the router's Prometheus page."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _bounded(text: str, limit: int = MAX_ERROR_CHARS) -> str:
    return text if len(text) <= limit else text[:limit - 1] + "…"


def _process_key(process: RouterProcess) -> tuple[int, str, int]:
    return process.port, process.policy, process.hold_s


class _PlainTail(LogTail):
    def append(self, line: str) -> None:
        super().append(_ANSI.sub("", line))


@dataclass(frozen=True)
class RouterProcess:
    """What an ``Instance`` runs: the router's process, without its worker list."""

    id: int  # the service's id
    revision: int  # counts the changes of port, policy or hold: each one is a restart
    port: int
    policy: str
    hold_s: int = 0  # the spec's: a retry budget that holds requests while no worker is listed
    drain_timeout_s: float = DRAIN_S


@dataclass
class _Router:
    spec: RouterSpec
    instance: Instance
    pid: int | None = None  # the process the fields below describe
    prometheus_port: int = 0
    held: set[str] = field(default_factory=set)  # what the router holds, as last known
    listed: list[Worker] = field(default_factory=list)  # its own list, last read
    metrics: RouterMetrics = field(default_factory=RouterMetrics)
    metrics_at: float = float("-inf")
    errors: list[str] = field(default_factory=list)  # this tick's
    error: str = ""  # the last tick's
    at: float = 0.0

    def up(self) -> bool:
        process = self.instance.process
        return (self.instance.state == "ready" and process is not None
                and process.pid == self.pid)


class RouterSupervisor:
    def __init__(self, command: list[str] | None = None, *,
                 clock: Callable[[], float] = time.time,
                 probe: Callable[[int], bool] = http_health,
                 spawn: Callable[[LaunchPlan, LogTail], Process] = spawn_process,
                 new_backoff: Callable[[], Backoff] = Backoff,
                 startup_timeout_s: float = STARTUP_TIMEOUT_S,
                 secrets: tuple[str, ...] = ()) -> None:
        """`secrets`: values (the agent's token) kept out of every router's environment."""
        self.command = list(default_command() if command is None else command)
        self.clock, self.secrets, self._spawn = clock, tuple(secrets), spawn
        self._probe, self._healthy = probe, {}  # port -> the last probe's answer
        self.runtime = Runtime(self._launch, self._probed, new_backoff=new_backoff,
                               startup_timeout_s=startup_timeout_s, clock=clock)
        self.routers: dict[int, _Router] = {}
        self.placeholders = Placeholders()

    # Not thread-safe: call every method from the agent's loop thread.

    def set_desired(self, routers: list[Mapping[str, Any]]) -> None:
        """Replace the desired routers; the next tick acts on them. A bad entry (SpecError)
        leaves the previous set in force."""
        self.apply(parse_routers(routers))

    def apply(self, specs: Mapping[int, RouterSpec]) -> None:
        now = self.clock()
        for service_id, router in self.routers.items():
            spec = specs.get(service_id)
            if spec is None:
                router.instance.target = None
                continue
            current = router.instance.target or router.instance.spec
            if current is not None and _process_key(current) == spec.process_key:
                router.instance.target = current  # kept, or taken back while it drained
            else:
                revision = 1 if current is None else current.revision + 1
                router.instance.target = RouterProcess(service_id, revision, *spec.process_key)
            router.spec = spec
        for service_id, spec in specs.items():
            if service_id not in self.routers:
                target = RouterProcess(service_id, 1, *spec.process_key)
                self.routers[service_id] = _Router(
                    spec, Instance(target, self.runtime, since=now, tail=_PlainTail()))

    def tick(self, now: float | None = None) -> None:
        now = self.clock() if now is None else now
        routers = list(self.routers.values())
        for router in routers:
            router.errors = []
            self._remove_unwanted(router)
        for router in routers:
            router.instance.step(now)
            if router.up():
                self._converge(router, now)
            router.error, router.at = _bounded("; ".join(router.errors)), now
        self.routers = {i: r for i, r in self.routers.items() if not r.instance.finished}

    def status(self) -> list[dict[str, Any]]:
        """The routers the control plane wants here; one it took away is not reported while
        it drains (its service may be routed by another host already)."""
        return [self._status(self.routers[i]) for i in sorted(self.routers)
                if self.routers[i].instance.target is not None]

    def close(self, sleep: Callable[[float], None] = time.sleep, poll_s: float = 0.1) -> None:
        """Stop every router and wait until all are gone (they exit on SIGTERM)."""
        self.apply({})
        deadline = self.clock() + DRAIN_S + EXIT_GRACE_S + 10.0
        remaining = list(self.routers.values())
        while remaining and self.clock() < deadline:
            for router in remaining:
                router.instance.step(self.clock())
            remaining = [r for r in remaining if not r.instance.finished]
            if remaining:
                sleep(poll_s)
        self.routers = {i: r for i, r in self.routers.items() if not r.instance.finished}
        self.placeholders.close()

    # --- the worker list ---------------------------------------------------------------------

    def _remove_unwanted(self, router: _Router) -> None:
        if not router.up():
            return
        for url in sorted(router.held - set(router.spec.workers)):
            self._admin(router, "remove", admin.remove_worker, url)

    def _converge(self, router: _Router, now: float) -> None:
        """Add what is missing, then read the router's own list; what differs from the
        desired list then (a router restarted behind our back, a worker it dropped) is
        applied again at once."""
        wanted = set(router.spec.workers)
        for url in [u for u in router.spec.workers if u not in router.held]:
            self._admin(router, "add", admin.add_worker, url)
        if not self._read_list(router) or {w.url for w in router.listed} == wanted:
            self._scrape(router, now)
            return
        for url in sorted(router.held - wanted):
            self._admin(router, "remove", admin.remove_worker, url)
        for url in [u for u in router.spec.workers if u not in router.held]:
            self._admin(router, "add", admin.add_worker, url)
        if self._read_list(router) and router.held != wanted:
            router.errors.append(f"the router lists {sorted(router.held)}, not the wanted "
                                 f"{sorted(wanted)}")
        self._scrape(router, now)

    def _admin(self, router: _Router, verb: str, call: Callable[[int, str], None],
               url: str) -> None:
        try:
            call(router.instance.spec.port, url)  # type: ignore[union-attr]
        except RouterAdminError as exc:
            router.errors.append(f"{verb} {url}: {exc}")
            return
        if verb == "add":
            router.held.add(url)
        else:
            router.held.discard(url)

    def _read_list(self, router: _Router) -> bool:
        try:
            router.listed = admin.workers(router.instance.spec.port)  # type: ignore[union-attr]
        except RouterAdminError as exc:
            router.errors.append(str(exc))
            return False
        router.held = {w.url for w in router.listed}
        return True

    def _scrape(self, router: _Router, now: float) -> None:
        every_s = METRICS_EVERY_S if router.listed else METRICS_IDLE_EVERY_S
        if now - router.metrics_at < every_s:
            return
        try:
            text = admin.metrics(router.prometheus_port)
            router.metrics = admin.parse_metrics(text, router.listed)
        except RouterAdminError as exc:
            router.errors.append(str(exc))
            return
        router.metrics_at = now

    # --- the process -------------------------------------------------------------------------

    def _launch(self, spec: RouterProcess, tail: LogTail) -> tuple[Process, LaunchPlan]:
        router = self.routers[spec.id]
        # Started with no worker (the first tick it is up adds them): a worker named on the
        # command line that does not answer /health within WORKER_WAIT_S makes the router
        # exit, and one unreachable replica must not keep its service's router down.
        workers = list(self.placeholders.urls()) if spec.policy == "power_of_two" else []
        prometheus_port = free_port()
        argv = router_argv(self.command, spec, workers, prometheus_port)
        plan = LaunchPlan(argv, inherited_env(os.environ, self.secrets))
        process = self._spawn(plan, tail)
        # A new process: nothing known of it but what it was started with.
        router.pid, router.prometheus_port = process.pid, prometheus_port
        router.held = set(workers)
        router.listed, router.metrics, router.metrics_at = [], RouterMetrics(), float("-inf")
        return process, plan

    def _probed(self, port: int) -> bool:
        self._healthy[port] = healthy = self._probe(port)
        return healthy

    def _status(self, router: _Router) -> dict[str, Any]:
        instance, up = router.instance, router.up()
        port = (instance.spec or instance.target or router.spec).port
        return {"service_id": router.spec.service_id, "state": instance.state,
                "pid": None if instance.process is None else instance.process.pid,
                "port": port,
                "workers": [w.url for w in router.listed] if up else [],
                "healthy": up and self._healthy.get(port, False),
                "error": router.error or _bounded(instance.error or ""),
                "log_tail": instance.tail.last(STATUS_TAIL_LINES),
                "metrics": (router.metrics if up else RouterMetrics()).as_json(),
                "at": router.at}
