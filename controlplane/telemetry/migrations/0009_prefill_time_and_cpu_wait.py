"""The columns of two signals the catalog gained: the prefill-time histogram
(``engine.prefill_seconds``: with the queue-time one, where a request's time to first token
went) and ``proc.cpu_wait_pct`` (the run-queue wait of the vLLM processes). The statements
are those of 0008: idempotent, they add what the catalog gained."""

from django.db import migrations

from controlplane.telemetry.migrations import sync_columns


class Migration(migrations.Migration):

    dependencies = [
        ("telemetry", "0008_issue19_signals"),
    ]

    operations = [
        migrations.RunPython(sync_columns, migrations.RunPython.noop),
    ]
