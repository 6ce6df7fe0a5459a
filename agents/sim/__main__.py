"""``python -m agents.sim fleet …`` (a simulated fleet), ``… vllm …`` (one simulated vLLM) or
``… scenario …`` (a deployment's batches, simulated without waiting)."""

from __future__ import annotations

import sys


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if not args or args[0] not in ("fleet", "vllm", "scenario"):
        print("usage: python -m agents.sim {fleet|vllm|scenario} [options]  (--help after any)",
              file=sys.stderr)
        return 2
    if args[0] == "scenario":
        from agents.sim.scenario_cli import main as scenario_main

        return scenario_main(args[1:])
    if args[0] == "fleet":
        from agents.sim.fleet import main as fleet_main

        return fleet_main(args[1:])
    from agents.sim.vllm_cli import main as vllm_main

    return vllm_main(args[1:])


if __name__ == "__main__":
    raise SystemExit(main())
