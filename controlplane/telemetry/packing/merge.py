"""The statement that packs raw rows into packed minutes, merging with minutes packed before.

One ``INSERT … SELECT`` per table and scope: the scope's raw rows (``src``), the packed rows
of the same entities and minutes taken out (``DELETE … RETURNING``) and unnested, both
together with one row per (entity, ts) — a row already packed wins over a raw copy of it, as
the raw table's primary key would have refused the copy — then grouped per entity and minute
into arrays ordered by ts. Running it twice packs the same minutes: the second run merges the
raw rows with their own packed copies and keeps one of each.
"""

from __future__ import annotations

from controlplane.telemetry.packing.read import unpacked_sql
from controlplane.telemetry.packing.schema import PackedTable, is_array
from controlplane.telemetry.schema import host_rows_join

EPOCH = "TIMESTAMPTZ '2000-01-01 00:00:00+00'"
MINUTE = f"date_bin(interval '1 minute', ts, {EPOCH})"


def _aggregates(table: PackedTable) -> list[str]:
    offs = ("array_agg(((extract(epoch FROM ts) - extract(epoch FROM m)) * 1000000)::int4 "
            "ORDER BY ts)")
    out = [offs]
    for c in table.raw.columns:
        present = f"count({c.name}) > 0"
        if is_array(c):
            flat = f"coalesce(telemetry_array_cat({c.name} ORDER BY ts), '{{}}')"
            out += [f"CASE WHEN {present} THEN {flat} END",
                    f"CASE WHEN {present} THEN array_agg(cardinality({c.name}) ORDER BY ts) END"]
        else:  # a column no row of the minute had is one NULL, not sixty
            out.append(f"CASE WHEN {present} THEN array_agg({c.name} ORDER BY ts) END")
    return out


def merge_sql(table: PackedTable, src_sql: str) -> str:
    """Pack the rows ``src_sql`` selects (the raw table's columns, in its order)."""
    keys = [k.name for k in table.keys]
    k = ", ".join(keys)
    match = " AND ".join(f"p.{x} = m.{x}" for x in keys)
    old = unpacked_sql(table, "old", list(table.raw.columns), "TRUE")
    stored = ", ".join(n for n, _ in table.value_columns)
    return (
        f"WITH src AS ({src_sql}), "
        f"minutes AS (SELECT DISTINCT {k}, {MINUTE} AS m FROM src), "
        f"old AS (DELETE FROM {table.name} p USING minutes m WHERE {match} AND p.ts = m.m "
        f"RETURNING p.*), "
        f"merged AS (SELECT DISTINCT ON ({k}, ts) * FROM ("
        f"SELECT 0 AS o, a.* FROM ({old}) a UNION ALL SELECT 1 AS o, src.* FROM src) r "
        f"ORDER BY {k}, ts, o) "
        f"INSERT INTO {table.name} ({k}, ts, n, offs, {stored}) "
        f"SELECT {k}, m, count(*)::int2, {', '.join(_aggregates(table))} "
        f"FROM (SELECT merged.*, {MINUTE} AS m FROM merged) x GROUP BY {k}, m")


def raw_columns(table: PackedTable, alias: str = "t") -> str:
    return ", ".join(f"{alias}.{c}" for c in (*table.primary_key[:-1], "ts",
                                              *(c.name for c in table.raw.columns)))


def range_src(table: PackedTable, child: str) -> str:
    """The rows of a raw partition in ``%(lo)s <= ts < %(hi)s``."""
    return (f"SELECT {raw_columns(table)} FROM {child} t "
            "WHERE t.ts >= %(lo)s AND t.ts < %(hi)s")


# The fleet table naming the host of each entity that has no host_id column of its own.
def marked_src(table: PackedTable, child: str) -> str:
    """The rows of a raw partition of the hosts' entities in the minutes marked:
    (``%(hosts)s[i]``, ``%(minutes)s[i]``) pairs."""
    pairs = "unnest(%(hosts)s::int4[], %(minutes)s::timestamptz[]) AS d(host_id, minute)"
    span = "t.ts >= d.minute AND t.ts < d.minute + interval '1 minute'"
    joins = host_rows_join(table.entity, f"{child} t", span)
    return f"SELECT {raw_columns(table)} FROM {pairs} {joins}"
