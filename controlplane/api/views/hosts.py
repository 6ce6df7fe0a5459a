from __future__ import annotations

from django.db.models import Q
from drf_spectacular.utils import extend_schema
from rest_framework.request import Request
from rest_framework.response import Response

from controlplane.api.filters import HostFilter
from controlplane.api.permissions import CanLabelHosts
from controlplane.api.serializers.hosts import HostLabelsSerializer, HostSerializer
from controlplane.api.views.alerts import ERRORS
from controlplane.api.views.base import FleetViewSet, count_of, online_flag
from controlplane.fleet import host_labels
from controlplane.fleet.models import Engine, Gpu, Host
from controlplane.fleet.queries import online_cutoff


class HostViewSet(FleetViewSet):
    """Hosts that run an agent, with their GPU and engine counts and online state. Deployers
    set a host's labels (what services' selectors match) with a PATCH."""

    serializer_class = HostSerializer
    filterset_class = HostFilter
    permission_classes = [CanLabelHosts]

    def get_queryset(self):
        return Host.objects.annotate(
            online=online_flag(Q(last_seen__gte=online_cutoff())),
            gpu_count=count_of(Gpu, present=True),
            engine_count=count_of(Engine, present=True),
        ).order_by("hostname")  # unique, so indexed: a stable page order

    @extend_schema(summary="Set the host's labels (fleet.change_host)",
                   request=HostLabelsSerializer, responses={200: HostSerializer, 400: ERRORS})
    def partial_update(self, request: Request, pk=None) -> Response:
        host = self.get_object()
        body = HostLabelsSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        host_labels.set_labels(host, body.validated_data["labels"])
        return Response(self.get_serializer(self.get_object()).data)
