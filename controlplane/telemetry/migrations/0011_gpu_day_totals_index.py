"""An index of the GPUs' 1-day rollups holding the columns the efficiency report sums from
them (efficiency/reads.py, GPU_DAY_TOTALS_INDEX): the whole days of a fleet-wide report read
from the index alone. Built on every partition of the 1-day tier, which holds 24 times fewer
rows than the hours it is built from: a short build.
"""

from django.db import migrations


def create(apps, schema_editor):
    from controlplane.telemetry.efficiency.reads import gpu_day_totals_index_sql

    with schema_editor.connection.cursor() as cursor:
        cursor.execute(gpu_day_totals_index_sql())


def drop(apps, schema_editor):
    from controlplane.telemetry.efficiency.reads import GPU_DAY_TOTALS_INDEX

    with schema_editor.connection.cursor() as cursor:
        cursor.execute(f"DROP INDEX IF EXISTS {GPU_DAY_TOTALS_INDEX}")


class Migration(migrations.Migration):

    dependencies = [
        ("telemetry", "0010_day_rollups"),
    ]

    operations = [
        migrations.RunPython(create, drop),
    ]
