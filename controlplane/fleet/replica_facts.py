"""What the service pages and the services API read off a replica: how long its start took,
phase by phase, and its share of the requests the router processed.

Both read the same stored reports (``Deployment.start_phases``, ``Service.router_status``),
so the numbers a page shows and the API returns cannot differ.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

from controlplane.fleet import routing
from controlplane.fleet.models import Deployment, Service

# vLLM's start, in the order its log prints them (docs/services.md): the agent reports the
# unix second of each it read for the running process's current start.
PHASES = ("process_start", "weights_loaded", "kv_profiled", "graphs_captured", "api_ready")
PHASE_LABELS = {"process_start": "process started", "weights_loaded": "weights loaded",
                "kv_profiled": "KV cache profiled", "graphs_captured": "CUDA graphs captured",
                "api_ready": "API ready"}


@dataclass(frozen=True)
class Step:
    """One stretch of a start: from the phase before to ``phase``."""

    phase: str
    label: str
    seconds: float
    share: float  # of the whole start, 0..100, for a bar's segment


def _when(phases: object, name: str) -> float | None:
    value = phases.get(name) if isinstance(phases, dict) else None
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return None
    return float(value)


def time_to_ready(phases: object) -> float | None:
    """Seconds from the process's start to its API answering; None until both are known."""
    start, ready = _when(phases, "process_start"), _when(phases, "api_ready")
    if start is None or ready is None or ready < start:
        return None
    return round(ready - start, 3)


def steps(phases: object, scale_s: float | None = None) -> list[Step]:
    """The stretches between the phases reported, in vLLM's order; a phase not reported (or
    earlier than the one before it) is left out and the next one counts from the last known.
    Each share is of ``scale_s`` (the slowest start of a page's replicas, so that their bars
    compare) or, without it, of this start's own length."""
    known = [(name, t) for name in PHASES if (t := _when(phases, name)) is not None]
    stretches, last = [], None
    for name, t in known:
        if last is None:
            last = t
        elif t >= last:
            stretches.append((name, t - last))
            last = t
    total = scale_s if scale_s else sum(seconds for _, seconds in stretches)
    return [Step(name, PHASE_LABELS[name], round(seconds, 3),
                 round(min(100.0, 100 * seconds / total), 1) if total > 0 else 0.0)
            for name, seconds in stretches]


def started_s(phases: object) -> float:
    """Seconds from the first phase reported to the last: how long a bar of its start is."""
    return sum(step.seconds for step in steps(phases))


def per_worker(service: Service) -> dict[str, dict]:
    """The router's last per-worker counts, {url: {"processed", "running", "healthy"}}."""
    status = service.router_status if isinstance(service.router_status, dict) else {}
    metrics = status.get("metrics") if isinstance(status.get("metrics"), dict) else {}
    workers = metrics.get("per_worker")
    return {url: counts for url, counts in workers.items()
            if isinstance(url, str) and isinstance(counts, dict)} if isinstance(
        workers, dict) else {}


def traffic_shares(service: Service, replicas: Iterable[Deployment]) -> dict[int, float | None]:
    """Each replica's share (0..100) of the requests the router processed, by replica id,
    matched by the URL the router knows it by (``routing.worker_url``, as its config lists
    it); None for all when the router reported no counts (no router yet, or none processed)."""
    counts = per_worker(service)
    processed = {r.pk: _count(counts.get(routing.worker_url(r), {}).get("processed"))
                 for r in replicas}
    total = sum(counts_of(counts))
    if total <= 0:
        return dict.fromkeys(processed)
    return {pk: round(100 * n / total, 1) for pk, n in processed.items()}


def counts_of(counts: dict[str, dict]) -> list[float]:
    return [_count(c.get("processed")) for c in counts.values()]


def _count(value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return 0.0
    return max(float(value), 0.0)
