"""``python -m agents.sim scenario``: a preset's agent batches as JSON lines, or a summary."""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import replace

from agents.sim.scenario import simulate
from agents.sim.scenario_presets import PRESETS, preset, summary


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m agents.sim scenario",
        description="Simulate one host running one vLLM deployment (no GPU, no waiting) and "
                    "print the agent's protocol-v1 batches, one JSON object a line.")
    p.add_argument("preset", choices=sorted(PRESETS), help="what the deployment shows")
    p.add_argument("--minutes", type=float, default=10.0, help="simulated time to report")
    p.add_argument("--end", type=float, default=None,
                   help="unix seconds of the last sample (default: now)")
    p.add_argument("--interval", type=float, default=1.0, help="seconds between samples")
    p.add_argument("--rate", type=float, default=None, help="requests/s (default: the preset's)")
    p.add_argument("--seed", type=int, default=None)
    p.add_argument("--summary", action="store_true",
                   help="print what the batches show (KV, queue, latencies, GPU, CPU) instead")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    a = parse_args(sys.argv[1:] if argv is None else argv)
    scenario = preset(a.preset)
    load = scenario.load
    if a.rate is not None:
        load = replace(load, rate=a.rate)
    if a.seed is not None:
        load = replace(load, seed=a.seed)
    batches = simulate(replace(scenario, load=load), a.minutes,
                       a.end if a.end is not None else time.time(), a.interval)
    if a.summary:
        print(json.dumps(summary(batches), indent=1))
        return 0
    for batch in batches:
        sys.stdout.write(json.dumps(batch, separators=(",", ":")) + "\n")
    return 0
