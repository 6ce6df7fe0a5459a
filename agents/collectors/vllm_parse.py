"""A vLLM /metrics page -> per-engine readings: gauges, cumulative counters and histograms.

Each value of the `engine` label (the data-parallel rank) is an engine of its own; a series
without it (V0, early V1, and admission_rejections, which vLLM counts in the API server) goes
to engine "0", so that summing over engines counts it once.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from prometheus_client.samples import Sample

from agents.collectors.vllm_names import (
    CACHE_CONFIG,
    COUNTER_PARTS,
    COUNTERS,
    DEFAULT_ENGINE,
    ENGINE_LABEL,
    GAUGE_PARTS,
    GAUGES,
    HISTOGRAMS,
    LORA_INFO,
    LORA_KEYS,
    MAX_LORA_LABEL,
    MODEL_LABEL,
)
from agents.collectors.vllm_text import Families, Memo, VllmMetricsError, parse_families

__all__ = ["CounterReading", "EngineReadings", "HistogramReading", "Memo", "VllmMetricsError",
           "parse_metrics"]


@dataclass(frozen=True)
class CounterReading:
    source: str  # the family it came from: a change of source restarts the rate
    value: float  # cumulative, summed over the family's other labels


@dataclass(frozen=True)
class HistogramReading:
    source: str
    le: tuple[float, ...]  # finite upper bounds, ascending
    cumulative: tuple[float, ...]  # len(le) + 1 cumulative counts, the last one for +Inf
    sum: float | None  # None when the page has no _sum line


@dataclass
class EngineReadings:
    engine: str  # the `engine` label value
    model: str | None = None
    gauges: dict[str, float] = field(default_factory=dict)
    counters: dict[str, CounterReading] = field(default_factory=dict)
    histograms: dict[str, HistogramReading] = field(default_factory=dict)
    config: dict[str, str] = field(default_factory=dict)


def parse_metrics(text: str, memo: Memo | None = None) -> dict[str, EngineReadings]:
    """Engine label value -> its readings, in engine order; {} when no vllm:* family is there
    (a server started with --disable-log-stats). Raises VllmMetricsError on malformed text.
    Pass the same `memo` dict on every scrape of one server to skip re-parsing what did not
    change since the previous one."""
    families = parse_families(text, memo)
    engines: dict[str, EngineReadings] = {}
    _read_gauges(families, engines)
    _read_counters(families, engines)
    _read_parts(families, engines)
    _read_lora(families, engines)
    _read_histograms(families, engines)
    _read_config(families, engines)
    return dict(sorted(engines.items(), key=lambda item: _engine_order(item[0])))


def _engine_order(engine: str) -> tuple[int, int, str]:
    return (0, int(engine), "") if engine.isdigit() else (1, 0, engine)


def _engine(engines: dict[str, EngineReadings], labels: dict[str, str]) -> EngineReadings:
    name = labels.get(ENGINE_LABEL, DEFAULT_ENGINE)
    readings = engines.get(name)
    if readings is None:
        readings = engines[name] = EngineReadings(name)
    if readings.model is None:
        readings.model = labels.get(MODEL_LABEL)
    return readings


def _sum_by_engine(samples: list[Sample], sample_name: str,
                   engines: dict[str, EngineReadings],
                   where: tuple[str, str] | None = None) -> dict[str, float]:
    """Per engine, the sum of the samples named `sample_name` (only those whose label
    where[0] has the value where[1], when given)."""
    totals: dict[str, float] = {}
    for sample in samples:
        if sample.name == sample_name and (
                where is None or sample.labels.get(where[0]) == where[1]):
            engine = _engine(engines, sample.labels).engine
            totals[engine] = totals.get(engine, 0.0) + sample.value
    return totals


def _read_gauges(families: Families, engines: dict[str, EngineReadings]) -> None:
    for key, sources in GAUGES.items():
        for source in sources:  # preferred first: an older name only fills what is missing
            if source in families:
                for engine, value in _sum_by_engine(families[source], source, engines).items():
                    if math.isfinite(value):  # NaN would not even be valid JSON
                        engines[engine].gauges.setdefault(key, value)


def _read_counters(families: Families, engines: dict[str, EngineReadings]) -> None:
    for key, sources in COUNTERS.items():
        for source in sources:
            if source in families:
                totals = _sum_by_engine(families[source], source + "_total", engines)
                for engine, value in totals.items():
                    if math.isfinite(value):
                        engines[engine].counters.setdefault(key, CounterReading(source, value))


def _read_parts(families: Families, engines: dict[str, EngineReadings]) -> None:
    """The gauges and counters read one label value at a time (waiting and finished requests
    by reason). A label value the page does not print gives no reading: absent, never 0."""
    for table, suffix in ((GAUGE_PARTS, ""), (COUNTER_PARTS, "_total")):
        for key, (sources, label, value) in table.items():
            for source in sources:
                if source not in families:
                    continue
                totals = _sum_by_engine(families[source], source + suffix, engines,
                                        (label, value))
                for engine, total in totals.items():
                    if not math.isfinite(total):
                        continue
                    if suffix:
                        engines[engine].counters.setdefault(key, CounterReading(source, total))
                    else:
                        engines[engine].gauges.setdefault(key, total)


def _read_lora(families: Families, engines: dict[str, EngineReadings]) -> None:
    """Adapters running and waiting, from the newest lora_requests_info series (its value is
    when it was set). It has no engine label: it goes to engine "0", like admission_rejections.
    """
    samples = [s for s in families.get(LORA_INFO, ()) if s.name == LORA_INFO
               and math.isfinite(s.value)]
    if not samples:
        return
    newest = max(samples, key=lambda s: s.value)
    if newest.labels.get(MAX_LORA_LABEL, "0") in ("", "0"):
        return  # V0 prints it with max_lora="0" when LoRA is off: no adapters to count
    readings = _engine(engines, newest.labels)
    for key, label in LORA_KEYS.items():
        names = newest.labels.get(label, "")
        readings.gauges[key] = len({name for name in names.split(",") if name.strip()})


def _read_histograms(families: Families, engines: dict[str, EngineReadings]) -> None:
    for key, sources in HISTOGRAMS.items():
        for source in sources:
            if source in families:
                histograms = _histograms(source, families[source], engines)
                for engine, histogram in histograms.items():
                    engines[engine].histograms.setdefault(key, histogram)


def _histograms(family: str, samples: list[Sample],
                engines: dict[str, EngineReadings]) -> dict[str, HistogramReading]:
    buckets: dict[str, dict[float, float]] = {}
    sums: dict[str, float] = {}
    counts: dict[str, float] = {}
    for sample in samples:
        engine = _engine(engines, sample.labels).engine
        suffix = sample.name[len(family):]
        if suffix == "_bucket":
            bound = _bound(family, sample.labels.get("le"))
            per_engine = buckets.setdefault(engine, {})
            per_engine[bound] = per_engine.get(bound, 0.0) + sample.value
        elif suffix == "_sum":
            sums[engine] = sums.get(engine, 0.0) + sample.value
        elif suffix == "_count":
            counts[engine] = counts.get(engine, 0.0) + sample.value
    built = {engine: _histogram(family, engine, per_engine, sums.get(engine),
                                counts.get(engine)) for engine, per_engine in buckets.items()}
    return {engine: histogram for engine, histogram in built.items() if histogram is not None}


def _bound(family: str, le: str | None) -> float:
    try:
        bound = float(le if le is not None else "nan")
    except ValueError:
        bound = math.nan
    if math.isnan(bound):
        raise VllmMetricsError(f"{family}: bucket bound le={le!r} is not a number")
    return bound


def _histogram(family: str, engine: str, buckets: dict[float, float], total: float | None,
               count: float | None) -> HistogramReading | None:
    le = tuple(sorted(bound for bound in buckets if bound != math.inf))
    overflow = buckets.get(math.inf, count)  # a page cut short may lack +Inf but have _count
    if overflow is None:
        return None  # no way to know the observations above the last bound: leave it absent
    cumulative = tuple(buckets[bound] for bound in le) + (overflow,)
    if not all(math.isfinite(value) for value in cumulative):
        return None
    if total is not None and not math.isfinite(total):
        total = None
    if any(later < earlier for earlier, later in zip(cumulative, cumulative[1:], strict=False)):
        raise VllmMetricsError(f"{family}{{engine={engine!r}}}: cumulative bucket counts go down")
    return HistogramReading(family, le, cumulative, total)


def _read_config(families: Families, engines: dict[str, EngineReadings]) -> None:
    for sample in families.get(CACHE_CONFIG, ()):
        _engine(engines, sample.labels).config.update(
            (name, value) for name, value in sample.labels.items()
            if name not in (ENGINE_LABEL, MODEL_LABEL))
