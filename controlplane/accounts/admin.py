"""Django's /admin/ for users and roles, under the rules the Users API applies
(controlplane/accounts/users.py, docs/security.md "Roles").

Django's own UserAdmin lets anyone holding ``auth.change_user`` (every admin) tick
``is_superuser`` on themselves, grant any permission directly, and set a superuser's password:
each a way past their role. Here a user who is not a superuser:

- cannot change or set the password of a superuser (only a superuser changes a superuser);
- cannot set ``is_superuser`` or direct permissions on anyone (roles are the only grants);
- cannot change their own role, staff flag or whether they may sign in (ask another admin);
- cannot edit what a role holds (the groups are defined in roles.py and re-synced at migrate).

Nobody deletes users here: they are deactivated, so that the audit log and the revisions
they authored keep naming them.
"""

from __future__ import annotations

from django.contrib import admin
from django.contrib.auth.admin import GroupAdmin, UserAdmin
from django.contrib.auth.models import Group, User

from controlplane.accounts import users

# What only a superuser may set, on anyone.
SUPERUSER_FIELDS = ("is_superuser", "user_permissions")
# What nobody changes on their own account.
OWN_FIELDS = ("is_active", "is_staff", "is_superuser", "groups", "user_permissions")


class RuledUserAdmin(UserAdmin):
    def has_change_permission(self, request, obj=None) -> bool:
        # Also guards the password form: Django's user_change_password checks this first.
        if obj is not None and not _may_change(request.user, obj):
            return False
        return super().has_change_permission(request, obj)

    def has_delete_permission(self, request, obj=None) -> bool:
        return False

    def get_readonly_fields(self, request, obj=None) -> tuple[str, ...]:
        fields = set(super().get_readonly_fields(request, obj))
        if not request.user.is_superuser:
            fields.update(SUPERUSER_FIELDS)
        if obj is not None and obj.pk == request.user.pk:
            fields.update(OWN_FIELDS)
        return tuple(sorted(fields))


def _may_change(actor, user) -> bool:
    try:
        users.check_may_change(actor, user)
    except users.Refused:
        return False
    return True


class SuperuserOnlyGroupAdmin(GroupAdmin):
    """Roles are read here; only a superuser edits them (an admin adding permissions to the
    admin group would grant themselves what their role does not hold)."""

    def has_add_permission(self, request) -> bool:
        return request.user.is_superuser

    def has_change_permission(self, request, obj=None) -> bool:
        return request.user.is_superuser

    def has_delete_permission(self, request, obj=None) -> bool:
        return request.user.is_superuser


admin.site.unregister(User)
admin.site.register(User, RuledUserAdmin)
admin.site.unregister(Group)
admin.site.register(Group, SuperuserOnlyGroupAdmin)
