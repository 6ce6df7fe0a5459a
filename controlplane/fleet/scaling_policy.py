"""When a service needs another replica, or one fewer: the autoscaler's decision, pure.

Demand, not config, is what a replica answers. A queue while the replicas' KV cache is full is
KV pressure: another replica would take a share of it, but the tuning diagnosis's config change
(more memory for the cache, fewer sequences) absorbs it on the GPUs already held, so the
decision says so and adds none. A queue at healthy KV usage, or a TTFT error budget burning
too fast, held over the whole scale-out window, is demand: one more replica. A service idle
over the longer scale-in window loses one, if the replicas left would still be idle with its
share of the load. That is the hysteresis: a scale-in needs fewer running requests per replica
than the idle threshold even after it, and a scale-out needs a queue, which forms only once a
replica runs ``max_num_seqs`` requests; the same load never triggers both.

Each direction has its own cool-down after the last step taken, and no step is decided while
one is in flight. Every decision carries its evidence: each figure over its window against its
threshold, as it read.

At zero replicas (``min_replicas`` 0) there are no minutes to read: the router is the only
witness of demand. A request sent then waits in the router's retries (its agent starts it with a
retry budget of ``router_hold_s``), and each of its tries that finds no worker is counted; a
count that grew lately is a request waiting now, so the first replica is added at once, with no
window (``from_zero``).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace
from datetime import datetime, timedelta
from statistics import fmean


class Direction:
    OUT = "out"
    IN = "in"
    HOLD = "hold"  # a reason to act that a bound, a cool-down or the config held back
    CONFIG = "config"  # the queue is KV pressure: a config change, not a replica


@dataclass(frozen=True)
class Policy:
    """A service's limits and the thresholds it scales on (docs/autoscaling.md)."""

    min_replicas: int = 1
    max_replicas: int = 1
    waiting_per_replica: float = 4.0  # out: requests queued per replica, every minute
    ttft_burn: float = 2.0  # out: the TTFT error budget's burn rate, every minute
    kv_pressure: float = 0.9  # a queue at this KV usage (mean) is the config's, not demand's
    idle_running_per_replica: float = 1.0  # in: requests running per replica, every minute
    out_window_s: int = 120
    in_window_s: int = 600
    out_cooldown_s: int = 180
    in_cooldown_s: int = 600


# How long the router holds a request sent at zero replicas, unless the service's ``scaling``
# says otherwise: the 5 minutes rollouts give a replica to become ready by default
# (PITWALL_ROLLOUT_READY_MIN_S). Bounded: each second of hold is also a second a live replica's
# failure may keep a client waiting, and a client's own timeout rarely exceeds 10 minutes.
DEFAULT_HOLD_S = 300
HOLD_RANGE_S = (30, 600)
# A request held at zero tries again every 2.4 s at most (the router's longest backoff with its
# jitter), and its agent reports each growth within a second or two, at worst with its 30-s
# heartbeat: a count that grew this recently is a request still waiting.
WAITING_S = 60
FROM_ZERO_RETRY_S = 15  # the longest a step from zero waits after the step before


# The controller's tick (PITWALL_SERVICE_TICK_S, 2 s) and a margin: how early a cool-down
# may end (``_cooling``).
COOLDOWN_SLACK_S = 5


@dataclass(frozen=True)
class Minute:
    """One minute of the service's serving replicas, summed or averaged over them."""

    at: datetime
    replicas: int  # replicas that served in the minute
    waiting: float  # requests waiting, summed over the replicas (minute mean)
    running: float  # requests running, summed
    kv_usage: float | None  # the replicas' mean KV-cache usage, 0..1
    ttft_burn: float | None  # the TTFT objective's burn rate (None: no request finished)
    requests: int = 0  # requests finished


@dataclass(frozen=True)
class Waiting:
    """What the router said of requests sent while it had no worker: its tries that found
    none grew by ``tries`` in the report received at ``at``."""

    at: datetime
    tries: int


@dataclass
class Figure:
    """One piece of evidence: a figure over its window against its threshold."""

    name: str
    window_s: int
    value: float | None
    threshold: float
    op: str  # ">" or "<": what the decision needed of it
    held: bool  # whether the figure met it


@dataclass
class State:
    """What the autoscaler remembers between ticks."""

    last_out: datetime | None = None
    last_in: datetime | None = None
    in_flight: bool = False  # a replica added is not yet serving, or one removed not gone


@dataclass
class Decision:
    direction: str
    replicas_before: int
    replicas_after: int
    reason: str
    evidence: list[Figure] = field(default_factory=list)

    @property
    def changes(self) -> bool:
        return self.replicas_after != self.replicas_before

    def as_json(self) -> dict:
        return {**asdict(self), "changes": self.changes}


