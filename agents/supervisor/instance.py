"""One deployment's state machine: started, probed, drained, restarted after a crash.

    stopped ──start──▶ starting ──/health 200──▶ ready
       ▲                  │  exit, start timeout   │  exit, N failed probes
       │                  ▼                        ▼
       │               crashed ──group gone──▶ backing_off ──delay over──▶ starting
       │
    draining ◀── SIGTERM to vLLM's API server when the desired spec changed or was removed;
                 once it has exited: SIGKILL to what is left of its group, stopped, and the
                 new spec starts at once; still running after drain_timeout_s + EXIT_GRACE_S:
                 SIGKILL to the group

vLLM drains itself: started with ``--shutdown-timeout N`` (the control plane passes the drain
timeout), its API server stops taking requests on SIGTERM, lets the running ones finish for up
to N s, then stops its EngineCore and workers and exits. Signalling the whole group instead
would reach the EngineCore directly, which aborts every running request.

Nothing here blocks: `step(now)` looks at the process and the probe once and moves at most a
few transitions, so one slow deployment never holds up the others in the agent's loop.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from agents.supervisor.backoff import Backoff
from agents.supervisor.launch import LaunchPlan
from agents.supervisor.phases import PhaseTail, StartPhases
from agents.supervisor.process import LogTail, Process
from agents.supervisor.spec import DeploymentSpec

STATUS_TAIL_LINES = 50
# After its last request a real vLLM 0.32 takes a few seconds to stop its engine processes and
# exit (measured 0.5-5 s on 2 cores, see docs/deployments.md); SIGKILL waits this long beyond
# the drain timeout, so a drain that finishes in time is never cut short.
EXIT_GRACE_S = 15.0


@dataclass
class Runtime:
    """What every instance shares: how to start, how to probe, and the timing knobs."""

    launch: Callable[[DeploymentSpec, LogTail], tuple[Process, LaunchPlan]]
    probe: Callable[[int], bool]
    new_backoff: Callable[[], Backoff] = Backoff
    startup_timeout_s: float = 600.0  # real vLLM loads weights and compiles for minutes
    unhealthy_after: int = 3  # failed probes in a row before a ready instance is killed
    stable_after_s: float = 600.0  # ready this long and a crash starts the backoff afresh
    clock: Callable[[], float] = time.time  # the supervisor's: times the phases' log lines


@dataclass
class Instance:
    target: DeploymentSpec | None  # what should run; None once removed
    runtime: Runtime
    since: float
    spec: DeploymentSpec | None = None  # what runs, or ran last
    state: str = "stopped"
    process: Process | None = None
    restarts: int = 0
    next_start_at: float | None = None
    exit_code: int | None = None
    error: str | None = None
    argv: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    tail: LogTail = field(default_factory=LogTail)
    phases: StartPhases | None = None  # the current start's; None before the first
    backoff: Backoff = field(init=False)
    _failed_probes: int = field(default=0, init=False)
    _drain_deadline: float = field(default=0.0, init=False)
    _killed: bool = field(default=False, init=False)  # SIGKILL sent to a draining group

    def __post_init__(self) -> None:
        self.backoff = self.runtime.new_backoff()

    @property
    def finished(self) -> bool:
        """Removed and nothing left running: the supervisor may forget it."""
        return self.target is None and self.state == "stopped"

    def step(self, now: float) -> None:
        if self.state in ("starting", "ready") and self.target != self.spec:
            self._drain(now)
        handler = getattr(self, f"_on_{self.state}")
        handler(now)
        if self.state == "stopped":
            self._on_stopped(now)  # a drained or abandoned revision gives way at once

    # --- one handler per state -------------------------------------------------------------

    def _on_stopped(self, now: float) -> None:
        if self.target is None:
            return
        if self.target != self.spec:
            # A new spec is a new configuration: its crash history starts from nothing.
            self.spec, self.restarts = self.target, 0
            self.backoff.reset()
        self._start(now)

    def _on_starting(self, now: float) -> None:
        if self._exited(now):
            return
        if self.runtime.probe(self._port):
            self._enter("ready", now)
            self.error, self._failed_probes = None, 0
            self._note_ready(now)
        elif now - self.since >= self.runtime.startup_timeout_s:
            self._crash(now, f"not healthy {self.runtime.startup_timeout_s:g} s after start")

    def _on_ready(self, now: float) -> None:
        if self._exited(now):
            return
        if self.runtime.probe(self._port):
            self._failed_probes = 0
            if now - self.since >= self.runtime.stable_after_s:
                self.backoff.reset()
            return
        self._failed_probes += 1
        if self._failed_probes >= self.runtime.unhealthy_after:
            self._crash(now, f"/health failed {self._failed_probes} times in a row")

    def _on_crashed(self, now: float) -> None:
        if self.process is not None and self.process.poll() is None:
            return  # SIGKILL sent; wait until the leader is really gone (its port, its GPUs)
        self._record_exit()
        if self.target != self.spec:
            self._enter("stopped", now)  # no backoff for a configuration nobody wants now
            return
        self.next_start_at = now + self.backoff.next_delay()
        self._enter("backing_off", now)

    def _on_backing_off(self, now: float) -> None:
        if self.target != self.spec:
            self.next_start_at = None
            self._enter("stopped", now)
        elif self.next_start_at is not None and now >= self.next_start_at:
            self.restarts += 1
            self._start(now)

    def _on_draining(self, now: float) -> None:
        # No health probe here: a draining vLLM still answers /health with 200.
        assert self.process is not None
        if self.process.poll() is not None:
            self.process.signal_group(signal.SIGKILL)  # workers the leader left behind
            self._record_exit()
            self.tail.append(f"[pitwall] drained in {now - self.since:.1f} s, "
                             f"exit code {self.exit_code}")
            self._enter("stopped", now)
        elif now >= self._drain_deadline and not self._killed:
            self.process.signal_group(signal.SIGKILL)
            self._killed = True
            self.tail.append("[pitwall] still running after the drain timeout: SIGKILL to "
                             "the process group")

    # --- transitions -----------------------------------------------------------------------

    def _start(self, now: float) -> None:
        assert self.spec is not None
        self.next_start_at, self.exit_code, self._failed_probes = None, None, 0
        phases = StartPhases(now, self.runtime.clock)
        try:
            self.process, plan = self.runtime.launch(self.spec, PhaseTail(self.tail, phases))
        except Exception as exc:  # noqa: BLE001 - whatever failed, the state says so
            self.process, self.phases = None, None
            self._crash(now, f"could not start: {exc}")
            return
        self.phases = phases
        self.argv, self.warnings = plan.argv, plan.warnings
        self.tail.append(f"[pitwall] revision {self.spec.revision} started, "
                         f"pid {self.process.pid}")
        self._enter("starting", now)

    def _note_ready(self, now: float) -> None:
        assert self.phases is not None and self.spec is not None
        self.phases.ready(now, "health")  # unless the log said so first
        self.tail.append(f"[pitwall] revision {self.spec.revision} {self.phases.summary()}")

    def _exited(self, now: float) -> bool:
        assert self.process is not None
        code = self.process.poll()
        if code is None:
            return False
        self._crash(now, f"exited with code {code}")
        return True

    def _crash(self, now: float, reason: str) -> None:
        if self.process is not None:
            # Kill the whole group even when the leader is gone: orphaned workers still hold
            # GPU memory and would make the restart fail.
            self.process.signal_group(signal.SIGKILL)
        self.error = reason
        self.tail.append(f"[pitwall] {reason}")
        self._enter("crashed", now)

    def _drain(self, now: float) -> None:
        assert self.process is not None and self.spec is not None
        self.process.signal_leader(signal.SIGTERM)  # vLLM stops accepting, finishes requests
        timeout = self.spec.drain_timeout_s
        self._drain_deadline = now + timeout + EXIT_GRACE_S
        self._killed = False
        self.tail.append(f"[pitwall] draining revision {self.spec.revision}: SIGTERM to pid "
                         f"{self.process.pid}; running requests may finish for {timeout:g} s, "
                         f"SIGKILL to the group if it still runs {timeout + EXIT_GRACE_S:g} s "
                         "from now")
        self._enter("draining", now)

    def _record_exit(self) -> None:
        if self.process is not None:
            self.exit_code = self.process.poll()
        self.process = None

    def _enter(self, state: str, now: float) -> None:
        self.state, self.since = state, now

    @property
    def _port(self) -> int:
        assert self.spec is not None
        return self.spec.port

    def status(self) -> dict[str, Any]:
        spec = self.spec or self.target  # not started yet: what will start
        assert spec is not None
        return {"id": spec.id, "revision": spec.revision, "state": self.state,
                "since": self.since, "pid": None if self.process is None else self.process.pid,
                "restarts": self.restarts, "next_start_at": self.next_start_at,
                "exit_code": self.exit_code, "error": self.error, "argv": list(self.argv),
                "log_tail": self.tail.last(STATUS_TAIL_LINES),
                "warnings": list(self.warnings),
                # The phases of the process that runs (or ran last), whatever state it is in.
                "phases": {} if self.phases is None else self.phases.snapshot()}
