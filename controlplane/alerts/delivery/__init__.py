"""Notification delivery: channels, routes, grouping and the delivery queue (docs/notifications.md).

Tasks live in ``controlplane.alerts.delivery.tasks``; they are not imported from here because
``controlplane.alerts.models`` imports this package's models while Django loads apps.
"""
