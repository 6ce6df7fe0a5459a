"""``GET /metrics``: Pitwall's own health for a Prometheus server (docs/prometheus.md).

Open to a scraper on the same machine (loopback, with no proxy in between), to anyone when
``PITWALL_METRICS_OPEN`` is on (a private network that is trusted), otherwise to a user API
token with read rights on the fleet: the same credential that scrapes the fleet exposition.
"""

from __future__ import annotations

import ipaddress

from django.conf import settings
from django.http import HttpResponse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework.permissions import BasePermission
from rest_framework.request import Request
from rest_framework.views import APIView

# The modules that define metrics, imported so that every family is exposed from the start,
# at zero, even by a process that never ran that code (a scraper's alert on a missing series
# would never fire).
import controlplane.realtime.metrics  # noqa: F401
import controlplane.telemetry.ingest.metrics  # noqa: F401
import controlplane.tuning.metrics  # noqa: F401
from controlplane.alerts.metrics import AlertingNow
from controlplane.api.permissions import CanReadFleet
from controlplane.fleet.metrics import ServiceScaling
from controlplane.lib.selfmetrics import CONTENT_TYPE, exposition
from controlplane.telemetry.metrics import RollupLag

# A request a proxy forwarded comes from the proxy's address: loopback proves nothing then.
PROXY_HEADERS = ("HTTP_X_FORWARDED_FOR", "HTTP_FORWARDED", "HTTP_X_REAL_IP")


def from_this_machine(request: Request) -> bool:
    if any(header in request.META for header in PROXY_HEADERS):
        return False
    try:
        return ipaddress.ip_address(request.META.get("REMOTE_ADDR", "")).is_loopback
    except ValueError:
        return False


class MetricsAccess(CanReadFleet):
    message = ("/metrics is open on loopback only: send a user API token with read rights "
               "(Authorization: Bearer pwu_…), or set PITWALL_METRICS_OPEN")

    def has_permission(self, request, view) -> bool:
        if settings.PITWALL["METRICS_OPEN"] or from_this_machine(request):
            return True
        return super().has_permission(request, view)


class MetricsView(APIView):
    permission_classes: list[type[BasePermission]] = [MetricsAccess]

    @extend_schema(
        summary="Pitwall's own metrics (Prometheus text format)",
        description=(
            "Ingest requests, batches, rows and values by outcome; refusals by reason; the "
            "writer's queue and flush latency; alert cycles and rule errors; notifications "
            "sent, failed and pending per channel kind; tuning passes; rollup lag; live "
            "clients; services' replicas and autoscaling decisions. Open on loopback; "
            "elsewhere a user API token with read rights, unless "
            "PITWALL_METRICS_OPEN is on."),
        responses={200: OpenApiResponse(OpenApiTypes.STR, description="text/plain; "
                                        "version=0.0.4 exposition")},
    )
    def get(self, request: Request) -> HttpResponse:
        body = exposition(at_scrape=(RollupLag(), AlertingNow(), ServiceScaling()))
        return HttpResponse(body, content_type=CONTENT_TYPE)
