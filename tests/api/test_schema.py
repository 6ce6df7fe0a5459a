"""The OpenAPI schema: generated without warnings, valid, and served."""

from __future__ import annotations

from django.core.management import call_command


def test_the_schema_validates_without_a_single_warning(tmp_path):
    out = tmp_path / "schema.yaml"
    # --fail-on-warn raises on any warning; --validate checks it against the OpenAPI spec.
    call_command("spectacular", "--validate", "--fail-on-warn", "--file", str(out))
    text = out.read_text()
    for path in ("/api/v1/hosts/{id}/", "/api/v1/gpus/", "/api/v1/engines/", "/api/v1/series/"):
        assert f"  {path}:" in text
    for path in ALERTING_PATHS + SECURITY_PATHS:
        assert f"  {path}:" in text


ALERTING_PATHS = (
    "/api/v1/alert-rules/", "/api/v1/alert-rules/{id}/", "/api/v1/alert-rules/preview/",
    "/api/v1/alerts/", "/api/v1/alerts/{id}/", "/api/v1/alerts/{id}/ack/",
    "/api/v1/alerts/{id}/unack/", "/api/v1/silences/", "/api/v1/silences/{id}/",
    "/api/v1/silences/{id}/expire/", "/api/v1/channels/", "/api/v1/channels/{id}/",
    "/api/v1/channels/{id}/test/", "/api/v1/channels/{id}/enable/",
    "/api/v1/channels/{id}/disable/", "/api/v1/notifications/", "/api/v1/notifications/{id}/",
)


SECURITY_PATHS = (
    "/api/v1/tokens/", "/api/v1/tokens/{id}/", "/api/v1/tokens/{id}/revoke/",
    "/api/v1/agent-tokens/", "/api/v1/agent-tokens/{id}/revoke/", "/api/v1/audit/",
    "/api/v1/audit/{id}/", "/api/v1/users/", "/api/v1/users/{id}/",
)


def test_the_schema_and_docs_routes_answer(api):
    assert api.get("/api/v1/schema/").status_code == 200
    assert api.get("/api/v1/docs/").status_code == 200
