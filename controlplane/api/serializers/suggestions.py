"""Suggestions: a diagnosis of a vLLM server with its evidence, and what came of it. The
server is a deployment (``deployment``; Pitwall applies the change) or an engine Pitwall only
watches (``deployment`` null, ``engine`` set: a report with the ``command`` to paste)."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from controlplane.api.serializers.fields import ObjectField
from controlplane.evidence_links import with_links
from controlplane.tuning.models import Suggestion

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
    deployment_name = serializers.CharField(source="deployment.name", read_only=True,
                                            allow_null=True, default=None)
    engine_name = serializers.CharField(source="engine.name", read_only=True, allow_null=True,
                                        default=None, help_text='e.g. "vllm:8000/0"')
    host = serializers.SerializerMethodField()
    report_only = serializers.BooleanField(read_only=True, help_text=(
        "true: nothing Pitwall can apply (an engine it does not run, or a report); accept "
        "answers 409"))
    command = serializers.CharField(read_only=True, help_text=(
        "For an engine Pitwall does not run: the change as a command-line fragment to paste "
        "(vllm serve flags, a numactl or CUDA_VISIBLE_DEVICES prefix where it takes one); "
        "empty otherwise"))
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
        fields = ["id", "deployment", "deployment_name", "engine", "engine_name", "host",
                  "kind", "kind_label", "state", "report_only", "changes", "command",
                  "reasoning", "expected", "confidence", "evidence", "severity", "revision",
                  "revision_after", "created_at", "updated_at", "decided_at", "decided_by",
                  "applied_at", "verified_at", "verification"]
        read_only_fields = fields
        extra_kwargs = {
            "deployment": {"help_text": "null: Pitwall does not run this server (a report)"},
            "engine": {"help_text": "the server's first engine (rank 0); null for a "
                                    "deployment whose engine is not reported yet"},
            "revision": {"help_text": "the deployment's revision it was made against; null "
                                      "for an engine Pitwall does not run"}}

    @extend_schema_field({"type": "integer"})
    def get_host(self, s: Suggestion) -> int:
        return s.deployment.host_id if s.deployment_id is not None else s.engine.host_id
