"""Per-interval values from two scrapes of one engine: rates, prefix-cache hit rate, draft
acceptance rate, and histogram bucket deltas, as docs/protocol.md puts them on the wire.

A counter that went down means the engine restarted, so its new value is the increase since
zero (what Prometheus' rate() assumes). A histogram restarted if any cumulative bucket, or its
sum, went down: its new cumulative counts are then the deltas. A value whose source changed
(other bucket bounds after a vLLM upgrade, or a family renamed) cannot be differenced: it is
left out for one interval, and the next one has the new baseline.
"""

from __future__ import annotations

from typing import Any

from agents.collectors.vllm_names import RATES
from agents.collectors.vllm_parse import EngineReadings, HistogramReading


def interval_values(prev: EngineReadings, cur: EngineReadings, dt: float) -> dict[str, Any]:
    """The engine's rates and histogram deltas over the `dt` seconds (> 0) between scrapes."""
    deltas = counter_deltas(prev, cur)
    values: dict[str, Any] = {key: deltas[counter] / dt
                              for counter, key in RATES.items() if counter in deltas}
    queries, hits = deltas.get("prefix_cache_queries"), deltas.get("prefix_cache_hits")
    if queries and hits is not None:  # no queries in the interval: no hit rate, not 0
        values["prefix_cache_hit_rate"] = min(hits / queries, 1.0)
    drafts, accepted = deltas.get("spec_draft_tokens"), deltas.get("spec_accepted_tokens")
    if drafts and accepted is not None:  # no drafts in the interval: no acceptance rate
        values["spec_acceptance_rate"] = min(accepted / drafts, 1.0)
    for key, histogram in cur.histograms.items():
        before = prev.histograms.get(key)
        delta = histogram_delta(before, histogram) if before is not None else None
        if delta is not None:
            values[key] = delta
    return values


def counter_delta(prev: float, cur: float) -> float:
    return cur - prev if cur >= prev else cur


def counter_deltas(prev: EngineReadings, cur: EngineReadings) -> dict[str, float]:
    deltas: dict[str, float] = {}
    for key, reading in cur.counters.items():
        before = prev.counters.get(key)
        if before is not None and before.source == reading.source:
            deltas[key] = counter_delta(before.value, reading.value)
    return deltas


def histogram_delta(prev: HistogramReading, cur: HistogramReading) -> dict[str, Any] | None:
    """{"le", "counts" (len(le) + 1, per bucket, not cumulative), "sum"?}, or None when the two
    readings cannot be differenced."""
    if prev.le != cur.le or prev.source != cur.source:
        return None
    restarted = _restarted(prev, cur)
    base = (0.0,) * len(cur.cumulative) if restarted else prev.cumulative
    grown = [now - then for now, then in zip(cur.cumulative, base, strict=True)]
    # Each bucket's own count only grows, so these are >= 0; max() keeps a float's last-digit
    # noise from ever putting a negative count on the wire.
    counts = [max(0, round(upper - lower)) for lower, upper in zip([0.0, *grown], grown,
                                                                   strict=False)]
    delta: dict[str, Any] = {"le": list(cur.le), "counts": counts}
    if cur.sum is not None and restarted:
        delta["sum"] = cur.sum
    elif cur.sum is not None and prev.sum is not None:
        delta["sum"] = cur.sum - prev.sum
    return delta


def _restarted(prev: HistogramReading, cur: HistogramReading) -> bool:
    if any(now < then for now, then in zip(cur.cumulative, prev.cumulative, strict=True)):
        return True
    # Latencies are never negative, so a smaller sum also means the engine started over.
    return prev.sum is not None and cur.sum is not None and cur.sum < prev.sum
