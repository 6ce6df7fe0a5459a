"""The API's Swagger UI for signed-in users: a person who opens it in a browser without a
session is sent to the sign-in page and back, rather than shown a bare 401."""

from __future__ import annotations

from django.contrib.auth.views import redirect_to_login
from drf_spectacular.views import SpectacularSwaggerSplitView
from rest_framework.exceptions import NotAuthenticated

from controlplane.api.permissions import SignedIn


class SwaggerView(SpectacularSwaggerSplitView):
    permission_classes = [SignedIn]

    def handle_exception(self, exc):
        # The page alone: its start-up script (?script) and the schema stay a plain 401.
        if isinstance(exc, NotAuthenticated) and "script" not in self.request.GET:
            return redirect_to_login(self.request.get_full_path())
        return super().handle_exception(exc)
