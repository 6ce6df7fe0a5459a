from __future__ import annotations

from rest_framework import serializers

from controlplane.api.serializers.fields import NumaNodesField
from controlplane.fleet.models import Host


class HostSerializer(serializers.ModelSerializer):
    # online, gpu_count and engine_count are annotations of the view's queryset.
    online = serializers.BooleanField(read_only=True, help_text="Reported within the online window")
    numa_nodes = NumaNodesField(read_only=True)
    gpu_count = serializers.IntegerField(read_only=True, help_text="GPUs present")
    engine_count = serializers.IntegerField(read_only=True, help_text="Engines present")

    class Meta:
        model = Host
        fields = [
            "id", "hostname", "simulated", "online", "last_seen", "cpu_model", "cpu_count",
            "mem_total_bytes", "numa_nodes", "agent_version", "driver_version", "gpu_count",
            "engine_count", "spool_evicted_batches", "spool_evicted_samples",
        ]
        read_only_fields = fields
