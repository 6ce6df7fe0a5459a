"""AlertRule.last_error and last_error_at: a rule that fails in a cycle is marked, and the
cycle goes on with the other rules."""

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ("alerts", "0006_ack_permission"),
    ]

    operations = [
        migrations.AddField(
            model_name="alertrule",
            name="last_error",
            field=models.CharField(blank=True, default="", max_length=500),
        ),
        migrations.AddField(
            model_name="alertrule",
            name="last_error_at",
            field=models.DateTimeField(blank=True, null=True),
        ),
    ]
