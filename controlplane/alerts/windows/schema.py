"""Slice tables: 10-second partial aggregates of the raw samples, the stuff rule windows are
made of.

Agents report every second, so a 5-minute window over 8,000 GPUs is 2.4 million raw rows:
scanning that for every evaluation cycle costs tens of CPU-seconds (BENCHMARKS.md §7). Each
cycle instead folds only the newest seconds of raw rows into slices, and rules combine the
slices of their window: 30 rows per GPU for 5 minutes instead of 300.

One row per entity per slice. A slice ``ts = s`` holds the raw rows with ``s < ts <= s + 10 s``
(right-closed, like a rule window ``(now - w, now]``); ``n`` rows, the first and last row's
time ``t0``/``t1``. Per scalar metric ``<key>_n`` (rows where present), ``_sum``, ``_min``,
``_max`` and the values of the slice's first and last row ``_first``/``_last`` (for ``last``
and ``rate``); a bitmask metric also ``_vals``/``_cnts``, its distinct values and how many rows
had each, so the share of rows with any bit of any mask is exact. A histogram keeps the layout
holding most observations in the slice and its counts summed bucket by bucket.

The tables are derived, rebuilt from the raw rows whenever their watermark says they are
missing or stale (after a crash PostgreSQL empties them, and the next cycle rebuilds the
window): nothing here is a product record. Each is partitioned by the evaluation shard
(``shard``: ``Shard.code``, alerts/shards.py) into UNLOGGED partitions, so a lane scans its own
targets' slices only.
"""

from __future__ import annotations

from dataclasses import dataclass

from agents.protocol import Entity, Metric
from controlplane.telemetry.schema import TABLES as RAW_TABLES
from controlplane.telemetry.schema import Column, SampleTable

SLICE_S = 10
STATE_TABLE = "alerts_slice_state"
SCALAR_PARTS = ("n", "sum", "min", "max", "first", "last")
_PART_TYPES = {"n": "int4", "sum": "float8", "min": "float8", "max": "float8",
               "first": "float8", "last": "float8", "vals": "int8[]", "cnts": "int4[]"}


@dataclass(frozen=True)
class SliceTable:
    raw: SampleTable
    name: str
    scalars: tuple[Column, ...]  # raw scalar metric columns
    bitmasks: tuple[Column, ...]  # those of them that are bitmasks
    histograms: tuple[Metric, ...]

    @property
    def entity(self) -> Entity:
        return self.raw.entity

    @property
    def keys(self) -> tuple[str, ...]:
        return tuple(k.name for k in self.raw.keys)

    def columns(self) -> list[tuple[str, str]]:
        cols = [("shard", "int4")]
        cols += [(k.name, k.sql_type) for k in self.raw.keys]
        cols += [("ts", "timestamptz"), ("n", "int4"), ("t0", "timestamptz"),
                 ("t1", "timestamptz")]
        if self.entity == "proc":
            cols.append(("engine_id", "int4"))  # the engine the process served last
        for c in self.scalars:
            parts = SCALAR_PARTS + (("vals", "cnts") if c in self.bitmasks else ())
            cols += [(f"{c.name}_{p}", _PART_TYPES[p]) for p in parts]
        for m in self.histograms:
            cols += [(f"{m.key}_layout", "int2"), (f"{m.key}_counts", "int8[]")]
        return cols


def slice_table(raw: SampleTable) -> SliceTable:
    scalars = tuple(c for c in raw.columns
                    if c.metric is not None and not c.part and not c.metric.array)
    return SliceTable(
        raw=raw, name=raw.name.replace("telemetry_", "alerts_slice_").removesuffix("_sample"),
        scalars=scalars,
        bitmasks=tuple(c for c in scalars if c.metric.unit == "bitmask"),
        histograms=tuple(dict.fromkeys(c.metric for c in raw.columns if c.part)))


SLICES: dict[Entity, SliceTable] = {e: slice_table(raw) for e, raw in RAW_TABLES.items()}


def schema_sql() -> list[str]:
    out = [f"CREATE UNLOGGED TABLE IF NOT EXISTS {STATE_TABLE} (entity text PRIMARY KEY, "
           f"lo timestamptz NOT NULL, hi timestamptz NOT NULL)"]
    for table in SLICES.values():
        cols = ", ".join(f"{name} {typ}" for name, typ in table.columns())
        out += [
            f"CREATE TABLE IF NOT EXISTS {table.name} ({cols}, "
            f"PRIMARY KEY (shard, {', '.join(table.keys)}, ts)) PARTITION BY LIST (shard)",
            # the cycle deletes and rebuilds by time across all entities
            f"CREATE INDEX IF NOT EXISTS {table.name}_ts ON {table.name} (ts)",
            *(f"ALTER TABLE {table.name} ADD COLUMN IF NOT EXISTS {name} {typ}"
              for name, typ in table.columns()),
        ]
    return out


def all_names() -> list[str]:
    return [STATE_TABLE, *(t.name for t in SLICES.values())]


def partition_name(table: SliceTable, code: int) -> str:
    return f"{table.name}_{code}"


def partition_sql(table: SliceTable, code: int) -> str:
    return (f"CREATE UNLOGGED TABLE IF NOT EXISTS {partition_name(table, code)} "
            f"PARTITION OF {table.name} FOR VALUES IN ({code})")
