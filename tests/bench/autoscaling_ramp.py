"""Autoscaling load-ramp benchmark: demand 1x -> 4x -> 1x through vLLM's router, an autoscaled
service against a fixed one sized for the peak.

    make bench-autoscaling
    python -m tests.bench.autoscaling_ramp [--quick] [--profile 120:1,20:2,...] [--out F]
    PITWALL_BENCH_RAMP=quick make bench-autoscaling

The stack of tests/support/sim_service.py, every process real: the ASGI server on a bench
database of its own, two agents with simulated GPUs supervising simulated vLLM replicas, an
agent running the real vllm-router (one per service), the service controller's tick on a
thread of this process (the autoscaler is its step). Services of the same model side by side,
each behind its own router and each driven by the same closed-loop clients:

- ``auto``: ``scaling_mode: auto``, 1..MAX_REPLICAS, one-minute windows (the shortest);
- ``headroom``: the same with ``min_replicas`` ``--headroom`` (2; 0 leaves it out): what a
  replica kept in hand buys during the rise, and what it costs;
- ``fixed``: PEAK_REPLICAS replicas all along, the count that holds the peak without a queue
  (the peak's clients over ``max_num_seqs``).

Each replica runs MAX_NUM_SEQS sequences at a time, so one replica queues at 2x. The profile
is phases of ``seconds:multiple`` of BASE_CLIENTS clients (``--profile``, or the environment's
PITWALL_BENCH_RAMP; ``quick`` is a short one for a try). Every SAMPLE_S: the clients, the
service's desired replicas, the replicas placed (holding GPUs), those in the router's
rotation (its GET /workers) and the requests waiting and running (each replica's
/sim/state). Then, for each autoscaled service: each scale step's decision, when its replica
was in the router and first answered, the client requests that failed during it; and for
every service its GPU-hours (against the fixed one's) and its TTFT objective attainment.

TTFT at the client: the simulated vLLM serves no streams, so a client sees only the whole
answer. A request's TTFT is taken as its latency less the decode of its remaining tokens by
the simulated engine's own roofline (``decode_s``); the first 1x phase checks it (its
requests queue nowhere). Beside it, the engines' TTFT histograms over the same span, read
from the stored engine rows with the arithmetic the autoscaler's burn uses (the share under
the objective, interpolated inside the bucket). Results go to var/bench/autoscaling_ramp.json.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import threading
import time
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from tests.bench import harness

BASE_CLIENTS = 2  # 1x: one replica's worth of sequences, no queue
MAX_NUM_SEQS = 2
MAX_TOKENS, PROMPT_TOKENS, PAUSE_S = 128, 48, 0.05  # about 1.1 s a request on a simulated H100
PEAK_MULTIPLE = 4
PEAK_REPLICAS = BASE_CLIENTS * PEAK_MULTIPLE // MAX_NUM_SEQS  # the fixed service: 4
MAX_REPLICAS = PEAK_REPLICAS + 1  # room for an overshoot to show
GPUS_PER_REPLICA = 1  # no tensor parallelism
HOSTS, GPUS_PER_HOST = 2, 7  # 14 GPUs: every service at its most
HEADROOM_MIN = 2
# One-minute windows (the shortest: whole minutes); no cool-down between scale-outs (each
# waits for the last to serve, being in flight until then); a queue of more than half a
# request per replica scales out, so three replicas under the peak's 8 clients (2 waiting)
# still do. A replica is idle below max_num_seqs running: the replicas left after a scale-in
# must hold the minute's whole load without a queue.
SCALING = {"waiting_per_replica": 0.5, "out_window_s": 60, "in_window_s": 60,
           "out_cooldown_s": 0, "in_cooldown_s": 60, "idle_running_per_replica": MAX_NUM_SEQS}
PROFILES = {
    # 1x for two minutes, a one-minute ramp to 4x (2x, 3x), 4x held, then 1x long enough for
    # three scale-ins a minute apart: 12.5 minutes of load.
    "full": "120:1,20:2,20:3,260:4,330:1",
    "quick": "60:1,150:4,150:1",
}
SAMPLE_S = 2.0
PRINT_EVERY = 5  # samples between timeline lines
STEP_TAIL_S = 15.0  # after a step ends: an added replica's first answers, a removed one's drain
SETTLE_S = 20.0  # after the profile: the last requests answered


@dataclass(frozen=True)
class Phase:
    seconds: float
    multiple: int

    @property
    def clients(self) -> int:
        return BASE_CLIENTS * self.multiple


def parse_profile(text: str) -> list[Phase]:
    text = PROFILES.get(text, text)
    phases = []
    for part in text.split(","):
        seconds, multiple = part.split(":")
        phases.append(Phase(float(seconds), int(multiple)))
    return phases


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--profile", default=os.environ.get("PITWALL_BENCH_RAMP", "full"),
                        help="'full', 'quick' or phases as seconds:multiple,... of "
                             f"{BASE_CLIENTS} clients")
    parser.add_argument("--quick", action="store_const", const="quick", dest="profile")
    parser.add_argument("--headroom", type=int, default=HEADROOM_MIN,
                        help="min_replicas of a second autoscaled service; 0: none")
    parser.add_argument("--sample-s", type=float, default=SAMPLE_S)
    parser.add_argument("--out", type=Path,
                        default=harness.ROOT / "var" / "bench" / "autoscaling_ramp.json")
    return parser.parse_args(argv)


# -- the demand ----------------------------------------------------------------------------

class Demand:
    """Closed-loop clients through one router, as many as the phase asks: each rise adds a
    ServiceLoad of its own, a fall stops the newest first (a stopped client finishes the
    request it has in flight, which is counted)."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.layers: list[tuple[int, Any]] = []  # (clients, ServiceLoad), oldest first
        self.stopped: list[Any] = []

    @property
    def clients(self) -> int:
        return sum(n for n, _ in self.layers)

    def set(self, clients: int) -> None:
        while self.clients > clients:
            _, load = self.layers.pop()
            load.stop(timeout=0)
            self.stopped.append(load)
        if self.clients < clients:
            self.layers.append((clients - self.clients, self._load(clients - self.clients)))

    def _load(self, clients: int):
        from tests.support.service_load import ServiceLoad
        from tests.support.sim_service import MODEL

        return ServiceLoad(self.url, MODEL, clients=clients, prompt_tokens=PROMPT_TOKENS,
                           max_tokens=MAX_TOKENS, pause_s=PAUSE_S, stream=False).start()

    def stop(self) -> None:
        self.set(0)
        for load in self.stopped:
            load.stop(timeout=300)  # every request in flight answered and kept

    def sent(self) -> list:
        loads = [load for _, load in self.layers] + self.stopped
        return sorted((s for load in loads for s in load.sent), key=lambda s: s.start)


