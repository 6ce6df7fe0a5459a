"""Suggestions: a diagnosis of a deployment with its evidence, and what came of it."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from controlplane.api.serializers.fields import ObjectField
from controlplane.tuning.models import Suggestion
from controlplane.web.suggestion_links import with_links

_CHANGE = {"type": "object", "properties": {
    "field": {"type": "string", "example": "args.max_num_seqs"},
    "current": {}, "proposed": {}}}
_EVIDENCE = {"type": "object", "properties": {
    "metric": {"type": "string"}, "stat": {"type": "string"}, "value": {},
    "threshold": {"type": "string"}, "entity": {"type": "string"},
    "entity_id": {"type": "integer", "nullable": True},
    "start": {"type": "string", "format": "date-time"},
    "end": {"type": "string", "format": "date-time"},
    "chart": {"type": "string", "nullable": True,
              "description": "The entity's page over the window"}}}


@extend_schema_field({"type": "array", "items": _CHANGE})
class ChangesField(serializers.JSONField):
    pass


@extend_schema_field({"type": "array", "items": _EVIDENCE})
class EvidenceField(serializers.JSONField):
    def to_representation(self, value):
        return with_links(value or [])


class SuggestionSerializer(serializers.ModelSerializer):
    deployment_name = serializers.CharField(source="deployment.name", read_only=True)
    host = serializers.IntegerField(source="deployment.host_id", read_only=True)
    kind_label = serializers.CharField(source="get_kind_display", read_only=True)
    changes = ChangesField(read_only=True, help_text="current -> proposed per field; "
                                                     "empty: a report, nothing to apply")
    evidence = EvidenceField(read_only=True)
    decided_by = serializers.CharField(source="decided_by.username", read_only=True,
                                       default=None)
    verification = ObjectField(read_only=True, help_text=(
        "before/after figures over equal windows, the target metric and a summary"))

    class Meta:
        model = Suggestion
        fields = ["id", "deployment", "deployment_name", "host", "kind", "kind_label", "state",
                  "changes", "reasoning", "expected", "confidence", "evidence", "severity",
                  "revision", "revision_after", "created_at", "updated_at", "decided_at",
                  "decided_by", "applied_at", "verified_at", "verification"]
        read_only_fields = fields
