"""What a real engine's gauges do under load, as Pitwall stores them: recorded from the real
scenarios (scenarios.py) into tests/real_vllm/fixtures/engine_shapes.json, so that the
simulated vLLM can be held to the same figures.

Re-record (a few minutes; needs `make real-vllm` and the test database, as the real-vLLM
suite does)::

    SECRET_KEY_FILE=var/secret_key PITWALL_VLLM_VENV=... PITWALL_TINY_MODEL=... \\
        .venv/bin/python -m tests.real_vllm.record_shapes

The file (JSON)::

    {"recorded": {"at": ISO 8601 UTC, "host": hostname, "cpus": CPUs online,
                  "cpu_model": /proc/cpuinfo's model name, "vllm": vLLM's version,
                  "model": "tiny-llama", "agent_interval_s": 1},
     "objectives_ms": {"ALERT_TTFT_P99_OBJECTIVE_MS": ..., "TUNING_ITL_P99_OBJECTIVE_MS": ...},
     "scenarios": {NAME: {
        "engine": {"name", "path": "deployment" | "watched", "args": vLLM arguments},
        "clients": [{"count", "prompt_tokens", "max_tokens", "pause_s"}],
        "minute": the engine's 1-minute rollup row (telemetry_engine_1m) of the scenario's
            minute: {"n": samples,
                     "requests_running" / "requests_waiting" / "kv_cache_usage" /
                     "preemptions_per_s" / "prompt_tokens_per_s" /
                     "generation_tokens_per_s" / "requests_finished_per_s":
                         {"min", "avg", "max"},
                     "queue_seconds" / "prefill_seconds" / "ttft_seconds" / "itl_seconds"
                     / "iteration_tokens" (tokens per engine step):
                         {"sum": seconds (tokens), "count": observations, "bounds": bucket
                          upper bounds, "counts": per bucket, the last one over the bounds}},
        "samples": the same minute's 1-second samples (telemetry_engine_sample):
            {"n", "running": {value: samples}, "waiting": {value: samples},
             "series": [[seconds into the minute, running, waiting], ...] in time order,
             "waiting_zero_share", "running_at_cap_share" (null where no max_num_seqs is
             set), "running_at_max_share" (at the minute's own maximum)},
        "derived": {"queue_share_of_ttft": mean queue time / mean TTFT,
                    "prefill_share_of_ttft", "ttft_p99_s", "itl_p99_s" (as the tuning
                    pass's facts read them), "cpu_pct" / "cpu_wait_pct": the busiest
                    vLLM process's minute average (100 = one core, one waiting thread)}}}}

Values are as stored: None (null) where the engine reported nothing.
"""

from __future__ import annotations

import json
import os
import platform
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

# Django's models and what imports them are imported where they are used: `python -m` runs
# this file before pytest-django has set Django up.
if TYPE_CHECKING:
    from tests.real_vllm.engine import Install
    from tests.real_vllm.scenarios import Outcome

# django_db: pytest-django makes the test database only for a session that asks for it.
pytestmark = [pytest.mark.real_vllm, pytest.mark.django_db(transaction=True)]
FIXTURE = Path(__file__).parent / "fixtures" / "engine_shapes.json"
# The scenarios whose gauges the simulation should match, one minute each, alone.
RECORDED = (("concurrency_cap",), ("kv_pressure",), ("prefill_ttft",))
GAUGES = ("requests_running", "requests_waiting", "kv_cache_usage", "preemptions_per_s",
          "prompt_tokens_per_s", "generation_tokens_per_s", "requests_finished_per_s")
HISTOGRAMS = ("queue_seconds", "prefill_seconds", "ttft_seconds", "itl_seconds",
              "iteration_tokens")


def shape(outcome: Outcome) -> dict[str, Any]:
    """One scenario's minute, in the fixture's format."""
    engine = outcome.scenario.engine
    minute = _minute(outcome)
    return {"engine": {"name": engine.name, "args": engine.args,
                       "path": "watched" if engine.watched else "deployment"},
            "clients": [vars(c) for c in outcome.scenario.clients],
            "minute": minute, "samples": _samples(outcome),
            "derived": _derived(outcome, minute)}


def _query(sql: str, params: list) -> list[tuple]:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return cursor.fetchall()


def _minute(outcome: Outcome) -> dict[str, Any] | None:
    columns = ["n"] + [f"{g}_{s}" for g in GAUGES for s in ("min", "avg", "max")] + [
        f"{h}_{p}" for h in HISTOGRAMS for p in ("layout", "counts", "sum")]
    rows = _query(f"SELECT {', '.join(columns)} FROM telemetry_engine_1m "
                  f"WHERE engine_id = ANY(%s) AND ts = %s ORDER BY engine_id LIMIT 1",
                  [outcome.engine_ids, outcome.start])
    if not rows:
        return None
    row = dict(zip(columns, rows[0], strict=True))
    found: dict[str, Any] = {"n": row["n"]}
    for gauge in GAUGES:
        found[gauge] = {s: row[f"{gauge}_{s}"] for s in ("min", "avg", "max")}
    from controlplane.telemetry.models import HistogramLayout

    bounds = dict(HistogramLayout.objects.values_list("id", "bounds"))
    for key in HISTOGRAMS:
        counts = [int(c or 0) for c in row[f"{key}_counts"] or []]
        found[key] = {"sum": row[f"{key}_sum"], "count": sum(counts),
                      "bounds": list(bounds.get(row[f"{key}_layout"], [])), "counts": counts}
    return found


