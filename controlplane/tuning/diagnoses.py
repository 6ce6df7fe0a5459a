"""The diagnoses: from one vLLM server's facts over a window to a suggestion, or none.

A server is a deployment (Pitwall runs it) or an engine Pitwall only watches; both get every
diagnosis (for the second, fragments.py turns the changes into flags to paste).

Each diagnosis is a plain function of ``Facts`` (facts.py) returning a ``Finding`` or None, so
it can be read, tested and tuned on its own. The thresholds are named at the top with why; a
healthy deployment trips none of them. A finding names what to change (``changes``: current →
proposed per field; none for a report), a reasoning sentence an operator can check against the
evidence, the evidence itself (each a metric over the window with its value and the threshold
it crossed), the effect to expect and a confidence that grows with how sustained the symptom
was. ``severity`` is the symptom's size in its own unit: a dismissed suggestion comes back for
the same revision only when the evidence got clearly worse (service.py).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings

from agents import vllm_args
from controlplane.fleet.deployments import world_size
from controlplane.fleet.models import Deployment
from controlplane.telemetry.objectives import objective_s
from controlplane.tuning import queueing
from controlplane.tuning.facts import Facts
from controlplane.tuning.models import Kind

GIB = 1 << 30
MIN_MINUTES = 5  # of data in a long window before anything is judged (half a short one)
# Average KV-cache usage that leaves no room for bursts. With preemptions it is pressure: a
# real vLLM preempting 6.7 times a second averaged 0.885 over its minute (requests finish and
# free blocks between preemptions), another at 4.4/s 0.953.
KV_HIGH = 0.85
PREEMPTING = 0.1  # preemptions/s: recompute wasted on a steady basis
PREEMPTING_MOST = 0.5  # share of the window's minutes that preempted: pressure that lasts
KV_HEADROOM = 0.75  # peak KV usage under which more sequences fit
GPU_BUSY = 85.0  # % GPU utilisation under which the GPU waits for something
CORE_PINNED = 90.0  # % of one core: vLLM's engine loop is single-threaded
# % of one thread's time a vLLM process's threads waited for a CPU: the engine loop loses a
# step in two to whatever else holds its cores.
CPU_WAITING = 50.0
# Without GPU figures (a CPU build: the CPU is the device, and vLLM's own threads contend for
# it under any load) only a process that waited for nearly all the time it could have run
# counts. Measured on vLLM 0.32's CPU build on 2 cores: under ordinary load the EngineCore
# waited 0.66-0.77 of its runnable time (64-81 % of a thread); bound to one CPU beside busy
# neighbours, 0.99 (100 %, running 1 %).
CPU_WAIT_SHARE = 0.9
THROTTLED = 10.0  # % of the time the cgroup throttled the host's CPUs
WAITING = 0.5  # requests waiting on average: work the GPU could be doing
FOREIGN_MIN = 1 * GIB  # GPU memory beyond the engine's share worth a word
FOREIGN_CEILING = 0.95  # vLLM's share plus the foreign memory: at most this of the GPU
MAX_BATCHED_TOKENS = 65536
MIN_BATCHED_TOKENS = 2048
# Prefill starving TTFT: how far one suggestion raises the token budget. The predicted ITL p99
# (linear in tokens per step, below) may reach ITL_TARGET of its objective: the margin covers
# the p99's noise. Under MIN_GROWTH a restart is not worth it; over MAX_GROWTH it is one step
# too many at once (the next pass can go on).
ITL_TARGET = 0.9
BUDGET_GROWTH = (1.25, 2.0)
# Tokens: proposals are multiples of it (fine enough for a 512 budget), or of a quarter of a
# smaller budget's power of two (16 -> 32, not 0).
BUDGET_STEP = 64
IDLE_PER_S = 0.05  # requests/s: one every 20 s
# The reference host: what vLLM at fleet scale wants per host.
REFERENCE = {"gpu_mem_bytes": 24 * 10**9, "cpu_count": 8, "mem_total_bytes": 64 * 10**9}


@dataclass
class Finding:
    kind: str
    reasoning: str
    expected: str
    confidence: float
    severity: float
    changes: list[dict[str, Any]] = field(default_factory=list)
    evidence: list[dict[str, Any]] = field(default_factory=list)
    command: str = ""  # for an engine Pitwall does not run: the change to paste (fragments.py)


def diagnose(facts: Facts) -> list[Finding]:
    """Every diagnosis's finding for this server (most have none)."""
    found = [check(facts) for check in DIAGNOSES]
    return [f for f in found if f is not None]


# -- shared pieces ------------------------------------------------------------------------


def arg(facts: Facts, name: str, default: Any = None) -> Any:
    """A vLLM argument as configured, else as the engine reports it, else ``default``, else
    vLLM's own default on the server's GPU (agents.vllm_args.serve_default)."""
    if default is None:
        gpu = facts.gpus[0] if facts.gpus else None
        default = vllm_args.serve_default(name, gpu and gpu.mem_total_bytes,
                                          gpu.name if gpu else "")
    if name in facts.args:
        return facts.args[name]
    value = reported(facts, name)
    if value is None or default is None:
        return default if value is None else value
    try:
        return type(default)(value)
    except (TypeError, ValueError):
        return default


