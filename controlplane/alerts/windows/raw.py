"""The raw rows a fold needs, as arrays: one statement per entity table, decoded in bulk.

PostgreSQL aggregates each field of the rows into one array and sends it in binary
(``array_send``): every element fixed-width (absent values travel as NaN, an absent histogram
as layout -1 with zero counts), so each field is one ``np.frombuffer``, with no Python step per
row or value. A binary ``COPY`` sends a message per row, and reading 200,000 of them cost
psycopg 0.2-0.3 CPU-s a cycle; the arrays cost PostgreSQL ~0.1 s more and Python almost
nothing (BENCHMARKS.md §7). Timestamps stay PostgreSQL's binary ``timestamptz``: microseconds
since 2000-01-01 UTC, which is also the epoch the slices are aligned to.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

import numpy as np
import psycopg

from agents.protocol import Entity, Metric
from controlplane.alerts.shards import WHOLE, Shard
from controlplane.telemetry.schema import OWNERS, TABLES, Column, SampleTable

# A one-dimensional array in binary: its number of dimensions, a has-nulls flag, the element
# type, then the dimension's length and lower bound; then per element a length and the data.
_ARRAY_HEADER = 20
_FLOAT4 = "float4"  # kept as float32: every other scalar travels as float8 (exact below 2^53)


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
    """Raw rows of one entity table, column by column, in the order PostgreSQL read them."""

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


def _fields(reading: Reading) -> list[tuple[str, str]]:
    """(SQL expression, big-endian NumPy type) of every field read, in order."""
    out = [(key_sql(reading.entity), ">i8"), ("t.ts", ">i8")]
    if reading.entity == "proc":
        out.append(("coalesce(t.engine_id, -1)", ">i4"))
    for c in reading.scalars:
        if c.sql_type == _FLOAT4:
            out.append((f"coalesce(t.{c.name}, 'NaN')", ">f4"))
        else:
            out.append((f"coalesce(t.{c.name}::float8, 'NaN')", ">f8"))
    for m in reading.histograms:
        counts = f"t.{m.key}_counts"
        out.append((f"(CASE WHEN {counts} IS NULL THEN -1 "
                    f"ELSE coalesce(t.{m.key}_layout, -1) END)::int4", ">i4"))
        out += [(f"coalesce({counts}[{i}], 0)", ">i4") for i in range(1, reading.buckets + 1)]
    return out


def read_sql(reading: Reading, shard: Shard = WHOLE) -> str:
    """The rows in (%(lo)s, %(hi)s] of the shard's hosts, each field aggregated into one
    binary array."""
    lines = ",\n  ".join(f"array_send(array_agg({sql}))" for sql, _ in _fields(reading))
    return (f"SELECT\n  {lines}\nFROM {reading.table.name} t\n"
            f"WHERE t.ts > %(lo)s AND t.ts <= %(hi)s{in_shard(reading.entity, shard)}")


def in_shard(entity: Entity, shard: Shard) -> str:
    """SQL, `` AND …``: a row of ``t`` is of a host of the shard. GPU and engine rows carry
    no host: their fleet table says it (a hashed semi-join on a few thousand ids)."""
    if shard.whole:
        return ""
    owner = OWNERS.get(entity)
    if owner is None:
        return f" AND {shard.hosts('t.host_id')}"
    table, key = owner
    return f" AND t.{key} IN (SELECT id FROM {table} WHERE {shard.hosts('host_id')})"


def read(cursor, reading: Reading, lo: datetime, hi: datetime, shard: Shard = WHOLE) -> Rows:
    """The rows of ``reading``'s table with lo < ts <= hi, of the shard's hosts. ``cursor``: a
    psycopg cursor; the statement runs on its connection with server-side binding, which
    binary results need."""
    with psycopg.Cursor(cursor.connection) as binary:
        binary.execute(read_sql(reading, shard), {"lo": lo, "hi": hi}, binary=True)
        return decode(reading, binary.fetchone())


def _column(data: bytes | None, dtype: str) -> np.ndarray:
    if data is None:  # no rows: array_agg gives NULL
        return np.zeros(0, dtype)
    elements = np.frombuffer(data, dtype=[("length", ">i4"), ("value", dtype)],
                             offset=_ARRAY_HEADER)
    return elements["value"].astype(np.dtype(dtype).newbyteorder("="))


def decode(reading: Reading, row: tuple) -> Rows:
    columns = iter(_column(data, dtype) for data, (_, dtype) in
                   zip(row, _fields(reading), strict=True))
    rows = Rows(key=next(columns), ts=next(columns), engine=None)
    if reading.entity == "proc":
        rows.engine = next(columns).astype(np.int64)
    for c in reading.scalars:
        rows.values[c.name] = next(columns)
    for m in reading.histograms:
        rows.layouts[m.key] = next(columns)
        buckets = [next(columns) for _ in range(reading.buckets)]
        rows.counts[m.key] = (np.stack(buckets, axis=1) if buckets
                              else np.zeros((len(rows.ts), 0), np.int32))
    return rows
