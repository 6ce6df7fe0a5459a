"""Who may change what on the pages: rules, channels and deployments are staff's; any
signed-in user may read them, acknowledge alerts and silence them."""

from __future__ import annotations

from collections.abc import Callable
from functools import wraps

from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse


def staff_to_change(view: Callable[..., HttpResponse]) -> Callable[..., HttpResponse]:
    """Signed in to read; staff to POST (403 otherwise: the page said it is read-only)."""

    @login_required
    @wraps(view)
    def wrapped(request: HttpRequest, *args, **kwargs) -> HttpResponse:
        if request.method == "POST" and not request.user.is_staff:
            raise PermissionDenied("only staff users may change this")
        return view(request, *args, **kwargs)

    return wrapped
