"""Validated batches -> their rows per sample table as columns (tables.py), in the column order
of the tables (schema.py), and the histogram layouts they name (bounded per host).

A v2 batch's columns are passed on as decoded (columns.tables_of); a v1 batch (deprecated) is
walked into row tuples, then transposed."""

from __future__ import annotations

from collections.abc import Iterator

from django.conf import settings
from django.db import transaction

from controlplane.fleet.models import Host
from controlplane.telemetry.ingest.columns import Columns, tables_of
from controlplane.telemetry.ingest.credentials import check_token
from controlplane.telemetry.ingest.errors import BadRequest, join
from controlplane.telemetry.ingest.orm import orm
from controlplane.telemetry.ingest.registry import HostState
from controlplane.telemetry.ingest.tables import TableColumns, Tables
from controlplane.telemetry.ingest.validate import Batch
from controlplane.telemetry.models import HistogramLayout, HostHistogramLayout
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
# Protocol v2 (columns.py): per section, its table and the (wire key, part) of each column.
COLUMN_PLAN = (("hosts", HOST.name, [(k, "") for k in HOST_KEYS or ()]),
               ("gpus", GPU.name, [(k, "") for k in GPU_KEYS or ()]),
               ("engines", ENGINE.name, ENGINE_PLAN),
               ("processes", PROC.name, [(k, "") for k in PROC_KEYS]))


def max_layouts_per_host() -> int:
    return settings.PITWALL["MAX_HISTOGRAM_LAYOUTS_PER_HOST"]


class LayoutLimit(BadRequest):
    """A host sent more distinct histogram bucket layouts than it may register."""


class LayoutCache:
    """Histogram bucket layouts: bounds tuple -> small id, shared by every row that uses it.

    Each host may register at most ``MAX_HISTOGRAM_LAYOUTS_PER_HOST`` distinct layouts (counted
    in HostHistogramLayout, across processes); ``hosts`` caches the layouts each host has, so a
    known one costs a set lookup, as before.
    """

    def __init__(self) -> None:
        self.ids: dict[tuple, int] = {}
        self.hosts: dict[int, set[tuple]] = {}

    async def resolve(self, host_id: int, batches: list[Batch],
                      token_id: int | None = None) -> None:
        known = self.hosts.get(host_id, frozenset())
        missing = list(dict.fromkeys(b for b in _bounds(batches) if b not in known))
        if not missing:
            return
        try:
            registered = await orm(_register_layouts)(host_id, missing, token_id)
        except LayoutLimit as exc:
            exc.field = _path_of(batches, exc.bounds)  # type: ignore[attr-defined]
            raise
        self.ids.update(registered)
        self.hosts[host_id] = set(registered)


def _bounds(batches: list[Batch]) -> Iterator[tuple]:
    for batch in batches:
        if isinstance(batch, Columns):
            yield from batch.histogram_bounds()
            continue
        for sample in batch.samples:
            for engine in sample.get("engines") or ():
                for value in engine.values():
                    if type(value) is dict:
                        yield tuple(value["le"])


def _path_of(batches: list[Batch], bounds: tuple) -> str:
    """The field of the first histogram with these bounds (only to name a refusal)."""
    for batch in batches:
        if isinstance(batch, Columns):
            found = batch.bounds_field(bounds)
            if found:
                return found
            continue
        for i, sample in enumerate(batch.samples):
            for j, engine in enumerate(sample.get("engines") or ()):
                for key, value in engine.items():
                    if type(value) is dict and tuple(value["le"]) == bounds:
                        return join(batch.path, f"samples[{i}].engines[{j}].{key}.le")
    return ""


@transaction.atomic
def _register_layouts(host_id: int, wanted: list[tuple],
                      token_id: int | None) -> dict[tuple, int]:
    """Every layout of the host, ``wanted`` included, registering the new ones; all or none.

    The host's row is locked while it counts, so concurrent requests (in any process) cannot
    together pass the cap.
    """
    check_token(token_id)
    list(Host.objects.select_for_update().filter(pk=host_id).values_list("id"))
    have = {tuple(bounds): layout_id for bounds, layout_id in
            HostHistogramLayout.objects.filter(host_id=host_id)
            .values_list("layout__bounds", "layout_id")}
    new = [b for b in wanted if b not in have]
    cap = max_layouts_per_host()
    if len(have) + len(new) > cap:
        error = LayoutLimit(
            f"this host already uses {len(have)} histogram bucket layouts and this request "
            f"adds {len(new)}: at most {cap} are allowed per host "
            "(PITWALL_MAX_HISTOGRAM_LAYOUTS_PER_HOST)")
        error.bounds = new[max(0, cap - len(have))]  # type: ignore[attr-defined]
        raise error
    for bounds in new:
        layout, _ = HistogramLayout.objects.get_or_create(bounds=list(bounds))
        HostHistogramLayout.objects.create(host_id=host_id, layout=layout)
        have[bounds] = layout.id
    return have


def build_tables(state: HostState, batch: Batch | Columns, layouts: dict[tuple, int]
                 ) -> Tables:
    if isinstance(batch, Columns):
        return tables_of(batch, state, layouts, COLUMN_PLAN)
    return {name: TableColumns.from_rows(name, rows)
            for name, rows in _v1_rows(state, batch, layouts).items() if rows}


def _v1_rows(state: HostState, batch: Batch, layouts: dict[tuple, int]) -> Rows:
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


def engines_seen(state: HostState, batch: Batch | Columns) -> set[int]:
    if isinstance(batch, Columns):
        return batch.engines_up(state.engine_ids)
    return {state.engine_ids[e["name"]] for s in batch.samples for e in s.get("engines") or ()
            if e.get("up")}
