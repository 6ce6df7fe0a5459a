"""The columns of the signals the catalog gained (finished and waiting requests by
reason, speculative decoding, LoRA, batch size and length histograms; GPU energy, NVLink,
single-bit ECC, remapped rows, PCIe replays): each schema's statements are idempotent
(``ADD COLUMN IF NOT EXISTS``), so running them adds what the catalog gained."""

from django.db import migrations

from controlplane.telemetry.migrations import sync_columns


class Migration(migrations.Migration):

    dependencies = [
        ("telemetry", "0007_packing"),
    ]

    operations = [
        migrations.RunPython(sync_columns, migrations.RunPython.noop),
    ]
