"""Runs GET and HEAD requests with reads from the standby, while it is current.

A request that writes (POST, PUT, PATCH, DELETE) runs on the primary and pins its browser or
client's reads to the primary for a while (a cookie), so the page it redirects to shows what
it just wrote even if the standby has not replayed it yet. The admin, the health check and
the agents' own endpoints always run on the primary. A GET that fails with a database error on
the standby (gone away, a query cancelled by a replay conflict) runs again on the primary.
"""

from __future__ import annotations

import logging
import math
import sys
from collections.abc import Callable

from django.conf import settings
from django.core.signals import got_request_exception
from django.db import DatabaseError
from django.dispatch import receiver
from django.http import HttpRequest, HttpResponse

from controlplane.lib.standby.metrics import READS
from controlplane.lib.standby.router import reading, reading_from_standby
from controlplane.lib.standby.watch import watch

log = logging.getLogger(__name__)

READ_METHODS = frozenset({"GET", "HEAD"})
# The admin edits what it shows; the health check is the primary's; an agent's config is read
# right after ingest told it a new version exists, which a standby may not have replayed yet.
PRIMARY_PATHS = ("/admin/", "/healthz", "/api/v1/agent/")
PIN_COOKIE = "pitwall_read_primary"
STANDBY_ERROR = "_pitwall_standby_error"


def pin_seconds() -> int:
    """Long enough for a write to reach a standby that is still in use (at most the lag limit
    behind, measured once an interval)."""
    return math.ceil(settings.STANDBY_MAX_LAG_S + settings.STANDBY_CHECK_INTERVAL_S)


class ReadFromStandby:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        if request.method not in READ_METHODS:
            response = self.get_response(request)
            response.set_cookie(PIN_COOKIE, "1", max_age=pin_seconds(), httponly=True,
                                samesite="Lax", secure=request.is_secure())
            return response
        if request.path.startswith(PRIMARY_PATHS):
            return self.get_response(request)
        if PIN_COOKIE in request.COOKIES or not watch().usable():
            READS.labels("primary").inc()
            return self.get_response(request)
        READS.labels("standby").inc()
        with reading_from_standby():
            response = self.get_response(request)
        failed = getattr(request, STANDBY_ERROR, None)
        if response.status_code >= 500 and failed is not None:
            # A GET may run again. The watch looks now: a dead standby is skipped from this
            # request on, not from the next check.
            watch().usable(now=True)
            log.warning("%s %s failed on the standby (%s): run again on the primary",
                        request.method, request.path, str(failed).strip().splitlines()[0][:200])
            READS.labels("primary").inc()
            return self.get_response(request)
        return response


@receiver(got_request_exception)
def note_standby_error(sender, request: HttpRequest | None = None, **kwargs) -> None:
    """A database error raised while the request read from the standby (gone away, a query
    cancelled by a replay conflict): Django turns it into a 500 before the middleware sees
    it, so it is noted on the request."""
    error = sys.exc_info()[1]
    if request is not None and reading() and isinstance(error, DatabaseError):
        setattr(request, STANDBY_ERROR, error)
