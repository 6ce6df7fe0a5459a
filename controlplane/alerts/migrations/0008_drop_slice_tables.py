"""The evaluator keeps its slices in memory now (controlplane/alerts/windows/store.py): the
slice tables go, and the watermarks of the old shards with them. Derived rows only: the next
cycle rebuilds its windows from raw rows."""

from django.db import migrations

OLD_TABLES = ("alerts_slice_host", "alerts_slice_gpu", "alerts_slice_engine", "alerts_slice_proc")


def drop_slice_tables(apps, schema_editor):
    with schema_editor.connection.cursor() as cursor:
        for name in OLD_TABLES:
            cursor.execute(f"DROP TABLE IF EXISTS {name} CASCADE")
        cursor.execute("TRUNCATE alerts_slice_state")


class Migration(migrations.Migration):

    dependencies = [
        ("alerts", "0007_rule_errors"),
    ]

    operations = [
        migrations.RunPython(drop_slice_tables, migrations.RunPython.noop),
    ]
