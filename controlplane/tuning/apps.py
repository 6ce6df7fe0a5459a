from django.apps import AppConfig


class TuningConfig(AppConfig):
    name = "controlplane.tuning"
    label = "tuning"
    default_auto_field = "django.db.models.BigAutoField"
