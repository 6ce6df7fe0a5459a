"""Who may read what through the API."""

from __future__ import annotations

from rest_framework.permissions import BasePermission


class CanReadFleet(BasePermission):
    """Any active, signed-in user reads the whole fleet: there are no teams yet.

    Agent tokens never get here: ApiTokenAuthentication refuses them with a 401.
    """

    message = "sign in, or send a user API token: Authorization: Bearer pwu_…"

    def has_permission(self, request, view) -> bool:
        user = request.user
        return bool(user and user.is_authenticated and user.is_active)
