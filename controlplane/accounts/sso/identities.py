"""The Pitwall user a provider's claims sign in as: created at the first sign-in, its role set
from the group claim at every one."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from django.contrib.auth import get_user_model
from django.contrib.auth.validators import UnicodeUsernameValidator
from django.core.exceptions import ValidationError
from django.db import transaction

from controlplane.accounts.roles import ORDER, assign_role, clear_roles
from controlplane.accounts.sso.mapping import groups_from_claim, role_for_groups
from controlplane.accounts.sso.models import Identity
from controlplane.accounts.sso.policy import sso


class Refused(Exception):
    """This sign-in is refused; the message says why, to the person signing in."""


@transaction.atomic
def user_for_claims(issuer: str, claims: Mapping[str, Any]):
    """The user for the provider's (verified) claims, with its role set from them."""
    subject = claims.get("sub")
    if not isinstance(subject, str) or not subject or len(subject) > 255:
        raise Refused("the provider sent no usable subject (sub)")
    identity = (Identity.objects.select_for_update().select_related("user")
                .filter(issuer=issuer, subject=subject).first())
    user = identity.user if identity else _create(issuer, subject, claims)
    if not user.is_active:
        raise Refused("this account is deactivated in Pitwall: ask an admin")
    _update(user, claims)
    return user


def _create(issuer: str, subject: str, claims: Mapping[str, Any]):
    config = sso()
    username = claims.get(config["USERNAME_CLAIM"])
    if not isinstance(username, str) or not username or len(username) > 150:
        raise Refused(f"the provider sent no usable {config['USERNAME_CLAIM']}")
    try:
        UnicodeUsernameValidator()(username)
    except ValidationError:
        raise Refused(f"{username!r} cannot be a Pitwall account name "
                      "(letters, digits and @ . + - _ only)") from None
    User = get_user_model()
    # A local account of that name (any case) stays its own: it is never taken over.
    if User.objects.filter(username__iexact=username).exists():
        raise Refused(f"the account name {username!r} is already taken by an account that "
                      f"does not sign in with {config['PROVIDER_NAME']}: an admin must rename "
                      "or delete it first")
    user = User.objects.create_user(username)  # no password: it can never sign in with one
    Identity.objects.create(user=user, issuer=issuer, subject=subject)
    return user


def _update(user, claims: Mapping[str, Any]) -> None:
    config = sso()
    email = claims.get("email")
    if isinstance(email, str) and len(email) <= 254 and email != user.email:
        user.email = email
        user.save(update_fields=["email"])
    groups = groups_from_claim(claims.get(config["GROUPS_CLAIM"]))
    role = role_for_groups(groups, config["GROUP_ROLES"])
    held = set(user.groups.filter(name__in=ORDER).values_list("name", flat=True))
    if held == ({role} if role else set()):
        return  # unchanged: nothing for the audit log
    if role is None:
        clear_roles(user)
    else:
        assign_role(user, role)
