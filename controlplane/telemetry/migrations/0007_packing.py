"""Packed raw history (packing/schema.py): the packed tables, their concatenating aggregate,
and the packing job's bookkeeping (PackProgress, PackDirty)."""

from django.db import migrations, models


def create_packed_tables(apps, schema_editor):
    from controlplane.telemetry.packing.schema import schema_sql

    with schema_editor.connection.cursor() as cursor:
        for stmt in schema_sql():
            cursor.execute(stmt)


def drop_packed_tables(apps, schema_editor):
    from controlplane.telemetry.packing.schema import TABLES

    with schema_editor.connection.cursor() as cursor:
        for table in TABLES.values():
            cursor.execute(f"DROP TABLE IF EXISTS {table.name} CASCADE")
        cursor.execute("DROP AGGREGATE IF EXISTS telemetry_array_cat(anycompatiblearray)")


class Migration(migrations.Migration):

    dependencies = [
        ("telemetry", "0006_host_histogram_layout"),
    ]

    operations = [
        migrations.CreateModel(
            name="PackDirty",
            fields=[
                ("pk", models.CompositePrimaryKey("host_id", "bucket", blank=True, editable=False, primary_key=True, serialize=False)),
                ("host_id", models.IntegerField()),
                ("bucket", models.DateTimeField()),
            ],
        ),
        migrations.CreateModel(
            name="PackProgress",
            fields=[
                ("pk", models.CompositePrimaryKey("table_name", "day", blank=True, editable=False, primary_key=True, serialize=False)),
                ("table_name", models.CharField(max_length=63)),
                ("day", models.DateField()),
                ("upto", models.DateTimeField()),
                ("sealed", models.BooleanField(default=False)),
            ],
        ),
        migrations.RunPython(create_packed_tables, drop_packed_tables),
    ]
