from __future__ import annotations

from rest_framework import serializers

from controlplane.api.serializers.fields import ObjectField, StringListField
from controlplane.fleet.models import Engine


class EngineSerializer(serializers.ModelSerializer):
    host = serializers.IntegerField(source="host_id", read_only=True, help_text="Host id")
    hostname = serializers.CharField(source="host.hostname", read_only=True)
    gpu_uuids = StringListField(read_only=True)
    config = ObjectField(read_only=True, help_text="cache_config_info and the flags in effect")
    # An annotation of the view's queryset.
    online = serializers.BooleanField(read_only=True, help_text="Reported within the online window")

    class Meta:
        model = Engine
        fields = [
            "id", "host", "hostname", "name", "url", "model", "gpu_uuids", "config", "simulated",
            "present", "online", "last_seen",
        ]
        read_only_fields = fields
