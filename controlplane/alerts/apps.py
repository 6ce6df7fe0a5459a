from django.apps import AppConfig
from django.db.models.signals import post_migrate


class AlertsConfig(AppConfig):
    name = "controlplane.alerts"
    label = "alerts"

    def ready(self) -> None:
        post_migrate.connect(_load_pack, sender=self)


def _load_pack(sender, using="default", **kwargs) -> None:
    # After every migrate (and every test-database flush, which re-emits post_migrate) the
    # default pack's missing rules are created; rules an operator edited are left alone.
    from controlplane.alerts.pack import load_default_pack

    load_default_pack(using=using)
