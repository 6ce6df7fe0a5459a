"""The lines a GPU vLLM 0.32 prints while it starts, printed by the simulated vLLM on the same
schedule as its start, so the supervisor times a simulated replica's phases as a real one's
(agents/supervisor/phases.py).

The messages are vLLM 0.32's format strings (v1/worker/gpu_model_runner.py, gpu_worker.py,
model_loader/default_loader.py, v1/core/kv_cache_utils.py, v1/engine/core.py,
entrypoints/launchers/api_server/entry.py, and uvicorn's own), with the simulated engine's
numbers. Each comes at a share of the start-up time that a large model's GPU start takes
roughly (weights half of it, then profiling, then graph capture); the last ones come when the
simulated server starts answering.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable
from typing import TextIO

from agents.sim.engine_model import GIB, EngineConfig

# (share of the start-up time, process, source location, message)
Line = tuple[float, str, str, str]


def start_lines(engine: EngineConfig, startup_s: float, host: str, port: int,
                eager: bool) -> list[Line]:
    tokens = engine.num_gpu_blocks * engine.block_size
    kv_gib = tokens * engine.kv_bytes_per_token_per_gpu / GIB
    load_s = 0.5 * startup_s
    lines: list[Line] = [
        (0.45, "Worker", "default_loader.py:501", f"Loading weights took {load_s * 0.9:.2f} "
                                                  "seconds"),
        (0.5, "Worker", "gpu_model_runner.py:5150",
         f"Model loading took {engine.weights_bytes_per_gpu / GIB:.2f} GiB memory and "
         f"{load_s:.6f} seconds"),
        (0.65, "Worker", "gpu_worker.py:760", f"Available KV cache memory: {kv_gib:.2f} GiB"),
        (0.66, "EngineCore", "kv_cache_utils.py:2327",
         f"GPU KV cache size: {tokens:,} tokens, Maximum concurrency for "
         f"{engine.max_model_len:,} tokens per request: {tokens / engine.max_model_len:.2f}x"),
    ]
    if not eager:
        lines.append((0.9, "Worker", "gpu_model_runner.py:6582",
                      f"Graph capturing finished in {0.2 * startup_s:.0f} secs, took 0.52 GiB"))
    lines += [
        (0.95, "EngineCore", "core.py:402", "init engine (profile, create kv cache, warmup "
                                            f"model) took {0.45 * startup_s:.2f} s"),
        (1.0, "APIServer", "entry.py:140", f"Starting vLLM server on http://{host}:{port}"),
    ]
    return lines


def format_line(process: str, pid: int, where: str, message: str, now: float) -> str:
    stamp = time.strftime("%m-%d %H:%M:%S", time.localtime(now))
    return f"({process} pid={pid}) INFO {stamp} [{where}] {message}"


def uvicorn_lines(pid: int) -> list[str]:
    return [f"INFO:     Started server process [{pid}]", "INFO:     Waiting for application "
            "startup.", "INFO:     Application startup complete."]


def print_start(lines: list[Line], startup_s: float, ready_at: float, pid: int,
                clock: Callable[[], float], stop: threading.Event,
                out: TextIO = sys.stderr) -> None:
    """Print each line at its share of the start, the uvicorn lines at ready_at; stop early
    when the server closes."""
    begun = ready_at - startup_s
    for share, process, where, message in lines:
        if stop.wait(max(0.0, begun + share * startup_s - clock())):
            return
        print(format_line(process, pid, where, message, time.time()), file=out, flush=True)
    if stop.wait(max(0.0, ready_at - clock())):
        return
    for line in uvicorn_lines(pid):
        print(line, file=out, flush=True)
