"""Where a server's time to first token went, and what its queue waited for.

vLLM splits the wait for a first token in two histograms: the queue
(``request_queue_time_seconds``, arrival to first scheduled) and the prefill
(``request_prefill_time_seconds``, first scheduled to first token). A high TTFT is a prefill
problem only when the prefill holds most of it, or when the queue waits for the token budget.
A request waits for one of three things:

- the sequence cap: ``running`` reaches ``max_num_seqs``;
- the KV cache: it is full, and preemptions follow;
- the token budget: ``running`` below the cap, the KV cache with room, the steps full: their
  mean tokens (the iteration-token histogram's sum over its count) at the budget. Not the
  histogram's buckets: vLLM 0.32 counts a prompt's tokens on the step its prefill completes,
  so a prompt longer than the budget puts its middle chunks' steps in the decode buckets and
  its whole length in one step (a 256-token budget under 1,800-token prompts: 14 % of the
  steps in the budget's bucket or above, and 256 tokens a step on average).

A queue is judged minute by minute by how many requests waited on average, time-weighted
(Little's law on the queue-time histogram: seconds waited per second), or the waiting gauge's
sample average where that is larger. Not by its minimum: a real engine's queue touches 0
inside most minutes, as requests finish and are admitted in bursts, while the queue holds
several on average (measured on vLLM 0.32 under a cap: running at the cap in every minute,
waiting 0.4-8.3 on average and 0 at some instant of nearly every minute).
"""

from __future__ import annotations

from dataclasses import dataclass

from controlplane.tuning.facts import EngineMinute, Facts

QUEUED = 0.5  # requests waiting on average over a minute: a queue, not a passing request
QUEUED_SHARE = 0.5  # of the minutes with a queue: it is the rule, not a burst
CAUSE_SHARE = 0.5  # of the queued minutes in which a cause held: it is the queue's cause
KV_FULL = 0.90  # peak KV-cache usage in a minute at which admissions wait for blocks
FULL_STEPS = 0.9  # mean tokens per step over the budget: the scheduler fills every step


@dataclass(frozen=True)
class Queueing:
    """One server's queue over the window, and its cause over the minutes it was there:
    "cap", "kv", "budget", or None (no queue, or in doubt: ``doubt`` says why). A queue in
    a few minutes has a cause too (the window may have just caught its onset); ``queued``
    says whether it held through most of the window."""

    minutes: int  # engine-minutes read
    queued_share: float  # of the minutes with a queue
    waiting: float | None  # requests waiting on average, time-weighted where reported
    queue_s: float | None  # mean seconds a request waited to be scheduled
    prefill_s: float | None  # mean seconds from first scheduled to first token
    ttft_s: float | None  # mean time to first token
    capped_share: float | None  # of the queued minutes, those with running at the cap
    kv_full_share: float | None  # of the queued minutes, those with the KV cache full
    full_steps: float | None  # mean tokens per step in the queued minutes, over the budget
    cause: str | None
    doubt: str = ""

    @property
    def queued(self) -> bool:
        return self.queued_share >= QUEUED_SHARE

    @property
    def queue_share(self) -> float | None:
        """Of the mean TTFT, the share spent in the queue (None: not reported)."""
        return _share(self.queue_s, self.ttft_s)

    @property
    def prefill_share(self) -> float | None:
        return _share(self.prefill_s, self.ttft_s)

    def split(self) -> str:
        """Where TTFT went, for a reasoning: "queueing was 81 % of TTFT (0.81 s of 1.00 s on
        average), prefill 12 %"; or why it is not known."""
        if self.queue_share is None:
            return "vLLM reported no queue-time histogram, so the share of TTFT spent queueing " \
                   "is not known"
        text = (f"queueing was {self.queue_share:.0%} of TTFT ({self.queue_s:.2f} s of "
                f"{self.ttft_s:.2f} s on average)")
        if self.prefill_share is not None:
            text += f", prefill {self.prefill_share:.0%}"
        return text


def _share(part: float | None, whole: float | None) -> float | None:
    if part is None or not whole:
        return None
    return min(1.0, max(0.0, part / whole))


