"""A batch's rows per table as columns (ingest/tables.py): joined for one COPY per flush."""

from __future__ import annotations

from controlplane.telemetry.ingest import binary
from controlplane.telemetry.ingest.tables import WIDTH, TableColumns, concat
from controlplane.telemetry.schema import TABLES

PROC = TABLES["proc"]


def proc_rows(pid: int, count: int, with_threads: bool) -> list[tuple]:
    width = WIDTH[PROC.name]
    threads = [c.name for c in PROC.all_columns].index("threads")
    rows = []
    for i in range(count):
        row = [None] * width
        row[:3] = [1, pid + i, 1000.0 + i]  # host_id, pid, ts
        if with_threads:
            row[threads] = 10 + i
        rows.append(tuple(row))
    return rows


def test_joined_tables_hold_every_row_in_order_and_a_column_null_in_one_part_fills_in():
    first, second = proc_rows(100, 2, with_threads=False), proc_rows(200, 3, with_threads=True)
    parts = [TableColumns.from_rows(PROC.name, first), TableColumns.from_rows(PROC.name, second)]
    parts[0] = TableColumns(PROC.name, 2, tuple(None if all(v is None for v in c) else c
                                                 for c in parts[0].columns))

    joined = concat(parts)

    assert joined.length == 5 and joined.rows() == first + second
    assert list(joined.ts) == [1000.0, 1001.0, 1000.0, 1001.0, 1002.0]


def test_columns_encode_to_the_same_copy_data_as_their_rows():
    rows = proc_rows(100, 2, with_threads=False) + proc_rows(200, 3, with_threads=True)
    types = [c.sql_type for c in PROC.all_columns]
    table = TableColumns.from_rows(PROC.name, rows)
    columns = [None if all(v is None for v in c) else c for c in table.columns]

    assert binary.encode_columns(types, columns, len(rows)) == binary.encode(types, rows)
