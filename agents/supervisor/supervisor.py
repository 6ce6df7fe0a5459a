"""Run the vLLM instances a host should run, and keep them to the desired configuration.

The agent's loop hands over the control plane's desired deployments with `set_desired()`
and calls `tick()` about once a second; `status()` says what actually runs, for the next
report. All the waiting (startup, drain, backoff) is state plus a deadline, never a sleep, so
a tick stays short. Only `close()` blocks, because the agent is exiting.

    Supervisor()                                            # real: vllm serve MODEL --port N
    Supervisor([sys.executable, "-m", "agents.sim.vllm_server", "--model"])   # simulated
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any

from agents.supervisor.backoff import Backoff
from agents.supervisor.health import http_health
from agents.supervisor.instance import EXIT_GRACE_S, Instance, Runtime
from agents.supervisor.launch import DEFAULT_COMMAND, LaunchPlan, plan_launch
from agents.supervisor.process import LogTail, Process
from agents.supervisor.process import spawn as spawn_process
from agents.supervisor.spec import DeploymentSpec, parse_specs

# Beyond the longest drain timeout: vLLM's own exit grace, after which an instance SIGKILLs its
# group, and then time for the killed group to go; less would leave vLLM running unsupervised.
CLOSE_GRACE_S = EXIT_GRACE_S + 10.0


class Supervisor:
    def __init__(self, command: list[str] | None = None, *,
                 clock: Callable[[], float] = time.time,
                 probe: Callable[[int], bool] = http_health,
                 spawn: Callable[[LaunchPlan, LogTail], Process] = spawn_process,
                 new_backoff: Callable[[], Backoff] = Backoff,
                 sys_root: str = "/sys", startup_timeout_s: float = 600.0,
                 unhealthy_after: int = 3, stable_after_s: float = 600.0,
                 secrets: tuple[str, ...] = ()) -> None:
        """`secrets`: values (the agent's token) kept out of every vLLM's environment."""
        self.command = list(DEFAULT_COMMAND if command is None else command)
        self.secrets = tuple(secrets)
        self.clock, self.sys_root, self._spawn = clock, sys_root, spawn
        self.runtime = Runtime(self._launch, probe, new_backoff, startup_timeout_s,
                               unhealthy_after, stable_after_s, clock)
        self.instances: dict[int, Instance] = {}

    def set_desired(self, deployments: list[Mapping[str, Any]]) -> None:
        """Replace the desired set; the next tick acts on it. A bad entry (SpecError, a
        ValueError) leaves the previous set in force: a half-applied config is worse."""
        specs = parse_specs(deployments)
        now = self.clock()
        for id_, instance in self.instances.items():
            instance.target = specs.get(id_)
        for id_, spec in specs.items():
            if id_ not in self.instances:
                self.instances[id_] = Instance(spec, self.runtime, since=now)

    # Not thread-safe: call every method from the agent's loop thread.

    def tick(self, now: float | None = None) -> None:
        now = self.clock() if now is None else now
        for instance in list(self.instances.values()):
            instance.step(now)
        self.instances = {i: inst for i, inst in self.instances.items() if not inst.finished}

    def status(self) -> list[dict[str, Any]]:
        return [self.instances[i].status() for i in sorted(self.instances)]

    def close(self, sleep: Callable[[float], None] = time.sleep,
              poll_s: float = 0.1) -> None:
        """Drain every instance (each within its drain timeout) and wait until all are gone.

        Stopped instances stay listed in `status()` as "stopped" afterwards."""
        self.set_desired([])
        drains = [i.spec.drain_timeout_s for i in self.instances.values() if i.spec]
        deadline = self.clock() + max(drains, default=0.0) + CLOSE_GRACE_S
        remaining = list(self.instances.values())
        while remaining and self.clock() < deadline:
            for instance in remaining:
                instance.step(self.clock())
            remaining = [i for i in remaining if not i.finished]
            if remaining:
                sleep(poll_s)
        # Never started (closed before the first tick): nothing to report.
        self.instances = {i: x for i, x in self.instances.items() if x.spec is not None}

    def _launch(self, spec: DeploymentSpec, tail: LogTail) -> tuple[Process, LaunchPlan]:
        plan = plan_launch(spec, self.command, sys_root=self.sys_root, secrets=self.secrets)
        return self._spawn(plan, tail), plan
