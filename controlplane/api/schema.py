"""OpenAPI extensions: how the schema describes Pitwall's own auth classes."""

from __future__ import annotations

from drf_spectacular.extensions import OpenApiAuthenticationExtension
from drf_spectacular.plumbing import build_bearer_security_scheme_object


class ApiTokenScheme(OpenApiAuthenticationExtension):
    target_class = "controlplane.api.auth.ApiTokenAuthentication"
    name = "apiToken"

    def get_security_definition(self, auto_schema):
        return build_bearer_security_scheme_object(
            header_name="Authorization", token_prefix="Bearer", bearer_format="pwu_…")


class AgentTokenScheme(OpenApiAuthenticationExtension):
    target_class = "controlplane.api.auth.AgentTokenAuthentication"
    name = "agentToken"

    def get_security_definition(self, auto_schema):
        return build_bearer_security_scheme_object(
            header_name="Authorization", token_prefix="Bearer", bearer_format="pwa_…")