def reported(facts: Facts, name: str) -> Any:
    """What the engine reports for an argument (its cache_config_info labels, or the flags in
    effect, at the top of its config or under "args"); None where it says nothing or "None"
    (how vLLM's labels spell an unset field)."""
    config = facts.engine_config or {}
    nested = config.get("args") if isinstance(config.get("args"), dict) else {}
    value = config.get(name, nested.get(name))
    return None if value in (None, "", "None") else value


def assumed(facts: Facts, name: str) -> bool:
    """The value is vLLM's default, neither set by Pitwall nor reported by the engine: true of
    the scheduler budget of most engines Pitwall does not run (vLLM's metrics do not carry
    it)."""
    return name not in facts.args and reported(facts, name) is None


def evidence(facts: Facts, metric: str, stat: str, value: float | None, threshold: str,
             entity: str = "engine", entity_id: int | None = None) -> dict[str, Any]:
    if entity == "engine" and entity_id is None and facts.engine_ids:
        entity_id = facts.engine_ids[0]
    return {"metric": metric, "stat": stat, "value": _round(value), "threshold": threshold,
            "entity": entity, "entity_id": entity_id, "start": facts.start.isoformat(),
            "end": facts.end.isoformat()}


def _round(value: float | None) -> float | None:
    if value is None or not math.isfinite(value):
        return None
    return float(f"{value:.4g}")


def change(field_: str, current: Any, proposed: Any) -> dict[str, Any]:
    return {"field": field_, "current": current, "proposed": proposed}


def _enough(facts: Facts) -> bool:
    """Data for most of the window (at least MIN_MINUTES of a long one)."""
    window = (facts.end - facts.start).total_seconds() / 60
    return facts.minutes >= max(1, min(MIN_MINUTES, window / 2))


def _sustained(share: float | None) -> float:
    """Confidence from the share of the window a symptom held."""
    return round(min(0.95, 0.5 + 0.45 * (share or 0.0)), 2)


def _free_gpu_fraction(facts: Facts) -> float | None:
    """The least free share of the deployment's GPUs (NVML: total - used)."""
    free = [1 - facts.gpu_mem_used[g.id] / g.mem_total_bytes for g in facts.gpus
            if g.id in facts.gpu_mem_used and g.mem_total_bytes]
    return min(free) if free else None


# -- 1. KV pressure -----------------------------------------------------------------------


def _kv_pressed(facts: Facts) -> bool:
    """Recurring preemptions with the cache full: vLLM preempts only a request it cannot give
    a block. Either the cache averaged KV_HIGH, or it filled up (queueing.KV_FULL at its peak)
    while most of the window's minutes preempted: a cache that thrashes frees a request's
    blocks at each preemption, and a real vLLM preempting 14 times a second with 7 requests
    waiting averaged 0.77 over its minute (a peak of 1.0)."""
    if (facts.preemptions_per_s or 0) < PREEMPTING:
        return False
    return (facts.kv_avg or 0) >= KV_HIGH or (
        (facts.kv_max or 0) >= queueing.KV_FULL
        and (facts.preempting_share or 0) >= PREEMPTING_MOST)


# The operator's own caps on the KV cache: each overrides what gpu_memory_utilization leaves
# for it, so under pressure raising the cap is the first thing to try.
KV_CAPS = ("num_gpu_blocks_override", "kv_cache_memory_bytes")
# How far one suggestion raises a cap: at least double (pressure that preempts is rarely a
# few per cent short), at most 4x (the memory may not be there; one step at a time).
KV_CAP_GROWTH = (2.0, 4.0)


def _kv_cap(facts: Facts) -> tuple[str, int] | None:
    for name in KV_CAPS:
        value = facts.args.get(name) if facts.deployment is not None else reported(facts, name)
        try:
            value = int(value) if value is not None else 0
        except (TypeError, ValueError):
            continue
        if value > 0:
            return name, value
    return None


