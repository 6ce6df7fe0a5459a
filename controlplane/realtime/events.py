"""The messages of the live WebSocket (docs/live.md), as typed dicts.

Events (fleet, host, engine) are built by the ingest process from committed rows
(``realtime.events_from_rows``) and serialised once: every socket in a group receives the same text.
Keys inside ``host``, ``gpus``, ``values`` and ``procs`` are catalog keys without the entity
prefix, as on the agent wire; a metric that was not reported is absent.
"""

from __future__ import annotations

from typing import Literal, NotRequired, TypedDict

import orjson

Quantiles = dict[str, float]  # "0.5" / "0.9" / "0.99" -> seconds


class FleetGpu(TypedDict):
    id: int
    mem_used_bytes: NotRequired[int]
    mem_total_bytes: NotRequired[int]
    util_pct: NotRequired[float]


class FleetEngine(TypedDict):
    id: int
    up: NotRequired[int]
    requests_running: NotRequired[float]
    requests_waiting: NotRequired[float]
    kv_cache_usage: NotRequired[float]


class FleetHost(TypedDict):
    id: int
    ts: float  # unix seconds of the host's latest sample
    cpu_pct: NotRequired[float]
    mem_used_bytes: NotRequired[int]
    mem_total_bytes: NotRequired[int]
    gpus: list[FleetGpu]
    engines: list[FleetEngine]


class FleetEvent(TypedDict):
    type: Literal["fleet"]
    sent: float
    hosts: list[FleetHost]  # only the hosts that reported since the previous fleet event


class HostSample(TypedDict):
    ts: float
    host: dict[str, object]
    gpus: dict[str, dict[str, object]]  # GPU id (as a JSON key) -> values
    procs: list[dict[str, object]]  # pid, engine (id or None), values


class HostEvent(TypedDict):
    type: Literal["host"]
    host: int
    samples: list[HostSample]


class EngineSample(TypedDict):
    ts: float
    values: dict[str, object]
    quantiles: dict[str, Quantiles]  # histogram key -> quantiles; absent without observations


class EngineEvent(TypedDict):
    type: Literal["engine"]
    engine: int
    samples: list[EngineSample]


class Subscribed(TypedDict):
    type: Literal["subscribed"]
    groups: list[str]
    denied: dict[str, str]  # client group name -> reason


class Pong(TypedDict):
    type: Literal["pong"]
    server_time: float


class Error(TypedDict):
    type: Literal["error"]
    error: str


Event = FleetEvent | HostEvent | EngineEvent
Reply = Subscribed | Pong | Error


def encode(message: Event | Reply) -> str:
    """JSON text for a WebSocket text frame."""
    return orjson.dumps(message).decode()
