"""Users with a role, as the tests need them."""

from __future__ import annotations

from django.contrib.auth import get_user_model

from controlplane.accounts.roles import assign_role


def user_with_role(username: str, role: str | None, **fields):
    """A new user holding ``role`` (None: no role at all)."""
    user = get_user_model().objects.create_user(username, **fields)
    if role is not None:
        assign_role(user, role)
    return user
