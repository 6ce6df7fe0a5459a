"""Reading raw rows wherever they are: the raw table, the packed table, or both.

``source`` gives a FROM item shaped like the raw table (the entity keys, ``ts``, the columns
asked for) over a time range: the raw rows ``UNION ALL`` the packed minutes unnested back
into rows, so a reader's SQL stays what it was with ``{source} t`` for ``{raw table} t``. A
packed minute becomes its rows with ``unnest(offs, col, …)`` (one pass over each array); a flat
array column is sliced back per row by the running sum of its lengths.

Packed rows exist only for days that ended ``PACK_AFTER_S`` ago (job.py); a range that starts
after ``read_horizon`` reads the raw table alone, as before packing existed.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime, timedelta

from django.conf import settings
from django.db import connection
from django.utils import timezone

from controlplane.telemetry.packing.schema import TABLES, PackedTable, is_array
from controlplane.telemetry.schema import TABLES as RAW_TABLES
from controlplane.telemetry.schema import Column

MICROSECOND = "interval '1 microsecond'"


def midnight_before(ts: datetime) -> datetime:
    day = ts.astimezone(UTC).date()
    return datetime(day.year, day.month, day.day, tzinfo=UTC)


def seal_horizon(now: datetime) -> datetime:
    """Days before this midnight are sealed: their raw rows may be packed (job.py)."""
    return midnight_before(now - timedelta(seconds=settings.PITWALL["PACK_AFTER_S"]))


def read_horizon(now: datetime | None = None) -> datetime:
    """No packed row is at or after this instant, with half ``PACK_AFTER_S`` to spare for
    clock skew between the packing worker and this process; ingest marks samples older than
    it for the packing job (rollups/late.py)."""
    now = now or timezone.now()
    return midnight_before(now - timedelta(seconds=settings.PITWALL["PACK_AFTER_S"] / 2))


def columns_of(entity: str, names: Iterable[str] | None = None) -> list[Column]:
    raw = RAW_TABLES[entity]
    if names is None:
        return list(raw.columns)
    wanted = set(names)
    return [c for c in raw.columns if c.name in wanted]


def unpacked_sql(table: PackedTable, relation: str, columns: list[Column], where: str) -> str:
    """``SELECT keys, ts, columns`` of the packed rows of ``relation`` (aliased p) that match
    ``where``, one row per sample, in the raw table's types."""
    scalars = [c for c in columns if not is_array(c)]
    arrays = [c for c in columns if is_array(c)]
    names = ["toff", *(c.name for c in scalars), *(f"{c.name}_len" for c in arrays)]
    args = ", ".join(f"p.{n}" for n in ["offs", *names[1:]])
    keys = [f"p.{k.name}" for k in table.keys]
    # In the raw table's column order: the raw arm of a UNION ALL matches by position.
    values = [(f"CASE WHEN u.{c.name}_len IS NOT NULL THEN "
               f"p.{c.name}[u.{c.name}_end - u.{c.name}_len + 1 : u.{c.name}_end] "
               f"END AS {c.name}") if is_array(c) else f"u.{c.name}" for c in columns]
    if arrays:
        ends = ", ".join(f"sum(r.{c.name}_len) OVER (ORDER BY r.i) AS {c.name}_end"
                         for c in arrays)
        lateral = (f"CROSS JOIN LATERAL (SELECT r.*, {ends} FROM unnest({args}) "
                   f"WITH ORDINALITY AS r({', '.join(names)}, i)) u")
    else:
        lateral = f"CROSS JOIN LATERAL unnest({args}) AS u({', '.join(names)})"
    ts = f"p.ts + u.toff * {MICROSECOND} AS ts"
    return f"SELECT {', '.join([*keys, ts, *values])} FROM {relation} p {lateral} WHERE {where}"


def source_sql(entity: str, lo: str, hi: str, names: Iterable[str] | None = None,
               packed: bool = True, alias: str = "t") -> str:
    """A FROM item: the raw-shaped rows of ``entity`` with ``lo <= ts < hi`` (SQL
    expressions, placeholders usually), with the columns ``names`` (all when None), from the
    raw table and, when ``packed``, the packed one."""
    raw = RAW_TABLES[entity]
    columns = columns_of(entity, names)
    head = [*(k.name for k in raw.keys), "ts", *(c.name for c in columns)]
    raw_sql = f"SELECT {', '.join(head)} FROM {raw.name} WHERE ts >= {lo} AND ts < {hi}"
    if not packed:
        return f"({raw_sql}) {alias}"
    # A packed minute starting up to a minute before lo holds rows at or after lo.
    unpacked = unpacked_sql(TABLES[entity], TABLES[entity].name, columns,
                            f"p.ts > {lo} - interval '1 minute' AND p.ts < {hi}")
    return f"({raw_sql} UNION ALL {unpacked}) {alias}"


def source(entity: str, lo: datetime, hi: datetime, names: Iterable[str] | None = None,
           alias: str = "t") -> tuple[str, list]:
    """(FROM item, params) of ``source_sql`` with ``%s`` placeholders; the packed table is
    read only when the range starts before the read horizon."""
    packed = lo < read_horizon()
    sql = source_sql(entity, "%s", "%s", names, packed, alias)
    return sql, ([lo, hi, lo, hi] if packed else [lo, hi])


def packed_lower_bound(entity: str, column: str, keys: list[tuple[int, ...]], lo: datetime,
                       hi: datetime) -> dict[tuple[int, ...], int]:
    """Per entity, the values of ``column`` its packed minutes wholly inside ``[lo, hi)``
    hold: at least that many rows of the range have it. One array a minute is read, none
    unnested."""
    if lo >= read_horizon() or not keys:
        return {}
    table = TABLES[entity]
    raw = next(c for c in table.raw.columns if c.name == column)
    counted = f"{column}_len" if is_array(raw) else column  # a flat column: its rows' lengths
    cols = [k.name for k in table.keys]
    match = " AND ".join(f"{c} = ANY(%s)" for c in cols)
    params = [sorted({key[i] for key in keys}) for i in range(len(cols))]
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT {', '.join(cols)}, sum(cardinality(array_remove({counted}, NULL))) "
            f"FROM {table.name} WHERE {match} AND ts >= %s AND ts <= %s - interval '1 minute' "
            f"GROUP BY {', '.join(cols)}", [*params, lo, hi])
        return {tuple(row[:-1]): int(row[-1] or 0) for row in cursor.fetchall()}


def any_row_sql(entity: str, where: str) -> str:
    """``SELECT 1`` if a raw or a packed row matches ``where`` (over the key columns only)."""
    return (f"SELECT EXISTS (SELECT 1 FROM {RAW_TABLES[entity].name} WHERE {where}) "
            f"OR EXISTS (SELECT 1 FROM {TABLES[entity].name} WHERE {where})")
