"""The partitioned sample tables, generated from the metric catalog (schema.py)."""

from django.db import migrations
from django.utils import timezone


def create_sample_tables(apps, schema_editor):
    from controlplane.telemetry import partitions
    from controlplane.telemetry.schema import schema_sql

    with schema_editor.connection.cursor() as cursor:
        for stmt in schema_sql():
            cursor.execute(stmt)
        partitions.ensure(cursor, partitions.days_around(timezone.now().date(), 1, 3))


def drop_sample_tables(apps, schema_editor):
    from controlplane.telemetry.schema import TABLES

    with schema_editor.connection.cursor() as cursor:
        for table in TABLES.values():
            cursor.execute(f"DROP TABLE IF EXISTS {table.name} CASCADE")


class Migration(migrations.Migration):
    dependencies = [("telemetry", "0001_initial")]
    operations = [migrations.RunPython(create_sample_tables, drop_sample_tables)]
