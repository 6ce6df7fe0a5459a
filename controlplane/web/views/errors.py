"""The answer to an unhandled error: 503 with Retry-After while the database is unreachable.

PostgreSQL restarting, failing over or stalled makes every page and API call that touches it
fail with a connection error (or the pool's timeout, which Django reports the same way).
That is an outage to wait out, not a bug: clients and load balancers are told so (503,
``Retry-After``), API clients in JSON, people in a page that says to reload; ingest answers
its own 503s (telemetry/ingest). Every other error stays Django's 500.
"""

from __future__ import annotations

import sys

from django.conf import settings
from django.db import InterfaceError, OperationalError
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views.defaults import server_error as django_server_error

DATABASE_ERRORS = (OperationalError, InterfaceError)
MESSAGE = "the database is unavailable; retry later"


def server_error(request: HttpRequest) -> HttpResponse:
    """``handler500``: Django calls it inside the ``except`` of the unhandled error."""
    if not isinstance(sys.exc_info()[1], DATABASE_ERRORS):
        return django_server_error(request)
    retry_after = str(settings.PITWALL["INGEST_RETRY_AFTER_S"])
    if request.path.startswith("/api/"):
        response: HttpResponse = JsonResponse({"detail": MESSAGE}, status=503)
    else:
        response = HttpResponse(
            f"<!doctype html><title>Pitwall: database unavailable</title>"
            f"<h1>Database unavailable</h1><p>Pitwall cannot reach its database right now; "
            f"reload in {retry_after} seconds.</p>", status=503)
    response["Retry-After"] = retry_after
    response["Cache-Control"] = "no-store"
    return response
