"""Diagnoses scorecard: every scenario against the diagnosis it should get, simulated and real.

    make bench-diagnoses

Simulated: each preset of agents/sim/scenario_presets.py that names a diagnosis (the
expectations of tests/tuning/test_scenarios.py) runs on one simulated host, twice: as a
deployment Pitwall runs, and as an engine it only watches (no deployment at its port: a
report with flags to paste). A symptom that load brings on follows 10 healthy minutes at a
light load (``ONSET``); one that the configuration or the host brings (NUMA, foreign memory,
a small host) is there from the first minute. Then 12 minutes of the symptom, simulated at
accelerated time through the agent's own collectors, the real ingest and the real rollup
builder; tuning passes run as of every minute after the onset (``tuning_pass(now)`` reads only
the rollups before ``now``). Per case: what was expected, what was found over those minutes,
the false positives (found, not expected), and the minutes from the onset to the expected
suggestion. Over-provisioning reads its idle window, here 10 minutes
(``TUNING_IDLE_WINDOW_S``; an hour in production).

Real: the scenarios of tests/real_vllm/scenarios.py on the real vLLM CPU build, where
``make real-vllm`` installed it (the make target does), unless ``--sim-only``: each on its own
path (as `make test-real-vllm` runs it), then each on the other (a deployment watched, a
watched engine deployed). A real scenario is one minute judged once: "1 min" when found. The
hosts have 2 cores, under the reference host's 8: every real server also earns a readiness
report, which is expected.

The table goes to stdout and var/bench/diagnoses.json.
"""

from __future__ import annotations

import argparse
import json
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

from tests.bench import harness
from tests.bench.tuning_onset import SYMPTOM_MIN

# preset -> the light load (requests/s) before the onset of a symptom that load brings on
ONSET = {"kv_pressure": 1.0, "concurrency_cap": 1.0, "capped_clients": 1.0,
         "prefill_starved_ttft": 0.5, "prefill_interference_itl": 0.3, "cpu_starved": 0.5,
         "idle": 3.0}
PATHS = ("deployment", "watched")


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=harness.ROOT / "var/bench/diagnoses.json")
    parser.add_argument("--sim-only", action="store_true", help="skip the real vLLM")
    parser.add_argument("--real-only", action="store_true", help="skip the simulated vLLM")
    parser.add_argument("--real-paths", choices=("both", "own", "other"), default="both",
                        help="the real scenarios on their own path, the other, or both")
    parser.add_argument("--only", nargs="*", default=None, help="these presets alone")
    return parser.parse_args(argv)


def simulated_case(name: str, expected: set[str], path: str, onset: datetime) -> dict:
    from tests.bench.tuning_onset import stream
    from tests.tuning.telemetry import declare

    hostname = f"score-{name.replace('_', '-')}-{path[0]}"
    host, scenario = stream(name, onset.timestamp(), ONSET.get(name), hostname)
    if path == "deployment":
        declare(host, scenario, name=f"score-{name}"[:60])
    else:
        _watched_for_hours(host.id, onset)
    started = time.perf_counter()
    found, first = _passes(host.id, expected, onset)
    _retire(host.id)
    return _row(name, "simulated", path, expected, found, first,
                time.perf_counter() - started)


def _watched_for_hours(host_id: int, onset: datetime) -> None:
    """An engine the agent has reported long before the onset: a whole window lies after it,
    so a pass judges it (the engine rows were made as the batches arrived, just now)."""
    from controlplane.fleet.models import Engine

    Engine.objects.filter(host_id=host_id).update(first_seen=onset - timedelta(days=1))


def _passes(host_id: int, expected: set[str], onset: datetime) -> tuple[set[str], float | None]:
    """The kinds suggested for the host in the minutes after the onset, and the minute of the
    first expected one."""
    from django.db.models import Q

    from controlplane.telemetry.rollups import refresh as build
    from controlplane.tuning.models import Suggestion
    from controlplane.tuning.service import tuning_pass

    build.catch_up()
    mine = Suggestion.objects.filter(Q(deployment__host_id=host_id) | Q(engine__host_id=host_id))
    found: set[str] = set()
    first = None
    for minute in range(1, SYMPTOM_MIN + 1):
        tuning_pass(onset + timedelta(minutes=minute))
        found |= set(mine.values_list("kind", flat=True))
        if first is None and found & expected:
            first = float(minute)
    return found, first


