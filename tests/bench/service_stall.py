"""Service stall benchmark: a replica whose engine loop wedges, from the stall to its router.

    make bench-service-stall
    python -m tests.bench.service_stall [--stalls 5] [--spans 10 5]

The stack of tests/support/sim_service.py, every process real: the ASGI server on a fresh
bench database, an agent supervising three simulated vLLM replicas, an agent running the real
vllm-router, the service controller's tick on a thread every PITWALL_SERVICE_TICK_S (as beat
runs it), six clients through the router. Then ``--stalls`` stalls, each of the next replica
in turn (``POST /sim/stall``: /health 200, /metrics frozen), resumed once the router dropped it
and the others answered a dozen requests sent after, and back in the router before the next.
For each: stall -> verdict (the OUT_OF_ROTATION event's time), verdict -> the router no longer
lists it (its GET /workers polled every 0.1 s), stall -> out of the router, resume -> back in
the router, the requests it held (the event's figures) and the client errors from the stall
to the resume; then the median and max of each. Once per PITWALL_SERVICE_STALL_S in
``--spans`` (the controller's setting in this process; 10 is the default). Results go to
var/bench/service_stall.json.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
from datetime import UTC, datetime
from pathlib import Path

from tests.bench import harness

REPLICAS = 3
# The figures summarised (median, max), as Stall.figures() names them.
TIMINGS = ("stall_to_verdict_s", "verdict_to_router_s", "stall_to_out_of_router_s",
           "resume_to_router_s", "held_requests", "client_errors_while_stalled")


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--stalls", type=int, default=5)
    parser.add_argument("--spans", type=int, nargs="+", default=[10, 5],
                        help="PITWALL_SERVICE_STALL_S values, one series each (at least 3)")
    parser.add_argument("--out", type=Path,
                        default=harness.ROOT / "var" / "bench" / "service_stall.json")
    return parser.parse_args(argv)


def summary(stalls: list[dict]) -> dict[str, dict[str, float]]:
    out = {}
    for name in TIMINGS:
        values = [s[name] for s in stalls if s[name] is not None]
        out[name] = ({"median": round(statistics.median(values), 2), "max": max(values)}
                     if values else {"median": None, "max": None})
    return out


def series(stack, span: int, stalls: int) -> dict:
    """``stalls`` stalls under PITWALL_SERVICE_STALL_S = ``span``."""
    from django.conf import settings

    settings.PITWALL["SERVICE_STALL_S"] = span  # the controller's thread reads it each tick
    figures = []
    for i in range(stalls):
        stall = stack.stall(replica=i % REPLICAS)  # slots 0 .. REPLICAS-1, in turn
        figures.append(stall.figures())
        f = figures[-1]
        print(f"  stall {i + 1} (replica {f['replica']}): verdict after "
              f"{f['stall_to_verdict_s']:.1f} s, out of the router {f['verdict_to_router_s']:.1f}"
              f" s later ({f['stall_to_out_of_router_s']:.1f} s after the stall), held "
              f"{f['held_requests']:.0f} requests, {f['client_errors_while_stalled']} client "
              f"errors; back {f['resume_to_router_s']:.1f} s after the resume", flush=True)
        if stall.failed_after_unlisted:
            print(f"    requests failed after the router dropped it: "
                  f"{stall.failed_after_unlisted[:3]}", flush=True)
    return {"stalls": figures, "summary": summary(figures)}


def main(argv=None) -> int:
    args = parse_args(argv)
    env = harness.open_bench_database()
    from django.conf import settings

    from tests.support.sim_service import CLIENTS, SimServiceStack

    tick_s = settings.PITWALL["SERVICE_TICK_S"]
    report = {"machine": harness.machine(), "when": datetime.now(UTC).isoformat(),
              "replicas": REPLICAS, "clients": CLIENTS, "tick_s": tick_s,
              "agent_interval_s": 1.0, "spans": {}}
    with tempfile.TemporaryDirectory(prefix="pw-bench-stall-") as tmp:
        stack = SimServiceStack(Path(tmp), env, replicas=REPLICAS, tick_s=tick_s).start()
        try:
            stack.create_service()
            load = stack.start_load()
            stack.wait_until_each_replica_answered()
            for span in args.spans:
                print(f"PITWALL_SERVICE_STALL_S={span}:", flush=True)
                report["spans"][str(span)] = series(stack, span, args.stalls)
            load.stop()
            report["requests"] = len(load.sent)
            report["failed_requests"] = len(load.failed())
            report["controller_errors"] = stack.controller.errors
        finally:
            stack.stop()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2))
    for span, result in report["spans"].items():
        line = ", ".join(f"{name} {s['median']} (max {s['max']})"
                         for name, s in result["summary"].items())
        print(f"stall span {span} s, median (max) of {args.stalls}: {line}")
    print(f"{report['requests']} requests through the router, {report['failed_requests']} "
          f"failed; report in {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
