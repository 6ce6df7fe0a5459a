"""API authentication: ``Authorization: Bearer …`` with a user API token (the API) or an agent
token (the agent's own endpoints). Only an HMAC of each token is stored (lib/tokens.py)."""

from __future__ import annotations

from datetime import timedelta

from django.utils import timezone
from rest_framework import authentication, exceptions

from controlplane.fleet.models import AgentToken, ApiToken
from controlplane.lib import tokens


class BearerTokenAuthentication(authentication.BaseAuthentication):
    """A Pitwall token of one kind; ``found`` turns its live row into (user, auth)."""

    keyword = "Bearer"
    kind: str
    model: type[AgentToken] | type[ApiToken]
    name: str  # in messages: "user API token", "agent token"

    def authenticate(self, request):
        raw = tokens.bearer(request.META.get("HTTP_AUTHORIZATION"))
        if raw is None:
            return None
        parsed = tokens.parse(raw)
        if parsed is None or parsed.kind != self.kind:
            raise exceptions.AuthenticationFailed(f"not a Pitwall {self.name}")
        now = timezone.now()
        token = self.rows().filter(lookup=parsed.lookup, revoked_at__isnull=True).first()
        if token is None or not tokens.matches(token.digest, parsed):
            raise exceptions.AuthenticationFailed(f"unknown or revoked {self.name}")
        if token.expires_at is not None and token.expires_at <= now:
            raise exceptions.AuthenticationFailed(
                f"this {self.name} expired at {token.expires_at:%Y-%m-%d %H:%M} UTC")
        _note_use(token, now)
        return self.found(token)

    def rows(self):
        return self.model.objects.all()

    def found(self, token):
        raise NotImplementedError

    def authenticate_header(self, request) -> str:
        return self.keyword


# last_used_at is written at most this often per token: a script polling the API every second
# should not cost a row update per request.
LAST_USED_RESOLUTION = timedelta(minutes=1)


def _note_use(token: AgentToken | ApiToken, now) -> None:
    if token.last_used_at is None or now - token.last_used_at >= LAST_USED_RESOLUTION:
        type(token).objects.filter(pk=token.pk).update(last_used_at=now)


class ApiTokenAuthentication(BearerTokenAuthentication):
    kind, model, name = tokens.USER, ApiToken, "user API token"

    def rows(self):
        return ApiToken.objects.select_related("user")

    def found(self, token: ApiToken):
        if not token.user.is_active:
            raise exceptions.AuthenticationFailed("the token's user is inactive")
        return token.user, token


class AgentPrincipal:
    """The host an agent token writes for; it stands as request.user on the agent endpoints."""

    is_authenticated = True
    is_active = True
    is_staff = False

    def __init__(self, host_id: int) -> None:
        self.host_id = host_id

    def __str__(self) -> str:
        return f"agent of host {self.host_id}"


class AgentTokenAuthentication(BearerTokenAuthentication):
    """Agent tokens on the agent's own endpoints: each reads and writes its own host only."""

    kind, model, name = tokens.AGENT, AgentToken, "agent token"

    def found(self, token: AgentToken):
        return AgentPrincipal(token.host_id), token
