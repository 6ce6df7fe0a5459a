"""Storage layout of the samples, derived from the metric catalog.

One wide row per entity per timestamp, in tables partitioned by day. The primary key puts the
entity first, ``(gpu_id, ts)``: the cost is measured in BENCHMARKS.md ("primary key order") —
``(ts, gpu_id)`` loads faster, but every chart reads one entity's range, and with the entity
first that range is one contiguous stretch of the index instead of a walk over every GPU of
the fleet for the same time span. BRIN on ``ts`` serves the fleet-wide time scans.

Adding a metric to the catalog adds a column here; a migration that calls ``sync_schema``
adds it to the database (``ADD COLUMN IF NOT EXISTS``: old rows read NULL, i.e. absent).
"""

from __future__ import annotations

from dataclasses import dataclass

from agents.protocol import PROCESS_ATTRIBUTES, Entity, Metric, metrics_of

# Units whose values need no more than float4's 7 significant digits.
_FLOAT4_UNITS = {"%", "°C", "W", "MHz", "ratio", "count"}


@dataclass(frozen=True)
class Column:
    name: str
    sql_type: str
    metric: Metric | None = None
    part: str = ""  # for histograms: "layout", "counts" or "sum"


@dataclass(frozen=True)
class SampleTable:
    entity: Entity
    name: str
    keys: tuple[Column, ...]  # entity key columns, before ts
    columns: tuple[Column, ...]  # value columns, after ts

    @property
    def all_columns(self) -> tuple[Column, ...]:
        return (*self.keys, Column("ts", "timestamptz"), *self.columns)

    @property
    def primary_key(self) -> tuple[str, ...]:
        return (*(k.name for k in self.keys), "ts")


class FromRaw:
    """A table derived from a raw sample table (rollups, packed minutes): its entity and keys
    are the raw table's. Mixed into frozen dataclasses that have a ``raw`` field."""

    raw: SampleTable

    @property
    def entity(self) -> Entity:
        return self.raw.entity

    @property
    def keys(self) -> tuple[Column, ...]:
        return self.raw.keys

    @property
    def primary_key(self) -> tuple[str, ...]:
        return self.raw.primary_key


# The fleet table that places an entity keyed by an id of its own on its host.
OWNERS = {"gpu": ("fleet_gpu", "gpu_id"), "engine": ("fleet_engine", "engine_id")}


def host_rows_join(entity: Entity, rows: str, span: str) -> str:
    """JOINs from ``d`` (a row per ``host_id``) to ``rows`` (an entity's rows, alias ``t``)
    within ``span``: host and process rows carry their host id, GPUs and engines go through
    their fleet table."""
    owner = OWNERS.get(entity)
    if owner is None:
        return f"JOIN {rows} ON t.host_id = d.host_id AND {span}"
    owners, key = owner
    return f"JOIN {owners} e ON e.host_id = d.host_id JOIN {rows} ON t.{key} = e.id AND {span}"


def sql_type(metric: Metric) -> str:
    if metric.array:
        return "float4[]"
    if metric.integer:
        return "int8"
    return "float4" if metric.unit in _FLOAT4_UNITS else "float8"


def metric_columns(entity: Entity) -> tuple[Column, ...]:
    columns: list[Column] = []
    for metric in metrics_of(entity):
        if metric.kind == "histogram":
            columns += [
                Column(f"{metric.key}_layout", "int2", metric, "layout"),
                Column(f"{metric.key}_counts", "int4[]", metric, "counts"),
                Column(f"{metric.key}_sum", "float8", metric, "sum"),
            ]
        else:
            columns.append(Column(metric.key, sql_type(metric), metric))
    return tuple(columns)


TABLES: dict[Entity, SampleTable] = {
    "host": SampleTable(
        "host", "telemetry_host_sample", (Column("host_id", "int4"),), metric_columns("host")
    ),
    "gpu": SampleTable(
        "gpu", "telemetry_gpu_sample", (Column("gpu_id", "int4"),), metric_columns("gpu")
    ),
    "engine": SampleTable(
        "engine", "telemetry_engine_sample", (Column("engine_id", "int4"),),
        metric_columns("engine"),
    ),
    "proc": SampleTable(
        "proc",
        "telemetry_proc_sample",
        (Column("host_id", "int4"), Column("pid", "int4")),
        (
            Column("engine_id", "int4"),
            *metric_columns("proc"),
            *(Column(attr, "int2[]") for attr in PROCESS_ATTRIBUTES),
        ),
    ),
}


def column_for(metric: Metric) -> Column:
    """The storage column of a gauge or rate metric."""
    table = TABLES[metric.entity]
    return next(c for c in table.columns if c.metric == metric and not c.part)


def brin_sql(table_name: str) -> str:
    """BRIN on ts, summarising each block range as soon as the next one gets rows: without
    autosummarize the newest ranges stay unsummarised until a vacuum, and every scan of the
    last minutes (alert slices, live charts) reads them all."""
    return (f"CREATE INDEX IF NOT EXISTS {table_name}_ts_brin ON {table_name} "
            f"USING brin (ts) WITH (autosummarize = on)")


def create_table_sql(table: SampleTable) -> list[str]:
    cols = ",\n  ".join(
        f"{c.name} {c.sql_type}{' NOT NULL' if c.name in table.primary_key else ''}"
        for c in table.all_columns
    )
    pk = ", ".join(table.primary_key)
    return [
        f"CREATE TABLE IF NOT EXISTS {table.name} (\n  {cols},\n  PRIMARY KEY ({pk})\n)"
        " PARTITION BY RANGE (ts)",
        brin_sql(table.name),
        *(
            f"ALTER TABLE {table.name} ADD COLUMN IF NOT EXISTS {c.name} {c.sql_type}"
            for c in table.columns
        ),
    ]


def schema_sql() -> list[str]:
    return [stmt for table in TABLES.values() for stmt in create_table_sql(table)]
