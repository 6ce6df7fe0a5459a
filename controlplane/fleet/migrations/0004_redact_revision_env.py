"""Revisions written before env values became write-only held them in clear: keep only the
names (every reader already saw them redacted; this takes them out of the database)."""

from django.db import migrations

# The placeholder of controlplane/fleet/deployments.py, frozen here as migrations must be.
REDACTED = "<redacted>"


def redact(apps, schema_editor):
    Revision = apps.get_model("fleet", "DeploymentRevision")
    for revision in Revision.objects.exclude(config__env={}).iterator():
        env = revision.config.get("env")
        if isinstance(env, dict) and any(v != REDACTED for v in env.values()):
            revision.config["env"] = dict.fromkeys(env, REDACTED)
            revision.save(update_fields=["config"])


class Migration(migrations.Migration):
    dependencies = [("fleet", "0003_token_expiry_scope_deploy_code")]

    operations = [migrations.RunPython(redact, migrations.RunPython.noop)]
