"""The telemetry schema's migrations. The sample, rollup and packed tables are generated from
the metric catalog; a migration for metrics the catalog gained runs ``sync_columns``."""


def sync_columns(apps, schema_editor) -> None:
    """Every table's statements, each idempotent (``CREATE ... IF NOT EXISTS``, ``ADD COLUMN
    IF NOT EXISTS``): run again, they add the columns of the metrics the catalog gained."""
    from controlplane.telemetry.packing.schema import schema_sql as packed
    from controlplane.telemetry.rollups.schema import schema_sql as rollups
    from controlplane.telemetry.schema import schema_sql as raw

    with schema_editor.connection.cursor() as cursor:
        for stmt in (*raw(), *rollups(), *packed()):
            cursor.execute(stmt)
