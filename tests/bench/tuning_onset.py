"""Tuning benchmark: from a scenario's onset to its suggestion.

    make bench-tuning-onset

For a few scenarios (agents/sim/scenario_presets.py) one simulated host runs its deployment
healthy for 10 minutes (a light load), then the load that brings the symptom on from the
onset ``T0``, 12 minutes of it, all simulated at accelerated time through the agent's own
collectors. The batches go through the real ingest and the real rollup builder into a fresh
bench database; then tuning passes run as of every minute after ``T0`` (``tuning_pass(now)``
reads only the rollups before ``now``) until one makes the suggestion. That gives the
detection delay the 10-minute window imposes. A live system adds up to one rollup interval
plus its settle time (``PITWALL_ROLLUP_INTERVAL_S`` 60 s + ``PITWALL_ROLLUP_SETTLE_S`` 30 s)
before a minute is rolled up, and up to one pass interval (``PITWALL_TUNING_INTERVAL_S``, 60 s)
before a pass reads it: the report adds those bounds.
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

from tests.bench import harness

HEALTHY_MIN, SYMPTOM_MIN = 10, 12
INTERVAL_S = 5.0
# preset -> (suggestion kind, light load before the onset, requests/s)
CASES = {"kv_pressure": ("kv_pressure", 1.0), "concurrency_cap": ("concurrency_cap", 1.0),
         "cpu_starved": ("cpu_starvation", 0.5)}


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path,
                        default=harness.ROOT / "var/bench/tuning_onset.json")
    return parser.parse_args(argv)


def stream(name: str, onset: float, calm_rate: float | None = None,
           hostname: str | None = None) -> tuple[object, str]:
    """Ingest the healthy stretch (``calm_rate`` requests/s; None: none) and the symptom of
    one preset, as ``hostname``; returns (host, scenario)."""
    from agents.sim.scenario import simulate
    from agents.sim.scenario_presets import preset
    from controlplane.fleet.tokens import issue_agent_token
    from controlplane.telemetry.ingest.app import IngestApp
    from tests.support.asgi import AsgiClient

    sick = preset(name)
    hostname = hostname or f"onset-{name.replace('_', '-')}"
    sick = replace(sick, host=replace(sick.host, hostname=hostname))
    stretches = [(sick, onset + SYMPTOM_MIN * 60, SYMPTOM_MIN)]
    if calm_rate is not None:
        calm = replace(sick, load=replace(sick.load, rate=calm_rate, clients=0))
        stretches.insert(0, (calm, onset, HEALTHY_MIN))
    token, host = issue_agent_token(sick.host.hostname)
    client = AsgiClient(IngestApp())
    try:
        for scenario, end, minutes in stretches:
            for batch in simulate(scenario, minutes, end, INTERVAL_S):
                code, reply = client.post(batch, token)
                assert code == 200, reply
    finally:
        client.close()
    return host, sick


def detect(kind: str, onset: datetime) -> float | None:
    """Minutes after the onset of the first pass that suggests ``kind``."""
    from controlplane.tuning.models import Suggestion
    from controlplane.tuning.service import tuning_pass

    for minute in range(1, SYMPTOM_MIN + 1):
        tuning_pass(onset + timedelta(minutes=minute))
        if Suggestion.objects.filter(kind=kind).exists():
            return float(minute)
    return None


def main(argv=None) -> int:
    args = parse_args(argv)
    harness.open_bench_database()
    from django.conf import settings

    from controlplane.telemetry.rollups import refresh as build
    from controlplane.tuning.models import Suggestion
    from tests.tuning.telemetry import declare

    conf = settings.PITWALL
    lag_s = conf["ROLLUP_INTERVAL_S"] + conf["ROLLUP_SETTLE_S"] + conf["TUNING_INTERVAL_S"]
    # The onset on a minute boundary, far enough back that the whole symptom is in the past.
    onset = datetime.now(UTC).replace(second=0, microsecond=0) - timedelta(
        minutes=SYMPTOM_MIN + 2)
    report = {"machine": harness.machine(), "when": datetime.now(UTC).isoformat(),
              "window_s": conf["TUNING_WINDOW_S"], "live_lag_bound_s": lag_s, "cases": {}}
    for name, (kind, _) in CASES.items():
        started = time.perf_counter()
        host, scenario = stream(name, onset.timestamp(), CASES[name][1])
        declare(host, scenario, name="onset")
        build.catch_up()
        delay = detect(kind, onset)
        Suggestion.objects.all().delete()
        report["cases"][name] = {
            "kind": kind, "detected_after_min": delay,
            "live_bound_s": None if delay is None else delay * 60 + lag_s,
            "bench_s": round(time.perf_counter() - started, 1)}
        print(f"  {name}: {report['cases'][name]}", flush=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2))
    found = ", ".join(f"{name} {case['detected_after_min']} min"
                      for name, case in report["cases"].items())
    print(f"onset to suggestion: detected after {found} of symptom "
          f"({conf['TUNING_WINDOW_S']}-s window); live, add at most {lag_s} s of rollup and "
          f"pass lag; report in {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
