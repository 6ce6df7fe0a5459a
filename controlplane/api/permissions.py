"""Who may do what through the API: Django permissions, held through the roles
(controlplane/accounts/roles.py, docs/security.md).

Every class needs an active, signed-in user; reads need ``read`` and writes ``write`` (both
"app_label.codename"). A read-only token never writes, whatever its user may do: a token
carries at most its user's rights.
"""

from __future__ import annotations

from rest_framework.permissions import SAFE_METHODS, BasePermission

from controlplane.fleet.models import TokenScope


class Needs(BasePermission):
    read = "fleet.view_host"
    write: str | None = None  # None: the view writes nothing
    message = "your role does not allow this"

    def has_permission(self, request, view) -> bool:
        if not self.signed_in(request) or not self.scope_allows(request):
            return False
        if not _handled(view, request.method):
            return True  # the view answers 405 Method Not Allowed, which says more than a 403
        needed = self.needed(request, view)
        if needed is None or not request.user.has_perm(needed):
            self.message = f"your role does not allow this (needs the permission {needed})"
            return False
        return True

    def needed(self, request, view) -> str | None:
        return self.read if request.method in SAFE_METHODS else self.write

    def signed_in(self, request) -> bool:
        """An active user, by session or user API token (not an agent token)."""
        user = request.user
        if user and user.is_authenticated and user.is_active and hasattr(user, "has_perm"):
            return True
        self.message = "sign in, or send a user API token: Authorization: Bearer pwu_…"
        return False

    def scope_allows(self, request) -> bool:
        """A read-only token reads, whatever the method would do and whatever its user may:
        checked before anything else so that no view, action or subclass can forget it."""
        if request.method in SAFE_METHODS or getattr(request.auth, "scope",
                                                     None) != TokenScope.READ:
            return True
        self.message = "this API token is read-only"
        return False


class SignedIn(Needs):
    """Any active user, whatever their role (their own tokens, the API's schema)."""

    def has_permission(self, request, view) -> bool:
        return self.signed_in(request) and self.scope_allows(request)


def _handled(view, method: str) -> bool:
    action_map = getattr(view, "action_map", None)  # a viewset's methods -> actions
    if action_map is not None:
        return method.lower() in action_map
    return hasattr(view, method.lower())


def needs(read: str, write: str | None = None, name: str = "") -> type[Needs]:
    return type(name or f"Needs_{read}_{write}", (Needs,), {"read": read, "write": write})


# Reading the fleet: hosts, GPUs, engines, series, alerts (any role).
CanReadFleet = needs("fleet.view_host", name="CanReadFleet")
CanManageRules = needs("alerts.view_alertrule", "alerts.change_alertrule", "CanManageRules")
# Previewing a draft rule runs its queries: for those who may write rules.
CanEditRules = needs("alerts.change_alertrule", "alerts.change_alertrule", "CanEditRules")
CanManageChannels = needs("alerts.view_channel", "alerts.change_channel", "CanManageChannels")
CanSilence = needs("alerts.view_silence", "alerts.add_silence", "CanSilence")
CanAck = needs("alerts.view_alert", "alerts.ack_alert", "CanAck")
CanManageDeployments = needs("fleet.view_deployment", "fleet.change_deployment",
                             "CanManageDeployments")
CanDecideSuggestions = needs("tuning.view_suggestion", "tuning.decide_suggestion",
                             "CanDecideSuggestions")
CanReadAudit = needs("audit.view_auditentry", name="CanReadAudit")
# Host labels steer where services place their replicas: deployers set them.
CanLabelHosts = needs("fleet.view_host", "fleet.change_host", "CanLabelHosts")


class CanManageServices(Needs):
    """Every role reads services; creating, changing (a revert too) and deleting each need
    their own permission, as Django names them."""

    read = "fleet.view_service"
    by_action = {"create": "fleet.add_service", "destroy": "fleet.delete_service"}

    def needed(self, request, view) -> str | None:
        if request.method in SAFE_METHODS:
            return self.read
        return self.by_action.get(getattr(view, "action", None), "fleet.change_service")


class IsAgent(BasePermission):
    message = "send the host's agent token: Authorization: Bearer pwa_…"

    def has_permission(self, request, view) -> bool:
        return getattr(request.user, "host_id", None) is not None
