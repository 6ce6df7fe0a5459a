"""From the totals one engine (or a model's engines together) had over a range to the figures
shown: tokens/s, tokens per joule, GPU-hours, cost, objective attainment and burn rates.

``Inputs`` hold sums only, so a model's inputs are its engines' inputs added up and its
figures come out of the same function as an engine's.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from controlplane.telemetry.objectives import burn_rate
from controlplane.telemetry.series.histograms import histogram_fraction

# Where an engine's energy came from: its GPUs' total energy counter, or their power draw
# integrated over the samples.
ENERGY_COUNTER, POWER, MIXED = "energy_counter", "power", "mixed"
WINDOWS = ("range", "1h", "30d")  # attainment over the range asked, and the two burn windows

Layouts = dict[int, list[int]]  # layout id -> bucket counts summed


@dataclass
class Inputs:
    tokens: float = 0.0  # generation tokens over the range
    tokens_per_s: float = 0.0  # an engine's average rate; a model's: its engines' rates added
    seconds: float = 0.0  # seconds with samples of the generation rate
    energy_j: float = 0.0  # energy of the engines whose GPUs reported some
    energy_tokens: float = 0.0  # tokens of those engines: tokens per joule uses only them
    sources: set[str] = field(default_factory=set)
    gpus: int = 0
    gpu_seconds: float = 0.0  # GPUs x seconds with samples
    histograms: dict[tuple[str, str], Layouts] = field(default_factory=dict)  # (obj., window)

    def add(self, other: Inputs) -> None:
        self.tokens += other.tokens
        self.tokens_per_s += other.tokens_per_s
        self.seconds += other.seconds
        self.energy_j += other.energy_j
        self.energy_tokens += other.energy_tokens
        self.sources |= other.sources
        self.gpus += other.gpus
        self.gpu_seconds += other.gpu_seconds
        for key, layouts in other.histograms.items():
            mine = self.histograms.setdefault(key, {})
            for lay, counts in layouts.items():
                add_counts(mine.setdefault(lay, []), counts)


def add_counts(have: list[int], counts: Sequence[int]) -> None:
    """Add ``counts`` bucket by bucket into ``have``, which grows to fit."""
    have.extend([0] * (len(counts) - len(have)))
    for i, c in enumerate(counts):
        have[i] += c


@dataclass(frozen=True)
class Terms:
    """What the figures are measured against (settings.PITWALL, read per request)."""

    objective_s: Mapping[str, float]  # "ttft", "itl" -> seconds
    target: float  # OBJECTIVE_TARGET: the share of requests that must meet the objective
    gpu_hour_price: float | None  # None: not configured
    bounds: Mapping[int, Sequence[float]]  # layout id -> bucket upper bounds


@dataclass(frozen=True)
class Attainment:
    objective_ms: float
    attainment: float | None  # over the range; None without requests
    requests: int  # observations in the range
    burn_1h: float | None  # error budget burn over the last hour of the range
    burn_30d: float | None  # and over its last 30 days


@dataclass(frozen=True)
class Figures:
    generation_tokens: float
    generation_tokens_per_s: float | None
    seconds_with_samples: float
    energy_j: float | None
    energy_source: str | None
    tokens_per_joule: float | None
    gpus: int
    gpu_hours: float
    cost: float | None
    cost_per_million_tokens: float | None
    ttft: Attainment
    itl: Attainment


def figures(inputs: Inputs, terms: Terms) -> Figures:
    cost = (inputs.gpu_seconds / 3600 * terms.gpu_hour_price
            if terms.gpu_hour_price is not None else None)
    return Figures(
        generation_tokens=inputs.tokens,
        generation_tokens_per_s=inputs.tokens_per_s if inputs.seconds > 0 else None,
        seconds_with_samples=inputs.seconds,
        energy_j=inputs.energy_j if inputs.sources else None,
        energy_source=_source(inputs.sources),
        tokens_per_joule=(inputs.energy_tokens / inputs.energy_j
                          if inputs.sources and inputs.energy_j > 0 else None),
        gpus=inputs.gpus,
        gpu_hours=inputs.gpu_seconds / 3600,
        cost=cost,
        cost_per_million_tokens=(cost / (inputs.tokens / 1e6)
                                 if cost is not None and inputs.tokens > 0 else None),
        ttft=attainment_of("ttft", inputs, terms),
        itl=attainment_of("itl", inputs, terms),
    )


def _source(sources: set[str]) -> str | None:
    if not sources:
        return None
    return next(iter(sources)) if len(sources) == 1 else MIXED


def attainment_of(objective: str, inputs: Inputs, terms: Terms) -> Attainment:
    upper = terms.objective_s[objective]
    share = {w: fraction_under(upper, inputs.histograms.get((objective, w), {}), terms.bounds)
             for w in WINDOWS}
    requests = sum(sum(c) for c in inputs.histograms.get((objective, "range"), {}).values())
    return Attainment(objective_ms=upper * 1000, attainment=share["range"], requests=requests,
                      burn_1h=burn_rate(share["1h"], terms.target),
                      burn_30d=burn_rate(share["30d"], terms.target))


def fraction_under(upper: float, layouts: Layouts,
                   bounds: Mapping[int, Sequence[float]]) -> float | None:
    """The share of observations at or under ``upper`` over every layout: each layout's
    estimate (Prometheus's histogram_fraction) weighed by its observations."""
    under = total = 0.0
    for lay, counts in layouts.items():
        share = histogram_fraction(upper, bounds.get(lay, []), counts)
        if share is not None:
            n = sum(counts)
            under, total = under + share * n, total + n
    return under / total if total > 0 else None