def _retire(host_id: int) -> None:
    """Out of the next cases' passes: its deployment disabled, its engines gone."""
    from controlplane.fleet.models import Deployment, Engine

    Deployment.objects.filter(host_id=host_id).update(enabled=False)
    Engine.objects.filter(host_id=host_id).update(present=False)


def _row(name: str, engine: str, path: str, expected: set[str], found: set[str],
         first: float | None, seconds: float) -> dict:
    return {"scenario": name, "engine": engine, "path": path, "expected": sorted(expected),
            "found": sorted(found), "missed": sorted(expected - found),
            "false_positives": sorted(found - expected), "onset_to_suggestion_min": first,
            "bench_s": round(seconds, 1)}


def simulated(only: list[str] | None) -> list[dict]:
    from django.conf import settings

    from tests.tuning.test_scenarios import EXPECTED

    settings.PITWALL = {**settings.PITWALL, "TUNING_IDLE_WINDOW_S": 600}
    # The onset on a minute boundary, far enough back that the whole symptom is in the past.
    onset = datetime.now(UTC).replace(second=0, microsecond=0) - timedelta(
        minutes=SYMPTOM_MIN + 2)
    rows = []
    for name, expected in sorted(EXPECTED.items()):
        if only and name not in only:
            continue
        for path in PATHS:
            rows.append(simulated_case(name, set(expected), path, onset))
            print(f"  {_line(rows[-1])}", flush=True)
    return rows


def real(only: list[str] | None, paths: str = "both") -> list[dict]:
    """The real vLLM's scenarios, where it is installed (tests/real_vllm/scenarios.py)."""
    from tests.real_vllm import scenarios
    from tests.real_vllm.engine import MissingInstall, install

    try:
        found = install()
    except MissingInstall as exc:
        print(f"  real vLLM: skipped ({exc})")
        return []
    rows = []
    for other_path in {"both": (False, True), "own": (False,), "other": (True,)}[paths]:
        for row in scenarios.scorecard(found, only, other_path):
            row = {**row, "engine": f"real ({row['engine']})",
                   "missed": sorted(set(row["expected"]) - set(row["found"]))}
            rows.append(row)
            print(f"  {_line(row)}", flush=True)
    return rows


HEADER = ("scenario", "engine", "path", "expected", "found", "false positives",
          "onset -> suggestion")


def _cells(row: dict) -> tuple[str, ...]:
    first = row["onset_to_suggestion_min"]
    return (row["scenario"], row["engine"], row["path"], ", ".join(row["expected"]) or "none",
            ", ".join(row["found"]) or "none", ", ".join(row["false_positives"]) or "-",
            "-" if first is None else f"{first:g} min")


def _line(row: dict) -> str:
    return " | ".join(_cells(row))


def table(rows: list[dict]) -> str:
    lines = ["| " + " | ".join(HEADER) + " |", "|" + "---|" * len(HEADER)]
    lines += ["| " + " | ".join(_cells(row)) + " |" for row in rows]
    return "\n".join(lines)


def main(argv=None) -> int:
    args = parse_args(argv)
    harness.open_bench_database()
    started = time.perf_counter()
    rows = [] if args.real_only else simulated(args.only)
    if not args.sim_only:
        rows += real(args.only, args.real_paths)
    report = {"machine": harness.machine(), "when": datetime.now(UTC).isoformat(),
              "seconds": round(time.perf_counter() - started), "rows": rows}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2))
    print(table(rows))
    right = sum(1 for r in rows if not r["missed"] and not r["false_positives"])
    print(f"{right} of {len(rows)} cases found exactly what they should; report in {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
