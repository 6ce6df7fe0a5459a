"""A metrics sink for coasted engine steps: many equal observations recorded at once.

``EngineSeries`` (vllm_exposition) observes one value at a time, which is what a real
vLLM does but costs a Python call per generated token. Coasted records (see engine_coast)
carry ``steps`` iterations and their inter-token latencies as (value, count) runs; this
wrapper adds each run to the histogram's bucket and sum in one go, so the exposition shows
exactly what the step-by-step path would have shown.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import replace
from typing import Any

from agents.sim.engine_model import Request, StepStats


def observe_many(histogram: Any, runs: Iterable[tuple[float, int]]) -> None:
    """``count`` observations of ``value`` per run, on a prometheus_client Histogram child.

    Uses the child's bucket values (prometheus_client stores per-bucket, not cumulative,
    counts and a sum); a client without them gets one observe() per observation.
    """
    bounds = getattr(histogram, "_upper_bounds", None)
    buckets = getattr(histogram, "_buckets", None)
    total = getattr(histogram, "_sum", None)
    for value, count in runs:
        if bounds is None or buckets is None or total is None:
            for _ in range(count):
                histogram.observe(value)
            continue
        total.inc(value * count)
        for i, bound in enumerate(bounds):
            if value <= bound:
                buckets[i].inc(count)
                break


class BatchedSeries:
    """Wraps one engine's EngineSeries; the engine model reports to this instead."""

    def __init__(self, series: Any) -> None:
        self.series = series

    def set_state(self, running: int, waiting: int, kv_usage: float) -> None:
        self.series.set_state(running, waiting, kv_usage)

    def on_finished(self, request: Request) -> None:
        self.series.on_finished(request)

    def on_step(self, step: StepStats) -> None:
        # Counters, TTFTs and one iteration go through the ordinary path; the rest in runs.
        self.series.on_step(replace(step, itls=[], itl_runs=[], steps=1))
        one = self.series.one
        if step.steps > 1:
            observe_many(one["iteration_tokens"], [(step.tokens, step.steps - 1)])
        observe_many(one["itl"], [*Counter(step.itls).items(), *step.itl_runs])