# -- what is watched -----------------------------------------------------------------------

@dataclass
class ReplicaSeen:
    """One replica's life as the samples saw it (unix seconds)."""

    url: str
    placed: float
    listed: float | None = None  # first in the router's GET /workers
    answered: float | None = None  # its first finished request (vllm:request_success_total)
    unlisted: float | None = None  # out of the router again
    gone: float | None = None  # its row removed: its GPU given back


@dataclass
class Sample:
    at: float
    clients: int
    desired: int
    placed: int
    in_rotation: int
    waiting: float
    running: float


@dataclass
class Watched:
    """A service, its router, its clients and what the samples saw of it."""

    name: str
    service: Any
    router_port: int
    demand: Demand
    samples: list[Sample] = field(default_factory=list)
    replicas: dict[int, ReplicaSeen] = field(default_factory=dict)
    engine_ids: set[int] = field(default_factory=set)
    step_replica: dict[int, int] = field(default_factory=dict)  # decision -> deployment


class Sampler:
    """Every ``every`` s, a Sample of each watched service; a timeline line now and then."""

    def __init__(self, stack, watched: list[Watched], every: float) -> None:
        self.stack, self.watched, self.every = stack, watched, every
        self.t0 = time.time()
        self.errors: list[str] = []
        self.loadavg: list[float] = []  # the machine's 1-minute load average, each round
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="sampler", daemon=True)

    def start(self, t0: float) -> Sampler:
        self.t0 = t0
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(60)

    def _run(self) -> None:
        from django.db import connection

        n = 0
        try:
            while not self._stop.wait(self.every):
                try:
                    for w in self.watched:
                        self.sample(w)
                except Exception as exc:  # noqa: BLE001 -- kept and reported; sampling goes on
                    self.errors.append(repr(exc)[:200])
                    continue
                self.loadavg.append(os.getloadavg()[0])
                n += 1
                if n % PRINT_EVERY == 0:
                    print(self.line(), flush=True)
        finally:
            connection.close()

    def sample(self, w: Watched) -> None:
        from controlplane.fleet import routing
        from controlplane.fleet.models import Deployment, ScaleDecision, Service

        now = time.time()
        rows = list(Deployment.objects.filter(service=w.service).select_related("host"))
        listed = set(self.stack.router_workers(w.router_port) or [])
        waiting = running = 0.0
        for d in rows:
            seen = w.replicas.setdefault(d.pk, ReplicaSeen(self.stack.url(d), now))
            state = _sim_state(seen.url)
            if state is not None:
                waiting += state["requests_waiting"]
                running += state["requests_running"]
            self._follow(seen, listed, now)
        held = {d.pk for d in rows}
        for pk, seen in w.replicas.items():
            if pk not in held and seen.gone is None:
                seen.gone = now
                self._follow(seen, listed, now)
        w.engine_ids |= set(routing.engines_of(rows).values())
        for pk, dep in ScaleDecision.objects.filter(service=w.service, deployment__isnull=False
                                                    ).values_list("pk", "deployment_id"):
            w.step_replica.setdefault(pk, dep)  # a removed replica's link is nulled after
        desired = Service.objects.values_list("replicas", flat=True).get(pk=w.service.pk)
        w.samples.append(Sample(now, w.demand.clients, desired, len(rows), len(listed),
                                waiting, running))

    @staticmethod
    def _follow(seen: ReplicaSeen, listed: set[str], now: float) -> None:
        if seen.url in listed and seen.listed is None:
            seen.listed = now
        if seen.listed is not None and seen.answered is None and _answered(seen.url):
            seen.answered = now
        if seen.listed is not None and seen.url not in listed and seen.unlisted is None:
            seen.unlisted = now

    def line(self) -> str:
        parts = []
        for w in self.watched:
            s = w.samples[-1]
            parts.append(f"{w.name} {s.desired}/{s.placed}/{s.in_rotation} w{s.waiting:.0f}")
        s = self.watched[0].samples[-1]
        return (f"  t={s.at - self.t0:4.0f} s  clients {s.clients:2d} | desired/placed/"
                f"in router, waiting: " + " | ".join(parts))


