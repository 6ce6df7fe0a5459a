"""The viewer, operator, deployer and admin groups; users who had access keep what they had."""

from django.contrib.auth.management import create_permissions
from django.db import migrations

from controlplane.accounts.roles import ADMIN, OPERATOR, sync_roles


def create_roles(apps, schema_editor):
    using = schema_editor.connection.alias
    # Permissions are normally created after all migrations (post_migrate): make them now.
    # create_permissions skips an app whose models_module is unset, as it is in a migration's
    # registry; each is put back as found (with Django's own registry, None would stop every
    # later post_migrate signal).
    for config in apps.get_app_configs():
        found = getattr(config, "models_module", None)
        config.models_module = found or True
        try:
            create_permissions(config, apps=apps, verbosity=0, using=using)
        finally:
            config.models_module = found
    sync_roles(apps, using)
    # Before roles, every active user read, acknowledged and silenced, and staff changed the
    # rest: each keeps that (superusers hold everything anyway).
    User = apps.get_model("auth", "User")
    Group = apps.get_model("auth", "Group")
    for user in User.objects.using(using).filter(is_active=True, is_superuser=False):
        role = ADMIN if user.is_staff else OPERATOR
        user.groups.add(Group.objects.using(using).get(name=role))


class Migration(migrations.Migration):
    dependencies = [
        ("auth", "0012_alter_user_first_name_max_length"),
        ("contenttypes", "0002_remove_content_type_name"),
        ("fleet", "0003_token_expiry_scope_deploy_code"),
        ("alerts", "0006_ack_permission"),
        ("tuning", "0002_decide_permission"),
        ("audit", "0001_initial"),
    ]

    operations = [migrations.RunPython(create_roles, migrations.RunPython.noop)]
