"""The raw tables' BRIN indexes on ts summarise new block ranges as they fill (schema.brin_sql).

An index's storage parameters are not inherited by partitions created before it, and a
partitioned index cannot be altered: the index is dropped and created again, which builds it on
every partition (a sequential read of each; BRIN builds are cheap, but on a large history this
migration takes a while).
"""

from django.db import migrations


def recreate(apps, schema_editor):
    from controlplane.telemetry.schema import TABLES, brin_sql

    with schema_editor.connection.cursor() as cursor:
        for table in TABLES.values():
            cursor.execute(f"DROP INDEX IF EXISTS {table.name}_ts_brin")
            cursor.execute(brin_sql(table.name))


class Migration(migrations.Migration):

    dependencies = [
        ("telemetry", "0004_rollups"),
    ]

    operations = [
        migrations.RunPython(recreate, migrations.RunPython.noop),
    ]
