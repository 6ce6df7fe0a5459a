"""Where the simulated GPUs learn what the simulated vLLM engines are doing.

A state source is a callable returning an engine's state dict, or None when the engine is not
reachable (a stopped engine holds no GPU memory). The simulated vLLM server answers
``GET /sim/state`` with::

    {"simulated": true, "pid": int, "gpu_indices": [int], "gpu_memory_utilization": float,
     "weights_bytes_per_gpu": int, "kv_cache_usage": float, "busy_fraction": float,
     "requests_running": int, "requests_waiting": int,
     "processes": [{"role": "engine_core" | "api_server", "index": int, "cpu_pct": float}],
     "cpus": [int], "cpu_throttled_pct": float}

``processes`` is the modeled CPU use of each vLLM process role (100 = one core); the agent
reports it for simulated engines (agents/sim/process_roles.py).
"""

from __future__ import annotations

import http.client
import json
import time
import urllib.request
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

StateSource = Callable[[], dict[str, Any] | None]

TIMEOUT_S = 0.5
CACHE_S = 1.0  # several GPU queries per interval must not each cost a request


def state_url(url: str) -> str:
    """``<scheme>://<host:port>/sim/state`` from an engine's base or /metrics URL."""
    parts = urlsplit(url if "://" in url else f"http://{url}")
    return f"{parts.scheme}://{parts.netloc}/sim/state"


def http_state_source(url: str, clock: Callable[[], float] = time.monotonic) -> StateSource:
    target = state_url(url)
    cache: dict[str, Any] = {"at": None, "state": None}

    def fetch() -> dict[str, Any] | None:
        now = clock()
        if cache["at"] is not None and now - cache["at"] < CACHE_S:
            return cache["state"]
        cache["at"], cache["state"] = now, _get(target)
        return cache["state"]

    return fetch


def _get(url: str) -> dict[str, Any] | None:
    try:
        with urllib.request.urlopen(url, timeout=TIMEOUT_S) as reply:
            state = json.loads(reply.read())
    except (OSError, http.client.HTTPException, ValueError):  # refused, timed out, not JSON
        return None
    return state if isinstance(state, dict) else None
