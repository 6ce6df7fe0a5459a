"""The command line of the simulated vLLM: ``vllm serve``'s flags, plus a few of its own.

    python -m agents.sim.vllm_server --port 8001 --model Qwen/Qwen3-8B --load 4

Flags the simulation models change it; every other flag of ``vllm serve`` is accepted and
named once on stderr as ignored, so the agent's supervisor can start it with the argv it would
give the real server. Flags of the simulation only (real vLLM has none): ``--load``,
``--seed``, ``--startup-seconds``, ``--gpu-indices``, ``--gpu-mem-bytes``,
``--cpu-contention`` and ``--cpu-quota``. A deployment run by the agent's supervisor passes
vLLM's flags only, so the knobs of the load also come from its environment:
``PITWALL_SIM_LOAD`` (requests/s), ``PITWALL_SIM_SEED``, ``PITWALL_SIM_CPU_CONTENTION`` and
``PITWALL_SIM_STARTUP_S`` (how long a start takes; default 0); a flag wins over the variable.

While it starts it prints the lines a GPU vLLM prints (agents/sim/start_lines.py), after the
banner: the supervisor reads a simulated replica's cold-start phases from them.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading
from collections.abc import Sequence

from agents.sim.engine_model import GIB, EngineConfig
from agents.sim.start_lines import print_start, start_lines
from agents.sim.vllm_exposition import SpecDecode
from agents.sim.vllm_server import RunningServer, SimOptions, start
from agents.vllm_args import serve_default


def _env(name: str, kind: type, default):
    """A default from the environment; a malformed value is an error, not a silent default."""
    text = os.environ.get(name)
    if text is None or text == "":
        return default
    try:
        return kind(text)
    except ValueError:
        raise SystemExit(f"pitwall-sim vllm: error: {name}={text!r} is not a "
                         f"{kind.__name__}") from None


def _parser() -> argparse.ArgumentParser:
    # No abbreviations: a real vLLM flag must never be read as a prefix of one of ours.
    p = argparse.ArgumentParser(prog="python -m agents.sim.vllm_server", allow_abbrev=False,
                                description="A simulated vLLM 0.33 OpenAI-compatible server.")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--model", default=EngineConfig.model)
    for flags, kind, default in (
            # None: vLLM's default for a GPU of --gpu-mem-bytes (EngineConfig resolves it).
            (("--max-num-seqs",), int, None), (("--max-num-batched-tokens",), int, None),
            (("--gpu-memory-utilization",), float, serve_default("gpu_memory_utilization")),
            (("--tensor-parallel-size", "-tp"), int, 1),
            (("--data-parallel-size", "-dp"), int, 1), (("--block-size",), int, 16),
            (("--max-model-len",), int, 8192), (("--gpu-mem-bytes",), int, 80 * GIB),
            (("--load",), float, _env("PITWALL_SIM_LOAD", float, 4.0)),
            (("--seed",), int, _env("PITWALL_SIM_SEED", int, None)),
            (("--startup-seconds",), float, _env("PITWALL_SIM_STARTUP_S", float, 0.0)),
            (("--api-server-count", "-asc"), int, 1),
            (("--num-gpu-blocks-override",), int, None)):
        p.add_argument(*flags, type=kind, default=default)
    p.add_argument("--gpu-indices", default=None,
                   help='the simulated GPUs, e.g. "0,1" (default: CUDA_VISIBLE_DEVICES)')
    p.add_argument("--cpu-contention", type=float,
                   default=_env("PITWALL_SIM_CPU_CONTENTION", float, 0.0),
                   help="simulation only: the share (0-1) of this process's CPUs other work "
                        "takes")
    p.add_argument("--cpu-quota", type=float, default=None,
                   help="simulation only: a cgroup CPU quota in cores (default: the real "
                        "cgroup's, if it has one)")
    p.add_argument("--shutdown-timeout", type=int, default=0,
                   help="as vLLM's: on SIGTERM, how long running requests may finish; 0 "
                        "aborts them")
    # As vLLM's: they add the spec_decode_* and lora_requests_info families to /metrics.
    p.add_argument("--speculative-config", type=_json_object, default=None,
                   help='as vLLM\'s, e.g. \'{"method": "eagle", "num_speculative_tokens": 3}\'')
    p.add_argument("--enable-lora", action="store_true")
    p.add_argument("--max-loras", type=int, default=1)
    p.add_argument("--lora-modules", nargs="+", type=_lora_module, default=[],
                   help="as vLLM's: name=path, or a JSON object with name and path")
    return p


def _json_object(text: str) -> dict:
    try:
        value = json.loads(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not JSON: {text!r}") from None
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError("must be a JSON object")
    return value


def _lora_module(text: str) -> tuple[str, str]:
    if text.startswith("{"):
        value = _json_object(text)
        if not isinstance(value.get("name"), str) or not isinstance(value.get("path"), str):
            raise argparse.ArgumentTypeError("a LoRA module needs a name and a path")
        return value["name"], value["path"]
    name, sep, path = text.partition("=")
    if not sep or not name:
        raise argparse.ArgumentTypeError(f"expected name=path, not {text!r}")
    return name, path


def parse_known(argv: Sequence[str]) -> tuple[SimOptions, list[str]]:
    """The options, and the flags of `vllm serve` the simulation accepts but does not model."""
    a, extras = _parser().parse_known_args(argv)
    engine = EngineConfig(a.model, a.max_num_seqs, a.max_num_batched_tokens,
                          a.gpu_memory_utilization, a.tensor_parallel_size, a.block_size,
                          a.max_model_len, a.gpu_mem_bytes,
                          max_loras=a.max_loras if a.enable_lora else 0,
                          num_gpu_blocks_override=a.num_gpu_blocks_override)
    # The supervisor chooses a process's GPUs with CUDA_VISIBLE_DEVICES, as for real vLLM
    # (indices only: a real host's GPU UUIDs there mean nothing to the simulated GPUs).
    visible = os.environ.get("CUDA_VISIBLE_DEVICES", "")
    indices = a.gpu_indices or (visible if visible.replace(",", "").isdigit() else None)
    gpus = None if indices is None else [int(i) for i in indices.split(",") if i]
    options = SimOptions(engine, a.host, a.port, a.data_parallel_size, gpus, a.load, a.seed,
                         a.startup_seconds, a.shutdown_timeout,
                         api_server_count=a.api_server_count,
                         cpu_contention=a.cpu_contention, cpu_quota=a.cpu_quota,
                         spec=_spec(a.speculative_config),
                         lora_modules=dict(a.lora_modules) if a.enable_lora else {})
    return options, _flag_names(extras)


def _spec(config: dict | None) -> SpecDecode | None:
    if config is None:
        return None
    try:
        return SpecDecode.from_config(config)
    except (TypeError, ValueError) as exc:
        raise SystemExit(f"pitwall-sim vllm: error: --speculative-config: {exc}") from None


def _flag_names(extras: Sequence[str]) -> list[str]:
    """"--enforce-eager", "--dtype=half", "-O3" -> names; values ("half", "-1") are skipped."""
    return [arg.split("=", 1)[0] for arg in extras
            if arg.startswith("-") and len(arg) > 1 and not arg[1].isdigit()
            and arg[1] != "."]


def parse_args(argv: Sequence[str]) -> SimOptions:
    return parse_known(argv)[0]


def main(argv: Sequence[str] | None = None) -> int:
    options, ignored = parse_known(sys.argv[1:] if argv is None else argv)
    try:
        server = start(options)
    except (ValueError, OSError) as exc:
        print(f"pitwall-sim vllm: error: {exc}", file=sys.stderr)
        return 1
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    print(f"pitwall-sim vllm: {options.engine.model} on http://{options.host}:{server.port} "
          f"(simulated, {options.data_parallel_size} engine(s), "
          f"{options.engine.num_gpu_blocks} KV blocks)", file=sys.stderr, flush=True)
    if ignored:  # after the banner: readers take the first line as the address
        print(f"pitwall-sim vllm: not simulated, ignored: {' '.join(ignored)}",
              file=sys.stderr, flush=True)
    _announce_start(server, options, eager="--enforce-eager" in ignored)
    try:
        while not stop.wait(1.0):
            pass
    except KeyboardInterrupt:
        server.close()
        return 0
    _drain(server, options.shutdown_timeout)
    server.close()
    return 0


def _announce_start(server: RunningServer, options: SimOptions, eager: bool) -> None:
    sim = server.sim
    lines = start_lines(options.engine, options.startup_seconds, options.host, server.port,
                        eager)
    threading.Thread(target=print_start, args=(lines, options.startup_seconds, sim.ready_at,
                                               os.getpid(), sim.clock, sim.closed),
                     name="start-lines", daemon=True).start()


def _drain(server: RunningServer, timeout_s: float) -> None:
    if timeout_s <= 0:
        print("pitwall-sim vllm: SIGTERM with --shutdown-timeout 0: aborting running requests",
              file=sys.stderr, flush=True)
        server.abort()
        return
    print(f"pitwall-sim vllm: SIGTERM, draining for up to {timeout_s:g} s", file=sys.stderr,
          flush=True)
    if not server.drain(timeout_s):
        print(f"pitwall-sim vllm: requests still running after {timeout_s:g} s: aborted",
              file=sys.stderr, flush=True)
