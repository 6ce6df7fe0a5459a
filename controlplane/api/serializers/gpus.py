from __future__ import annotations

from rest_framework import serializers

from controlplane.api.serializers.fields import NullableObjectField
from controlplane.fleet.models import Gpu


class GpuSerializer(serializers.ModelSerializer):
    host = serializers.IntegerField(source="host_id", read_only=True, help_text="Host id")
    hostname = serializers.CharField(source="host.hostname", read_only=True)
    mig = NullableObjectField(read_only=True, help_text="MIG mode and instances, as NVML has them")
    # An annotation of the view's queryset.
    online = serializers.BooleanField(read_only=True, help_text="Present, and its host is online")

    class Meta:
        model = Gpu
        fields = [
            "id", "uuid", "host", "hostname", "index", "name", "mem_total_bytes", "pci_bus_id",
            "numa_node", "mig", "simulated", "present", "online", "first_seen", "removed_at",
        ]
        read_only_fields = fields
