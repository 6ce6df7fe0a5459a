"""The named kind ``service_disrupted`` (choices only: no column changes)."""

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ("alerts", "0010_issue19_kinds"),
    ]

    operations = [
        migrations.AlterField(
            model_name="alertrule",
            name="kind",
            field=models.CharField(choices=[
                ("threshold", "Threshold"),
                ("host_no_data", "agent stopped reporting"),
                ("engine_down", "engine down or silent while its host reports"),
                ("kv_pressure", "KV cache full with requests waiting"),
                ("memory_beyond_share", "GPU memory beyond the engines' share"),
                ("cpu_bound_engine", "engine process pinned at a core, GPUs idle"),
                ("engine_stalled", "engine holds requests but makes no progress"),
                ("gpu_lost", "GPU gone from the inventory or lost to NVML"),
                ("objective_attainment", "share of requests within the objective"),
                ("error_budget_burn", "error budget burn rate (short and long window)"),
                ("service_disrupted", "service rolled back, healed or left unplaced"),
            ], default="threshold", max_length=32),
        ),
    ]
