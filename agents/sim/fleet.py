"""A simulated fleet: per host, one real agent process and the simulated vLLM it serves.

Everything here is simulated except the agent, which is the real agent code streaming over
HTTP to the control plane. With ``--supervise`` each agent runs the deployments the control
plane assigns to its host (the simulated vLLM takes ``vllm serve``'s flags), as ``make run``
does; without it each host gets one simulated vLLM started here, which the agent only scrapes.

Each host tells placement what a real host would (agents/collectors/placement_facts.py): a
port range of its own (the hosts share 127.0.0.1, so the ranges are disjoint and clear of the
demo deployments' BASE_PORT + i), the address 127.0.0.1, labels (zone-a and zone-b in turn,
pool=online), and a Hugging Face cache of its own under the state dir whose files are sparse
(their sizes are real, their disk use nothing): every host holds the demo deployments' 70B
model, half of them (hosts 1, 2, 5, 6 ...: both zones) also Llama 3.1 8B.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from agents.children import Child, Stack

BASE_PORT = 18000
REPLICA_PORTS = 20000  # host i's replicas get REPLICA_PORTS + 100 i .. + 99
PORTS_PER_HOST = 100
DEFAULT_SIM_START_S = 2.0  # a simulated vLLM's start: short, yet long enough to see phases
DEMO_MODEL = "meta-llama/Llama-3.1-70B-Instruct"
SMALL_MODEL = "meta-llama/Llama-3.1-8B-Instruct"
# What Hugging Face downloads for each (bf16 safetensors; config, tokenizer), in bytes.
MODEL_BYTES = {DEMO_MODEL: 141_107_412_992, SMALL_MODEL: 16_060_522_496}


def host_name(i: int) -> str:
    return f"sim-host-{i:02d}"


def port_range(i: int) -> tuple[int, int]:
    low = REPLICA_PORTS + PORTS_PER_HOST * i
    return low, low + PORTS_PER_HOST - 1


def labels(i: int) -> dict[str, str]:
    return {"zone": "zone-a" if i % 2 else "zone-b", "pool": "online"}


def cached_models(i: int) -> list[str]:
    return [DEMO_MODEL, *([SMALL_MODEL] if i % 4 in (1, 2) else [])]


def placement_flags(i: int) -> list[str]:
    low, high = port_range(i)
    flags = ["--advertise-address", "127.0.0.1", "--port-range", f"{low}-{high}"]
    for key, value in labels(i).items():
        flags += ["--label", f"{key}={value}"]
    return flags


def fill_hf_cache(root: Path, repos: list[str]) -> Path:
    """A hub cache holding these repositories, as sparse files of their real sizes."""
    for repo in repos:
        blobs = root / f"models--{repo.replace('/', '--')}" / "blobs"
        blobs.mkdir(parents=True, exist_ok=True)
        with open(blobs / "model.safetensors", "wb") as weights:
            weights.truncate(MODEL_BYTES[repo])
    return root


def engine_argv(port: int, gpus: int, seed: int, load: float) -> list[str]:
    """The simulated vLLM takes `vllm serve` flags: a 70B model over all GPUs of the host."""
    return [sys.executable, "-m", "agents.sim.vllm_server", "--port", str(port),
            "--model", DEMO_MODEL,
            "--tensor-parallel-size", str(gpus), "--gpu-indices", ",".join(map(str, range(gpus))),
            "--max-num-seqs", "128", "--load", str(load), "--seed", str(seed)]


def agent_argv(hostname: str, port: int | None, gpus: int, server: str, token_file: Path,
               spool_dir: Path, interval: float, extra: list[str] | None = None) -> list[str]:
    """``port``: the simulated vLLM to scrape; None: supervise the host's deployments.
    ``extra``: more flags (placement_flags)."""
    engines = (["--supervise"] if port is None
               else ["--vllm-metrics-url", f"http://127.0.0.1:{port}/metrics"])
    return [sys.executable, "-m", "agents", "run", "--server", server,
            "--token-file", str(token_file), "--hostname", hostname, "--gpu-backend", "sim",
            "--sim-gpus", str(gpus), *engines, "--spool-dir", str(spool_dir),
            "--interval", str(interval), *(extra or [])]


def agent_env(i: int, state_dir: Path, sim_start_s: float) -> dict[str, str]:
    """The host's own Hugging Face cache, and how long its simulated vLLM starts take (the
    supervisor passes PITWALL_SIM_* on to the simulated vLLM it runs)."""
    cache = fill_hf_cache(state_dir / "hf" / host_name(i), cached_models(i))
    return {"HF_HUB_CACHE": str(cache), "PITWALL_SIM_STARTUP_S": f"{sim_start_s:g}"}


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
    parser.add_argument("--sim-start-s", type=float,
                        default=os.environ.get("PITWALL_SIM_STARTUP_S") or DEFAULT_SIM_START_S,
                        help="how long a supervised simulated vLLM takes to start, its "
                             "phases spread over it (default %(default)s s)")
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
            args.state_dir / "spool" / hostname, args.interval, placement_flags(i)),
            env=agent_env(i, args.state_dir, args.sim_start_s)))
    stack = Stack(children, log=lambda message: print(f"sim fleet: {message}", file=sys.stderr))
    stack.start()
    print(f"sim fleet: {args.hosts} simulated hosts x {args.gpus} simulated GPUs streaming to "
          f"{args.server}", flush=True)
    return stack.supervise()


if __name__ == "__main__":
    raise SystemExit(main())