def _sim_state(url: str) -> dict | None:
    from tests.support.sim_service import call

    try:
        return call("GET", f"{url}/sim/state")
    except OSError:
        return None  # not started yet, or stopped


def _answered(url: str) -> bool:
    from prometheus_client.parser import text_string_to_metric_families

    from tests.support.sim_service import NO_PROXY

    try:
        text = NO_PROXY.open(f"{url}/metrics", timeout=10).read().decode()
    except OSError:
        return False
    return any(s.value > 0 for f in text_string_to_metric_families(text)
               for s in f.samples if s.name == "vllm:request_success_total")


# -- the run -------------------------------------------------------------------------------

def start_services(stack, headroom: int) -> list[Watched]:
    """The services, each behind its own router, every replica serving; the fixed one last."""
    args, why = {"max_num_seqs": MAX_NUM_SEQS}, "the autoscaling load ramp"
    auto = {"args": args, "scaling_mode": "auto", "max_replicas": MAX_REPLICAS,
            "scaling": SCALING, "reason": why}
    services = [("auto", stack.create_service("auto", min_replicas=1, **auto),
                 stack.router_port)]
    if headroom:
        services.append(("headroom", *stack.add_service(
            "headroom", headroom, min_replicas=headroom, **auto)))
    services.append(("fixed", *stack.add_service("fixed", PEAK_REPLICAS, args=args,
                                                 reason=why)))
    return [Watched(name, service, port, Demand(f"http://127.0.0.1:{port}"))
            for name, service, port in services]


def run_profile(watched: list[Watched], phases: list[Phase]) -> list[float]:
    """Each phase's clients on every service, for its time; when each phase began."""
    starts = []
    for phase in phases:
        starts.append(time.time())
        print(f"phase {len(starts)}: {phase.multiple}x ({phase.clients} clients) for "
              f"{phase.seconds:.0f} s", flush=True)
        for w in watched:
            w.demand.set(phase.clients)
        time.sleep(phase.seconds)
    return starts


