"""From the provider's group claim to one of Pitwall's roles.

PITWALL_OIDC_GROUP_ROLES="pitwall-admins=admin,pitwall-ops=operator": each group names the
role it gives; a user in several mapped groups gets the highest of their roles; in none, no
role at all. Read at every sign-in, so a user taken out of a group loses its role then.
"""

from __future__ import annotations

from collections.abc import Iterable

from controlplane.accounts.roles import ORDER
from controlplane.lib.env import ConfigError


def parse_group_roles(text: str, name: str = "PITWALL_OIDC_GROUP_ROLES") -> dict[str, str]:
    """``group=role,group=role`` as a dict; a bad item stops the process at start."""
    mapping: dict[str, str] = {}
    for item in (part.strip() for part in text.split(",")):
        if not item:
            continue
        # rpartition: a group name may hold "=" (LDAP DNs do), a role never does.
        group, equals, role = (side.strip() for side in item.rpartition("="))
        if not equals or not group:
            raise ConfigError(f"{name}: {item!r} is not group=role")
        if role not in ORDER:
            raise ConfigError(f"{name}: {item!r} names no role (one of {', '.join(ORDER)})")
        if mapping.get(group, role) != role:
            raise ConfigError(f"{name}: group {group!r} is mapped to two roles")
        mapping[group] = role
    return mapping


def groups_from_claim(value: object) -> list[str]:
    """The claim's group names: a list of strings (or one string); anything else is none."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, list | tuple):
        return [group for group in value if isinstance(group, str)]
    return []


def role_for_groups(groups: Iterable[str], mapping: dict[str, str]) -> str | None:
    """The highest role the groups map to, or None."""
    roles = {mapping[group] for group in groups if group in mapping}
    return max(roles, key=ORDER.index, default=None)
