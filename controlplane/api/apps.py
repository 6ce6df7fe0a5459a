from django.apps import AppConfig


class ApiConfig(AppConfig):
    name = "controlplane.api"
    label = "api"

    def ready(self) -> None:
        # Registers the OpenAPI extensions (drf-spectacular finds them by subclassing).
        from controlplane.api import schema  # noqa: F401
