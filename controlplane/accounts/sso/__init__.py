"""Single sign-on: OpenID Connect through mozilla-django-oidc, and the switch that turns
passwords off for everyone but the break-glass accounts (docs/security.md, "Single sign-on").

An app of its own (label ``sso``) for its one model, the link from a provider's subject to a
Pitwall user. Everything reads ``settings.PITWALL_SSO``; the library's own ``OIDC_*`` settings
exist only while single sign-on is configured.
"""