def decide(policy: Policy, replicas: int, minutes: list[Minute], state: State,
           now: datetime) -> Decision | None:
    """The decision for a service of ``replicas`` replicas on its last minutes (oldest first),
    or None when nothing calls for one. A replica count outside the limits is brought inside
    them first, whatever the load, a step at a time as any other."""
    if replicas < policy.min_replicas or replicas > policy.max_replicas:
        step = 1 if replicas < policy.min_replicas else -1
        return _gate(Decision(Direction.OUT if step > 0 else Direction.IN, replicas,
                              replicas + step, f"{replicas} replicas is outside the limits "
                              f"{policy.min_replicas}..{policy.max_replicas}"),
                     policy, State(in_flight=state.in_flight), now)
    out = _scale_out(policy, replicas, _within(minutes, now, policy.out_window_s))
    if out is not None:
        return _gate(out, policy, state, now)
    inward = _scale_in(policy, replicas, _within(minutes, now, policy.in_window_s))
    return None if inward is None else _gate(inward, policy, state, now)


def from_zero(policy: Policy, replicas: int, waiting: Waiting | None, state: State,
              now: datetime) -> Decision | None:
    """At zero replicas, the first one as soon as the router holds a request: no window to
    fill, someone is waiting. None above zero, or with no recent sign of a request."""
    if replicas != 0 or waiting is None:
        return None
    age_s = (now - waiting.at).total_seconds()
    if age_s > WAITING_S:
        return None
    held = Figure("router_tries_without_a_replica", WAITING_S, waiting.tries, 0.0, ">", True)
    # Someone waits, and 0 -> 1 cannot flap: a failed try (the last replica's GPU not yet
    # released, measured 2-4 s after it stopped) is tried again within seconds, not after the
    # scale-out cool-down the held request would spend most of its hold on.
    retrying = replace(policy, out_cooldown_s=min(policy.out_cooldown_s, FROM_ZERO_RETRY_S))
    return _gate(Decision(Direction.OUT, 0, 1,
                          f"requests wait in the router with no replica: its tries that found "
                          f"none grew by {waiting.tries} {max(age_s, 0.0):.0f} s ago", [held]),
                 retrying, state, now)


def router_hold_s(min_replicas: object, scaling: object) -> int:
    """How long the service's router holds a request while no replica serves: 0 (the router's
    usual retries) unless the service may scale to zero; then its ``zero_hold_s``, else
    DEFAULT_HOLD_S. Read from the config alone, not from the replicas: a change restarts the
    router."""
    if min_replicas != 0:
        return 0
    knob = scaling.get("zero_hold_s") if isinstance(scaling, dict) else None
    hold = knob if isinstance(knob, int) and not isinstance(knob, bool) else DEFAULT_HOLD_S
    return min(max(hold, HOLD_RANGE_S[0]), HOLD_RANGE_S[1])


