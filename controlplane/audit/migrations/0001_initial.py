import django.utils.timezone
from django.db import migrations, models

# Append-only in the database too: no UPDATE or DELETE from any client, the ORM's or not.
# (TRUNCATE stays possible: an operator archiving the log, `manage.py flush` in tests.)
APPEND_ONLY = """
CREATE FUNCTION audit_entry_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'audit entries are append-only';
END $$;
CREATE TRIGGER audit_entry_append_only BEFORE UPDATE OR DELETE ON audit_auditentry
    FOR EACH ROW EXECUTE FUNCTION audit_entry_append_only();
"""
DROP = """
DROP TRIGGER audit_entry_append_only ON audit_auditentry;
DROP FUNCTION audit_entry_append_only();
"""


class Migration(migrations.Migration):
    initial = True
    dependencies = []

    operations = [
        migrations.CreateModel(
            name="AuditEntry",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False,
                                           verbose_name="ID")),
                ("at", models.DateTimeField(db_index=True, default=django.utils.timezone.now)),
                ("actor", models.CharField(max_length=150)),
                ("user_id", models.IntegerField(null=True)),
                ("via", models.CharField(max_length=40)),
                ("address", models.GenericIPAddressField(null=True)),
                ("action", models.CharField(max_length=24)),
                ("target_type", models.CharField(max_length=40)),
                ("target_id", models.CharField(max_length=64)),
                ("target", models.CharField(max_length=200)),
                ("changes", models.JSONField(default=dict)),
            ],
            options={
                "ordering": ["-at", "-id"],
                "indexes": [
                    models.Index(fields=["target_type", "target_id"], name="audit_by_target"),
                    models.Index(fields=["actor", "at"], name="audit_by_actor"),
                ],
            },
        ),
        migrations.RunSQL(APPEND_ONLY, DROP),
    ]
