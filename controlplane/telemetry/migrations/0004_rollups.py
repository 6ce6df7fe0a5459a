"""Rollup bookkeeping (watermarks, dirty buckets) and the partitioned rollup tables, generated
from the metric catalog (rollups/schema.py)."""

from django.db import migrations, models
from django.utils import timezone


def create_rollup_tables(apps, schema_editor):
    from controlplane.telemetry import maintenance
    from controlplane.telemetry.rollups.schema import schema_sql

    with schema_editor.connection.cursor() as cursor:
        for stmt in schema_sql():
            cursor.execute(stmt)
        maintenance.ensure_rollup_partitions(cursor, timezone.now().date(), behind=1, ahead=3)


def drop_rollup_tables(apps, schema_editor):
    from controlplane.telemetry.rollups.schema import all_tables

    with schema_editor.connection.cursor() as cursor:
        for table in all_tables():
            cursor.execute(f"DROP TABLE IF EXISTS {table.name} CASCADE")


class Migration(migrations.Migration):

    dependencies = [
        ('telemetry', '0003_claim_function'),
    ]

    operations = [
        migrations.CreateModel(
            name='RollupDirty',
            fields=[
                ('pk', models.CompositePrimaryKey('resolution', 'host_id', 'bucket', blank=True, editable=False, primary_key=True, serialize=False)),
                ('resolution', models.CharField(max_length=8)),
                ('host_id', models.IntegerField()),
                ('bucket', models.DateTimeField()),
            ],
        ),
        migrations.CreateModel(
            name='RollupWatermark',
            fields=[
                ('resolution', models.CharField(max_length=8, primary_key=True, serialize=False)),
                ('upto', models.DateTimeField()),
            ],
        ),
        migrations.RunPython(create_rollup_tables, drop_rollup_tables),
    ]
