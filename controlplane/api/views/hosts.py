from __future__ import annotations

from django.db.models import Q

from controlplane.api.filters import HostFilter
from controlplane.api.serializers.hosts import HostSerializer
from controlplane.api.views.base import FleetViewSet, count_of, online_flag
from controlplane.fleet.models import Engine, Gpu, Host
from controlplane.fleet.queries import online_cutoff


class HostViewSet(FleetViewSet):
    """Hosts that run an agent, with their GPU and engine counts and online state."""

    serializer_class = HostSerializer
    filterset_class = HostFilter

    def get_queryset(self):
        return Host.objects.annotate(
            online=online_flag(Q(last_seen__gte=online_cutoff())),
            gpu_count=count_of(Gpu, present=True),
            engine_count=count_of(Engine, present=True),
        ).order_by("hostname")  # unique, so indexed: a stable page order
