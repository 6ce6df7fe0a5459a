"""Who may see and change what on the pages: the same Django permissions as the API
(controlplane/accounts/roles.py)."""

from __future__ import annotations

from collections.abc import Callable
from functools import wraps

from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse
from django.utils.http import url_has_allowed_host_and_scheme

View = Callable[..., HttpResponse]


def needs(read: str, write: str | None = None) -> Callable[[View], View]:
    """Signed in with ``read`` to see the page; with ``write`` to POST to it (403 otherwise:
    the page showed no form to a user without it)."""

    def decorate(view: View) -> View:
        @login_required
        @wraps(view)
        def wrapped(request: HttpRequest, *args, **kwargs) -> HttpResponse:
            needed = write if request.method == "POST" else read
            if needed is None or not request.user.has_perm(needed):
                raise PermissionDenied(f"your role does not allow this (needs {needed}); "
                                       "an admin can give you a role")
            return view(request, *args, **kwargs)

        return wrapped

    return decorate


def same_site(request: HttpRequest, url: str | None) -> str | None:
    """``url`` when it leads back into this site ("/deployments/3/"), else None: never to
    another host ("//evil.example", "https://evil.example", "/\\evil.example")."""
    if url and url_has_allowed_host_and_scheme(url, allowed_hosts={request.get_host()},
                                               require_https=request.is_secure()):
        return url
    return None


# The fleet's pages: hosts, GPUs, engines.
read_fleet = needs("fleet.view_host")
