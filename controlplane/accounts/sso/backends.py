"""The two authentication backends: passwords (Django's, with the local-login switch) and
OpenID Connect (mozilla-django-oidc's, finding users by subject, roles from groups)."""

from __future__ import annotations

import logging

from django.contrib.auth import get_user_model
from django.contrib.auth.backends import ModelBackend
from mozilla_django_oidc.auth import OIDCAuthenticationBackend

from controlplane.accounts.sso.identities import Refused, user_for_claims
from controlplane.accounts.sso.policy import password_refusal, sso

log = logging.getLogger(__name__)


class LocalPasswordBackend(ModelBackend):
    """Django's password backend, refusing every password but the break-glass accounts' while
    PITWALL_LOCAL_LOGIN is off: whatever form or view asks it (the sign-in page, /admin/)."""

    def authenticate(self, request, username=None, password=None, **kwargs):
        if username is None:
            username = kwargs.get(get_user_model().USERNAME_FIELD)
        if password is not None and password_refusal(username) is not None:
            return None
        return super().authenticate(request, username=username, password=password, **kwargs)


class OidcBackend(OIDCAuthenticationBackend):
    """The library's authorization-code flow (state, nonce, PKCE, the ID token's signature),
    plus what it leaves to the application: the ID token's issuer and audience, the userinfo
    subject matching the ID token's, and which Pitwall user the claims are."""

    def get_or_create_user(self, access_token, id_token, payload):
        try:
            _check_id_token(payload, sso()["ISSUER"], self.OIDC_RP_CLIENT_ID)
            claims = self.get_userinfo(access_token, id_token, payload)
            if not isinstance(claims, dict) or claims.get("sub") != payload.get("sub"):
                raise Refused("the provider's userinfo is for another subject")
            return user_for_claims(sso()["ISSUER"], claims)
        except Refused as exc:
            log.warning("single sign-on refused (sub %r): %s", payload.get("sub"), exc)
            self.request.sso_refusal = str(exc)
            return None


def _check_id_token(payload: dict, issuer: str, client_id: str) -> None:
    """The library checks the signature and the nonce (and PyJWT the expiry) only."""
    if payload.get("iss") != issuer:
        raise Refused(f"the ID token is from {payload.get('iss')!r}, not {issuer!r}")
    audience = payload.get("aud")
    audiences = audience if isinstance(audience, list) else [audience]
    if client_id not in audiences or (len(audiences) > 1 and payload.get("azp") != client_id):
        raise Refused("the ID token is not meant for Pitwall (aud)")
    if "exp" not in payload:
        raise Refused("the ID token has no expiry (exp)")

