"""PostgreSQL's binary COPY format for the sample tables, encoded a column at a time with numpy.

psycopg's ``write_row`` looks up a dumper and packs every value in Python: with 12 rows and
~150 values per agent batch that was the largest single cost of the ingest server (py-spy:
~16 % of its samples). Every row of one table has the same fixed-width layout once
it is known which columns are NULL and how long each array is, so a flush's columns (as the
decoder gave them, tables.py) become one numpy structured array when every row shares that
shape (nearly always), else the rows are cut into runs of one shape: the field lengths are
constants, the values are assigned column by column in C, and ``tobytes`` is the COPY data.

Format (PostgreSQL docs, "COPY ... BINARY"): a header, then per row an int16 field count and
per field an int32 byte length (-1 for NULL) followed by the value in network byte order; an
array is ``ndim, has_null, element oid, (length, lower bound) per dimension`` then each element
as length + value.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from controlplane.telemetry.ingest.tables import Column, rows_of

PG_EPOCH = 946684800.0  # 2000-01-01T00:00:00Z in unix seconds
HEADER = b"PGCOPY\n\xff\r\n\x00" + b"\x00\x00\x00\x00" + b"\x00\x00\x00\x00"
TRAILER = b"\xff\xff"

# sql type -> (numpy dtype of the value, element oid for arrays or 0)
SCALARS = {"int2": ">i2", "int4": ">i4", "int8": ">i8", "float4": ">f4", "float8": ">f8",
           "timestamptz": ">i8"}
ARRAYS = {"int2[]": (">i2", 21), "int4[]": (">i4", 23), "float4[]": (">f4", 700)}

NULL = -1  # a column's shape in a group: NULL, a scalar (0), or an array's length + 1


def null_counts(columns: Sequence[Column], length: int) -> list[int]:
    """The NULL cells of each column (COPY's encoder and /metrics' count of stored values both
    need them: counted once)."""
    return [length if c is None else c.count(None) for c in columns]


def encode(types: list[str], rows: list[tuple]) -> bytes:
    """The COPY data of row tuples (header and trailer included)."""
    columns = list(zip(*rows, strict=True)) if rows else [None] * len(types)
    return encode_columns(types, columns, len(rows))


def encode_columns(types: list[str], columns: Sequence[Column], length: int,
                   nulls: list[int] | None = None) -> bytes:
    """The COPY data (header and trailer included) of ``length`` rows given as ``columns`` of
    ``types`` (a None column: NULL in every row); ``nulls``: ``null_counts``, when the caller
    has them already."""
    if not length:
        return HEADER + TRAILER
    nulls = nulls or null_counts(columns, length)
    shapes = [_shape(t, c, n, length) for t, c, n in zip(types, columns, nulls, strict=True)]
    if None not in shapes:
        return HEADER + _encode_group(types, columns, tuple(shapes), length) + TRAILER
    rows = rows_of(columns, length)
    return HEADER + b"".join(_encode_group(types, list(zip(*run, strict=True)), shape, len(run))
                             for shape, run in _runs(types, rows)) + TRAILER


def _shape(sql_type: str, column: Column, nulls: int, length: int) -> int | None:
    """The column's shape if every row shares it, else None (the rows must be grouped)."""
    if column is None or nulls == length:
        return NULL
    if nulls:
        return None
    if sql_type in ARRAYS:
        lengths = set(map(len, column))
        return lengths.pop() + 1 if len(lengths) == 1 else None
    return 0


def _row_shape(types: list[str], row: tuple) -> tuple[int, ...]:
    return tuple(NULL if v is None else len(v) + 1 if t in ARRAYS else 0
                 for t, v in zip(types, row, strict=True))


def _runs(types: list[str], rows: list[tuple]) -> list[tuple[tuple, list[tuple]]]:
    """The rows cut into runs of one shape, in their order: rows are stored in the order they
    came (time order, which keeps the BRIN index on ts tight); grouping every row of a shape
    together would reorder them."""
    runs: list[tuple[tuple, list[tuple]]] = []
    for row in rows:
        shape = _row_shape(types, row)
        if runs and runs[-1][0] == shape:
            runs[-1][1].append(row)
        else:
            runs.append((shape, [row]))
    return runs


_DTYPES: dict[tuple, np.dtype] = {}


def _dtype(types: list[str], shape: tuple[int, ...]) -> np.dtype:
    key = (tuple(types), shape)
    dtype = _DTYPES.get(key)
    if dtype is None:
        fields: list[tuple] = [("n", ">i2")]
        for i, (sql_type, size) in enumerate(zip(types, shape, strict=True)):
            fields.append((f"l{i}", ">i4"))
            if size == NULL:
                continue
            if sql_type in ARRAYS:
                element, _ = ARRAYS[sql_type]
                head = 5 if size > 1 else 3  # an empty array has no dimension
                fields.append((f"h{i}", ">i4", (head,)))
                if size > 1:
                    fields.append((f"v{i}", [("l", ">i4"), ("v", element)], (size - 1,)))
            else:
                fields.append((f"v{i}", SCALARS[sql_type]))
        dtype = _DTYPES[key] = np.dtype(fields)
    return dtype


def _encode_group(types: list[str], columns: Sequence[Column], shape: tuple[int, ...],
                  length: int) -> bytes:
    dtype = _dtype(types, shape)
    out = np.empty(length, dtype=dtype)
    out["n"] = len(types)
    with np.errstate(over="ignore", invalid="ignore"):  # a huge float4 is stored as inf
        for i, (sql_type, size, column) in enumerate(zip(types, shape, columns, strict=True)):
            if size == NULL:
                out[f"l{i}"] = -1
            elif sql_type in ARRAYS:
                _fill_array(out, i, sql_type, size - 1, column)
            elif sql_type == "timestamptz":
                out[f"l{i}"] = 8
                micros = (np.array(column, dtype=np.float64) - PG_EPOCH) * 1_000_000
                out[f"v{i}"] = np.rint(micros)
            else:
                out[f"l{i}"] = dtype[f"v{i}"].itemsize
                out[f"v{i}"] = column
    return out.tobytes()


def _fill_array(out: np.ndarray, i: int, sql_type: str, length: int, column: tuple) -> None:
    element, oid = ARRAYS[sql_type]
    item = np.dtype(element).itemsize
    if length:
        out[f"l{i}"] = 20 + length * (4 + item)
        out[f"h{i}"] = (1, 0, oid, length, 1)
        values = out[f"v{i}"]
        values["l"] = item
        values["v"] = column
    else:
        out[f"l{i}"] = 12
        out[f"h{i}"] = (0, 0, oid)
