"""The column-at-a-time COPY encoder (ingest/binary.py) stores exactly what psycopg's own
row-at-a-time binary COPY stores, for every sample table, with and without NULLs, arrays of
mixed and equal lengths, and empty arrays, in the order the rows came."""

from __future__ import annotations

import datetime as dt
import random

import psycopg
import pytest
from django.db import connection

from controlplane.telemetry.ingest import binary
from controlplane.telemetry.ingest.copy import _COLUMN_LISTS, _TYPES
from controlplane.telemetry.schema import TABLES

pytestmark = pytest.mark.django_db


def _value(sql_type: str, rng: random.Random):
    pick = {
        "timestamptz": lambda: 1.7e9 + rng.random() * 1e5,
        "int4": lambda: rng.randint(1, 2**31 - 1),
        "int2": lambda: rng.randint(0, 32767),
        "int8": lambda: rng.randint(-2**63, 2**63 - 1),
        "float4": lambda: rng.choice([rng.random() * 100, 42]),  # ints travel in float columns
        "float8": lambda: rng.random() * 1e9,
        "float4[]": lambda: [rng.random() * 100 for _ in range(rng.choice([0, 16, 16]))],
        "int4[]": lambda: [rng.randint(0, 2**31 - 1) for _ in range(rng.choice([23, 23, 5]))],
        "int2[]": lambda: [rng.randint(0, 32767) for _ in range(rng.choice([0, 4]))],
    }
    return pick[sql_type]()


def _rows(types: list[str], null_share: float, rng: random.Random, n: int = 40) -> list[tuple]:
    return [tuple(None if rng.random() < null_share else _value(t, rng) for t in types)
            for _ in range(n)]


def _as_psycopg(types: list[str], row: tuple) -> list:
    """The row psycopg's default dumpers take: timestamps as datetimes, rounded as ours are."""
    return [dt.datetime.fromtimestamp(round((v - binary.PG_EPOCH) * 1e6) / 1e6 + binary.PG_EPOCH,
                                      dt.UTC)
            if t == "timestamptz" and v is not None else v for t, v in zip(types, row, strict=True)]


@pytest.mark.parametrize("table", [t.name for t in TABLES.values()])
@pytest.mark.parametrize("null_share", [0.0, 0.3, 1.0])
def test_encoded_rows_store_what_psycopg_stores(table, null_share):
    rng = random.Random(f"{table}{null_share}")
    types = _TYPES[table]
    rows = _rows(types, null_share, rng)
    defs = ", ".join(f"{c.name} {c.sql_type}" for c in TABLES[_entity(table)].all_columns)
    dsn = connection.get_connection_params()
    with psycopg.connect(**{k: v for k, v in dsn.items() if k != "cursor_factory"}) as conn:
        for name in ("theirs", "ours"):
            conn.execute(f"CREATE TEMP TABLE {name} ({defs})")
        with conn.cursor() as cur:
            with cur.copy(f"COPY theirs ({_COLUMN_LISTS[table]}) FROM STDIN (FORMAT BINARY)") \
                    as copy:
                copy.set_types(types)
                for row in rows:
                    copy.write_row(_as_psycopg(types, row))
            with cur.copy(f"COPY ours ({_COLUMN_LISTS[table]}) FROM STDIN (FORMAT BINARY)") \
                    as copy:
                copy.write(binary.encode(types, rows))
            differ = cur.execute("SELECT count(*) FROM ((TABLE theirs EXCEPT ALL TABLE ours)"
                                 " UNION ALL (TABLE ours EXCEPT ALL TABLE theirs)) d").fetchone()
            stored = cur.execute("SELECT count(*) FROM ours").fetchone()
            # in the order they came (rows of mixed NULLs are encoded in runs, not regrouped)
            in_order = [cur.execute(f"SELECT * FROM {name} ORDER BY ctid").fetchall()
                        for name in ("theirs", "ours")]
    assert (differ[0], stored[0]) == (0, len(rows))
    assert in_order[0] == in_order[1]


def test_no_rows_is_a_valid_copy():
    assert binary.encode(["int4"], []) == binary.HEADER + binary.TRAILER


def _entity(table: str) -> str:
    return next(k for k, t in TABLES.items() if t.name == table)
