"""Channels, routes, notification groups and notifications: the delivery side of alerts.

A ``Notification`` row is written before its first attempt and is the queue: workers claim due
rows with a conditional UPDATE (``delivery.service.claim``), never a broker message alone.
"""

from __future__ import annotations

import uuid

from django.core.exceptions import ValidationError
from django.db import models
from django.utils import timezone

from controlplane.alerts.transports import TRANSPORT_CHOICES, ConfigError, get_transport


class Channel(models.Model):
    """Where notifications go: one transport kind and its config (which may hold secrets)."""

    name = models.CharField(max_length=120, unique=True)
    kind = models.CharField(max_length=20, choices=TRANSPORT_CHOICES)
    # Never logged or shown in full: webhook secrets and URLs with tokens live here.
    config = models.JSONField(default=dict)
    enabled = models.BooleanField(default=True)
    # Set when a permanent error disabled the channel: "HTTP 404: no such hook".
    disabled_reason = models.CharField(max_length=500, blank=True)
    disabled_at = models.DateTimeField(null=True, blank=True)
    # The last attempt's outcome, for the channels page ("last delivery failed: HTTP 500").
    last_attempt_at = models.DateTimeField(null=True, blank=True)
    last_ok = models.BooleanField(null=True, blank=True)
    last_detail = models.CharField(max_length=500, blank=True)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name  # never the config

    def clean(self) -> None:
        if not isinstance(self.config, dict):
            raise ValidationError({"config": "config must be a JSON object"})
        try:
            self.config = get_transport(self.kind).validate_config(dict(self.config or {}))
        except ConfigError as exc:
            key = "kind" if exc.field == "kind" else "config"
            raise ValidationError({key: str(exc)}) from None


def default_group_by() -> list[str]:
    return ["alertname"]


class Route(models.Model):
    """Alerts of these severities whose labels match every matcher go to these channels.

    ``matchers`` use the silence format ([{"label", "op", "value"}]); an empty ``severities``
    list matches every severity. Alerts no enabled route matches go to every enabled channel.
    """

    name = models.CharField(max_length=120, unique=True)
    enabled = models.BooleanField(default=True)
    severities = models.JSONField(default=list, blank=True)
    matchers = models.JSONField(default=list, blank=True)
    channels = models.ManyToManyField(Channel, related_name="routes", blank=True)
    # Label names; [] puts every alert of the route in one group.
    group_by = models.JSONField(default=default_group_by, blank=True)
    group_wait_s = models.PositiveIntegerField(default=30)
    group_interval_s = models.PositiveIntegerField(default=300)
    repeat_interval_s = models.PositiveIntegerField(default=4 * 3600)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

    def clean(self) -> None:
        from controlplane.alerts.delivery.routing import validate_route

        validate_route(self)


class NotificationGroup(models.Model):
    """What was last sent for one group of one route, so a restart does not resend."""

    # "<route id or default>:<group labels as JSON>"; see routing.group_key.
    key = models.CharField(max_length=1000, unique=True)
    route = models.ForeignKey(Route, null=True, blank=True, on_delete=models.CASCADE,
                              related_name="groups")  # null: the default route
    group_labels = models.JSONField(default=dict)
    first_seen_at = models.DateTimeField(null=True)  # group_wait counts from here
    last_sent_at = models.DateTimeField(null=True)
    # {fingerprint: alert as sent (transports Alert.to_dict())}: the firing alerts last sent.
    sent = models.JSONField(default=dict)

    def __str__(self) -> str:
        return self.key


class DeliveryState(models.TextChoices):
    PENDING = "pending"
    SENDING = "sending"
    SENT = "sent"
    RETRYING = "retrying"  # failed, another attempt at next_attempt_at
    FAILED = "failed"  # permanent error, channel disabled, or retries given up
    # Not sent: a newer row of the same feed channel carries the state it would have sent
    # (an older "firing" posted after a newer "resolved" would reopen the alert).
    SUPERSEDED = "superseded"


# The states a worker may claim; "sending" only once its lease (next_attempt_at) ran out.
CLAIMABLE = [DeliveryState.PENDING, DeliveryState.SENDING, DeliveryState.RETRYING]


class Notification(models.Model):
    """One notification to one channel, and its delivery attempts so far."""

    # The id receivers drop duplicates by: the same on every attempt of this row.
    uuid = models.UUIDField(default=uuid.uuid4, unique=True, editable=False)
    channel = models.ForeignKey(Channel, on_delete=models.CASCADE, related_name="notifications")
    group = models.ForeignKey(NotificationGroup, null=True, blank=True,
                              on_delete=models.SET_NULL, related_name="notifications")
    test = models.BooleanField(default=False)
    status = models.CharField(max_length=10)  # "firing" / "resolved", as in the payload
    state = models.CharField(max_length=10, choices=DeliveryState.choices,
                             default=DeliveryState.PENDING)
    attempts = models.PositiveIntegerField(default=0)
    created_at = models.DateTimeField(default=timezone.now)
    next_attempt_at = models.DateTimeField(default=timezone.now)
    last_attempt_at = models.DateTimeField(null=True, blank=True)
    sent_at = models.DateTimeField(null=True, blank=True)
    give_up_at = models.DateTimeField()  # retries stop after this
    last_error = models.CharField(max_length=500, blank=True)  # "HTTP 500: upstream down"
    detail = models.CharField(max_length=500, blank=True)  # on success: "HTTP 200: ok"
    payload = models.JSONField()  # transports Notification.to_dict(), as first built

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [
            # service.due_ids / deliver_due: the rows still to (re)try, oldest due first.
            models.Index(fields=["next_attempt_at"], name="notification_due",
                         condition=models.Q(state__in=["pending", "sending", "retrying"])),
            models.Index(fields=["channel", "-created_at"], name="notification_by_channel"),
        ]

    def __str__(self) -> str:
        return f"{self.uuid} to {self.channel_id} {self.state}"


class AlertmanagerFeed(models.Model):
    """What dispatch last queued for one ``alertmanager_api`` channel (delivery/feeds.py):
    the alerts posted, firing and recently resolved, and when, so that a change posts at once
    and an unchanged set is re-posted every ``resend_s``, across restarts."""

    channel = models.OneToOneField(Channel, on_delete=models.CASCADE, primary_key=True,
                                   related_name="feed")
    last_posted_at = models.DateTimeField(null=True)
    # {fingerprint: transports Alert.to_dict()}: firing ones, and resolved ones (with ends_at)
    # until RESOLVED_RESEND after they resolved.
    posted = models.JSONField(default=dict)

    def __str__(self) -> str:
        return f"feed of {self.channel_id}"
