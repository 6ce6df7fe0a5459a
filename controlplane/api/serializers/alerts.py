"""Alert rules (and their preview), alerts with their history, silences."""

from __future__ import annotations

import copy
import math

from django.core.exceptions import ValidationError as DjangoValidationError
from django.db import models
from django.utils import timezone
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from controlplane.alerts.models import Alert, AlertEvent, AlertRule, Silence
from controlplane.alerts.silences import create_silence, silence_matches
from controlplane.api.serializers.fields import ObjectField

HISTORY_LIMIT = 100  # transitions shown on an alert's detail, newest first


def drf_errors(exc: DjangoValidationError) -> serializers.ValidationError:
    """A model or service ValidationError as DRF's 400 body, keyed by the field at fault."""
    if hasattr(exc, "error_dict"):
        return serializers.ValidationError(exc.message_dict)
    return serializers.ValidationError({"non_field_errors": exc.messages})


class FiniteFloatField(serializers.FloatField):
    # "nan" parses as a float, and a NaN stored would make every later JSON answer fail.
    def to_internal_value(self, data):
        value = super().to_internal_value(data)
        if not math.isfinite(value):
            raise serializers.ValidationError("must be a finite number")
        return value


class AlertRuleSerializer(serializers.ModelSerializer):
    serializer_field_mapping = {**serializers.ModelSerializer.serializer_field_mapping,
                                models.FloatField: FiniteFloatField}
    host_ids = serializers.ListField(child=serializers.IntegerField(min_value=1), required=False,
                                     help_text="Host ids in scope; empty: every host")
    engine_ids = serializers.ListField(child=serializers.IntegerField(min_value=1),
                                       required=False,
                                       help_text="Engine ids in scope; empty: every engine")
    params = ObjectField(required=False,
                         help_text='Extra thresholds of named kinds: {"gpu_util_below": 85}')

    class Meta:
        model = AlertRule
        fields = [
            "id", "name", "kind", "enabled", "severity", "metric", "aggregation", "quantile",
            "bitmask", "window_s", "op", "threshold", "for_s", "keep_firing_for_s", "host_ids",
            "engine_ids", "hostname_glob", "label_matchers", "params", "summary", "description",
            "pack_key",
            "created_at", "updated_at", "last_evaluated_at", "last_error", "last_error_at",
        ]
        read_only_fields = ["id", "pack_key", "created_at", "updated_at", "last_evaluated_at",
                            "last_error", "last_error_at"]
        extra_kwargs = {
            "label_matchers": {"help_text": (
                'Scope by the target\'s labels, as silences match: [{"label": "model", '
                '"op": "=~", "value": "llama-3.*"}]; labels host, engine, gpu, model; ops = != '
                '=~ !~ (RE2, at most 1000 characters); empty: no label filter')},
            "summary": {"help_text": (
                "A template of the fields, e.g. {host} GPU {gpu_index}: {value:.0f} °C; widths "
                "and precisions up to 200; the rendered text is cut to 1000 characters")},
            "last_error": {"help_text": (
                "Why the rule failed in its last evaluation cycle (the other rules ran on); "
                "empty once it runs again")},
            "last_error_at": {"help_text": "When it failed; null when it did not"},
        }

    checks_unique = True

    def validate_params(self, value):
        if not isinstance(value, dict):
            raise serializers.ValidationError('must be a JSON object, e.g. {"waiting_above": 0}')
        return value

    # The rule is checked as the model checks it (full_clean: validate_rule and the unique
    # name), so the API, the admin and the rule editor refuse the same rules with the same words;
    # DRF turns the model's ValidationError into a 400 keyed by field.
    def validate(self, attrs):
        self.draft(attrs).full_clean(validate_unique=self.checks_unique,
                                     validate_constraints=self.checks_unique)
        return attrs

    def draft(self, attrs) -> AlertRule:
        rule = copy.copy(self.instance) if self.instance is not None else AlertRule()
        for name, value in attrs.items():
            setattr(rule, name, value)
        return rule

    def update(self, instance, validated_data):
        validated_data["updated_at"] = timezone.now()
        return super().update(instance, validated_data)


class RulePreviewRequestSerializer(AlertRuleSerializer):
    """A draft rule: the create fields; the name may be left out or repeat a saved rule's."""

    name = serializers.CharField(max_length=120, required=False, default="preview")
    checks_unique = False


class PreviewHitSerializer(serializers.Serializer):
    target = serializers.CharField(help_text='"host:3", "gpu:17", "engine:5"')
    host_id = serializers.IntegerField(allow_null=True)
    host = serializers.CharField()
    engine_id = serializers.IntegerField(allow_null=True)
    engine = serializers.CharField()
    gpu_id = serializers.IntegerField(allow_null=True)
    gpu = serializers.CharField()
    value = serializers.FloatField(allow_null=True)
    summary = serializers.CharField()


