"""Packed raw history: one row per entity and minute, one array per column, lz4-compressed.

A raw table (schema.py) stores one row per entity per second, about 11.5 bytes a value: a
tuple header and a primary-key entry per row, and 8 bytes for every integer. Once a day's raw
rows have settled (packing/job.py), they move to ``<entity>_packed``: per entity and minute,
``offs`` holds each row's microseconds after the minute (exact timestamps), and each column
becomes an array of the column's own type, in ``offs`` order, NULL elements where a row lacked
the value, and NULL as a whole where no row of the minute had it. A column that is an array
already (``host.cpu_core_pct``, histogram counts, process affinity) is stored flat, the rows'
arrays one after another, with ``<name>_len`` giving each row's length (NULL: the row had none).

Storage: the arrays are ``STORAGE MAIN`` with ``COMPRESSION lz4``, and each partition has
``toast_tuple_target = 128``: PostgreSQL compresses a row's values only when the row is over
about 2 KB, then the largest first until the row is under the target, so a low target has
every array of a full minute compressed, and MAIN keeps them in the row (out of line, in the
TOAST table, only when the compressed row still exceeds a page). NVML's values are integers
that change slowly or repeat, which lz4 finds; pure noise does not compress (docs/history.md).

Adding a metric adds its array here too: the migration that runs the raw tables'
``schema_sql`` must run this module's ``schema_sql`` as well.
"""

from __future__ import annotations

from dataclasses import dataclass

from agents.protocol import Entity
from controlplane.telemetry.schema import TABLES as RAW_TABLES
from controlplane.telemetry.schema import Column, FromRaw, SampleTable

# Partition storage parameter: compress every array of a row over TOAST's 2 KB threshold.
PARTITION_OPTIONS = "toast_tuple_target = 128"

# Concatenates the rows' arrays of a flat column (NULL rows add nothing).
ARRAY_CAT_SQL = """
CREATE OR REPLACE AGGREGATE telemetry_array_cat(anycompatiblearray) (
    SFUNC = array_cat, STYPE = anycompatiblearray)
"""


def is_array(column: Column) -> bool:
    return column.sql_type.endswith("[]")


@dataclass(frozen=True)
class PackedTable(FromRaw):
    raw: SampleTable
    name: str

    def stored(self, column: Column) -> list[tuple[str, str]]:
        """(name, type) of the packed columns holding one raw column."""
        if is_array(column):
            return [(column.name, column.sql_type), (f"{column.name}_len", "int4[]")]
        return [(column.name, f"{column.sql_type}[]")]

    @property
    def value_columns(self) -> list[tuple[str, str]]:
        return [nt for c in self.raw.columns for nt in self.stored(c)]


def packed_table(raw: SampleTable) -> PackedTable:
    return PackedTable(raw, raw.name.removesuffix("_sample") + "_packed")


TABLES: dict[Entity, PackedTable] = {e: packed_table(raw) for e, raw in RAW_TABLES.items()}
NAMES = frozenset(t.name for t in TABLES.values())


def create_table_sql(table: PackedTable) -> list[str]:
    keys = [f"{k.name} {k.sql_type} NOT NULL" for k in table.keys]
    heads = [*keys, "ts timestamptz NOT NULL", "n int2 NOT NULL", "offs int4[] NOT NULL"]
    cols = ",\n  ".join([*heads, *(f"{n} {t} COMPRESSION lz4" for n, t in table.value_columns)])
    arrays = ["offs", *(n for n, _ in table.value_columns)]
    return [
        f"CREATE TABLE IF NOT EXISTS {table.name} (\n  {cols},\n"
        f"  PRIMARY KEY ({', '.join(table.primary_key)})\n) PARTITION BY RANGE (ts)",
        # The packing job and the rollups read a time range across all entities.
        f"CREATE INDEX IF NOT EXISTS {table.name}_ts_brin ON {table.name} USING brin (ts)",
        *(f"ALTER TABLE {table.name} ADD COLUMN IF NOT EXISTS {n} {t} COMPRESSION lz4"
          for n, t in table.value_columns),
        # Partitions created later inherit both (PostgreSQL 15 has no STORAGE in CREATE TABLE).
        *(f"ALTER TABLE {table.name} ALTER COLUMN {n} SET STORAGE MAIN, "
          f"ALTER COLUMN {n} SET COMPRESSION lz4" for n in arrays),
    ]


def schema_sql() -> list[str]:
    return [ARRAY_CAT_SQL, *(s for t in TABLES.values() for s in create_table_sql(t))]
