"""The latency objectives, defined once for everything that judges against them: the
efficiency figures (telemetry/efficiency), the alert kinds ``objective_attainment`` and
``error_budget_burn`` (alerts/objectives.py), the tuning diagnoses and the default pack.

A request meets the TTFT objective when its time to first token is under
``ALERT_TTFT_P99_OBJECTIVE_MS``, the ITL one when its inter-token latency is under
``TUNING_ITL_P99_OBJECTIVE_MS``; ``OBJECTIVE_TARGET`` is the share that must. Settings are
read at each call, so a test's override and a reloaded configuration both count.
"""

from __future__ import annotations

from django.conf import settings

# objective name -> (its histogram metric, the setting holding its objective in ms)
OBJECTIVES: dict[str, tuple[str, str]] = {
    "ttft": ("engine.ttft_seconds", "ALERT_TTFT_P99_OBJECTIVE_MS"),
    "itl": ("engine.itl_seconds", "TUNING_ITL_P99_OBJECTIVE_MS"),
}


def objective_s(name: str) -> float:
    """The objective ``name`` ("ttft", "itl") in seconds."""
    return settings.PITWALL[OBJECTIVES[name][1]] / 1000


def target() -> float:
    """The share of requests that must meet the objectives."""
    return float(settings.PITWALL["OBJECTIVE_TARGET"])


def burn_rate(attainment: float | None, target_share: float) -> float | None:
    """How fast the error budget goes: 1.0 spends exactly the budget (1 - target) over the
    window, 14.4 over one hour spends 2 % of a 30-day budget. None without an attainment."""
    if attainment is None:
        return None
    return (1 - attainment) / (1 - target_share)
