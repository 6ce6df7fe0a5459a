"""Rollup tables at 1 minute, 1 hour and 1 day, derived from the raw sample tables (schema.py):
each tier from the one below it.

One row per entity per bucket, ``ts`` the bucket's start, ``n`` the raw rows it summarises.
Per gauge or rate metric ``<key>_min``, ``_max``, ``_avg`` and ``_last`` (the last value seen
in the bucket), element by element for array metrics. A bitmask keeps ``_min`` (bits set the
whole bucket, bit_and), ``_max`` (bits set at any time, bit_or) and ``_last``; an error code
``_min``, ``_max`` and ``_last``: an average of either means nothing. Histograms keep their
three columns, summed: ``<key>_counts`` per bucket (int8 at 1 h), ``<key>_sum``, and the
``<key>_layout`` they are counted in. The process table keeps the last ``engine_id``; its
affinity lists are attributes, not series, and stay in the raw table only.

Adding a metric to the catalog adds its columns here too: the migration that runs the raw
tables' ``schema_sql`` (``ADD COLUMN IF NOT EXISTS``) runs this module's ``schema_sql`` too.
"""

from __future__ import annotations

from dataclasses import dataclass

from agents.protocol import Entity, Metric
from controlplane.telemetry.partitions import Period
from controlplane.telemetry.schema import TABLES as RAW_TABLES
from controlplane.telemetry.schema import Column, FromRaw, SampleTable


@dataclass(frozen=True)
class Tier:
    name: str  # "1m", "1h", "1d": what the readers report as their resolution
    seconds: int  # bucket width
    period: Period  # partitions: one per day or per month
    source: str  # the tier it is built from: "raw" or a finer tier's name
    retention_setting: str  # the PITWALL key holding its retention in days


TIERS: dict[str, Tier] = {
    "1m": Tier("1m", 60, "day", "raw", "ROLLUP_1M_RETENTION_DAYS"),
    "1h": Tier("1h", 3600, "month", "1m", "ROLLUP_1H_RETENTION_DAYS"),
    # Whole-day totals for long ranges (the efficiency report's 30 days read ~30 rows per
    # entity, not ~720); kept as long as the hours they are built from.
    "1d": Tier("1d", 86400, "month", "1h", "ROLLUP_1H_RETENTION_DAYS"),
}


@dataclass(frozen=True)
class RollupColumn:
    name: str
    sql_type: str
    source: Column  # the raw column it summarises
    stat: str  # min, max, avg, last; for histograms layout, counts, sum

    @property
    def metric(self) -> Metric | None:
        return self.source.metric


@dataclass(frozen=True)
class RollupTable(FromRaw):
    tier: Tier
    raw: SampleTable
    name: str
    columns: tuple[RollupColumn, ...]  # value columns, after ts and n

    @property
    def all_columns(self) -> tuple[Column | RollupColumn, ...]:
        return (*self.keys, Column("ts", "timestamptz"), Column("n", "int4"), *self.columns)

    def column(self, metric: Metric, stat: str) -> RollupColumn:
        return next(c for c in self.columns if c.metric == metric and c.stat == stat)


def stats_of(metric: Metric) -> tuple[str, ...]:
    """The statistics kept for a gauge or rate metric."""
    if metric.unit in ("bitmask", "code"):
        return ("min", "max", "last")
    return ("min", "max", "avg", "last")


def _avg_type(sql_type: str) -> str:
    return sql_type if sql_type.startswith("float4") else "float8"


def _columns_for(column: Column, tier: Tier) -> list[RollupColumn]:
    metric = column.metric
    if metric is None:  # engine_id of a process: the engine it served last
        return [RollupColumn(column.name, column.sql_type, column, "last")]
    if column.part:
        sql_type = "int8[]" if column.part == "counts" and tier.name != "1m" else column.sql_type
        return [RollupColumn(column.name, sql_type, column, column.part)]
    return [RollupColumn(f"{column.name}_{stat}",
                         _avg_type(column.sql_type) if stat == "avg" else column.sql_type,
                         column, stat) for stat in stats_of(metric)]


def _kept(column: Column) -> bool:
    return column.metric is not None or column.name == "engine_id"


def rollup_table(raw: SampleTable, tier: Tier) -> RollupTable:
    name = raw.name.removesuffix("_sample") + f"_{tier.name}"
    columns = [rc for c in raw.columns if _kept(c) for rc in _columns_for(c, tier)]
    return RollupTable(tier, raw, name, tuple(columns))


TABLES: dict[str, dict[Entity, RollupTable]] = {
    tier.name: {entity: rollup_table(raw, tier) for entity, raw in RAW_TABLES.items()}
    for tier in TIERS.values()
}


def all_tables() -> list[RollupTable]:
    return [table for tier in TABLES.values() for table in tier.values()]


def create_table_sql(table: RollupTable) -> list[str]:
    cols = ",\n  ".join(
        f"{c.name} {c.sql_type}{' NOT NULL' if c.name in (*table.primary_key, 'n') else ''}"
        for c in table.all_columns)
    pk = ", ".join(table.primary_key)
    return [
        f"CREATE TABLE IF NOT EXISTS {table.name} (\n  {cols},\n  PRIMARY KEY ({pk})\n)"
        " PARTITION BY RANGE (ts)",
        # The rollup task reads the finer tier by time across all entities (1 h from 1 min).
        f"CREATE INDEX IF NOT EXISTS {table.name}_ts_brin ON {table.name} USING brin (ts)",
        *(f"ALTER TABLE {table.name} ADD COLUMN IF NOT EXISTS {c.name} {c.sql_type}"
          for c in table.columns),
    ]


def schema_sql() -> list[str]:
    return [stmt for table in all_tables() for stmt in create_table_sql(table)]