def _raise_kv_cap(facts: Facts, cap: tuple[str, int], proof: list) -> Finding:
    """Scale the cap with the demand the window saw: what ran plus what waited, twice over,
    because a request's KV grows as it generates and the running ones held, on average, about
    half of what each holds at its end (measured on a real vLLM: x2.4 from the demand alone
    left it preempting)."""
    name, current = cap
    running = max(facts.running_avg or 0.0, 1.0)
    demand = (running + (facts.waiting_avg or 0.0)) / running
    low, high = KV_CAP_GROWTH
    factor = min(high, max(low, 2 * demand))
    proposed = math.ceil(current * factor)
    proof.append(evidence(facts, "engine.requests_waiting", "avg", facts.waiting_avg,
                          "demand beside the running requests"))
    return Finding(
        Kind.KV_PRESSURE, confidence=_sustained(facts.preempting_share),
        severity=facts.preemptions_per_s or 0.0, evidence=proof,
        changes=[change(f"args.{name}", current, proposed)],
        reasoning=(f"KV cache averaged {facts.kv_avg:.0%} (peak {facts.kv_max or 0:.0%}) with "
                   f"{facts.preemptions_per_s:.2f} preemptions/s, and its size is capped by "
                   f"{name}={current}: {running:.1f} requests ran and "
                   f"{facts.waiting_avg or 0:.1f} waited on average, and each holds more as it "
                   f"generates, so the cap grows "
                   f"x{factor:.1f} (bounded to x{low:g}-x{high:g}). "
                   f"If the memory is not there, vLLM refuses to start and says so; revert is "
                   f"one click."),
        expected="More KV blocks: fewer preemptions and less recompute, at the same "
                 "concurrency.")


def kv_pressure(facts: Facts) -> Finding | None:
    if not _enough(facts) or not _kv_pressed(facts):
        return None
    found = _kv_remedy(facts)
    # Requests that wait for KV blocks wait in the queue: say how much of TTFT that was.
    found.reasoning += f" Meanwhile {queue_of(facts).split()}."
    return found


def _kv_full_evidence(facts: Facts) -> dict:
    """Which of _kv_pressed's readings of a full cache held."""
    if (facts.kv_avg or 0) >= KV_HIGH:
        return evidence(facts, "engine.kv_cache_usage", "avg", facts.kv_avg, f">= {KV_HIGH}")
    return evidence(facts, "engine.kv_cache_usage", "max", facts.kv_max,
                    f">= {queueing.KV_FULL} with preemptions in "
                    f"{facts.preempting_share or 0:.0%} of the minutes")


def _kv_remedy(facts: Facts) -> Finding:
    gmu, seqs = float(arg(facts, "gpu_memory_utilization")), int(arg(facts, "max_num_seqs"))
    proof = [_kv_full_evidence(facts),
             evidence(facts, "engine.preemptions_per_s", "avg", facts.preemptions_per_s,
                      f">= {PREEMPTING}")]
    if cap := _kv_cap(facts):
        return _raise_kv_cap(facts, cap, proof)
    free = _free_gpu_fraction(facts)
    if free is not None and free >= 0.05 and gmu < 0.95:
        proposed = round(min(0.95, gmu + free - 0.02), 2)
        proof.append(evidence(facts, "gpu.mem_used_bytes", "avg free share", free, ">= 0.05",
                              "gpu", facts.gpus[0].id if facts.gpus else None))
        return Finding(
            Kind.KV_PRESSURE, confidence=_sustained(facts.preempting_share),
            severity=facts.preemptions_per_s or 0.0, evidence=proof,
            changes=[change("args.gpu_memory_utilization", gmu, proposed)],
            reasoning=(f"KV cache averaged {facts.kv_avg:.0%} with "
                       f"{facts.preemptions_per_s:.2f} preemptions/s, while NVML shows "
                       f"{free:.0%} of the GPU memory unused: give it to the KV cache."),
            expected="More KV blocks: fewer preemptions and less recompute, at the same "
                     "concurrency.")
    running = facts.running_avg or seqs
    proposed = max(1, int(min(seqs, running) * 0.8))
    return Finding(
        Kind.KV_PRESSURE, confidence=_sustained(facts.preempting_share),
        severity=facts.preemptions_per_s or 0.0, evidence=proof,
        changes=[change("args.max_num_seqs", seqs, proposed)],
        reasoning=(f"KV cache averaged {facts.kv_avg:.0%} with {facts.preemptions_per_s:.2f} "
                   f"preemptions/s and no spare GPU memory: fewer concurrent sequences "
                   f"({running:.0f} ran on average) fit without evicting each other. Adding "
                   f"tensor parallelism would also add KV room, at the cost of GPUs."),
        expected="Preemptions near zero; slightly longer queues, less wasted recompute.")


# -- 2. Concurrency cap -------------------------------------------------------------------


def sequence_cap(facts: Facts) -> tuple[int, bool]:
    """``max_num_seqs``, and whether it was inferred: an engine Pitwall only watches that does
    not report it, and whose running count stopped at one ceiling while requests waited, has
    that ceiling as its cap, not vLLM's default. (A deployment's unset argument is vLLM's
    default: Pitwall wrote its command line.)"""
    seqs = int(arg(facts, "max_num_seqs"))
    if facts.deployment is None and assumed(facts, "max_num_seqs"):
        ceiling = queueing.plateau(facts.engine_minutes,
                                   int(arg(facts, "max_num_batched_tokens")))
        if ceiling is not None and ceiling < seqs:
            return ceiling, True
    return seqs, False


def queue_of(facts: Facts) -> queueing.Queueing:
    """The server's queue over the window and what it waited for (queueing.py)."""
    return queueing.read(facts, sequence_cap(facts)[0],
                         int(arg(facts, "max_num_batched_tokens")), _kv_pressed(facts))


