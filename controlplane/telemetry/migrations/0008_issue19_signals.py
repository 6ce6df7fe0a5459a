"""The columns of the signals the catalog gained (finished and waiting requests by
reason, speculative decoding, LoRA, batch size and length histograms; GPU energy, NVLink,
single-bit ECC, remapped rows, PCIe replays): each schema's statements are idempotent
(``ADD COLUMN IF NOT EXISTS``), so running them adds what the catalog gained."""

from django.db import migrations


def sync_columns(apps, schema_editor):
    from controlplane.telemetry.packing.schema import schema_sql as packed
    from controlplane.telemetry.rollups.schema import schema_sql as rollups
    from controlplane.telemetry.schema import schema_sql as raw

    with schema_editor.connection.cursor() as cursor:
        for stmt in (*raw(), *rollups(), *packed()):
            cursor.execute(stmt)


class Migration(migrations.Migration):

    dependencies = [
        ("telemetry", "0007_packing"),
    ]

    operations = [
        migrations.RunPython(sync_columns, migrations.RunPython.noop),
    ]
