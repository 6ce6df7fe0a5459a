"""Validated samples -> row tuples in the column order of the sample tables (schema.py)."""

from __future__ import annotations

from collections.abc import Iterator

from asgiref.sync import sync_to_async

from controlplane.telemetry.ingest.registry import HostState
from controlplane.telemetry.ingest.validate import Batch
from controlplane.telemetry.models import HistogramLayout
from controlplane.telemetry.schema import TABLES, SampleTable

Rows = dict[str, list[tuple]]  # table name -> rows


def _engine_plan(table: SampleTable) -> list[tuple[str, str]]:
    """(wire key, part) per engine value column; part is "" for a plain gauge or rate."""
    return [(c.metric.key if c.metric else c.name, c.part) for c in table.columns]


def _plain_keys(table: SampleTable) -> list[str] | None:
    """The keys to read when a table has no histogram columns (the fast path)."""
    if any(c.part for c in table.columns):
        return None
    return [c.metric.key if c.metric else c.name for c in table.columns]


HOST = TABLES["host"]
GPU = TABLES["gpu"]
ENGINE = TABLES["engine"]
PROC = TABLES["proc"]
HOST_KEYS = _plain_keys(HOST)
GPU_KEYS = _plain_keys(GPU)
PROC_KEYS = [c.metric.key if c.metric else c.name for c in PROC.columns[1:]]  # after engine_id
ENGINE_PLAN = _engine_plan(ENGINE)


class LayoutCache:
    """Histogram bucket layouts: bounds tuple -> small id, shared by every row that uses it."""

    def __init__(self) -> None:
        self.ids: dict[tuple, int] = {}

    async def resolve(self, batches: list[Batch]) -> None:
        missing = {b for b in _bounds(batches) if b not in self.ids}
        if missing:
            self.ids.update(await sync_to_async(_layout_ids)(missing))


def _bounds(batches: list[Batch]) -> Iterator[tuple]:
    for batch in batches:
        for sample in batch.samples:
            for engine in sample.get("engines") or ():
                for value in engine.values():
                    if type(value) is dict:
                        yield tuple(value["le"])


def _layout_ids(bounds: set[tuple]) -> dict[tuple, int]:
    ids = {}
    for item in bounds:
        layout, _ = HistogramLayout.objects.get_or_create(bounds=list(item))
        ids[item] = layout.id
    return ids


def build_rows(state: HostState, batch: Batch, layouts: dict[tuple, int]) -> Rows:
    rows: Rows = {HOST.name: [], GPU.name: [], ENGINE.name: [], PROC.name: []}
    host_id, gpu_ids, engine_ids = state.host_id, state.gpu_ids, state.engine_ids
    for sample in batch.samples:
        ts = sample["ts"]
        host = sample.get("host")
        if host:
            rows[HOST.name].append((host_id, ts, *[host.get(k) for k in HOST_KEYS]))
        for gpu in sample.get("gpus") or ():
            rows[GPU.name].append((gpu_ids[gpu["uuid"]], ts, *[gpu.get(k) for k in GPU_KEYS]))
        for engine in sample.get("engines") or ():
            rows[ENGINE.name].append(
                (engine_ids[engine["name"]], ts, *_engine_values(engine, layouts)))
        for proc in sample.get("processes") or ():
            engine_id = engine_ids.get(proc.get("engine"))
            rows[PROC.name].append(
                (host_id, proc["pid"], ts, engine_id, *[proc.get(k) for k in PROC_KEYS]))
    return rows


def _engine_values(engine: dict, layouts: dict[tuple, int]) -> list:
    values = []
    for key, part in ENGINE_PLAN:
        value = engine.get(key)
        if part and value is not None:
            value = (layouts[tuple(value["le"])] if part == "layout"
                     else value["counts"] if part == "counts" else value.get("sum"))
        values.append(value)
    return values


def engines_seen(state: HostState, batch: Batch) -> set[int]:
    return {state.engine_ids[e["name"]] for s in batch.samples for e in s.get("engines") or ()
            if e.get("up")}
