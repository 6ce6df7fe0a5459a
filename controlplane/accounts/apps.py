from django.apps import AppConfig
from django.db.models.signals import post_migrate


class AccountsConfig(AppConfig):
    """Users' roles (groups of permissions) and their API tokens."""

    name = "controlplane.accounts"
    label = "accounts"

    def ready(self) -> None:
        # A flush (transactional tests, `manage.py flush`) empties the groups; migrate refills
        # them after every app's permissions exist (this app is listed after theirs).
        post_migrate.connect(_sync_roles, sender=self, dispatch_uid="pitwall-sync-roles")


def _sync_roles(sender, using="default", apps=None, **kwargs) -> None:
    from django.apps import apps as registry

    from controlplane.accounts.roles import sync_roles

    # migrate passes its (historical) registry; flush passes none.
    sync_roles(apps or registry, using)
