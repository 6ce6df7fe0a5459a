"""API authentication: user API tokens in ``Authorization: Bearer …``."""

from __future__ import annotations

from django.utils import timezone
from rest_framework import authentication, exceptions

from controlplane.fleet.models import AgentToken, ApiToken
from controlplane.lib import tokens


class ApiTokenAuthentication(authentication.BaseAuthentication):
    keyword = "Bearer"

    def authenticate(self, request):
        raw = tokens.bearer(request.META.get("HTTP_AUTHORIZATION"))
        if raw is None:
            return None
        parsed = tokens.parse(raw)
        if parsed is None or parsed.kind != tokens.USER:
            raise exceptions.AuthenticationFailed("not a Pitwall user API token")
        token = (
            ApiToken.objects.select_related("user")
            .filter(lookup=parsed.lookup, revoked_at__isnull=True)
            .first()
        )
        if token is None or not tokens.matches(token.digest, parsed):
            raise exceptions.AuthenticationFailed("unknown or revoked API token")
        if not token.user.is_active:
            raise exceptions.AuthenticationFailed("the token's user is inactive")
        ApiToken.objects.filter(pk=token.pk).update(last_used_at=timezone.now())
        return token.user, token

    def authenticate_header(self, request) -> str:
        return self.keyword


class AgentPrincipal:
    """The host an agent token writes for; it stands as request.user on the agent endpoints."""

    is_authenticated = True
    is_active = True
    is_staff = False

    def __init__(self, host_id: int) -> None:
        self.host_id = host_id

    def __str__(self) -> str:
        return f"agent of host {self.host_id}"


class AgentTokenAuthentication(authentication.BaseAuthentication):
    """Agent tokens on the agent's own endpoints: each reads and writes its own host only."""

    keyword = "Bearer"

    def authenticate(self, request):
        raw = tokens.bearer(request.META.get("HTTP_AUTHORIZATION"))
        if raw is None:
            return None
        parsed = tokens.parse(raw)
        if parsed is None or parsed.kind != tokens.AGENT:
            raise exceptions.AuthenticationFailed("not a Pitwall agent token")
        token = AgentToken.objects.filter(lookup=parsed.lookup, revoked_at__isnull=True).first()
        if token is None or not tokens.matches(token.digest, parsed):
            raise exceptions.AuthenticationFailed("unknown or revoked agent token")
        return AgentPrincipal(token.host_id), token

    def authenticate_header(self, request) -> str:
        return self.keyword
