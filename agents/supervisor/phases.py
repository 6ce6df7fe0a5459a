"""When each phase of a vLLM start ended, read from the lines vLLM prints.

    process_start    the supervisor spawned the process
    weights_loaded   "Loading weights took 2.31 seconds" / "Model loading took 15.2 GiB memory
                     and 3.1 seconds" (each worker of a tensor-parallel group prints its own)
    kv_profiled      "Memory profiling takes ...", "Available KV cache memory: 61.3 GiB",
                     "GPU KV cache size: 501,504 tokens, ..." (the CPU build: "CPU KV cache ...")
    graphs_captured  "Graph capturing finished in 7 secs, took 0.52 GiB" (CUDA graphs; none
                     with --enforce-eager or on the CPU build)
    api_ready        uvicorn's "Application startup complete." or the first /health 200,
                     whichever comes first (``api_ready_by`` says which)

The messages are vLLM 0.32's (its source, and tests/agents/fixtures/vllm_0.32_cpu_*.log as
the CPU build printed them). A phase takes the time of its latest line until the API is ready:
the last worker to load its weights ends the load. After that nothing moves. A line is timed
when the agent reads it, to the supervisor's clock (vLLM's own timestamps have no year and only
whole seconds); vLLM runs with PYTHONUNBUFFERED, so reading follows printing closely.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable

from agents.supervisor.process import LogTail

PHASES = ("process_start", "weights_loaded", "kv_profiled", "graphs_captured", "api_ready")
READY_LINE = "Application startup complete."
# Fixed patterns, searched in lines of at most MAX_LINE_BYTES (process.py): no user input.
MARKERS = (
    ("weights_loaded", re.compile(r"\] (Loading weights|Model loading) took \d")),
    ("kv_profiled", re.compile(r"\] (Memory profiling takes \d|Available KV cache memory: \d"
                               r"|[A-Z]{3}(?: \+ [a-z]+)? KV cache size: \d)")),
    ("graphs_captured", re.compile(r"\] Graph capturing finished in \d")),
    ("api_ready", re.compile(r"^INFO: +Application startup complete\.")),
)


class StartPhases:
    """One start's phases; thread-safe (the log pump observes, the agent's loop reads)."""

    def __init__(self, started_at: float, clock: Callable[[], float]) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._at: dict[str, float] = {"process_start": started_at}
        self.ready_by: str | None = None  # what said the API was ready: a log line or /health

    def observe(self, line: str) -> None:
        for phase, pattern in MARKERS:
            if pattern.search(line):
                self._mark(phase, self._clock(), "log")
                return

    def ready(self, now: float, by: str) -> bool:
        """The API answers; False when a log line had said so already."""
        return self._mark("api_ready", now, by)

    def _mark(self, phase: str, at: float, by: str) -> bool:
        with self._lock:
            if "api_ready" in self._at:
                return False  # ready: this start's phases are final
            self._at[phase] = at
            if phase == "api_ready":
                self.ready_by = by
            return True

    def snapshot(self) -> dict[str, float]:
        with self._lock:
            return {phase: self._at[phase] for phase in PHASES if phase in self._at}

    def summary(self) -> str:
        """"ready 41.2 s after start (weights 12.0 s, KV cache 30.1 s, graphs 39.8 s; ready by
        log)": one line for the log tail."""
        at = self.snapshot()
        start = at["process_start"]
        steps = [f"{name} {at[phase] - start:.1f} s" for phase, name in (
            ("weights_loaded", "weights"), ("kv_profiled", "KV cache"),
            ("graphs_captured", "graphs")) if phase in at]
        ready = at.get("api_ready", start) - start
        said = "the log's 'Application startup complete.'" if self.ready_by == "log" \
            else "GET /health 200"
        return f"ready {ready:.1f} s after start ({', '.join([*steps, f'by {said}'])})"


class PhaseTail(LogTail):
    """The deployment's log tail as one process sees it: every line it prints goes to the tail
    and past this start's phases. Each start gets its own, so a line the previous process's
    reader delivers late cannot move the new start's phases."""

    def __init__(self, tail: LogTail, phases: StartPhases) -> None:  # noqa: D107
        # No super().__init__(): the lines live in the shared tail, not here.
        self._tail, self._phases = tail, phases

    def append(self, line: str) -> None:
        self._phases.observe(line)
        self._tail.append(line)

    def last(self, n: int) -> list[str]:
        return self._tail.last(n)
