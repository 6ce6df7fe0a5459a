"""Server-rendered pages. The live dashboard comes with the realtime issue; this is the map."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.db import connection
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import render

from controlplane.fleet.queries import hosts_with_state


@login_required
def fleet(request: HttpRequest) -> HttpResponse:
    return render(request, "web/fleet.html", {"hosts": hosts_with_state()})


def healthz(request: HttpRequest) -> HttpResponse:
    """Unauthenticated liveness for load balancers: says only whether the database answers."""
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
    except Exception:  # noqa: BLE001 - any database failure means "not healthy"
        return JsonResponse({"status": "database unavailable"}, status=503)
    return JsonResponse({"status": "ok"})
