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


def test_the_schema_and_docs_routes_answer(api):
    assert api.get("/api/v1/schema/").status_code == 200
    assert api.get("/api/v1/docs/").status_code == 200
