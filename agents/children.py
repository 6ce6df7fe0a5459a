"""Run a set of child processes and stop every one of them on Ctrl-C, SIGTERM or a death.

Used by ``make run`` (``manage.py runstack``: ASGI server, Celery worker and beat, the
simulated fleet) and by the simulated fleet itself (a simulated vLLM and an agent per host).
No Django here: the agent distribution carries it.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass, field


@dataclass
class Child:
    name: str
    argv: list[str]
    env: dict[str, str] = field(default_factory=dict)
    process: subprocess.Popen | None = None


class Stack:
    def __init__(self, children: list[Child], log=print) -> None:
        self.children = children
        self.log = log

    def start(self) -> None:
        """Start the children not started yet (call again after adding more)."""
        for child in self.children:
            if child.process is not None:
                continue
            # Each child leads its own process group, so stopping it stops its children too.
            child.process = subprocess.Popen(
                child.argv, env={**os.environ, **child.env}, start_new_session=True)
            self.log(f"started {child.name} (pid {child.process.pid})")

    def wait_http(self, url: str, timeout_s: float = 60.0) -> bool:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.exited():
                return False
            try:
                with urllib.request.urlopen(url, timeout=2):
                    return True
            except OSError:
                time.sleep(0.3)
        return False

    def exited(self) -> Child | None:
        return next((c for c in self.children if c.process and c.process.poll() is not None),
                    None)

    def supervise(self) -> int:
        """Block until Ctrl-C / SIGTERM or until a child dies; then stop everything."""
        stop = {"signal": None}

        def on_signal(signum, frame):  # noqa: ARG001
            stop["signal"] = signum

        previous = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
        code = 0
        try:
            while stop["signal"] is None:
                dead = self.exited()
                if dead is not None:
                    self.log(f"{dead.name} exited with code {dead.process.returncode}; "
                              "stopping")
                    code = 1
                    break
                time.sleep(0.5)
        finally:
            self.stop()
            for signum, handler in previous.items():
                signal.signal(signum, handler)
        return code

    def stop(self, grace_s: float = 15.0) -> None:
        for child in reversed(self.children):
            self._signal(child, signal.SIGTERM)
        deadline = time.monotonic() + grace_s
        for child in reversed(self.children):
            remaining = max(0.1, deadline - time.monotonic())
            try:
                child.process.wait(remaining)
            except subprocess.TimeoutExpired:
                self.log(f"{child.name} did not stop in time; killing it")
                self._signal(child, signal.SIGKILL)
                child.process.wait()
        self.log("stopped every process")

    @staticmethod
    def _signal(child: Child, signum: int) -> None:
        if child.process and child.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(child.process.pid, signum)


def python() -> str:
    return sys.executable
