"""Who may read what through the API."""

from __future__ import annotations

from rest_framework.permissions import SAFE_METHODS, BasePermission


class CanReadFleet(BasePermission):
    """Any active, signed-in user reads the whole fleet: there are no teams yet.

    Agent tokens never get here: ApiTokenAuthentication refuses them with a 401.
    """

    message = "sign in, or send a user API token: Authorization: Bearer pwu_…"

    def has_permission(self, request, view) -> bool:
        user = request.user
        return bool(user and user.is_authenticated and user.is_active)


class StaffWrites(CanReadFleet):
    """Every active user reads; only staff users (the operators) write."""

    def has_permission(self, request, view) -> bool:
        if not super().has_permission(request, view):
            return False
        return request.method in SAFE_METHODS or bool(request.user.is_staff)


class CanManageAlerting(StaffWrites):
    """A rule decides who is paged and a channel holds webhook secrets: changing either is an
    operator's decision, while acks and silences stay open to everyone on call."""

    message = "only staff users may change alert rules and channels"


class CanManageDeployments(StaffWrites):
    """A change restarts vLLM on a host: an operator's decision."""

    message = "only staff users may change deployments"


class IsAgent(BasePermission):
    message = "send the host's agent token: Authorization: Bearer pwa_…"

    def has_permission(self, request, view) -> bool:
        return getattr(request.user, "host_id", None) is not None