def concurrency_cap(facts: Facts) -> Finding | None:
    seqs, inferred = sequence_cap(facts)
    if not _enough(facts) or (facts.kv_max or 1) >= KV_HEADROOM:
        return None
    q = queue_of(facts)
    if not q.queued or q.cause != "cap":
        return None
    room = KV_HEADROOM / max(facts.kv_max or 0.01, 0.01)
    proposed = max(seqs + 1, int(seqs * min(2.0, room)) // 8 * 8 or seqs + 1)
    # Queue time from vLLM's own histogram makes the cause surer; without it (an older vLLM)
    # the cap is read from the gauges alone. A cap inferred from the running count is less
    # sure than one the engine states.
    confidence = (_sustained(q.queued_share) - (0 if q.queue_share is not None else 0.15)
                  - (0.1 if inferred else 0))
    stated = (f"max_num_seqs is not reported, but running stopped at {seqs} while requests "
              f"waited: that is its cap. " if inferred else "")
    return Finding(
        Kind.CONCURRENCY_CAP, confidence=round(confidence, 2), severity=q.waiting or 0.0,
        evidence=[evidence(facts, "engine.queue_seconds", "seconds waited per second",
                           q.waiting, f">= {queueing.QUEUED} in >= "
                                      f"{queueing.QUEUED_SHARE:.0%} of minutes"),
                  evidence(facts, "engine.requests_running", "max", facts.running_max,
                           f"= max_num_seqs ({seqs}) in >= {queueing.CAUSE_SHARE:.0%} of the "
                           f"queued minutes"),
                  evidence(facts, "engine.kv_cache_usage", "max", facts.kv_max,
                           f"< {KV_HEADROOM}")],
        changes=[change("args.max_num_seqs", seqs, proposed)],
        reasoning=(f"{stated}Requests queued in {q.queued_share:.0%} of the minutes "
                   f"({q.waiting:.1f} waiting on average) and running reached the "
                   f"max_num_seqs cap of {seqs} in {q.capped_share:.0%} of those minutes, "
                   f"while KV usage peaked at {facts.kv_max:.0%}; {q.split()}. The cap, not "
                   f"memory or the token budget, holds them back."),
        expected="Shorter queue and queue time, higher throughput; KV usage rises toward "
                 f"{KV_HEADROOM:.0%}.")


# -- 3. Chunked prefill -------------------------------------------------------------------


def _objectives() -> tuple[float, float]:
    return objective_s("ttft"), objective_s("itl")


def budget_raise(tokens: int, itl_p99: float, itl_slo: float) -> tuple[int, float] | None:
    """The token budget prefill may grow to, and the ITL p99 predicted there; None when the
    ITL headroom does not allow a raise worth a restart.

    The model: in a prefill-starved engine the steps run full (prompts wait for budget), a
    decode's inter-token latency is the length of the step it shares, and a step's length
    grows about linearly with the tokens in it. Taking all of it as proportional to the budget
    (predicted ITL = ITL p99 x proposed / current) over-states the growth, since the decode
    share and the fixed cost of a step do not grow with it: the cap errs on the safe side.
    The budget grows until the predicted ITL p99 reaches ITL_TARGET of its objective, by
    BUDGET_GROWTH at least and at most, to a multiple of BUDGET_STEP."""
    low, high = BUDGET_GROWTH
    room = ITL_TARGET * itl_slo / max(itl_p99, 1e-6)
    if room < low or tokens >= MAX_BATCHED_TOKENS:
        return None
    step = min(BUDGET_STEP, max(1, 1 << max(0, tokens.bit_length() - 3)))
    proposed = min(MAX_BATCHED_TOKENS, int(tokens * min(room, high)) // step * step)
    if proposed < tokens * low:
        return None
    return proposed, itl_p99 * proposed / tokens


PREFILL_HOLDS = 0.5  # share of the mean TTFT spent prefilling: prefill is where it goes
IN_DOUBT = 0.45  # the most confidence a suggestion whose cause is in doubt may carry


def prefill_ttft(facts: Facts) -> Finding | None:
    ttft_slo, itl_slo = _objectives()
    if not _enough(facts) or facts.ttft_p99 is None or facts.itl_p99 is None \
            or facts.ttft_p99 <= ttft_slo or facts.itl_p99 >= itl_slo \
            or (facts.kv_avg or 0) >= KV_HIGH or _starved(facts):
        return None  # a full KV cache or a starved CPU explains TTFT better
    q = queue_of(facts)
    prefill_holds = q.prefill_share is not None and q.prefill_share >= PREFILL_HOLDS
    if q.cause in ("cap", "kv") and not prefill_holds:
        return None  # the queue waits for the cap or for KV blocks: their diagnoses say so
    tokens = int(arg(facts, "max_num_batched_tokens"))
    raised = budget_raise(tokens, facts.itl_p99, itl_slo)
    if raised is None:
        return None
    proposed, predicted = raised
    room = ITL_TARGET * itl_slo / BUDGET_GROWTH[0]
    why, certain = _where_ttft_went(q, tokens)
    # More ITL headroom, surer that the bigger steps fit: 0.55 at the least raise, 0.7 at the
    # largest; a cause in doubt at most IN_DOUBT.
    confidence = 0.55 + 0.15 * (proposed / tokens - 1)
    if not certain:
        confidence = min(IN_DOUBT, confidence - 0.2)
    return Finding(
        Kind.PREFILL_TTFT, confidence=round(confidence, 2),
        severity=facts.ttft_p99 / ttft_slo,
        evidence=[evidence(facts, "engine.ttft_seconds", "p99", facts.ttft_p99,
                           f"> {ttft_slo:g} s (objective)"),
                  evidence(facts, "engine.itl_seconds", "p99", facts.itl_p99,
                           f"< {room * 1000:.0f} ms (room for {BUDGET_GROWTH[0]:g}x the "
                           f"tokens per step under {ITL_TARGET:.0%} of the "
                           f"{itl_slo * 1000:g} ms objective)"),
                  evidence(facts, "engine.queue_seconds", "share of mean TTFT",
                           q.queue_share, "where TTFT went (queue, then prefill)")],
        changes=[change("args.max_num_batched_tokens", tokens, proposed)],
        reasoning=(f"TTFT p99 was {facts.ttft_p99:.2f} s, {facts.ttft_p99 / ttft_slo:.1f}x "
                   f"the {ttft_slo:g} s objective, while ITL p99 stayed at "
                   f"{facts.itl_p99 * 1000:.0f} ms of its {itl_slo * 1000:g} ms. {why} "
                   f"Steps of {proposed} tokens (x{proposed / tokens:.2f}) should put ITL p99 "
                   f"near {predicted * 1000:.0f} ms, taking step time as linear in its tokens, "
                   f"which over-states it."),
        expected=(f"Lower TTFT p99; ITL p99 up to about {predicted * 1000:.0f} ms, under the "
                  f"{itl_slo * 1000:g} ms objective."))


def _where_ttft_went(q: queueing.Queueing, tokens: int) -> tuple[str, bool]:
    """A sentence on where TTFT went and why the token budget is to blame, and whether that
    is sure: the queue waited for the budget, or the prefill itself held most of TTFT."""
    split = q.split()
    if q.cause == "budget":
        return (f"Requests queued while running stayed below max_num_seqs, the KV cache had "
                f"room and the steps were full: {q.full_steps:.0%} of the {tokens}-token "
                f"budget on average. They wait for the budget ({split})."), True
    if q.prefill_share is not None and q.prefill_share >= PREFILL_HOLDS:
        return (f"Prefill held most of it ({split}): prompts are prefilled in chunks of up to "
                f"{tokens} tokens, one chunk a step."), True
    if q.doubt:
        return (f"The cause is in doubt: {q.doubt} ({split}); a larger budget is the likeliest "
                f"remedy, not a sure one."), False
    return (f"The cause is in doubt: {split}, and neither the queue nor the prefill holds most "
            f"of TTFT; a larger budget may not help."), False


def prefill_itl(facts: Facts) -> Finding | None:
    _, itl_slo = _objectives()
    if not _enough(facts) or facts.itl_p99 is None or facts.itl_p99 <= itl_slo \
            or (facts.prompt_tps or 0) <= 0:
        return None
    # Recompute after preemptions and steps stretched by a starved CPU raise ITL too: their
    # own diagnoses say what to change; smaller prefill chunks would not help. Recurring
    # preemptions are enough to step aside: recompute is prefill, and while the KV cache fills
    # up (before its average says "pressure") it already stretches the steps.
    if (facts.preemptions_per_s or 0) >= PREEMPTING or _starved(facts):
        return None
    tokens = int(arg(facts, "max_num_batched_tokens"))
    proposed = max(MIN_BATCHED_TOKENS, int(arg(facts, "max_num_seqs")), tokens // 2)
    if proposed >= tokens:
        return None
    return Finding(
        Kind.PREFILL_ITL, confidence=0.7, severity=facts.itl_p99 / itl_slo,
        evidence=[evidence(facts, "engine.itl_seconds", "p99", facts.itl_p99,
                           f"> {itl_slo * 1000:g} ms (objective)"),
                  evidence(facts, "engine.prompt_tokens_per_s", "avg", facts.prompt_tps,
                           "> 0 (prefills share the steps)")],
        changes=[change("args.max_num_batched_tokens", tokens, proposed)],
        reasoning=(f"ITL p99 was {facts.itl_p99 * 1000:.0f} ms, over the "
                   f"{itl_slo * 1000:g} ms objective, with {facts.prompt_tps:.0f} prompt "
                   f"tokens/s prefilled in chunks of up to {tokens} tokens beside the "
                   f"decodes: smaller chunks make each step shorter."),
        expected="Lower ITL p99; TTFT of long prompts rises somewhat.")


# -- 4. CPU starvation --------------------------------------------------------------------


def _starved(facts: Facts) -> bool:
    """The CPU holds the engine back while work waits (a queue, or TTFT or ITL over its
    objective: steps stretched by a starved CPU make every decode wait):
    its processes' threads waited for a CPU (``proc.cpu_wait_pct``, measured where the host's
    kernel keeps schedstat), or a process held a full core or the cgroup throttled while the
    GPUs sat below GPU_BUSY. A full core alone is not enough: at low load vLLM's engine loop
    still polls one, and a GPU idle for want of requests is not starved."""
    ttft_slo, itl_slo = _objectives()
    waits = ((facts.waiting_avg or 0) >= WAITING
             or (facts.ttft_p99 is not None and facts.ttft_p99 > ttft_slo)
             or (facts.itl_p99 is not None and facts.itl_p99 > itl_slo))
    return waits and (_cpu_waited(facts) or _cpu_bound(facts))


def _cpu_waited(facts: Facts) -> bool:
    util = facts.gpu_util_avg
    if util is not None:
        return (facts.cpu_wait_pct or 0) >= CPU_WAITING and util < GPU_BUSY
    return (_wait_share(facts) or 0) >= CPU_WAIT_SHARE


def _wait_share(facts: Facts) -> float | None:
    """The largest share of its runnable time (waiting + running) a vLLM process spent
    waiting for a CPU, among those that waited CPU_WAITING or more."""
    shares = [wait / (wait + facts.proc_cpu.get(pid, 0.0))
              for pid, wait in facts.proc_cpu_wait.items() if wait >= CPU_WAITING]
    return max(shares) if shares else None


def _cpu_bound(facts: Facts) -> bool:
    util = facts.gpu_util_avg
    return ((facts.busiest_process_pct or 0) >= CORE_PINNED
            or (facts.throttled_pct or 0) >= THROTTLED) and util is not None and util < GPU_BUSY


def cpu_starvation(facts: Facts) -> Finding | None:
    if not _enough(facts) or not _starved(facts):
        return None
    current = _bound_cpus(facts)
    want = min(8, max(4, 2 + 2 * world_size(facts.args or _reported_parallelism(facts))))
    proposed = _cpus_near_gpus(facts, want) or current
    changes = []
    # An unbound server on a host with no more CPUs than that gains nothing from a binding.
    everything = current is None and len(proposed or []) >= (facts.host.cpu_count or 0)
    if proposed and proposed != current and not everything:
        changes.append(change("cpus", current, proposed))
    servers = int(arg(facts, "api_server_count", 1))
    if "api_server_count" in _arg_names(facts.vllm_version or vllm_args.DEFAULT_VERSION):
        changes.append(change("args.api_server_count", servers, servers + 1))
    proof, causes = _starvation_proof(facts)
    util = facts.gpu_util_avg
    gpus = (f"The GPUs averaged {util:.0f} % busy" if util is not None else
            "No GPU utilisation was reported (a CPU build, or NVML unreadable)")
    return Finding(
        Kind.CPU_STARVATION, confidence=0.8, evidence=proof, changes=changes,
        severity=(facts.cpu_wait_pct or 0.0) if _cpu_waited(facts) else GPU_BUSY - (util or 0),
        reasoning=(f"{gpus}; with work queued or running, {' and '.join(causes)}: the "
                   f"engine loop cannot keep the device fed. vLLM wants 4-8 dedicated cores "
                   f"per instance and more API server processes under load."),
        expected="Less CPU wait, higher device utilisation, step times and TTFT down at the "
                 "same load.")


def _starvation_proof(facts: Facts) -> tuple[list[dict[str, Any]], list[str]]:
    """The evidence of CPU starvation that held, and each as a clause of the reasoning."""
    util, waited = facts.gpu_util_avg, facts.cpu_wait_pct
    pinned, throttled = facts.busiest_process_pct, facts.throttled_pct
    proof, causes = [], []
    if util is not None:
        proof.append(evidence(facts, "gpu.util_pct", "avg", util, f"< {GPU_BUSY:g} %", "gpu",
                              facts.gpus[0].id if facts.gpus else None))
    if _cpu_waited(facts) and util is not None:
        proof.append(evidence(facts, "proc.cpu_wait_pct", "avg, longest-waiting vLLM process",
                              waited, f">= {CPU_WAITING:g} % (threads waiting for a CPU)",
                              "engine"))
        causes.append(f"its threads waited for a CPU {waited:.0f} % of the time (100 = one "
                      f"thread always)")
    elif _cpu_waited(facts):
        share = _wait_share(facts)
        proof.append(evidence(facts, "proc.cpu_wait_pct", "waiting / (waiting + running), "
                              "longest-waiting vLLM process", share,
                              f">= {CPU_WAIT_SHARE:g} (no GPU figures: the CPU is the device)",
                              "engine"))
        causes.append(f"a vLLM process waited for a CPU {share:.0%} of the time it could have "
                      f"run")
    if _cpu_bound(facts) and (pinned or 0) >= CORE_PINNED:
        proof.append(evidence(facts, "proc.cpu_pct", "avg, busiest vLLM process", pinned,
                              f">= {CORE_PINNED:g} % (a full core)", "engine"))
        causes.append(f"a vLLM process held {pinned:.0f} % of a core")
    if _cpu_bound(facts) and (throttled or 0) >= THROTTLED:
        proof.append(evidence(facts, "host.cpu_throttled_pct", "avg", throttled,
                              f">= {THROTTLED:g} %", "host", facts.host.id))
        causes.append(f"the cgroup throttled the CPUs {throttled:.0f} % of the time")
    return proof, causes


def _bound_cpus(facts: Facts) -> list[int] | None:
    """The CPUs the server is bound to: a deployment's ``cpus``; for an engine Pitwall does
    not run, its processes' affinity where it is narrower than the host (else None:
    unbound)."""
    if facts.deployment is not None:
        return list(facts.deployment.cpus) if facts.deployment.cpus else None
    cpus = sorted(facts.proc_cpus)
    return cpus if cpus and len(cpus) < (facts.host.cpu_count or 0) else None


def _reported_parallelism(facts: Facts) -> dict[str, int]:
    names = ("tensor_parallel_size", "pipeline_parallel_size", "data_parallel_size")
    return {n: int(arg(facts, n, 1)) for n in names}


def _arg_names(version: str) -> set[str]:
    try:
        return set(vllm_args.available(version))
    except ValueError:
        return set()


def _gpu_nodes(facts: Facts) -> set[int]:
    return {g.numa_node for g in facts.gpus if g.numa_node is not None}


def _cpus_near_gpus(facts: Facts, count: int) -> list[int] | None:
    """``count`` CPUs on the GPUs' NUMA node(s) that no other deployment of the host binds."""
    nodes, near = facts.host.node_cpus(), _gpu_nodes(facts)
    taken = _taken_cpus(facts)
    pool = [c for n in sorted(near) for c in nodes.get(n, []) if c not in taken]
    if not pool and facts.host.cpu_count:  # no NUMA layout reported: any free CPUs
        pool = [c for c in range(facts.host.cpu_count) if c not in taken]
    return sorted(pool[:count]) or None


def _taken_cpus(facts: Facts) -> set[int]:
    others = Deployment.objects.filter(host_id=facts.host.id, enabled=True)
    if facts.deployment is not None:
        others = others.exclude(pk=facts.deployment.pk)
    others = others.values_list("cpus", flat=True)
    return {c for cpus in others for c in cpus or []}


# -- 5. NUMA mismatch ---------------------------------------------------------------------


def numa_mismatch(facts: Facts) -> Finding | None:
    nodes, near = facts.host.node_cpus(), _gpu_nodes(facts)
    if not facts.proc_cpus or not near or len(nodes) < 2:
        return None
    node_of = {c: n for n, cpus in nodes.items() for c in cpus}
    used = {node_of[c] for c in facts.proc_cpus if c in node_of}
    if not used or used & near:
        return None
    proposed = _cpus_near_gpus(facts, max(4, min(8, len(facts.proc_cpus))))
    if not proposed:
        return None
    return Finding(
        Kind.NUMA_MISMATCH, confidence=0.9, severity=float(len(facts.proc_cpus)),
        evidence=[{**evidence(facts, "proc.cpu_affinity", "CPUs", None,
                              f"on NUMA node {sorted(near)}", "engine"),
                   "value": sorted(facts.proc_cpus), "nodes": sorted(used)}],
        changes=[change("cpus", _bound_cpus(facts), proposed)],
        reasoning=(f"The vLLM processes run on CPUs of NUMA node(s) {sorted(used)} while "
                   f"their GPUs hang off node(s) {sorted(near)}: every host-to-device copy "
                   f"and every kernel launch crosses the interconnect."),
        expected="Lower and steadier step times (TTFT and ITL), less cross-socket traffic.")


# -- 6. Foreign GPU memory ----------------------------------------------------------------


def foreign_memory(facts: Facts) -> Finding | None:
    gmu = float(arg(facts, "gpu_memory_utilization"))
    worst = None
    for gpu in facts.gpus:
        used = facts.gpu_mem_used.get(gpu.id)
        if used is None or not gpu.mem_total_bytes:
            continue
        beyond = used - gmu * gpu.mem_total_bytes
        if beyond >= FOREIGN_MIN and (worst is None or beyond > worst[1]):
            worst = (gpu, beyond)
    if worst is None:
        return None
    gpu, beyond = worst
    # Room for both: the other process keeps what it holds and may grow, CUDA contexts and
    # fragmentation take a few per cent, and a restart must find the share free.
    safe = math.floor((FOREIGN_CEILING * gpu.mem_total_bytes - beyond)
                      / gpu.mem_total_bytes * 100) / 100
    changes = [change("args.gpu_memory_utilization", gmu, safe)] if 0.5 <= safe < gmu else []
    return Finding(
        Kind.FOREIGN_MEMORY, confidence=0.85, severity=beyond / GIB,
        evidence=[evidence(facts, "gpu.mem_used_bytes", "avg", facts.gpu_mem_used[gpu.id],
                           f"> gpu_memory_utilization {gmu} x {gpu.mem_total_bytes / GIB:.0f} "
                           f"GiB + 1 GiB", "gpu", gpu.id)],
        changes=changes,
        reasoning=(f"GPU {gpu.index} holds {beyond / GIB:.1f} GiB beyond the "
                   f"{gmu:.0%} vLLM reserves: another process uses it. With both growing, "
                   f"one of them runs out of memory. Move that process, or leave it room."),
        expected="No out-of-memory risk on restart or under load; a smaller KV cache.")


# -- 7. Host readiness --------------------------------------------------------------------


def host_readiness(facts: Facts) -> Finding | None:
    host, gaps, proof = facts.host, [], []
    small = [g for g in facts.gpus if g.mem_total_bytes
             and g.mem_total_bytes < REFERENCE["gpu_mem_bytes"]]
    if small:
        gaps.append(f"GPU memory {small[0].mem_total_bytes / 10**9:.0f} GB < 24 GB")
        proof.append(evidence(facts, "gpu.mem_total_bytes", "inventory",
                              small[0].mem_total_bytes, ">= 24 GB", "gpu", small[0].id))
    if host.cpu_count and host.cpu_count < REFERENCE["cpu_count"]:
        gaps.append(f"{host.cpu_count} CPU cores < 8")
        proof.append(evidence(facts, "host.cpu_count", "inventory", host.cpu_count, ">= 8",
                              "host", host.id))
    if host.mem_total_bytes and host.mem_total_bytes < REFERENCE["mem_total_bytes"]:
        gaps.append(f"{host.mem_total_bytes / 10**9:.0f} GB RAM < 64 GB")
        proof.append(evidence(facts, "host.mem_total_bytes", "inventory",
                              host.mem_total_bytes, ">= 64 GB", "host", host.id))
    if not gaps:
        return None
    return Finding(
        Kind.HOST_READINESS, confidence=1.0, severity=float(len(gaps)), evidence=proof,
        reasoning=(f"{host.hostname} is below the reference host for vLLM: "
                   f"{'; '.join(gaps)}. (NVMe for models and KV offload is not measured by "
                   f"the agent: check it by hand.)"),
        expected="A readiness report: nothing to apply; move the deployment or upgrade the "
                 "host.")


# -- 8. Over-provisioned ------------------------------------------------------------------


def over_provisioned(facts: Facts) -> Finding | None:
    """Read over the long idle window (service.py gives it facts of TUNING_IDLE_WINDOW_S)."""
    idle_window = settings.PITWALL["TUNING_IDLE_WINDOW_S"]
    if facts.minutes < idle_window // 60 * 0.9 or (facts.finished_per_s or 0) >= IDLE_PER_S \
            or (facts.kv_max or 0) >= 0.1:
        return None
    tp = int(arg(facts, "tensor_parallel_size", 1))
    indices = (list(facts.deployment.gpu_indices) if facts.deployment is not None
               else [g.index for g in facts.gpus])
    changes = []
    if tp > 1 and len(indices) >= 2:
        changes = [change("args.tensor_parallel_size", tp, tp // 2),
                   change("gpu_indices", indices, indices[:len(indices) // 2])]
    return Finding(
        Kind.OVER_PROVISIONED, confidence=0.6, severity=1 / max(facts.finished_per_s or
                                                                 0.001, 0.001),
        evidence=[evidence(facts, "engine.requests_finished_per_s", "avg",
                           facts.finished_per_s, f"< {IDLE_PER_S} over {idle_window // 60} min"),
                  evidence(facts, "engine.kv_cache_usage", "max", facts.kv_max, "< 0.1")],
        changes=changes,
        reasoning=(f"Over {facts.minutes} minute{'s' * (facts.minutes != 1)} it finished "
                   f"{facts.finished_per_s or 0:.3f} requests/s and KV usage never passed "
                   f"{facts.kv_max or 0:.0%}: its {'GPUs sit' if facts.gpus else 'engine sits'} "
                   f"idle. " + ("Halve the tensor parallelism to free GPUs."
                                    if changes else "Consolidate it onto another deployment "
                                                    "or stop it.")),
        expected="The same service for this load on fewer GPUs." if changes else
                 "A report: free its GPUs for other work.")


# Over-provisioning reads its own, longer window (service.py).
DIAGNOSES = (kv_pressure, concurrency_cap, prefill_ttft, prefill_itl, cpu_starvation,
             numa_mismatch, foreign_memory, host_readiness)