def rise_and_fall(phases: list[Phase], starts: list[float]) -> tuple[float, float | None]:
    """When the demand first rose, and when it first fell after that (unix seconds)."""
    rise = next(i for i in range(1, len(phases))
                if phases[i].multiple > phases[i - 1].multiple)
    fall = next((i for i in range(rise + 1, len(phases))
                 if phases[i].multiple < phases[i - 1].multiple), None)
    return starts[rise], None if fall is None else starts[fall]


# -- the figures ---------------------------------------------------------------------------

def decode_s() -> float:
    """A request's time from its first token to its last on the simulated engine at a full
    batch: MAX_TOKENS - 1 decode steps by its roofline (weights and KV read once a step)."""
    from agents.sim.engine_model import EngineConfig
    from tests.support.sim_service import MODEL

    config = EngineConfig(model=MODEL, max_num_seqs=MAX_NUM_SEQS)
    step = config.step_seconds(MAX_NUM_SEQS, MAX_NUM_SEQS * (PROMPT_TOKENS + MAX_TOKENS))
    return (MAX_TOKENS - 1) * step


def client_ttft(sent, decode: float) -> float | None:
    """A request's TTFT at the client: its latency less its decode; None if it failed."""
    return None if sent.error else max(0.0, sent.end - sent.start - decode)


def attainment(sent: list, decode: float, objective_s: float) -> dict[str, Any]:
    """The share of requests sent whose client TTFT met the objective (a failed one did not)."""
    met = sum(1 for s in sent if (t := client_ttft(s, decode)) is not None and t <= objective_s)
    ttfts = [t for s in sent if (t := client_ttft(s, decode)) is not None]
    return {"requests": len(sent), "met": met,
            "attainment": round(met / len(sent), 4) if sent else None,
            "ttft_median_s": round(statistics.median(ttfts), 3) if ttfts else None,
            "ttft_max_s": round(max(ttfts), 3) if ttfts else None}


def engine_attainment(engine_ids: set[int], lo: float, hi: float) -> float | None:
    """The engines' TTFT histograms over (lo, hi], as the burn reads them: the share under the
    objective (telemetry/objectives), interpolated inside its bucket."""
    from controlplane.telemetry import objectives
    from controlplane.telemetry.models import HistogramLayout
    from controlplane.telemetry.series.histograms import (
        dominant_layout,
        engine_buckets,
        histogram_fraction,
    )

    summed = engine_buckets("ttft_seconds", sorted(engine_ids), _dt(lo), _dt(hi)).get(None)
    if not summed:
        return None
    layout, counts = dominant_layout(summed)
    bounds = HistogramLayout.objects.values_list("bounds", flat=True).get(pk=layout)
    share = histogram_fraction(objectives.objective_s("ttft"), bounds, counts)
    return None if share is None else round(share, 4)


def _dt(at: float) -> datetime:
    return datetime.fromtimestamp(at, UTC)


def replica_seconds(samples: list[Sample], lo: float, hi: float) -> float:
    """Replicas placed (holding their GPUs) integrated over [lo, hi], each sample's count held
    until the next."""
    total = 0.0
    for a, b in zip(samples, samples[1:], strict=False):
        start, end = max(a.at, lo), min(b.at, hi)
        if end > start:
            total += a.placed * (end - start)
    return total


def scale_steps(w: Watched, rise_at: float, fall_at: float | None) -> list[dict[str, Any]]:
    """Each step the autoscaler took: its decision and its replica's times, a scale-out's from
    the rise, a scale-in's from the fall; the client requests sent from the decision to
    STEP_TAIL_S after the step ended, and those of them that failed."""
    from controlplane.fleet.models import ScaleDecision

    sent = w.demand.sent()
    steps = []
    for row in ScaleDecision.objects.filter(service=w.service).exclude(
            direction__in=("hold", "config")).order_by("at"):
        at = row.at.timestamp()
        end = (row.ended_at.timestamp() if row.ended_at else time.time()) + STEP_TAIL_S
        seen = w.replicas.get(w.step_replica.get(row.pk, -1))
        out = row.direction == "out"
        since = rise_at if out or fall_at is None else fall_at
        times = ({"in_router_s": _after(seen and seen.listed, since),
                  "first_answer_s": _after(seen and seen.answered, since)} if out else
                 {"out_of_router_s": _after(seen and seen.unlisted, since),
                  "removed_s": _after(seen and seen.gone, since)})
        steps.append({
            "direction": row.direction, "state": row.state,
            "replicas": f"{row.replicas_before}->{row.replicas_after}",
            "since": "rise" if since == rise_at else "fall",
            "decided_s": round(at - since, 1), "ready_s": row.ready_s, **times,
            "requests": sum(1 for s in sent if at <= s.start < end),
            "failed": sum(1 for s in sent if at <= s.start < end and s.error),
            "reason": row.reason})
    return steps


