"""Issuing and revoking credentials. The plain token is returned once and never stored."""

from __future__ import annotations

from datetime import datetime, timedelta

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import transaction
from django.utils import timezone

from controlplane.fleet.models import AgentToken, ApiToken, Host, TokenScope
from controlplane.lib import tokens


@transaction.atomic
def issue_agent_token(hostname: str) -> tuple[str, Host]:
    """A new token that can write telemetry for ``hostname`` only (the host is created)."""
    host, _ = Host.objects.get_or_create(hostname=hostname)
    token, lookup, digest = tokens.new_token(tokens.AGENT)
    AgentToken.objects.create(host=host, lookup=lookup, digest=digest)
    return token, host


def issue_api_token(username: str, name: str = "", scope: str = TokenScope.WRITE,
                    expires_at: datetime | None = None) -> str:
    """A new token acting as ``username`` with at most that user's rights (``scope`` "read":
    reads only), valid until ``expires_at`` (None: until revoked)."""
    user = get_user_model().objects.get(username=username)
    token, lookup, digest = tokens.new_token(tokens.USER)
    ApiToken.objects.create(user=user, name=name, scope=scope, expires_at=expires_at,
                            lookup=lookup, digest=digest)
    return token


def lifetime_problem(days: int) -> str | None:
    """Why an API token may not live ``days`` days, or None (PITWALL_API_TOKEN_MAX_DAYS)."""
    bound = settings.PITWALL["API_TOKEN_MAX_DAYS"]
    return f"at most {bound} days (PITWALL_API_TOKEN_MAX_DAYS)" if days > bound else None


def expiry_after(days: int | None = None) -> datetime:
    """When a token made now for ``days`` days expires (None: PITWALL_API_TOKEN_DEFAULT_DAYS)."""
    return timezone.now() + timedelta(days=days or settings.PITWALL["API_TOKEN_DEFAULT_DAYS"])


def revoke_api_token(token: ApiToken) -> bool:
    """Revoke one API token now (the next request with it is refused); False if it already
    was. A save, not an update, so the audit log records who revoked it."""
    if token.revoked_at is not None:
        return False
    token.revoked_at = timezone.now()
    token.save(update_fields=["revoked_at"])
    return True


def revoke_agent_tokens(hostname: str) -> int:
    """Revoke every live agent token of ``hostname``, one by one so the audit log has each;
    ingest refuses them from their next batch. Returns how many were revoked."""
    live = AgentToken.objects.filter(host__hostname=hostname, revoked_at__isnull=True)
    return sum(revoke_agent_token(token) for token in live)


def revoke_agent_token(token: AgentToken) -> bool:
    """Revoke one agent token now; False if it already was. A save, so the audit log records
    who revoked it."""
    if token.revoked_at is not None:
        return False
    token.revoked_at = timezone.now()
    token.save(update_fields=["revoked_at"])
    return True
