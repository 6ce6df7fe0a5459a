"""Committed sample rows -> live events (events.py). Pure functions, no I/O.

Rows are the ingest writer's tuples in the column order of schema.py: ``(host_id, ts, ...)``,
``(gpu_id, ts, ...)``, ``(engine_id, ts, ...)`` and ``(host_id, pid, ts, engine_id, ...)``,
with ``ts`` in unix seconds. None is an absent metric and stays absent in the event.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence

from controlplane.realtime.events import (
    EngineEvent,
    EngineSample,
    FleetEvent,
    FleetHost,
    HostEvent,
    HostSample,
    Quantiles,
)
from controlplane.telemetry.schema import TABLES, SampleTable
from controlplane.telemetry.series.histograms import histogram_quantile

Rows = dict[str, list[tuple]]
BoundsOf = Callable[[int], Sequence[float] | None]  # histogram layout id -> bounds

HOST, GPU, ENGINE, PROC = (TABLES[e] for e in ("host", "gpu", "engine", "proc"))
QUANTILES = (("0.5", 0.5), ("0.9", 0.9), ("0.99", 0.99))


def _names(table: SampleTable, skip: int = 0) -> tuple[str, ...]:
    return tuple(c.name for c in table.columns[skip:])


HOST_NAMES, GPU_NAMES = _names(HOST), _names(GPU)
PROC_NAMES = _names(PROC, skip=1)  # engine_id travels as "engine"
# Engine values: (row index, key) of gauges and rates; (layout index, counts index, key) of
# histograms. Rows hold the entity id and ts before the value columns, hence + 2.
ENGINE_PLAIN = tuple((i + 2, c.name) for i, c in enumerate(ENGINE.columns) if not c.part)
ENGINE_HISTOGRAMS = tuple(
    (i + 2, i + 3, c.metric.key) for i, c in enumerate(ENGINE.columns)
    if c.part == "layout" and c.metric is not None)


def _picker(names: Sequence[str], wanted: Iterable[str]) -> tuple[tuple[int, str], ...]:
    return tuple((names.index(key) + 2, key) for key in wanted)


FLEET_HOST = _picker(HOST_NAMES, ("cpu_pct", "mem_used_bytes", "mem_total_bytes"))
FLEET_GPU = _picker(GPU_NAMES, ("mem_used_bytes", "mem_total_bytes", "util_pct"))
FLEET_ENGINE = _picker(_names(ENGINE), ("up", "requests_running", "requests_waiting",
                                        "kv_cache_usage", "generation_tokens_per_s"))


def _present(names: Sequence[str], values: Sequence) -> dict[str, object]:
    return {name: value for name, value in zip(names, values, strict=True) if value is not None}


def _pick(row: tuple, picker: tuple[tuple[int, str], ...]) -> dict[str, object]:
    return {key: row[i] for i, key in picker if row[i] is not None}


def host_event(host_id: int, batches: Iterable[Rows]) -> HostEvent:
    """Every sample of the host's committed batches, in time order."""
    samples: dict[float, HostSample] = {}

    def at(ts: float) -> HostSample:
        sample = samples.get(ts)
        if sample is None:
            sample = samples[ts] = {"ts": ts, "host": {}, "gpus": {}, "procs": []}
        return sample

    for rows in batches:
        for row in rows.get(HOST.name, ()):
            at(row[1])["host"] = _present(HOST_NAMES, row[2:])
        for row in rows.get(GPU.name, ()):
            at(row[1])["gpus"][str(row[0])] = _present(GPU_NAMES, row[2:])
        for row in rows.get(PROC.name, ()):
            at(row[2])["procs"].append(
                {"pid": row[1], "engine": row[3], **_present(PROC_NAMES, row[4:])})
    return {"type": "host", "host": host_id,
            "samples": sorted(samples.values(), key=lambda s: s["ts"])}


def engine_event(engine_id: int, rows: Iterable[tuple], bounds_of: BoundsOf) -> EngineEvent:
    samples: list[EngineSample] = [
        {"ts": row[1], "values": _pick(row, ENGINE_PLAIN), "quantiles": _quantiles(row, bounds_of)}
        for row in sorted(rows, key=lambda r: r[1])]
    return {"type": "engine", "engine": engine_id, "samples": samples}


def _quantiles(row: tuple, bounds_of: BoundsOf) -> dict[str, Quantiles]:
    """p50/p90/p99 of the interval's bucket deltas; a histogram with no observations is absent."""
    out: dict[str, Quantiles] = {}
    for layout_at, counts_at, key in ENGINE_HISTOGRAMS:
        layout, counts = row[layout_at], row[counts_at]
        bounds = bounds_of(layout) if layout is not None and counts else None
        if bounds is None or not sum(counts):
            continue
        values = {label: histogram_quantile(q, bounds, counts) for label, q in QUANTILES}
        if None not in values.values():
            out[key] = values  # type: ignore[assignment]
    return out


def last_ts(rows: Rows) -> float:
    """The latest sample time in one batch's rows (0.0 when it has none)."""
    at = {HOST.name: 1, GPU.name: 1, ENGINE.name: 1, PROC.name: 2}
    return max((max(r[at[t]] for r in table) for t, table in rows.items() if table), default=0.0)


def batch_ts(rows: Rows) -> float:
    """``last_ts`` cheaply: host rows are one per sample, GPU rows eight or more."""
    host_rows = rows.get(HOST.name)
    return max(r[1] for r in host_rows) if host_rows else last_ts(rows)


def _latest(rows: Iterable[tuple]) -> list[tuple]:
    """The latest row of each entity, in entity order."""
    newest: dict[int, tuple] = {}
    for row in rows:
        seen = newest.get(row[0])
        if seen is None or row[1] >= seen[1]:
            newest[row[0]] = row
    return [newest[k] for k in sorted(newest)]


def fleet_host(host_id: int, rows: Rows) -> FleetHost:
    entry: FleetHost = {"id": host_id, "ts": last_ts(rows), "gpus": [], "engines": []}
    host_rows = _latest(rows.get(HOST.name, ()))
    if host_rows:
        entry.update(_pick(host_rows[0], FLEET_HOST))  # type: ignore[typeddict-item]
    entry["gpus"] = [{"id": r[0], **_pick(r, FLEET_GPU)}  # type: ignore[misc]
                     for r in _latest(rows.get(GPU.name, ()))]
    entry["engines"] = [{"id": r[0], **_pick(r, FLEET_ENGINE)}  # type: ignore[misc]
                        for r in _latest(rows.get(ENGINE.name, ()))]
    return entry


def fleet_event(latest: dict[int, Rows]) -> FleetEvent:
    """The fleet summary of the hosts in ``latest`` (host id -> its newest batch's rows)."""
    return {"type": "fleet", "sent": time.time(),
            "hosts": [fleet_host(host_id, latest[host_id]) for host_id in sorted(latest)]}
