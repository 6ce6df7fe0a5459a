"""The agent's control loop: fetch the desired config, keep the supervisors on it, report.

Runs on a thread of its own beside the sampling loop, once a second, and at once when woken
(``poke``: the sender got an ingest reply with a newer ``config_version``). The desired config
is fetched at start, whenever an ingest reply carries a ``config_version`` newer than the one
applied, and every ``REFETCH_S`` regardless (a safety net while ingest is down or spooling).
A report goes out when a deployment's state, revision, pid or restart count changes, when a
router's state, pid, workers, health, error or count of tries that found no worker changes (at
zero replicas, a request waiting for the first one), when a deployment's log tail grew and
``LOG_REPORT_S`` passed, and every ``HEARTBEAT_S`` otherwise.

With --supervise the vLLM deployments run here; with --router the services' routers
(agents/router): either or both. The routers tick first: a replica taken out of rotation must
leave its router within seconds of the control plane's decision, before the vLLM instances'
probes and starts take their time.

The engines the supervisor runs are the engines the agent scrapes: ``EngineSet`` follows the
desired ports (and, with simulated GPUs, points them at the simulated vLLMs' state).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from agents.collectors.base import Warn, WarnOnce, stderr_warn
from agents.control import ControlClient, ControlError
from agents.router.supervisor import RouterSupervisor
from agents.supervisor.spec import SpecError
from agents.supervisor.supervisor import Supervisor

REFETCH_S = 60.0
RETRY_S = 10.0  # after a failed fetch or report
HEARTBEAT_S = 30.0
LOG_REPORT_S = 10.0
_KEY = ("id", "state", "revision", "pid", "restarts", "exit_code")
_ROUTER_KEY = ("service_id", "state", "pid", "port", "workers", "healthy", "error")


class EngineSet:
    """The vLLM /metrics the agent scrapes: the URLs named on its command line, plus one per
    port the supervisor runs. Lists are replaced whole, never mutated: the sampler reads them
    from another thread."""

    def __init__(self, sources: Any, make: Callable[[str], Any], static_urls: list[str],
                 sim_nvml: Any = None, state_source: Callable[[str], Any] | None = None
                 ) -> None:
        self.sources, self.make, self.static = sources, make, list(static_urls)
        self.sim_nvml, self.state_source = sim_nvml, state_source
        self._collectors: dict[str, Any] = {c.url: c for c in sources.engines
                                            if hasattr(c, "url")}

    def follow(self, ports: list[int]) -> None:
        urls = [*self.static, *(f"http://127.0.0.1:{p}/metrics" for p in sorted(set(ports)))]
        urls = list(dict.fromkeys(urls))
        self._collectors = {u: self._collectors.get(u) or self.make(u) for u in urls}
        self.sources.engines = [self._collectors[u] for u in urls]
        if self.sim_nvml is not None and self.state_source is not None:
            self.sim_nvml.state_sources = [self.state_source(u) for u in urls]


class Reconciler:
    def __init__(self, control: ControlClient, supervisor: Supervisor | None,
                 announced: Callable[[], int | None], engines: EngineSet | None = None,
                 warn: Warn = stderr_warn, clock: Callable[[], float] = time.time,
                 routers: RouterSupervisor | None = None) -> None:
        """`supervisor`: None unless --supervise; `routers`: None unless --router."""
        self.control, self.supervisor, self.announced = control, supervisor, announced
        self.engines, self.clock, self.routers = engines, clock, routers
        self.warn = WarnOnce(warn)
        self.wake = threading.Event()
        self.applied: int | None = None  # the config_version the supervisor runs
        self._refetch_at = 0.0
        self._retry_at = 0.0  # no fetch before this, after one failed
        self._reported: dict[int, tuple] = {}
        self._reported_routers: dict[int, tuple] = {}
        self._tails: dict[int, list[str]] = {}
        self._report_due = 0.0
        self._heartbeat_due = 0.0

    def poke(self) -> None:
        """Step now rather than at the end of the period (thread-safe)."""
        self.wake.set()

    def step(self) -> None:
        now = self.clock()
        if self._wants_config(now):
            self._fetch(now)
        if self.routers is not None:
            self.routers.tick(now)
        if self.supervisor is not None:
            self.supervisor.tick(now)
        self._report(now)

    def run(self, stop: threading.Event, period_s: float = 1.0) -> None:
        """Step every period until ``stop`` is set; whoever sets it pokes, so the wait ends."""
        while not stop.is_set():
            started = time.monotonic()
            try:
                self.step()
            except Exception as exc:  # the supervisor must outlive any one bad step
                self.warn.fail("supervisor", f"step failed: {type(exc).__name__}: {exc}")
            self.wake.wait(max(0.0, period_s - (time.monotonic() - started)))
            # A poke between the wait's end and here is not lost: the step that follows at
            # once reads what it announced.
            self.wake.clear()

    def _wants_config(self, now: float) -> bool:
        if now < self._retry_at:
            return False
        # Greater, not different: ingest caches versions for a moment (CONFIG_TTL_S), so a
        # reply can still carry the version before the one just fetched.
        announced = self.announced()
        newer = announced is not None and (self.applied is None or announced > self.applied)
        return newer or now >= self._refetch_at

    def _fetch(self, now: float) -> None:
        try:
            config = self.control.config()
            if self.supervisor is not None:
                self.supervisor.set_desired(config["deployments"])
        except (ControlError, SpecError) as exc:
            self.warn.fail("desired config", f"not applied: {exc}")
            self._retry_at = now + RETRY_S
            return
        self.warn.ok("desired config")
        self._set_routers(config.get("routers", []))
        self.applied, self._refetch_at = config["version"], now + REFETCH_S
        if self.engines is not None:
            self.engines.follow([d["port"] for d in config["deployments"]])

    def _set_routers(self, routers: Any) -> None:
        """A router list refused keeps the routers as they are, and costs the deployments
        nothing: they are applied already, and neither depends on the other."""
        if self.routers is None:
            return
        try:
            self.routers.set_desired(routers)
        except SpecError as exc:
            self.warn.fail("routers", f"not applied, the running ones stay: {exc}")
            return
        self.warn.ok("routers")

    def _report(self, now: float) -> None:
        statuses = [] if self.supervisor is None else self.supervisor.status()
        routers = None if self.routers is None else self.routers.status()
        if not statuses and not routers and not (self._reported or self._reported_routers):
            return
        keys = {s["id"]: tuple(s.get(k) for k in _KEY) for s in statuses}
        router_keys = {r["service_id"]: _router_key(r) for r in routers or []}
        tails = {s["id"]: s.get("log_tail", []) for s in statuses}
        changed = keys != self._reported or router_keys != self._reported_routers
        logged = tails != self._tails and now >= self._report_due
        if not (changed or logged or now >= self._heartbeat_due):
            return
        try:
            if routers is None:
                self.control.report(statuses)
            else:
                self.control.report(statuses, routers)
        except ControlError as exc:
            self.warn.fail("deployment status", f"not reported: {exc}")
            self._heartbeat_due = now + RETRY_S
            return
        self.warn.ok("deployment status")
        self._reported, self._reported_routers, self._tails = keys, router_keys, tails
        self._report_due, self._heartbeat_due = now + LOG_REPORT_S, now + HEARTBEAT_S


def _router_key(report: dict[str, Any]) -> tuple:
    """What changes a router's report: its key fields, and its tries that found no worker (a
    service at zero replicas scales out on them, so they go out now, not with the heartbeat;
    a router with workers rarely counts any)."""
    metrics = report.get("metrics")
    tries = metrics.get("no_worker_tries") if isinstance(metrics, dict) else None
    return (*(_frozen(report.get(k)) for k in _ROUTER_KEY), tries)


def _frozen(value: Any) -> Any:
    return tuple(value) if isinstance(value, list) else value