def _after(at: float | None, since: float) -> float | None:
    return None if not at else round(at - since, 1)


def timeline(samples: list[Sample], t0: float) -> list[dict[str, Any]]:
    """The samples at which the clients, desired replicas or replicas in the router changed."""
    out, last = [], None
    for s in samples:
        key = (s.clients, s.desired, s.in_rotation)
        if key != last:
            out.append({"t_s": round(s.at - t0), "clients": s.clients, "desired": s.desired,
                        "placed": s.placed, "in_router": s.in_rotation})
            last = key
    return out


def per_phase(sent: list, phases: list[Phase], starts: list[float], decode: float,
              objective_s: float) -> list[dict[str, Any]]:
    ends = starts[1:] + [starts[-1] + phases[-1].seconds]
    return [{"phase": i + 1, "multiple": p.multiple, "seconds": p.seconds,
             **attainment([s for s in sent if lo <= s.start < hi], decode, objective_s)}
            for i, (p, lo, hi) in enumerate(zip(phases, starts, ends, strict=True))]


def service_figures(w: Watched, lo: float, hi: float, phases: list[Phase],
                    starts: list[float], decode: float, objective_s: float) -> dict[str, Any]:
    sent = [s for s in w.demand.sent() if s.start >= lo]
    seconds = replica_seconds(w.samples, lo, hi)
    return {"requests": len(sent), "failed": sum(1 for s in sent if s.error),
            "errors": sorted({s.error[:80] for s in sent if s.error})[:5],
            "replica_seconds": round(seconds, 1),
            "gpu_hours": round(seconds * GPUS_PER_REPLICA / 3600, 4),
            "most_replicas": max((s.desired for s in w.samples), default=0),
            "attainment": attainment(sent, decode, objective_s),
            "engine_attainment": engine_attainment(w.engine_ids, lo, hi),
            "phases": per_phase(sent, phases, starts, decode, objective_s),
            "timeline": timeline(w.samples, lo)}


# -- the report ----------------------------------------------------------------------------

def print_report(report: dict[str, Any]) -> None:
    print(f"\nprofile {report['profile']} ({report['load_s']:.0f} s of load), TTFT objective "
          f"{report['objective_s']} s, decode taken off each latency {report['decode_s']} s")
    print(f"the rise began {report['rise_into_minute_s']} s into its minute")
    for name, steps in report["steps"].items():
        print(f"{name} replicas over time (t s: clients/desired/in the router): " + ", ".join(
            f"{e['t_s']}: {e['clients']}/{e['desired']}/{e['in_router']}"
            for e in report["services"][name]["timeline"]))
        for step in steps:
            print("  " + step_line(step))
    window = report["rise_window"]
    print(f"from the rise to auto's first added replica answering ({window['seconds']} s), "
          f"TTFT attainment: " + ", ".join(
              f"{name} {a['attainment']} ({a['requests']} requests)"
              for name, a in window["services"].items()))
    for name, f in report["services"].items():
        a = f["attainment"]
        print(f"{name}: {f['requests']} requests, {f['failed']} failed; {f['gpu_hours']} "
              f"GPU-hours ({f['replica_seconds']} replica-s, most {f['most_replicas']}); TTFT "
              f"attainment at the client {a['attainment']} (median {a['ttft_median_s']} s, max "
              f"{a['ttft_max_s']} s), engines' histograms {f['engine_attainment']}; GPU-hours "
              f"against fixed {f['gpu_hours_ratio']}")
        print("  per phase: " + ", ".join(
            f"{p['multiple']}x {p['attainment']} ({p['requests']})" for p in f["phases"]))
    print(f"load average (1 min) over the run: {report['loadavg_1m']}; sampler errors: "
          f"{len(report['sampler_errors'])}; controller errors: "
          f"{len(report['controller_errors'])}; report in {report['out']}")