class RulePreviewSerializer(serializers.Serializer):
    now = serializers.DateTimeField(help_text="The instant the preview evaluated at")
    count = serializers.IntegerField(help_text="Targets meeting the condition (hits lists 200)")
    fires_after_s = serializers.IntegerField(
        help_text="for_s: the targets fire only if the condition holds this long")
    hits = PreviewHitSerializer(many=True)


class AlertRuleRefSerializer(serializers.ModelSerializer):
    class Meta:
        model = AlertRule
        fields = ["id", "name", "severity"]
        read_only_fields = fields


class AlertEventSerializer(serializers.ModelSerializer):
    class Meta:
        model = AlertEvent
        fields = ["at", "from_state", "to_state", "value", "note"]
        read_only_fields = fields


@extend_schema_field({"type": "object", "additionalProperties": {"type": "string"}})
class LabelsField(serializers.JSONField):
    pass


class AlertSerializer(serializers.ModelSerializer):
    rule = AlertRuleRefSerializer(read_only=True)
    labels = LabelsField(read_only=True)
    silenced_by = serializers.SerializerMethodField(
        help_text="Ids of the active silences whose matchers match the alert's labels")

    class Meta:
        model = Alert
        fields = [
            "id", "rule", "target", "host_id", "engine_id", "gpu_id", "labels", "state", "value",
            "summary", "active_since", "started_at", "resolved_at", "last_evaluated_at",
            "acknowledged_at", "acknowledged_by", "ack_comment", "silenced_by",
        ]
        read_only_fields = fields

    def get_silenced_by(self, alert: Alert) -> list[int]:
        # The view reads the active silences once per request (context["silences"]).
        return [s.id for s in self.context.get("silences", []) if silence_matches(s, alert.labels)]


class AlertDetailSerializer(AlertSerializer):
    history = serializers.SerializerMethodField(
        help_text=f"State transitions and acks, newest first (at most {HISTORY_LIMIT})")

    class Meta(AlertSerializer.Meta):
        fields = [*AlertSerializer.Meta.fields, "history"]
        read_only_fields = fields

    @extend_schema_field(AlertEventSerializer(many=True))
    def get_history(self, alert: Alert):
        events = alert.events.order_by("-at", "-id")[:HISTORY_LIMIT]
        return AlertEventSerializer(events, many=True).data


class AckSerializer(serializers.Serializer):
    comment = serializers.CharField(max_length=500, required=False, allow_blank=True, default="")


@extend_schema_field({
    "type": "array",
    "items": {
        "type": "object",
        "required": ["label", "value"],
        "properties": {
            "label": {"type": "string", "enum": ["alertname", "severity", "host", "engine",
                                                 "gpu"]},
            "op": {"type": "string", "enum": ["=", "!=", "=~", "!~"], "default": "="},
            "value": {"type": "string"},
        },
    },
})
class MatchersField(serializers.JSONField):
    pass


class SilenceSerializer(serializers.ModelSerializer):
    matchers = MatchersField(
        help_text="Every matcher must match an alert's labels; =~ and !~ are full-match regexes")
    starts_at = serializers.DateTimeField(required=False, help_text="Default: now")
    author = serializers.CharField(
        read_only=True, help_text="The signed-in user who created it (an author in the body is "
                                  "ignored: no one silences in another's name)")
    created_by = serializers.SlugRelatedField(slug_field="username", read_only=True)
    state = serializers.SerializerMethodField()

    class Meta:
        model = Silence
        fields = ["id", "matchers", "starts_at", "ends_at", "author", "comment", "created_by",
                  "created_at", "state"]
        read_only_fields = ["id", "author", "created_by", "created_at", "state"]
        extra_kwargs = {"ends_at": {"help_text": (
            "After starts_at, by at most PITWALL_ALERT_SILENCE_MAX_DAYS days (default 90)")}}

    def get_state(self, silence: Silence) -> str:
        # "pending" | "active" | "expired", as Alertmanager says it.
        now = timezone.now()
        if silence.starts_at > now:
            return "pending"
        return "active" if silence.ends_at > now else "expired"

    def create(self, validated_data):
        request = self.context["request"]
        try:
            return create_silence(
                matchers=validated_data["matchers"],
                starts_at=validated_data.get("starts_at") or timezone.now(),
                ends_at=validated_data["ends_at"],
                author=request.user.get_username(),
                comment=validated_data["comment"],
                created_by=request.user)
        except DjangoValidationError as exc:
            raise drf_errors(exc) from None
