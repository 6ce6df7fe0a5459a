from __future__ import annotations

from django.db.models import Q

from controlplane.api.filters import EngineFilter
from controlplane.api.serializers.engines import EngineSerializer
from controlplane.api.views.base import FleetViewSet, online_flag
from controlplane.fleet.models import Engine
from controlplane.fleet.queries import online_cutoff


class EngineViewSet(FleetViewSet):
    """vLLM engines, one per data-parallel rank of a vLLM server."""

    serializer_class = EngineSerializer
    filterset_class = EngineFilter

    def get_queryset(self):
        online = Q(last_seen__gte=online_cutoff())
        return (Engine.objects.select_related("host").annotate(online=online_flag(online))
                .order_by("id"))
