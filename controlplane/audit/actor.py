"""Who is acting now: the signed-in user of the request being served, or the process itself.

The middleware sets the request; the user is read when something is recorded, since the API
authenticates a bearer token inside the view, after every middleware has run.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass

from django.http import HttpRequest


@dataclass(frozen=True)
class Actor:
    name: str
    user_id: int | None
    via: str
    address: str | None
    person: bool  # False for the system (tasks, commands, migrations)


_request: ContextVar[HttpRequest | None] = ContextVar("pitwall_audit_request", default=None)


@contextmanager
def serving(request: HttpRequest) -> Iterator[None]:
    token = _request.set(request)
    try:
        yield
    finally:
        _request.reset(token)


def current() -> Actor:
    request = _request.get()
    user = getattr(request, "user", None) if request is not None else None
    if user is None or not user.is_authenticated or not hasattr(user, "pk"):
        return system()
    return Actor(user.get_username(), user.pk, _via(request), client_address(request), True)


def system() -> Actor:
    path = sys.argv[0] if sys.argv and sys.argv[0] else "python"
    process = os.path.basename(path)
    if process == "__main__.py":  # python -m celery, python -m pytest
        process = os.path.basename(os.path.dirname(path))
    if process == "manage.py" and len(sys.argv) > 1:
        process = f"manage.py {sys.argv[1]}"
    return Actor(f"system: {process}"[:150], None, "system", None, False)


def _via(request: HttpRequest) -> str:
    lookup = getattr(getattr(request, "auth", None), "lookup", None)
    return f"token pwu_{lookup}" if lookup else "session"


def client_address(request: HttpRequest) -> str | None:
    """REMOTE_ADDR: behind a proxy the ASGI server puts the client's address there when told
    to trust the proxy (uvicorn --forwarded-allow-ips, docs/security.md)."""
    return request.META.get("REMOTE_ADDR") or None
