"""Binary COPY into the sample tables, with timestamps sent as unix seconds.

Agents send ``ts`` as float unix seconds. Turning each into a ``datetime`` only for psycopg to
turn it back into microseconds would cost more than the rest of the row, so floats go straight
into PostgreSQL's binary timestamptz (microseconds since 2000-01-01). The ingest writer's
tables arrive as columns (tables.py), are encoded a column at a time (binary.py) and written as
one buffer per table; the dumpers below serve row-at-a-time writers (tests/bench/pk_order.py).
"""

from __future__ import annotations

import functools
import struct

import psycopg
from psycopg.adapt import Dumper
from psycopg.pq import Format

from controlplane.telemetry.ingest import binary
from controlplane.telemetry.ingest.tables import TableColumns
from controlplane.telemetry.schema import TABLES

PG_EPOCH = 946684800.0  # 2000-01-01T00:00:00Z in unix seconds
_pack = struct.Struct(">q").pack
TIMESTAMPTZ_OID = 1184


class UnixSecondsDumper(Dumper):
    format = Format.BINARY
    oid = TIMESTAMPTZ_OID

    def dump(self, obj: float) -> bytes:
        return _pack(round((obj - PG_EPOCH) * 1_000_000))


class _ArrayDumper(Dumper):
    """Binary one-dimensional arrays without NULLs, packed with one struct call.

    psycopg's generic list dumper inspects every element in Python; histogram counts, CPU
    cores and affinities are plain lists of numbers, so their layout is known in advance.
    """

    format = Format.BINARY
    element_oid = 0
    element_code = ""
    element_size = 0

    def dump(self, obj: list) -> bytes:
        n = len(obj)
        head = _pack_head(1, 0, self.element_oid, n, 1)
        if not n:
            return _pack_head(0, 0, self.element_oid, 0, 0)[:12]
        size = self.element_size
        body = _element_struct(self.element_code, n).pack(
            *[v for x in obj for v in (size, x)])
        return head + body


def _pack_head(ndim: int, flags: int, oid: int, length: int, lbound: int) -> bytes:
    return struct.pack(">iiIii", ndim, flags, oid, length, lbound)


@functools.cache
def _element_struct(code: str, n: int) -> struct.Struct:
    return struct.Struct(">" + ("i" + code) * n)


class Int4ArrayDumper(_ArrayDumper):
    oid, element_oid, element_code, element_size = 1007, 23, "i", 4


class Int2ArrayDumper(_ArrayDumper):
    oid, element_oid, element_code, element_size = 1005, 21, "h", 2


class Float4ArrayDumper(_ArrayDumper):
    oid, element_oid, element_code, element_size = 1021, 700, "f", 4


class _UnixSeconds(float):
    """Marker type: registering a dumper for it installs the dumper for the timestamptz oid."""


class _Int4Array(list):
    """Marker types like _UnixSeconds, one per array dumper."""


class _Int2Array(list):
    pass


class _Float4Array(list):
    pass


_TABLES = {t.name: t for t in TABLES.values()}
_COLUMN_LISTS = {t.name: ", ".join(c.name for c in t.all_columns) for t in TABLES.values()}
_TYPES = {t.name: [c.sql_type for c in t.all_columns] for t in TABLES.values()}
_KEY_WIDTH = {t.name: len(t.keys) + 1 for t in TABLES.values()}  # the keys and ts


async def make_copy_connection(dsn: str, connect_timeout: int = 10) -> psycopg.AsyncConnection:
    """A connection for the writer; gives up after ``connect_timeout`` s on a server that
    accepts the TCP connection and then says nothing (a stalled one)."""
    conn = await psycopg.AsyncConnection.connect(dsn, autocommit=True,
                                                 connect_timeout=connect_timeout)
    # COPY looks dumpers up by the column type's oid (set_types), so these take over there.
    conn.adapters.register_dumper(_UnixSeconds, UnixSecondsDumper)
    conn.adapters.register_dumper(_Int4Array, Int4ArrayDumper)
    conn.adapters.register_dumper(_Int2Array, Int2ArrayDumper)
    conn.adapters.register_dumper(_Float4Array, Float4ArrayDumper)
    return conn


async def copy_table(conn, rows: TableColumns, conflict_safe: bool = False) -> int:
    """COPY a table's rows, given as columns, into it; with ``conflict_safe`` skip rows whose
    key already exists. Returns the values the rows carry (their present value columns), which
    /metrics counts: from the NULLs per column that the encoder counts anyway, where a loop
    over the rows would cost about as much as the rest of the instrumentation (rows skipped as
    conflicts are counted too: that path is rare)."""
    table = rows.table
    nulls = binary.null_counts(rows.columns, rows.length)
    values = present_values(table, nulls, rows.length)
    target = table
    async with conn.cursor() as cur:
        if conflict_safe:
            target = f"pitwall_stage_{table}"
            await cur.execute(
                f"CREATE TEMP TABLE IF NOT EXISTS {target}"
                f" (LIKE {table} INCLUDING DEFAULTS) ON COMMIT DELETE ROWS")
        async with cur.copy(
            f"COPY {target} ({_COLUMN_LISTS[table]}) FROM STDIN (FORMAT BINARY)"
        ) as copy:
            await copy.write(binary.encode_columns(_TYPES[table], rows.columns, rows.length,
                                                   nulls))
        if conflict_safe:
            pk = ", ".join(_TABLES[table].primary_key)
            await cur.execute(
                f"INSERT INTO {table} ({_COLUMN_LISTS[table]})"
                f" SELECT DISTINCT ON ({pk}) {_COLUMN_LISTS[table]} FROM {target}"
                f" ON CONFLICT ({pk}) DO NOTHING")
    return values


def present_values(table: str, nulls: list[int], length: int) -> int:
    """The non-null cells of ``table``'s value columns (after its keys and ts), from the NULLs
    of each column (``binary.null_counts``)."""
    width = _KEY_WIDTH[table]
    return length * (len(nulls) - width) - sum(nulls[width:])


def dsn_from_settings(db: dict) -> str:
    """A libpq connection string from Django's DATABASES entry."""
    parts = {"dbname": db["NAME"], "user": db.get("USER"), "password": db.get("PASSWORD"),
             "host": db.get("HOST"), "port": db.get("PORT"), **db.get("OPTIONS", {})}
    parts.pop("pool", None)  # Django's pool settings, not a libpq option
    return psycopg.conninfo.make_conninfo(**{k: v for k, v in parts.items() if v})
