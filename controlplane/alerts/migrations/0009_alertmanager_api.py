"""The ``alertmanager`` channel kind is renamed ``alertmanager_webhook`` (it posts
Alertmanager's webhook payload to a receiver); ``alertmanager_api`` posts to Alertmanager's
API, and dispatch keeps what it last posted to each such channel in ``AlertmanagerFeed``.
A notification may end ``superseded``: a newer one of its feed carries the newer state."""

import django.db.models.deletion
from django.db import migrations, models


def rename_kind(apps, schema_editor):
    Channel = apps.get_model("alerts", "Channel")
    Channel.objects.filter(kind="alertmanager").update(kind="alertmanager_webhook")


def unrename_kind(apps, schema_editor):
    Channel = apps.get_model("alerts", "Channel")
    Channel.objects.filter(kind="alertmanager_webhook").update(kind="alertmanager")


class Migration(migrations.Migration):

    dependencies = [
        ("alerts", "0008_drop_slice_tables"),
    ]

    operations = [
        migrations.CreateModel(
            name="AlertmanagerFeed",
            fields=[
                ("channel", models.OneToOneField(
                    on_delete=django.db.models.deletion.CASCADE, primary_key=True,
                    related_name="feed", serialize=False, to="alerts.channel")),
                ("last_posted_at", models.DateTimeField(null=True)),
                ("posted", models.JSONField(default=dict)),
            ],
        ),
        migrations.AlterField(
            model_name="channel",
            name="kind",
            field=models.CharField(choices=[
                ("email", "E-mail"), ("webhook", "Webhook (JSON, signed)"),
                ("alertmanager_webhook", "Webhook in Alertmanager's format"),
                ("alertmanager_api", "Alertmanager (API v2)"),
                ("slack", "Slack-compatible webhook")], max_length=20),
        ),
        migrations.RunPython(rename_kind, unrename_kind),
        migrations.AlterField(
            model_name="notification",
            name="state",
            field=models.CharField(choices=[
                ("pending", "Pending"), ("sending", "Sending"), ("sent", "Sent"),
                ("retrying", "Retrying"), ("failed", "Failed"), ("superseded", "Superseded")],
                default="pending", max_length=10),
        ),
    ]
