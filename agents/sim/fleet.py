"""A simulated fleet: per host, one real agent process and the simulated vLLM it serves.

Everything here is simulated except the agent, which is the real agent code streaming over
HTTP to the control plane. With ``--supervise`` each agent runs the deployments the control
plane assigns to its host (the simulated vLLM takes ``vllm serve``'s flags), as ``make run``
does; without it each host gets one simulated vLLM started here, which the agent only scrapes.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from agents.children import Child, Stack

BASE_PORT = 18000


def host_name(i: int) -> str:
    return f"sim-host-{i:02d}"


def engine_argv(port: int, gpus: int, seed: int, load: float) -> list[str]:
    """The simulated vLLM takes `vllm serve` flags: a 70B model over all GPUs of the host."""
    return [sys.executable, "-m", "agents.sim.vllm_server", "--port", str(port),
            "--model", "meta-llama/Llama-3.1-70B-Instruct",
            "--tensor-parallel-size", str(gpus), "--gpu-indices", ",".join(map(str, range(gpus))),
            "--max-num-seqs", "128", "--load", str(load), "--seed", str(seed)]


def agent_argv(hostname: str, port: int | None, gpus: int, server: str, token_file: Path,
               spool_dir: Path, interval: float) -> list[str]:
    """``port``: the simulated vLLM to scrape; None: supervise the host's deployments."""
    engines = (["--supervise"] if port is None
               else ["--vllm-metrics-url", f"http://127.0.0.1:{port}/metrics"])
    return [sys.executable, "-m", "agents", "run", "--server", server,
            "--token-file", str(token_file), "--hostname", hostname, "--gpu-backend", "sim",
            "--sim-gpus", str(gpus), *engines, "--spool-dir", str(spool_dir),
            "--interval", str(interval)]


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m agents.sim fleet",
                                     description="Run a simulated fleet (simulated GPUs and "
                                                 "vLLM, real agents).")
    parser.add_argument("--hosts", type=int, default=4)
    parser.add_argument("--gpus", type=int, default=8)
    parser.add_argument("--server", required=True, help="control plane URL")
    parser.add_argument("--token-dir", type=Path, required=True,
                        help="a folder with one agent-token file per host, named by hostname")
    parser.add_argument("--state-dir", type=Path, required=True, help="spools live here")
    parser.add_argument("--base-port", type=int, default=BASE_PORT)
    parser.add_argument("--interval", type=float, default=1.0)
    parser.add_argument("--load", type=float, default=4.0, help="requests/s per engine")
    parser.add_argument("--supervise", action="store_true",
                        help="agents run the deployments the control plane assigns (no "
                             "simulated vLLM started here)")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    children: list[Child] = []
    for i in range(1, args.hosts + 1):
        hostname, port = host_name(i), args.base_port + i
        token_file = args.token_dir / hostname
        if not token_file.exists():
            print(f"sim fleet: no token file {token_file}", file=sys.stderr)
            return 2
        if not args.supervise:
            children.append(Child(f"simulated vLLM {hostname}",
                                  engine_argv(port, args.gpus, i, args.load)))
        children.append(Child(f"agent {hostname}", agent_argv(
            hostname, None if args.supervise else port, args.gpus, args.server, token_file,
            args.state_dir / "spool" / hostname, args.interval)))
    stack = Stack(children, log=lambda message: print(f"sim fleet: {message}", file=sys.stderr))
    stack.start()
    print(f"sim fleet: {args.hosts} simulated hosts x {args.gpus} simulated GPUs streaming to "
          f"{args.server}", flush=True)
    return stack.supervise()


if __name__ == "__main__":
    raise SystemExit(main())
