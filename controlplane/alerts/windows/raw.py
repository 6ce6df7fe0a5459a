"""The raw rows a fold needs, as arrays: one statement per entity table, decoded in bulk.

PostgreSQL sends each row as one fixed-width binary record (every field through its type's
binary send function, concatenated) and all of them as one ``bytea`` (``string_agg``): absent
values travel as NaN, an absent histogram as layout -1 with zero counts, so the records are one
``np.frombuffer`` with a structured dtype, with no Python step per row or value.

Why one record per row and not an array per field (``array_send(array_agg(...))``, the earlier
form): ``array_send`` calls the element's send function again for every element of every array
at the end, and building and sending the arrays was two thirds of the statement; the records
cost PostgreSQL about 30 % less for the same rows (BENCHMARKS.md §33.2). A binary ``COPY`` sends a
message per row, and reading 200,000 of them cost psycopg 0.2-0.3 CPU-s a cycle (§7).
Timestamps stay PostgreSQL's binary ``timestamptz``: microseconds since 2000-01-01 UTC, which is
also the epoch the slices are aligned to.

One statement's result is one ``bytea``, which PostgreSQL caps at 1 GB: a read covers at most
a minute (``store.CHUNK_S``), ~50 MB for 8,000 GPUs at 1 s.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

import numpy as np
import psycopg

from agents.protocol import Entity, Metric
from controlplane.alerts.shards import WHOLE, Shard
from controlplane.telemetry.schema import OWNERS, TABLES, Column, SampleTable

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


def _fields(reading: Reading) -> list[tuple[str, str, str]]:
    """(SQL expression, its binary send function, big-endian NumPy type) of every field read,
    in order."""
    out = [(key_sql(reading.entity), "int8send", ">i8"), ("t.ts", "timestamptz_send", ">i8")]
    if reading.entity == "proc":
        out.append(("coalesce(t.engine_id, -1)", "int4send", ">i4"))
    for c in reading.scalars:
        if c.sql_type == _FLOAT4:
            out.append((f"coalesce(t.{c.name}, 'NaN')", "float4send", ">f4"))
        else:
            out.append((f"coalesce(t.{c.name}::float8, 'NaN')", "float8send", ">f8"))
    for m in reading.histograms:
        counts = f"t.{m.key}_counts"
        out.append((f"(CASE WHEN {counts} IS NULL THEN -1 "
                    f"ELSE coalesce(t.{m.key}_layout, -1) END)::int4", "int4send", ">i4"))
        out += [(f"coalesce({counts}[{i}], 0)", "int4send", ">i4")
                for i in range(1, reading.buckets + 1)]
    return out


def read_sql(reading: Reading, shard: Shard = WHOLE) -> str:
    """The rows in (%(lo)s, %(hi)s] of the shard's hosts, each a binary record, all of them
    one ``bytea``."""
    record = "\n  || ".join(f"{send}({sql})" for sql, send, _ in _fields(reading))
    return (f"SELECT string_agg(\n  {record},\n  ''::bytea)\nFROM {reading.table.name} t\n"
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
        return decode(reading, binary.fetchone()[0])


def record_dtype(reading: Reading) -> np.dtype:
    """A record's layout: its fields packed in order (no padding), big-endian."""
    fields = _fields(reading)
    names = [f"f{i}" for i in range(len(fields))]
    return np.dtype({"names": names, "formats": [dtype for _, _, dtype in fields]})


def decode(reading: Reading, data: bytes | None) -> Rows:
    """The rows of one ``read_sql`` result (None: no rows, as string_agg gives)."""
    dtype = record_dtype(reading)
    records = np.frombuffer(data or b"", dtype=dtype)
    columns = iter(records[name].astype(records.dtype[name].newbyteorder("="))
                   for name in dtype.names)
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
