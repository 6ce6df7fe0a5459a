"""Pages and the API while PostgreSQL is unreachable: 503 with Retry-After, never a bare 500."""

from __future__ import annotations

import psycopg
import pytest
from django.db import connection
from django.db.utils import DatabaseErrorWrapper
from django.test import RequestFactory

from controlplane.web.views.errors import server_error


def answer_during(error_source, path: str):
    """The handler's answer, called as Django calls it: inside the ``except`` of the error."""
    request = RequestFactory().get(path)
    try:
        error_source()
    except Exception:  # noqa: BLE001 - the handler reads the active exception
        return server_error(request)
    raise AssertionError("no error was raised")


def unreachable_database() -> None:
    """A real connection refused (nothing listens on port 1), as Django's backend reports it."""
    with DatabaseErrorWrapper(connection):
        psycopg.connect("host=127.0.0.1 port=1 dbname=pitwall", connect_timeout=2)


@pytest.mark.parametrize("path", ["/api/v1/hosts/", "/hosts/1/"])
def test_a_database_outage_answers_503_with_retry_after(path, settings):
    response = answer_during(unreachable_database, path)
    assert response.status_code == 503
    assert response["Retry-After"] == str(settings.PITWALL["INGEST_RETRY_AFTER_S"])
    assert b"database is unavailable" in response.content or b"Database unavailable" in \
        response.content
    if path.startswith("/api/"):
        assert response["Content-Type"] == "application/json"


def test_any_other_error_stays_a_500():
    response = answer_during(lambda: 1 / 0, "/api/v1/hosts/")
    assert response.status_code == 500
    assert not response.has_header("Retry-After")