def _samples(outcome: Outcome) -> dict[str, Any]:
    rows = _query("SELECT extract(epoch FROM ts - %s), requests_running, requests_waiting "
                  "FROM telemetry_engine_sample WHERE engine_id = ANY(%s) AND ts >= %s "
                  "AND ts < %s AND up = 1 ORDER BY ts",
                  [outcome.start, outcome.engine_ids, outcome.start, outcome.facts.end])
    running = [r for _, r, _ in rows if r is not None]
    waiting = [w for _, _, w in rows if w is not None]
    cap = outcome.scenario.engine.args.get("max_num_seqs")
    return {"n": len(rows), "running": _counts(running), "waiting": _counts(waiting),
            "series": [[round(float(at), 1), r, w] for at, r, w in rows],
            "waiting_zero_share": _share(waiting, lambda w: w == 0),
            "running_at_cap_share": _share(running, lambda r: r >= cap) if cap else None,
            "running_at_max_share": _share(running, lambda r: r == max(running))
            if running else None}


def _counts(values: list[float]) -> dict[str, int]:
    found: dict[str, int] = {}
    for value in sorted(values):
        key = f"{value:g}"
        found[key] = found.get(key, 0) + 1
    return found


def _share(values: list[float], test) -> float | None:
    return round(sum(1 for v in values if test(v)) / len(values), 3) if values else None


def _derived(outcome: Outcome, minute: dict[str, Any] | None) -> dict[str, Any]:
    facts = outcome.facts
    found = {"ttft_p99_s": facts.ttft_p99, "itl_p99_s": facts.itl_p99,
             "cpu_pct": max(facts.proc_cpu.values(), default=None),
             "cpu_wait_pct": max(getattr(facts, "proc_cpu_wait", {}).values(), default=None)}
    ttft = _mean(minute, "ttft_seconds")
    for part in ("queue", "prefill"):
        mean = _mean(minute, f"{part}_seconds")
        found[f"{part}_share_of_ttft"] = (round(mean / ttft, 3)
                                          if mean is not None and ttft else None)
    return found


def _mean(minute: dict[str, Any] | None, key: str) -> float | None:
    if not minute or minute[key]["sum"] is None or not minute[key]["count"]:
        return None
    return minute[key]["sum"] / minute[key]["count"]


def recorded(found: Install) -> dict[str, Any]:
    return {"at": datetime.now(UTC).isoformat(timespec="seconds"), "host": platform.node(),
            "cpus": os.cpu_count(), "cpu_model": _cpu_model(),
            "vllm": _vllm_version(found), "model": found.model.name, "agent_interval_s": 1}


def _cpu_model() -> str | None:
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
    except OSError:
        return None
    return next((line.split(":", 1)[1].strip() for line in lines
                 if line.startswith("model name")), None)


def _vllm_version(found: Install) -> str | None:
    """From the vLLM environment's installed distribution (importing vLLM takes seconds)."""
    dists = sorted(found.venv.glob("lib/python*/site-packages/vllm-*.dist-info"))
    return dists[0].name.removeprefix("vllm-").removesuffix(".dist-info") if dists else None


def test_record_engine_shapes(scenario_db, vllm_install, tmp_path_factory):
    """Collected only when main() runs this file: the real scenarios, one minute each, and
    their shapes written to FIXTURE."""
    from django.conf import settings
    from django.test import override_settings

    from tests.real_vllm.scenarios import OBJECTIVES, Stack, pitwall_settings, run, schedule

    plan = schedule(*RECORDED)
    with (override_settings(PITWALL=pitwall_settings(settings.PITWALL)),
          Stack(vllm_install, tmp_path_factory.mktemp("shapes"), plan) as stack):
        outcomes = run(stack, plan)
    shapes = {name: shape(outcome) for name, outcome in sorted(outcomes.items())}
    FIXTURE.parent.mkdir(exist_ok=True)
    FIXTURE.write_text(json.dumps({"recorded": recorded(vllm_install),
                                   "objectives_ms": OBJECTIVES, "scenarios": shapes},
                                  indent=1, sort_keys=True, default=_plain) + "\n")
    print(f"\nwrote {FIXTURE}: {', '.join(shapes)}")


def _plain(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.isoformat()
    return float(value)  # Decimal from numeric columns


def main() -> int:
    return int(pytest.main([__file__, "-m", "real_vllm", "-p", "no:cacheprovider", "-n", "0",
                            "-s", "-q"]))


if __name__ == "__main__":
    sys.exit(main())
