"""A stats sink for the simulated vLLM engine that keeps everything it reports."""

from __future__ import annotations

from agents.sim.engine_model import Request, StepStats


class Recorder:
    """A StatsSink that keeps everything the engine reports."""

    def __init__(self) -> None:
        self.steps: list[StepStats] = []
        self.finished: list[Request] = []

    def on_step(self, step: StepStats) -> None:
        self.steps.append(step)

    def on_finished(self, request: Request) -> None:
        self.finished.append(request)

    def total(self, field: str) -> int:
        return sum(getattr(step, field) for step in self.steps)
