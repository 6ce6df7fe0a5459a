"""The slice tables partitioned by evaluation shard (alerts/shards.py): dropped and created
again. They hold derived rows only; the next evaluation cycle rebuilds its windows."""

from django.db import migrations


def recreate_slice_tables(apps, schema_editor):
    from controlplane.alerts.windows.schema import all_names, schema_sql

    with schema_editor.connection.cursor() as cursor:
        for name in all_names():
            cursor.execute(f"DROP TABLE IF EXISTS {name}")
        for stmt in schema_sql():
            cursor.execute(stmt)


class Migration(migrations.Migration):

    dependencies = [
        ("alerts", "0003_slices"),
    ]

    operations = [
        migrations.RunPython(recreate_slice_tables, migrations.RunPython.noop),
    ]
