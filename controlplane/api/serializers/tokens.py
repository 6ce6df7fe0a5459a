"""API tokens (a user's, shown without their secret) and agent tokens (a host's)."""

from __future__ import annotations

from datetime import timedelta

from django.conf import settings
from django.utils import timezone
from rest_framework import serializers

from controlplane.fleet.models import AgentToken, ApiToken, TokenScope, TokenState

# What both kinds show of a token's life.
LIFE = ["prefix", "state", "created_at", "expires_at", "last_used_at", "revoked_at"]


class TokenLife(serializers.Serializer):
    prefix = serializers.CharField(read_only=True, help_text="How the token starts")
    state = serializers.ChoiceField(choices=TokenState.choices, read_only=True)


class ApiTokenSerializer(TokenLife, serializers.ModelSerializer):
    user = serializers.CharField(source="user.username", read_only=True)

    class Meta:
        model = ApiToken
        fields = ["id", "name", "user", "scope", *LIFE]
        read_only_fields = fields


class NewApiTokenSerializer(serializers.Serializer):
    name = serializers.CharField(max_length=100, help_text="To recognise it by: 'grafana'")
    scope = serializers.ChoiceField(
        choices=TokenScope.choices, default=TokenScope.READ,
        help_text="read: GET only; write: everything your role allows")
    expires_in_days = serializers.IntegerField(
        min_value=1, required=False,
        help_text="Days until it stops working (default and bound: PITWALL_API_TOKEN_*_DAYS)")

    def validate_expires_in_days(self, days: int) -> int:
        bound = settings.PITWALL["API_TOKEN_MAX_DAYS"]
        if days > bound:
            raise serializers.ValidationError(f"at most {bound} days (PITWALL_API_TOKEN_MAX_DAYS)")
        return days

    def expires_at(self):
        days = self.validated_data.get("expires_in_days",
                                       settings.PITWALL["API_TOKEN_DEFAULT_DAYS"])
        return timezone.now() + timedelta(days=days)


class IssuedApiTokenSerializer(ApiTokenSerializer):
    token = serializers.CharField(read_only=True, help_text="Shown this once; only a hash is kept")

    class Meta(ApiTokenSerializer.Meta):
        fields = [*ApiTokenSerializer.Meta.fields, "token"]
        read_only_fields = fields


class AgentTokenSerializer(TokenLife, serializers.ModelSerializer):
    hostname = serializers.CharField(source="host.hostname", read_only=True)

    class Meta:
        model = AgentToken
        fields = ["id", "host", "hostname", *LIFE]
        read_only_fields = fields
