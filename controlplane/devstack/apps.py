from django.apps import AppConfig


class DevstackConfig(AppConfig):
    name = "controlplane.devstack"
    label = "devstack"
