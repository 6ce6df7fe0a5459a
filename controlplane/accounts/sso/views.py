"""The sign-in page (passwords, and the provider's button) and the provider's callback."""

from __future__ import annotations

import logging
from collections.abc import Callable

import requests
from django.contrib import messages
from django.contrib.auth.views import LoginView
from django.core.exceptions import SuspiciousOperation
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect
from mozilla_django_oidc.views import (
    OIDCAuthenticationCallbackView,
    OIDCAuthenticationRequestView,
)

from controlplane.accounts.sso.forms import PasswordLoginForm
from controlplane.accounts.sso.policy import sso

log = logging.getLogger(__name__)


class SignInView(LoginView):
    form_class = PasswordLoginForm

    def get_context_data(self, **kwargs):
        config = sso()
        return {**super().get_context_data(**kwargs), "sso_enabled": config["ENABLED"],
                "sso_provider": config["PROVIDER_NAME"], "local_login": config["LOCAL_LOGIN"]}


class SignInCallbackView(OIDCAuthenticationCallbackView):
    """The library's callback; a failure goes back to the sign-in page saying why, instead of
    to "/" in silence (or a 500 when the provider is down)."""

    def get(self, request):
        try:
            return super().get(request)
        except SuspiciousOperation as exc:
            log.warning("single sign-on callback refused: %s", exc)
            request.sso_refusal = "the provider's answer did not check out; try again"
        except requests.RequestException as exc:
            log.warning("single sign-on: the provider did not answer: %s", exc)
            request.sso_refusal = "the identity provider did not answer; try again later"
        return self.login_failure()

    def login_failure(self):
        reason = getattr(self.request, "sso_refusal", None) or "sign-in was not completed"
        messages.error(self.request, f"Sign-in with {sso()['PROVIDER_NAME']} failed: {reason}.")
        return redirect("login")


def only_when_configured(view: Callable[..., HttpResponse]) -> Callable[..., HttpResponse]:
    """The routes exist always; without PITWALL_OIDC_CLIENT_ID they are a 404 (the library's
    views would raise for their missing settings)."""

    def wrapped(request: HttpRequest, *args, **kwargs) -> HttpResponse:
        if not sso()["ENABLED"]:
            raise Http404("single sign-on is not configured")
        return view(request, *args, **kwargs)

    return wrapped


authenticate = only_when_configured(OIDCAuthenticationRequestView.as_view())
callback = only_when_configured(SignInCallbackView.as_view())
