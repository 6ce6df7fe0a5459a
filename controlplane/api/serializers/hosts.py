from __future__ import annotations

from django.core.exceptions import ValidationError as DjangoValidationError
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from controlplane.api.serializers.fields import NumaNodesField
from controlplane.fleet import host_labels
from controlplane.fleet.models import Host

_STRING_MAP = {"type": "object", "additionalProperties": {"type": "string"}}


@extend_schema_field(_STRING_MAP)
class LabelsField(serializers.JSONField):
    """key: value strings (the bounds are checked by ``host_labels.check``)."""


class HostSerializer(serializers.ModelSerializer):
    # online, gpu_count and engine_count are annotations of the view's queryset.
    online = serializers.BooleanField(read_only=True, help_text="Reported within the online window")
    numa_nodes = NumaNodesField(read_only=True)
    gpu_count = serializers.IntegerField(read_only=True, help_text="GPUs present")
    engine_count = serializers.IntegerField(read_only=True, help_text="Engines present")
    labels = LabelsField(read_only=True, help_text=(
        "Labels set through the API or the host page (PATCH with {\"labels\": {...}})"))
    agent_labels = serializers.SerializerMethodField(help_text=(
        "Labels the agent reports (its --label flags)"))
    all_labels = serializers.SerializerMethodField(help_text=(
        "What a service's selector matches: agent_labels overridden by labels"))

    class Meta:
        model = Host
        fields = [
            "id", "hostname", "simulated", "online", "last_seen", "cpu_model", "cpu_count",
            "mem_total_bytes", "numa_nodes", "agent_version", "driver_version", "gpu_count",
            "engine_count", "spool_evicted_batches", "spool_evicted_samples",
            "labels", "agent_labels", "all_labels",
        ]
        read_only_fields = fields

    @extend_schema_field(_STRING_MAP)
    def get_agent_labels(self, host: Host) -> dict[str, str]:
        return host.agent_labels()

    @extend_schema_field(_STRING_MAP)
    def get_all_labels(self, host: Host) -> dict[str, str]:
        return host.all_labels()


class HostLabelsSerializer(serializers.Serializer):
    """What a PATCH of a host may change: its own labels, replaced whole."""

    labels = LabelsField(help_text=(
        f"The host's own labels, replacing those it holds: at most {host_labels.MAX_LABELS}; "
        f"keys 1 to {host_labels.MAX_KEY} of a-z 0-9 . _ / - (starting and ending with a "
        f"letter or a digit), values at most {host_labels.MAX_VALUE} of A-Z a-z 0-9 . _ -; "
        "{} removes them all"))

    def validate_labels(self, labels: object) -> dict[str, str]:
        try:
            return host_labels.check(labels)
        except DjangoValidationError as exc:
            raise serializers.ValidationError(exc.message_dict["labels"]) from None
