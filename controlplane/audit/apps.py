from django.apps import AppConfig


class AuditConfig(AppConfig):
    """The append-only log of changes to rules, channels, silences, acks, deployments,
    suggestion decisions, tokens and users (docs/security.md)."""

    name = "controlplane.audit"
    label = "audit"

    def ready(self) -> None:
        from controlplane.audit import tracked

        tracked.connect()
