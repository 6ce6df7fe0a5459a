"""The raw rows a fold needs, as arrays: one binary ``COPY`` per entity table, decoded in bulk.

Every field of the ``COPY`` is fixed-width (absent values travel as NaN, an absent histogram
as layout -1 with zero counts), so the whole stream is one NumPy structured array: no Python
step per row or value. Timestamps stay PostgreSQL's binary ``timestamptz``: microseconds since
2000-01-01 UTC, which is also the epoch the slices are aligned to.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

import numpy as np

from agents.protocol import Entity, Metric
from controlplane.telemetry.schema import TABLES, Column, SampleTable

# Binary COPY: an 11-byte signature, 4 bytes of flags, 4 of header extension (always 0 from
# PostgreSQL); then per row a 2-byte field count and per field a 4-byte length and the data;
# then a 2-byte trailer.
_HEADER, _TRAILER = 19, 2
_DTYPES = {"float4": ">f4"}  # every other scalar travels as float8 (int8 is exact below 2^53)


@dataclass(frozen=True)
class Reading:
    """What a fold reads of one entity's raw table: these scalar columns and histograms."""

    entity: Entity
    scalars: tuple[Column, ...]
    histograms: tuple[Metric, ...] = ()
    buckets: int = 0  # counts per histogram row (the most any layout has): shorter ones padded

    @property
    def table(self) -> SampleTable:
        return TABLES[self.entity]


@dataclass
class Rows:
    """Raw rows of one entity table, column by column, in the order PostgreSQL sent them."""

    key: np.ndarray  # int64 target key (proc: host_id << 32 | pid)
    ts: np.ndarray  # int64 microseconds since 2000-01-01 UTC
    engine: np.ndarray | None  # proc: the engine the process served (-1: none)
    # column -> float32 (a float4 column) or float64 (the others), NaN where absent
    values: dict[str, np.ndarray] = field(default_factory=dict)
    layouts: dict[str, np.ndarray] = field(default_factory=dict)  # histogram key -> int32, -1
    counts: dict[str, np.ndarray] = field(default_factory=dict)  # histogram key -> int32 (n, B)

    def __len__(self) -> int:
        return len(self.ts)


def key_sql(entity: Entity, alias: str = "t") -> str:
    """An entity's target key as one int8: a process is its host and pid."""
    if entity == "proc":
        return f"({alias}.host_id::int8 << 32) | {alias}.pid"
    return f"{alias}.{TABLES[entity].keys[0].name}::int8"


def copy_sql(reading: Reading) -> str:
    """The COPY of the rows in (%(lo)s, %(hi)s], every field fixed-width."""
    fields = [key_sql(reading.entity), "t.ts"]
    if reading.entity == "proc":
        fields.append("coalesce(t.engine_id, -1)")
    for c in reading.scalars:
        cast = "" if c.sql_type in _DTYPES else "::float8"
        fields.append(f"coalesce(t.{c.name}{cast}, 'NaN')")
    for m in reading.histograms:
        counts = f"t.{m.key}_counts"
        fields.append(f"(CASE WHEN {counts} IS NULL THEN -1 "
                      f"ELSE coalesce(t.{m.key}_layout, -1) END)::int4")
        fields += [f"coalesce({counts}[{i}], 0)" for i in range(1, reading.buckets + 1)]
    lines = ",\n  ".join(fields)
    return (f"COPY (SELECT\n  {lines}\nFROM {reading.table.name} t\n"
            f"WHERE t.ts > %(lo)s AND t.ts <= %(hi)s) TO STDOUT (FORMAT binary)")


def row_dtype(reading: Reading) -> np.dtype:
    types = [">i8", ">i8"]
    if reading.entity == "proc":
        types.append(">i4")
    types += [_DTYPES.get(c.sql_type, ">f8") for c in reading.scalars]
    for _ in reading.histograms:
        types += [">i4", *([">i4"] * reading.buckets)]  # counts are int4[]
    spec: list[tuple[str, str]] = [("fields", ">i2")]
    for i, t in enumerate(types):
        spec += [(f"len{i}", ">i4"), (f"f{i}", t)]
    return np.dtype(spec)


def read(cursor, reading: Reading, lo: datetime, hi: datetime) -> Rows:
    """The rows of ``reading``'s table with lo < ts <= hi. ``cursor``: a psycopg cursor."""
    with cursor.copy(copy_sql(reading), {"lo": lo, "hi": hi}) as copy:
        data = b"".join(bytes(block) for block in copy)
    return decode(reading, data)


def decode(reading: Reading, data: bytes) -> Rows:
    dtype = row_dtype(reading)
    count = (len(data) - _HEADER - _TRAILER) // dtype.itemsize
    table = np.frombuffer(data, dtype=dtype, count=max(count, 0), offset=_HEADER)
    fields = iter(f"f{i}" for i in range(len(dtype.names) // 2))
    rows = Rows(key=table[next(fields)].astype(np.int64), ts=table[next(fields)].astype(np.int64),
                engine=None)
    if reading.entity == "proc":
        rows.engine = table[next(fields)].astype(np.int64)
    for c in reading.scalars:
        column = table[next(fields)]
        rows.values[c.name] = column.astype(column.dtype.newbyteorder("="))
    for m in reading.histograms:
        rows.layouts[m.key] = table[next(fields)].astype(np.int32)
        buckets = [table[next(fields)] for _ in range(reading.buckets)]
        rows.counts[m.key] = (np.stack(buckets, axis=1).astype(np.int32) if buckets
                              else np.zeros((len(table), 0), np.int32))
    return rows
