"""API tokens (a user's, shown without their secret) and agent tokens (a host's)."""

from __future__ import annotations

from rest_framework import serializers

from controlplane.fleet import tokens
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
        if problem := tokens.lifetime_problem(days):
            raise serializers.ValidationError(problem)
        return days

    def expires_at(self):
        return tokens.expiry_after(self.validated_data.get("expires_in_days"))


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
