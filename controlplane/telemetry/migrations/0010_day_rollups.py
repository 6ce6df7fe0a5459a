"""The 1-day rollup tables (rollups/schema.py's "1d" tier, built from the 1-hour tier): the
statements of 0008, idempotent, create what the schema gained."""

from django.db import migrations

from controlplane.telemetry.migrations import sync_columns


class Migration(migrations.Migration):

    dependencies = [
        ("telemetry", "0009_prefill_time_and_cpu_wait"),
    ]

    operations = [
        migrations.RunPython(sync_columns, migrations.RunPython.noop),
    ]
