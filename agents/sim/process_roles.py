"""proc.* rows for a simulated vLLM: the modeled CPU use of each vLLM process role.

The simulated vLLM is one Python process whose real CPU use says nothing about the vLLM it
plays, so for a simulated engine the agent reports what ``/sim/state`` models instead. A real
vLLM V1 runs the engine core and ``--api-server-count`` API servers as separate processes;
the simulation has one. So:

- the real process (the one the agent found by its port, and the one the simulated GPUs show
  holding memory) carries the engine core's CPU use (rank 0), keeping its real rss, threads
  and affinity;
- every other role (API server i, the engine cores of data-parallel ranks >= 1) is an extra
  row with a pseudo-pid at or above 2^30: Linux pids never exceed 2^22 (pid_max's ceiling),
  so such a pid can never name a real process, and it only ever appears for an engine whose
  inventory says ``simulated: true``. Such rows carry cpu_pct, cpu_affinity and numa_nodes
  (the same CPUs as the real process); rss and threads are not modeled, hence absent.

The wire format stays protocol v1's: one row per pid, nothing but catalog keys and the
process attributes.
"""

from __future__ import annotations

from typing import Any

PSEUDO_PID_BASE = 1 << 30
_SLOTS = 64  # pseudo-pids per real pid: API servers from 1, data-parallel ranks from 33


def pseudo_pid(pid: int, slot: int) -> int:
    """Stable per (real pid, role slot), in [2^30, 2^31): valid on the wire, never real."""
    return PSEUDO_PID_BASE + (pid * _SLOTS + slot) % PSEUDO_PID_BASE


def _slot(role: dict[str, Any]) -> int | None:
    index = int(role.get("index", 0))
    if role.get("role") == "api_server":
        return 1 + index % 32
    if role.get("role") == "engine_core":
        return None if index == 0 else 33 + index % 31
    return None


def overlay(rows: list[dict[str, Any]], engine: str, state: dict[str, Any]) -> list[dict[str, Any]]:
    """The rows with the engine's modeled roles applied; other engines' rows untouched."""
    roles = state.get("processes")
    base = next((r for r in rows if r.get("engine") == engine and r.get("pid") == state.get(
        "pid")), None) or next((r for r in rows if r.get("engine") == engine), None)
    if base is None or not isinstance(roles, list):
        return rows
    out = [r for r in rows if r.get("engine") != engine or r is base]
    shared = {key: base[key] for key in ("cpu_affinity", "numa_nodes") if key in base}
    for role in roles:
        slot, pct = _slot(role), float(role.get("cpu_pct", 0.0))
        if slot is None and role.get("role") == "engine_core":
            base["cpu_pct"] = pct
        elif slot is not None:
            out.append({"pid": pseudo_pid(int(base["pid"]), slot), "engine": engine,
                        "cpu_pct": pct, **shared})
    return out
