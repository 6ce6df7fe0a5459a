"""Makes the request being served the actor of anything recorded while it runs."""

from __future__ import annotations

from collections.abc import Callable

from django.http import HttpRequest, HttpResponse

from controlplane.audit import actor


class AuditActorMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        with actor.serving(request):
            return self.get_response(request)
