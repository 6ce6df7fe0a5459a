"""The slice tables rule windows read (controlplane/alerts/windows/schema.py), generated from
the metric catalog."""

from django.db import migrations


def create_slice_tables(apps, schema_editor):
    from controlplane.alerts.windows.schema import schema_sql

    with schema_editor.connection.cursor() as cursor:
        for stmt in schema_sql():
            cursor.execute(stmt)


def drop_slice_tables(apps, schema_editor):
    from controlplane.alerts.windows.schema import all_names

    with schema_editor.connection.cursor() as cursor:
        for name in all_names():
            cursor.execute(f"DROP TABLE IF EXISTS {name}")


class Migration(migrations.Migration):

    dependencies = [
        ("alerts", "0002_delivery"),
        ("telemetry", "0004_rollups"),
    ]

    operations = [
        migrations.RunPython(create_slice_tables, drop_slice_tables),
    ]
