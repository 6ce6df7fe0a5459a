"""Issuing and revoking credentials. The plain token is returned once and never stored."""

from __future__ import annotations

from django.contrib.auth import get_user_model
from django.db import transaction
from django.utils import timezone

from controlplane.fleet.models import AgentToken, ApiToken, Host
from controlplane.lib import tokens


@transaction.atomic
def issue_agent_token(hostname: str) -> tuple[str, Host]:
    """A new token that can write telemetry for ``hostname`` only (the host is created)."""
    host, _ = Host.objects.get_or_create(hostname=hostname)
    token, lookup, digest = tokens.new_token(tokens.AGENT)
    AgentToken.objects.create(host=host, lookup=lookup, digest=digest)
    return token, host


def issue_api_token(username: str, name: str = "") -> str:
    user = get_user_model().objects.get(username=username)
    token, lookup, digest = tokens.new_token(tokens.USER)
    ApiToken.objects.create(user=user, name=name, lookup=lookup, digest=digest)
    return token


def revoke_agent_tokens(hostname: str) -> int:
    return AgentToken.objects.filter(host__hostname=hostname, revoked_at__isnull=True).update(
        revoked_at=timezone.now())
