"""The four roles, as Django groups with Django permissions (docs/security.md).

Each role holds the one before it: a viewer reads; an operator also acknowledges and silences
alerts; a deployer also changes deployments (code on GPU hosts) and decides on suggestions; an
admin also changes alert rules, channels, users and tokens, and reads the audit log. A
superuser holds every permission without a group.

A permission is "app_label.codename"; a trailing "*" matches a prefix ("alerts.view_*").
"""

from __future__ import annotations

from fnmatch import fnmatchcase

# The apps whose objects Pitwall's pages and API show.
FLEET_APPS = ("fleet", "telemetry", "alerts", "tuning")
# Credentials are listed per owner (one's own tokens) unless one may administer them.
PRIVATE_VIEWS = ("fleet.view_apitoken", "fleet.view_agenttoken")

VIEWER = "viewer"
OPERATOR = "operator"
DEPLOYER = "deployer"
ADMIN = "admin"

_GRANTS: dict[str, tuple[str, ...]] = {
    VIEWER: tuple(f"{app}.view_*" for app in FLEET_APPS),
    OPERATOR: ("alerts.ack_alert", "alerts.add_silence", "alerts.change_silence"),
    DEPLOYER: ("fleet.add_deployment", "fleet.change_deployment", "fleet.delete_deployment",
               "fleet.deploy_code", "tuning.decide_suggestion", "fleet.add_service",
               "fleet.change_service", "fleet.delete_service", "fleet.change_host"),
    ADMIN: (*(f"{app}.*" for app in FLEET_APPS), "auth.*", "audit.view_auditentry"),
}
ORDER = (VIEWER, OPERATOR, DEPLOYER, ADMIN)


def grants(role: str) -> tuple[str, ...]:
    """The patterns a role holds, its own and those of every role before it."""
    held = ORDER[: ORDER.index(role) + 1]
    return tuple(pattern for name in held for pattern in _GRANTS[name])


def holds(role: str, permission: str) -> bool:
    """Whether ``role`` holds ``permission`` ("app_label.codename")."""
    if role != ADMIN and permission in PRIVATE_VIEWS:
        return False
    return any(fnmatchcase(permission, pattern) for pattern in grants(role))


def sync_roles(apps, using: str = "default") -> None:
    """Create the role groups and give each exactly its permissions (idempotent).

    ``apps`` is Django's registry or a migration's historical one; the permissions must exist.
    """
    Group = apps.get_model("auth", "Group")
    Permission = apps.get_model("auth", "Permission")
    every = list(Permission.objects.using(using).select_related("content_type"))
    for role in ORDER:
        group, _ = Group.objects.using(using).get_or_create(name=role)
        group.permissions.set([p for p in every if holds(role, _name(p))])


def _name(permission) -> str:
    return f"{permission.content_type.app_label}.{permission.codename}"


def assign_role(user, role: str) -> None:
    """Make ``role`` the user's only role (other groups are kept)."""
    from django.contrib.auth.models import Group

    if role not in ORDER:
        raise ValueError(f"unknown role {role!r}: one of {', '.join(ORDER)}")
    others = user.groups.filter(name__in=[r for r in ORDER if r != role])
    if others:
        user.groups.remove(*others)
    user.groups.add(Group.objects.get(name=role))


def clear_roles(user) -> None:
    """Take every role away (the user keeps other groups)."""
    held = user.groups.filter(name__in=ORDER)
    if held:
        user.groups.remove(*held)


def role_of(user) -> str | None:
    """The highest role the user holds through a group ("admin" for a superuser)."""
    if user.is_superuser:
        return ADMIN
    names = set(user.groups.values_list("name", flat=True))
    return next((r for r in reversed(ORDER) if r in names), None)