def step_line(step: dict[str, Any]) -> str:
    times = (f"in the router {step['in_router_s']} s, first answer {step['first_answer_s']} s"
             if step["direction"] == "out" else
             f"out of the router {step['out_of_router_s']} s, removed {step['removed_s']} s")
    return (f"scale {step['direction']} {step['replicas']} ({step['state']}), after the "
            f"{step['since']}: decided {step['decided_s']} s, {times}; {step['failed']} of "
            f"{step['requests']} requests failed during the step")


def measure(stack, phases: list[Phase], sample_s: float, headroom: int) -> dict[str, Any]:
    """Every service through the profile; every figure of the report."""
    from controlplane.telemetry import objectives

    watched = start_services(stack, headroom)
    t0 = time.time()
    sampler = Sampler(stack, watched, sample_s).start(t0)
    try:
        starts = run_profile(watched, phases)
    finally:
        for w in watched:
            w.demand.stop()
    hi = time.time()
    time.sleep(SETTLE_S)  # the last requests' engine rows stored
    sampler.stop()
    rise_at, fall_at = rise_and_fall(phases, starts)
    decode, objective_s = round(decode_s(), 3), objectives.objective_s("ttft")
    services = {w.name: service_figures(w, t0, hi, phases, starts, decode, objective_s)
                for w in watched}
    steps = {w.name: scale_steps(w, rise_at, fall_at) for w in watched if w.name != "fixed"}
    for f in services.values():
        f["gpu_hours_ratio"] = round(f["gpu_hours"] / services["fixed"]["gpu_hours"], 3)
    # Where the attainment is lost: from the rise until auto's first added replica answered.
    served = next((rise_at + s["first_answer_s"] for s in steps["auto"]
                   if s["direction"] == "out" and s["first_answer_s"] is not None), hi)
    window = {"seconds": round(served - rise_at, 1), "services": {
        w.name: attainment([s for s in w.demand.sent() if rise_at <= s.start < served],
                           decode, objective_s) for w in watched}}
    return {"load_s": round(hi - t0, 1), "decode_s": decode, "objective_s": objective_s,
            "objective_target": objectives.target(),
            "rise_into_minute_s": round(rise_at % 60, 1), "steps": steps,
            "rise_window": window, "services": services,
            "loadavg_1m": {"mean": round(statistics.fmean(sampler.loadavg), 2),
                           "max": round(max(sampler.loadavg), 2)} if sampler.loadavg else None,
            "sampler_errors": sampler.errors,
            "samples": {w.name: [asdict(s) for s in w.samples] for w in watched},
            "replicas": {w.name: [asdict(r) for r in w.replicas.values()] for w in watched}}


def main(argv=None) -> int:
    args = parse_args(argv)
    phases = parse_profile(args.profile)
    # A database of its own: other benchmarks and sessions use pitwall_bench.
    harness.BENCH_DB = os.environ.get("PITWALL_BENCH_DB", "bench_autoscaling")
    env = harness.open_bench_database()
    from django.conf import settings

    from tests.support.sim_service import SimServiceStack

    tick_s = settings.PITWALL["SERVICE_TICK_S"]
    report: dict[str, Any] = {
        "machine": harness.machine(), "when": datetime.now(UTC).isoformat(),
        "profile": ",".join(f"{p.seconds:g}:{p.multiple}" for p in phases),
        "base_clients": BASE_CLIENTS, "max_num_seqs": MAX_NUM_SEQS, "max_tokens": MAX_TOKENS,
        "fixed_replicas": PEAK_REPLICAS, "max_replicas": MAX_REPLICAS, "scaling": SCALING,
        "headroom_min_replicas": args.headroom,
        "tick_s": tick_s, "out": str(args.out)}
    with tempfile.TemporaryDirectory(prefix="pw-bench-ramp-") as tmp:
        stack = SimServiceStack(Path(tmp), env, replicas=1, hosts=HOSTS, tick_s=tick_s,
                                gpus_per_host=GPUS_PER_HOST).start()
        try:
            report.update(measure(stack, phases, args.sample_s, args.headroom))
            report["controller_errors"] = stack.controller.errors
        finally:
            stack.stop()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2))
    print_report(report)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
