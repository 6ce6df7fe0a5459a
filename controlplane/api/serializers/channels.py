"""Notification channels (their config is write-only) and the notifications sent to them."""

from __future__ import annotations

from datetime import datetime
from typing import Any
from urllib.parse import urlsplit

from django.core.exceptions import ValidationError as DjangoValidationError
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from controlplane.alerts.delivery import service
from controlplane.alerts.delivery.models import CLAIMABLE, Channel, Notification
from controlplane.alerts.transports import RENAMED_KINDS, TRANSPORT_CHOICES, unknown_kind
from controlplane.api.serializers.alerts import drf_errors
from controlplane.api.serializers.fields import ObjectField

# Config keys shown as they are: none of them is a secret. Everything else is left out, except
# that a URL shows its host only (tokens live in paths and queries) and a secret shows that it
# is set. An unknown key is never shown: a transport's new key might be a secret.
PLAIN_KEYS = ("to", "max_alerts", "resend_s", "external_labels")


def redacted_config(config: dict[str, Any]) -> dict[str, Any]:
    shown: dict[str, Any] = {key: config[key] for key in PLAIN_KEYS if key in config}
    if isinstance(config.get("url"), str):
        shown["url_host"] = urlsplit(config["url"]).hostname or ""
    if isinstance(config.get("urls"), list):
        shown["url_hosts"] = [urlsplit(u).hostname or "" for u in config["urls"]]
    if "secret" in config:
        shown["secret_set"] = bool(config["secret"])
    if "bearer_token" in config:
        shown["bearer_token_set"] = bool(config["bearer_token"])
    return shown


@extend_schema_field({
    "type": "object",
    "description": "The config's non-secret parts: to, max_alerts, resend_s, external_labels, "
                   "url_host, url_hosts, secret_set, bearer_token_set",
    "properties": {
        "to": {"type": "array", "items": {"type": "string"}},
        "max_alerts": {"type": "integer"},
        "resend_s": {"type": "integer"},
        "external_labels": {"type": "object", "additionalProperties": {"type": "string"}},
        "url_host": {"type": "string"},
        "url_hosts": {"type": "array", "items": {"type": "string"}},
        "secret_set": {"type": "boolean"},
        "bearer_token_set": {"type": "boolean"},
    },
})
class RedactedConfigField(serializers.Field):
    def __init__(self, **kwargs) -> None:
        super().__init__(source="config", read_only=True, **kwargs)

    def to_representation(self, value):
        return redacted_config(value or {})


class KindField(serializers.ChoiceField):
    """The transports' kinds; a renamed one is refused with its new name."""

    def to_internal_value(self, data):
        if isinstance(data, str) and data in RENAMED_KINDS:
            raise serializers.ValidationError(unknown_kind(data))
        return super().to_internal_value(data)


class ChannelSerializer(serializers.ModelSerializer):
    kind = KindField(choices=TRANSPORT_CHOICES)
    config = ObjectField(
        write_only=True,
        help_text="Write-only: never shown again. email: {to}; webhook: {url, secret}; "
                  "slack: {url}; alertmanager_webhook: {url, secret?, max_alerts?}; "
                  "alertmanager_api: {urls: [Alertmanager base URLs], resend_s?: 10-600, "
                  "external_labels?, bearer_token?}")
    config_redacted = RedactedConfigField()

    class Meta:
        model = Channel
        fields = ["id", "name", "kind", "config", "config_redacted", "enabled",
                  "disabled_reason", "disabled_at", "last_attempt_at", "last_ok", "last_detail",
                  "created_at"]
        read_only_fields = ["id", "enabled", "disabled_reason", "disabled_at",
                            "last_attempt_at", "last_ok", "last_detail", "created_at"]

    def get_fields(self):
        fields = super().get_fields()
        if self.instance is not None:  # an update may leave the config as it is
            fields["config"].required = False
        return fields

    def validate_config(self, value):
        # Channel.clean() takes dict(config): a string or a list would not make a clear error.
        if not isinstance(value, dict):
            raise serializers.ValidationError("must be a JSON object, e.g. {\"url\": …}")
        return value

    def create(self, validated_data):
        try:
            return service.create_channel(**validated_data)
        except DjangoValidationError as exc:
            raise drf_errors(exc) from None

    def update(self, instance, validated_data):
        for name, value in validated_data.items():
            setattr(instance, name, value)
        try:
            instance.full_clean()  # the transport validates the config, kind and all
        except DjangoValidationError as exc:
            raise drf_errors(exc) from None
        instance.save(update_fields=list(validated_data))
        return instance


class DisableSerializer(serializers.Serializer):
    reason = serializers.CharField(max_length=400, required=False, default="disabled by hand")


class NotificationSerializer(serializers.ModelSerializer):
    channel_name = serializers.CharField(source="channel.name", read_only=True)
    next_attempt_at = serializers.SerializerMethodField(
        help_text="When it is (re)tried; null once sent or failed")

    def get_next_attempt_at(self, row: Notification) -> datetime | None:
        # A settled row keeps its last lease in the column: meaningless to a reader.
        return row.next_attempt_at if row.state in CLAIMABLE else None

    class Meta:
        model = Notification
        fields = ["id", "uuid", "channel", "channel_name", "test", "status", "state", "attempts",
                  "created_at", "next_attempt_at", "last_attempt_at", "sent_at", "give_up_at",
                  "last_error", "detail"]
        read_only_fields = fields


class NotificationDetailSerializer(NotificationSerializer):
    payload = ObjectField(read_only=True, help_text="The message as first built (alerts, labels)")

    class Meta(NotificationSerializer.Meta):
        fields = [*NotificationSerializer.Meta.fields, "payload"]
        read_only_fields = fields
