"""Small SQL pieces the series readers share."""

from __future__ import annotations

from django.db import connection

from controlplane.telemetry.schema import SampleTable

EPOCH_OF = "extract(epoch FROM {})::float8"
# float4 goes through text, where PostgreSQL writes its shortest exact form: 33.3, where a
# plain cast to float8 would give 33.29999923706055.
_VIA_TEXT = {"float4": "::text::float8", "float4[]": "::text::float8[]"}


def fetch(sql: str, params) -> list[tuple]:
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return cursor.fetchall()


def shortest(expr: str, sql_type: str) -> str:
    """``expr`` of type ``sql_type`` as the float8 a reader expects, float4 in its short form."""
    suffix = _VIA_TEXT.get(sql_type, "")
    return f"({expr}){suffix}" if suffix else expr


def key_filter(table: SampleTable, keys: list[tuple[int, ...]], alias: str = "t"):
    """(SQL, params) matching these entities; one ``= ANY`` per key column, so the primary
    key index serves it. Multi-column keys over-match across pairs: callers drop the extra
    rows by their keys."""
    cols = [k.name for k in table.keys]
    sql = " AND ".join(f"{alias}.{c} = ANY(%s)" for c in cols)
    return sql, [sorted({key[i] for key in keys}) for i in range(len(cols))]


def per_entity(table: SampleTable, keys: list[tuple[int, ...]]):
    """(FROM item, join condition, params): one row per entity, for a LATERAL read of each."""
    cols = [k.name for k in table.keys]
    arrays = ", ".join("%s::int4[]" for _ in cols)
    match = " AND ".join(f"t.{c} = e.{c}" for c in cols)
    params = [[key[i] for key in keys] for i in range(len(cols))]
    return f"unnest({arrays}) AS e({', '.join(cols)})", match, params


def positions(count: int) -> str:
    """``1, 2, …, count``: GROUP BY / ORDER BY the leading output columns."""
    return ", ".join(str(i) for i in range(1, count + 1))


def by_entity(rows: list[tuple], width: int, wanted: set) -> dict[tuple, list[tuple]]:
    """Rows that start with ``width`` key values, grouped by them (rows of unwanted keys,
    which a multi-column ``key_filter`` lets through, are dropped)."""
    out: dict[tuple, list[tuple]] = {}
    for row in rows:
        key = tuple(row[:width])
        if key in wanted:
            out.setdefault(key, []).append(row[width:])
    return out
