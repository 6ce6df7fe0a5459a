"""Did it help? Equal windows before and after an applied change, compared on what the
diagnosis meant to move (its target) and on what must not get worse (the guards).

The before-window ends when the change was accepted; the after-window starts
``TUNING_SETTLE_S`` after the agent reported the new revision ready (caches warm, queues drain)
and has the same length. Verdicts: ``improved`` when the target moved the right way by at least
``MOVED`` and no guard got worse past its limit (``GUARDS``: throughput may not fall by a fifth;
a latency may not grow by half, unless the other latency improved by a larger factor: more
sequences per step lengthen each step and shorten the queue, and that trade is often what the
change was for); ``regressed`` when the target moved the wrong way by ``MOVED`` or a guard
passed its limit; ``unchanged`` otherwise. Load that changed between the windows moves these
numbers too: the figures are shown so an operator can judge.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from django.conf import settings
from django.utils import timezone

from controlplane.tuning.facts import Facts, deployment_facts, minute
from controlplane.tuning.models import Kind, State, Suggestion

MOVED = 0.10
# metric -> (Facts attribute, +1 when higher is better, -1 when lower is)
METRICS = {
    "generation_tokens_per_s": ("generation_tps", +1),
    "ttft_p99_s": ("ttft_p99", -1),
    "itl_p99_s": ("itl_p99", -1),
    "preemptions_per_s": ("preemptions_per_s", -1),
    "requests_waiting": ("waiting_avg", -1),
    "kv_cache_usage": ("kv_avg", 0),  # shown, judged by nobody: more use can be the point
    "gpu_util_pct": ("gpu_util_avg", +1),
}
TARGET = {
    Kind.KV_PRESSURE: "preemptions_per_s", Kind.CONCURRENCY_CAP: "requests_waiting",
    Kind.PREFILL_TTFT: "ttft_p99_s", Kind.PREFILL_ITL: "itl_p99_s",
    Kind.CPU_STARVATION: "gpu_util_pct", Kind.NUMA_MISMATCH: "itl_p99_s",
}
# metric -> how much worse (relative) it may get before the change counts as a regression
GUARDS = {"generation_tokens_per_s": 0.20, "ttft_p99_s": 0.50, "itl_p99_s": 0.50,
          "preemptions_per_s": 0.50}
LATENCY_PAIR = {"ttft_p99_s": "itl_p99_s", "itl_p99_s": "ttft_p99_s"}


def windows(s: Suggestion) -> tuple[tuple[datetime, datetime], tuple[datetime, datetime]]:
    length = timedelta(seconds=settings.PITWALL["TUNING_VERIFY_WINDOW_S"])
    before_end = minute(s.decided_at)
    after_start = _ceil(s.applied_at + timedelta(seconds=settings.PITWALL["TUNING_SETTLE_S"]))
    return (before_end - length, before_end), (after_start, after_start + length)


def due(s: Suggestion, now: datetime) -> bool:
    """The after-window is over and its last minute rolled up."""
    conf = settings.PITWALL
    lag = timedelta(seconds=conf["ROLLUP_SETTLE_S"] + conf["ROLLUP_INTERVAL_S"])
    return now >= windows(s)[1][1] + lag


def conclude(s: Suggestion) -> Suggestion:
    (b0, b1), (a0, a1) = windows(s)
    before = measure(deployment_facts(s.deployment, b0, b1))
    after = measure(deployment_facts(s.deployment, a0, a1))
    verdict, summary = judge(s.kind, before, after)
    s.state, s.verified_at = verdict, timezone.now()
    s.verification = {"before": before, "after": after, "target": TARGET.get(s.kind),
                      "windows": {"before": [b0.isoformat(), b1.isoformat()],
                                  "after": [a0.isoformat(), a1.isoformat()]},
                      "summary": summary}
    s.save(update_fields=["state", "verified_at", "verification"])
    return s


def measure(facts: Facts) -> dict[str, float | None]:
    return {name: _value(facts, attr) for name, (attr, _) in METRICS.items()}


def _value(facts: Facts, attr: str) -> float | None:
    value = getattr(facts, attr)
    return None if value is None else round(float(value), 4)


def change_of(name: str, before: dict, after: dict) -> float | None:
    """Relative change, signed so that positive is better (None: not comparable)."""
    b, a, sign = before.get(name), after.get(name), METRICS[name][1]
    if b is None or a is None or sign == 0:
        return None
    if b == 0:
        return 0.0 if a == 0 else sign * (1.0 if a > 0 else -1.0)
    return sign * (a - b) / abs(b)


def judge(kind: str, before: dict, after: dict,
          guards: dict[str, float] = GUARDS) -> tuple[str, str]:
    target = TARGET.get(kind)
    moved = change_of(target, before, after) if target else None
    worse = [g for g, limit in guards.items() if g != target
             and (c := change_of(g, before, after)) is not None and c <= -limit
             and not _traded(g, c, before, after)]
    summary = "; ".join(_line(name, before, after) for name in METRICS
                        if before.get(name) is not None or after.get(name) is not None)
    if (moved is not None and moved <= -MOVED) or worse:
        return State.REGRESSED, summary
    if moved is not None and moved >= MOVED:
        return State.IMPROVED, summary
    return State.UNCHANGED, summary


def _traded(guard: str, change: float, before: dict, after: dict) -> bool:
    """One latency worse, the other better by more: the trade the change was made for (more
    sequences per step: a longer step, a shorter queue). Compared as factors, not as signed
    shares: a latency falls by at most 100 % but grows without bound, and a real vLLM whose
    TTFT p99 fell 5.8-fold (-83 %) while its ITL p99 doubled (+97 %) made the trade."""
    other = LATENCY_PAIR.get(guard)
    gain = _factor(other, before, after) if other else None
    loss = _factor(guard, before, after)
    return gain is not None and loss is not None and gain >= 1 / loss


def _factor(name: str, before: dict, after: dict) -> float | None:
    """How many times better a latency got (0.5: twice as long); None: not comparable."""
    b, a = before.get(name), after.get(name)
    if b is None or a is None or b <= 0 or a <= 0:
        return None
    return b / a


def _line(name: str, before: dict, after: dict) -> str:
    b, a = before.get(name), after.get(name)
    text = f"{name} {_fmt(b)} -> {_fmt(a)}"
    if b not in (None, 0) and a is not None:
        text += f" ({(a - b) / abs(b):+.0%})"
    return text


def _fmt(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.4g}"


def _ceil(at: datetime) -> datetime:
    start = minute(at)
    return start if start == at else start + timedelta(minutes=1)