def _within(minutes: list[Minute], now: datetime, window_s: int) -> list[Minute] | None:
    """The minutes of the window, or None unless every one of its minutes is there (a
    sustained condition is one seen in each minute, not in a mean a spike could make)."""
    lo = now - timedelta(seconds=window_s)
    inside = [m for m in minutes if lo < m.at <= now and m.replicas > 0]
    return inside if len(inside) >= max(1, window_s // 60) else None


def _scale_out(policy: Policy, replicas: int, window: list[Minute] | None) -> Decision | None:
    if window is None:
        return None
    waiting = [m.waiting / m.replicas for m in window]
    burns = [m.ttft_burn for m in window]
    queued = Figure("waiting_per_replica", policy.out_window_s, min(waiting),
                    policy.waiting_per_replica, ">", min(waiting) > policy.waiting_per_replica)
    least_burn = None if None in burns else min(b for b in burns if b is not None)
    burning = Figure("ttft_burn", policy.out_window_s, least_burn, policy.ttft_burn, ">",
                     least_burn is not None and least_burn > policy.ttft_burn)
    if not (queued.held or burning.held):
        return None
    kv = [m.kv_usage for m in window if m.kv_usage is not None]
    kv_mean = fmean(kv) if kv else None
    pressure = Figure("kv_usage", policy.out_window_s, kv_mean, policy.kv_pressure, "<",
                      kv_mean is None or kv_mean < policy.kv_pressure)
    evidence = [queued, burning, pressure]
    why = " and ".join(f"{f.name} {_num(f.value)} > {_num(f.threshold)}"
                       for f in (queued, burning) if f.held)
    if not pressure.held:
        return Decision(Direction.CONFIG, replicas, replicas,
                        f"{why}, but KV usage is {_num(kv_mean)}: the queue is KV pressure, "
                        f"which the tuning diagnosis's config change absorbs on the GPUs "
                        f"held; no replica added", evidence)
    if replicas >= policy.max_replicas:
        return Decision(Direction.HOLD, replicas, replicas,
                        f"{why}, but the service is at its max_replicas "
                        f"({policy.max_replicas})", evidence)
    return Decision(Direction.OUT, replicas, replicas + 1,
                    f"{why} for {policy.out_window_s} s at KV usage {_num(kv_mean)}",
                    evidence)


def _scale_in(policy: Policy, replicas: int, window: list[Minute] | None) -> Decision | None:
    if window is None or replicas <= policy.min_replicas:
        return None
    running = max(m.running / m.replicas for m in window)
    waiting = max(m.waiting / m.replicas for m in window)
    idle = Figure("running_per_replica", policy.in_window_s, running,
                  policy.idle_running_per_replica, "<",
                  running < policy.idle_running_per_replica)
    quiet = Figure("waiting_per_replica", policy.in_window_s, waiting, 0.0, "<=",
                   waiting <= 0.0)
    if not (idle.held and quiet.held):
        return None
    fewer = replicas - 1
    if fewer == 0:  # to zero (min_replicas 0): only a service that served nothing at all
        served = sum(m.requests for m in window)
        none = Figure("requests", policy.in_window_s, served, 0.0, "<=",
                      served == 0 and running == 0)
        return None if not none.held else Decision(
            Direction.IN, replicas, 0, f"no request for {policy.in_window_s} s",
            [idle, quiet, none])
    # What the replicas left would carry, each minute's load over one replica fewer, must be
    # idle still: the band between this and a queue is the hysteresis.
    after = max((m.waiting + m.running) / fewer for m in window)
    room = Figure("running_per_replica_after", policy.in_window_s, after,
                  policy.idle_running_per_replica, "<", after < policy.idle_running_per_replica)
    if not room.held:
        return None
    return Decision(Direction.IN, replicas, fewer,
                    f"at most {_num(running)} requests running and none waiting per replica "
                    f"for {policy.in_window_s} s; {fewer} replicas would carry "
                    f"{_num(after)} each", [idle, quiet, room])


def _gate(decision: Decision, policy: Policy, state: State, now: datetime) -> Decision:
    """The decision as taken, or held by a step in flight or its direction's cool-down."""
    if not decision.changes:
        return decision
    held = None
    if state.in_flight:
        held = "a scale step is still in flight"
    elif decision.direction == Direction.OUT:
        held = _cooling(state.last_out, policy.out_cooldown_s, now, "out")
    else:
        # A scale-in waits out the scale-out cool-down too: no removing what was just added.
        held = (_cooling(state.last_in, policy.in_cooldown_s, now, "in")
                or _cooling(state.last_out, policy.in_cooldown_s, now, "out"))
    if held is None:
        return decision
    return Decision(Direction.HOLD, decision.replicas_before, decision.replicas_before,
                    f"{decision.reason}; held: {held}", decision.evidence)


def _cooling(last: datetime | None, cooldown_s: int, now: datetime, what: str) -> str | None:
    """Why the cool-down still holds, or None. Decisions come once a minute, each on the
    controller's first tick of the minute, so a step is 60 s after the one before give or take
    a tick: a cool-down of a whole number of minutes is over COOLDOWN_SLACK_S early, or it
    would hold a step for a minute more about every other time (measured: "the last scale-in
    was 59 s ago (cool-down 60 s)")."""
    if last is None:
        return None
    left = cooldown_s - (now - last).total_seconds()
    return f"the last scale-{what} was {cooldown_s - left:.0f} s ago " \
           f"(cool-down {cooldown_s} s)" if left > COOLDOWN_SLACK_S else None


def _num(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.3g}"


# What a service's ``scaling`` may set over the defaults, and the range of each: Policy's
# thresholds, and the router's hold at zero replicas (``router_hold_s``).
KNOB_RANGES: dict[str, tuple[float, float]] = {
    "waiting_per_replica": (0.0, 10_000.0),
    "ttft_burn": (0.0, 1_000.0),
    "kv_pressure": (0.0, 1.0),
    "idle_running_per_replica": (0.0, 10_000.0),
    "out_window_s": (60, 3600),
    "in_window_s": (60, 86_400),
    "out_cooldown_s": (0, 86_400),
    "in_cooldown_s": (0, 86_400),
    "zero_hold_s": HOLD_RANGE_S,
}


def knob_errors(scaling: object) -> list[str]:
    """What is wrong with a service's ``scaling`` thresholds: unknown names, values that are
    not numbers or out of range, windows that are not whole minutes."""
    if not isinstance(scaling, dict):
        return ["must be an object of thresholds"]
    errors = []
    for name, value in scaling.items():
        if name not in KNOB_RANGES:
            errors.append(f"{str(name)[:40]!r} is not a threshold; "
                          f"known: {', '.join(sorted(KNOB_RANGES))}")
            continue
        low, high = KNOB_RANGES[name]
        whole = name.endswith("_s")
        if isinstance(value, bool) or not isinstance(value, int | float) or (
                whole and not isinstance(value, int)) or not low <= value <= high:
            kind = "a whole number of seconds" if whole else "a number"
            errors.append(f"{name} must be {kind} from {low:g} to {high:g}")
        elif name.endswith("_window_s") and value % 60:
            errors.append(f"{name} must be whole minutes (a multiple of 60), not {value}")
    return errors
