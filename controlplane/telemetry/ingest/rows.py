"""Validated samples -> row tuples in the column order of the sample tables (schema.py)."""

from __future__ import annotations

from collections.abc import Callable, Iterator

from asgiref.sync import sync_to_async

from controlplane.telemetry.ingest.registry import HostState
from controlplane.telemetry.ingest.validate import Batch
from controlplane.telemetry.models import HistogramLayout
from controlplane.telemetry.schema import TABLES, Column, SampleTable

Rows = dict[str, list[tuple]]  # table name -> rows


def _getter(column: Column, layouts: dict[tuple, int]) -> Callable[[dict], object]:
    key = column.metric.key if column.metric else column.name
    if column.part == "layout":
        return lambda item: (h := item.get(key)) and layouts[tuple(h["le"])]
    if column.part == "counts":
        return lambda item: (h := item.get(key)) and h["counts"]
    if column.part == "sum":
        return lambda item: (h := item.get(key)) and h.get("sum")
    return lambda item: item.get(key)


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
    engine_getters = [_getter(c, layouts) for c in ENGINE.columns]
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
                (engine_ids[engine["name"]], ts, *[get(engine) for get in engine_getters]))
        for proc in sample.get("processes") or ():
            engine_id = engine_ids.get(proc.get("engine"))
            rows[PROC.name].append(
                (host_id, proc["pid"], ts, engine_id, *[proc.get(k) for k in PROC_KEYS]))
    return rows


def engines_seen(state: HostState, batch: Batch) -> set[int]:
    return {state.engine_ids[e["name"]] for s in batch.samples for e in s.get("engines") or ()
            if e.get("up")}
