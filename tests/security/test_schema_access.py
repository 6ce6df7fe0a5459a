"""The OpenAPI schema and its Swagger UI are for signed-in users: a session or a user API
token, whatever the role; anonymous requests and agent tokens are refused."""

from __future__ import annotations

import pytest
from django.test import Client
from rest_framework.test import APIClient

from controlplane.fleet.models import TokenScope
from controlplane.fleet.tokens import issue_api_token
from tests.support.clients import bearer_client
from tests.support.roles import user_with_role

PAGES = ("/api/v1/schema/", "/api/v1/schema/?format=json", "/api/v1/docs/",
         "/api/v1/docs/?script=")
# What a program fetches: refused outright. The page itself sends a browser to sign in.
MACHINE_READ = tuple(p for p in PAGES if p != "/api/v1/docs/")


@pytest.mark.parametrize("url", MACHINE_READ)
def test_anonymous_requests_get_nothing_of_the_schema(db, url):
    response = APIClient().get(url)
    assert response.status_code == 401, response.content
    assert b"/api/v1/hosts/" not in response.content and b"swagger" not in response.content


def test_an_anonymous_browser_is_sent_to_sign_in_and_back(db):
    response = Client().get("/api/v1/docs/")
    assert response.status_code == 302
    assert response["Location"] == "/accounts/login/?next=/api/v1/docs/"


@pytest.mark.parametrize("url", PAGES)
def test_an_agent_token_gets_nothing_of_the_schema(agent_client, url):
    assert agent_client.get(url).status_code == 401


@pytest.mark.parametrize("url", PAGES)
def test_a_signed_in_user_without_a_role_reads_the_schema(db, url):
    browser = Client()
    browser.force_login(user_with_role("nobody", None))
    assert browser.get(url).status_code == 200


def test_a_read_only_token_reads_the_schema(db):
    user_with_role("reader", "viewer")
    client = bearer_client(issue_api_token("reader", "docs", scope=TokenScope.READ))
    response = client.get("/api/v1/schema/?format=json")
    assert response.status_code == 200 and "/api/v1/hosts/" in response.json()["paths"]


def test_an_inactive_user_is_refused(db):
    browser = Client()
    browser.force_login(user_with_role("gone", "admin", is_active=False))
    assert browser.get("/api/v1/schema/").status_code in (401, 403)
