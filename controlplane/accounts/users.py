"""Changing users as an admin: their role, whether they may sign in, their password.

The guards keep an admin from locking themselves out and keep a non-superuser from changing
a superuser (whose password would give them every permission).
"""

from __future__ import annotations

from django.contrib.auth import get_user_model
from django.contrib.auth.password_validation import validate_password
from django.db import transaction

from controlplane.accounts.roles import assign_role, clear_roles


class Refused(Exception):
    """The change is not allowed; the message says why."""


def check_may_change(actor, user) -> None:
    if user.is_superuser and not actor.is_superuser:
        raise Refused("only a superuser may change a superuser")


@transaction.atomic
def create_user(actor, username: str, password: str, role: str | None, email: str = ""):
    user = get_user_model()(username=username, email=email)
    validate_password(password, user)  # ValidationError: the caller shows its messages
    user.set_password(password)
    user.save()
    set_role(actor, user, role)
    return user


def set_role(actor, user, role: str | None) -> None:
    check_may_change(actor, user)
    if user.pk == actor.pk:
        raise Refused("you cannot change your own role: ask another admin")
    if role is None:
        clear_roles(user)
    else:
        assign_role(user, role)


def set_active(actor, user, active: bool) -> None:
    check_may_change(actor, user)
    if user.pk == actor.pk and not active:
        raise Refused("you cannot deactivate yourself: ask another admin")
    user.is_active = active
    user.save(update_fields=["is_active"])


def set_password(actor, user, password: str) -> None:
    check_may_change(actor, user)
    validate_password(password, user)
    user.set_password(password)
    user.save(update_fields=["password"])
