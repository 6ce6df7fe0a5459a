"""A real vLLM under the agent's supervisor: start to ready, and a graceful restart under load.

    make bench-real-vllm                              # with the scrape bench
    python -m tests.bench.real_vllm_restart --runs 3

Each run starts the tiny model with the real CPU build of vLLM 0.32 through
`agents.supervisor.Supervisor` (as `pitwall-agent run --supervise` does), puts REQUESTS
completions in flight (half streaming, TOKENS tokens each, all admitted by the engine), changes
the deployment's revision, and follows vLLM's drain (SIGTERM to the API server with
--shutdown-timeout 30) and the new start. It prints: start to ready, requests sent / completed
with all their tokens / lost (target 0), the drain (change to the old server's exit) and the
change to ready again. Results go to var/bench/real_vllm_restart.json.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
from pathlib import Path

from tests.bench import harness
from tests.real_vllm.engine import install
from tests.real_vllm.restart import restart_under_load


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--requests", type=int, default=16)
    parser.add_argument("--tokens", type=int, default=300)
    parser.add_argument("--out", type=Path,
                        default=harness.ROOT / "var" / "bench" / "real_vllm_restart.json")
    return parser.parse_args(argv)


def spread(values: list[float]) -> str:
    return (f"median {statistics.median(values):.1f} s "
            f"({min(values):.1f}-{max(values):.1f})")


def main(argv=None) -> int:
    args = parse_args(argv)
    found = install()
    runs = []
    for i in range(args.runs):
        with tempfile.TemporaryDirectory(prefix="pw-bench-") as tmp:
            r = restart_under_load(found, Path(tmp), args.requests, args.tokens)
        runs.append({"start_to_ready_s": round(r.start_to_ready_s, 1), "sent": r.sent,
                     "completed": r.completed, "lost": r.lost, "failures": r.failures,
                     "drain_s": round(r.drain_s, 1),
                     "change_to_ready_s": round(r.change_to_ready_s, 1)})
        print(f"run {i + 1}: ready in {r.start_to_ready_s:.1f} s; {r.sent} requests "
              f"({r.tokens_asked} tokens) in flight at the change: {r.completed} completed, "
              f"{r.lost} lost; drained in {r.drain_s:.1f} s, ready again "
              f"{r.change_to_ready_s:.1f} s after the change", flush=True)
    summary = {
        "runs": runs, "machine": harness.machine(),
        "start_to_ready": spread([r["start_to_ready_s"] for r in runs]),
        "drain": spread([r["drain_s"] for r in runs]),
        "change_to_ready": spread([r["change_to_ready_s"] for r in runs]),
        "lost": sum(r["lost"] for r in runs), "sent": sum(r["sent"] for r in runs)}
    print(f"start to ready: {summary['start_to_ready']}; drain: {summary['drain']}; "
          f"change to ready: {summary['change_to_ready']}; lost {summary['lost']} of "
          f"{summary['sent']} requests")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(summary, indent=2))
    return 0 if summary["lost"] == 0 else 1


if __name__ == "__main__":
    raise SystemExit(main())
