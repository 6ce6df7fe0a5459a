from __future__ import annotations

from django.db.models import Q

from controlplane.api.filters import GpuFilter
from controlplane.api.serializers.gpus import GpuSerializer
from controlplane.api.views.base import FleetViewSet, online_flag
from controlplane.fleet.models import Gpu
from controlplane.fleet.queries import online_cutoff


class GpuViewSet(FleetViewSet):
    """GPUs, present or removed: a removed GPU keeps its history."""

    serializer_class = GpuSerializer
    filterset_class = GpuFilter

    def get_queryset(self):
        online = Q(present=True, host__last_seen__gte=online_cutoff())
        return (Gpu.objects.select_related("host").annotate(online=online_flag(online))
                .order_by("id"))
