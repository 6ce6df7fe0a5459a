"""Who may sign in with a password, and the settings single sign-on reads."""

from __future__ import annotations

from typing import Any

from django.conf import settings


def sso() -> dict[str, Any]:
    return settings.PITWALL_SSO


def password_refusal(username: str | None) -> str | None:
    """Why a password sign-in as ``username`` is refused, or None when it may go ahead.

    With PITWALL_LOCAL_LOGIN=off only the break-glass accounts (PITWALL_BREAK_GLASS_USERS) sign
    in with a password: everyone else goes through the identity provider, which is where an
    organisation turns people's access on and off.
    """
    config = sso()
    if config["LOCAL_LOGIN"] or (username is not None and username in config["BREAK_GLASS_USERS"]):
        return None
    return (f"Password sign-in is turned off for this account: sign in with "
            f"{config['PROVIDER_NAME']}.")


def not_a_password_attempt(request, credentials: dict | None) -> bool:
    """For django-axes: the login throttle is for password guesses only. A single sign-on
    callback carries no password; the provider throttles its own sign-in."""
    return (credentials or {}).get("password") is None