def _mean(minutes: list[EngineMinute], total: str, count: str) -> float | None:
    seconds = [getattr(m, total) for m in minutes if getattr(m, total) is not None]
    n = sum(getattr(m, count) for m in minutes)
    return sum(seconds) / n if seconds and n else None


def waiting_in(m: EngineMinute) -> float:
    """Requests waiting on average over the minute: the seconds waited by the requests it
    scheduled, per second (time-weighted), or the gauge's sample average if larger (a queue
    that has not been scheduled yet is not in the histogram)."""
    return max((m.queue_s or 0.0) / 60.0, m.waiting_avg or 0.0)


def step_fill(minutes: list[EngineMinute], budget: int) -> float | None:
    """Mean tokens per engine step over the minutes, as a share of the token budget (None:
    no iteration-token histogram)."""
    tokens = [m.step_tokens for m in minutes if m.step_tokens is not None]
    steps = sum(m.steps for m in minutes)
    if not tokens or not steps or budget <= 0:
        return None
    return sum(tokens) / steps / budget


def plateau(minutes: list[EngineMinute], budget: int) -> int | None:
    """The running count a queue could not get past: the highest ``running`` of the minutes
    with a queue, reached in most of them (None: no queue, no such ceiling, or steps full at
    the token budget, which holds ``running`` below a cap too). Where an engine does not say
    its ``max_num_seqs`` (a container whose command line the agent cannot read), that ceiling
    with requests waiting behind it is the cap."""
    queued = [m for m in minutes if waiting_in(m) >= QUEUED and m.running_max]
    if not queued:
        return None
    fill = step_fill(queued, budget)
    if fill is not None and fill >= FULL_STEPS:
        return None
    top = max(m.running_max or 0 for m in queued)
    at_top = sum(1 for m in queued if m.running_max == top) / len(queued)
    return int(top) if at_top >= CAUSE_SHARE else None


def read(facts: Facts, max_num_seqs: int, budget: int, kv_pressed: bool) -> Queueing:
    """The queue of ``facts``' server and what it waited for, given its scheduler limits."""
    minutes = facts.engine_minutes
    queued = [m for m in minutes if waiting_in(m) >= QUEUED]
    waits = [waiting_in(m) for m in minutes]
    capped = _share_of(queued, lambda m: (m.running_max or 0) >= max_num_seqs)
    kv_full = _share_of(queued, lambda m: (m.kv_max or 0) >= KV_FULL)
    steps = step_fill(queued, budget)
    reading = Queueing(
        minutes=len(minutes), queued_share=len(queued) / len(minutes) if minutes else 0.0,
        waiting=sum(waits) / len(waits) if waits else None,
        queue_s=_mean(minutes, "queue_s", "queue_n"),
        prefill_s=_mean(minutes, "prefill_s", "prefill_n"),
        ttft_s=_mean(minutes, "ttft_s", "ttft_n"),
        capped_share=capped, kv_full_share=kv_full, full_steps=steps, cause=None)
    if not queued:
        return reading
    cause, doubt = _cause(reading, kv_pressed, max_num_seqs, budget)
    return Queueing(**{**reading.__dict__, "cause": cause, "doubt": doubt})


def _share_of(minutes: list[EngineMinute], held) -> float | None:
    return sum(1 for m in minutes if held(m)) / len(minutes) if minutes else None


def _cause(q: Queueing, kv_pressed: bool, seqs: int, budget: int) -> tuple[str | None, str]:
    """The KV cache first (a full cache also stops admissions below the cap), then the cap,
    then the budget; else in doubt, with what was seen."""
    if kv_pressed or (q.kv_full_share or 0) >= CAUSE_SHARE:
        return "kv", ""
    if (q.capped_share or 0) >= CAUSE_SHARE:
        return "cap", ""
    if q.full_steps is not None and q.full_steps >= FULL_STEPS:
        return "budget", ""
    steps = ("vLLM reported no tokens per step" if q.full_steps is None else
             f"the steps held {q.full_steps:.0%} of the {budget}-token budget on average")
    return None, (f"requests waited while running reached the {seqs}-sequence cap in only "
                  f"{q.capped_share or 0:.0%} of those minutes, the KV cache had room and "
                  f"{steps}: what held them back is not clear")
