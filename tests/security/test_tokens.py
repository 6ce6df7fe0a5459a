"""API tokens expire, carry a scope, record their last use, and are listed and revoked by
their user (admins: everyone's) through the API and a page; revocation is immediate."""

from __future__ import annotations

from datetime import timedelta

from django.test import Client
from django.utils import timezone
from rest_framework.test import APIClient

from controlplane.fleet.models import AgentToken, ApiToken
from controlplane.fleet.tokens import issue_agent_token, issue_api_token
from tests.support.clients import bearer_client
from tests.support.roles import user_with_role


def signed_in(username: str, role: str = "viewer") -> APIClient:
    client = APIClient()
    client.force_login(user_with_role(username, role))
    return client


def test_a_user_creates_a_token_that_works_and_is_shown_once(db):
    client = signed_in("ann")
    made = client.post("/api/v1/tokens/", {"name": "grafana", "scope": "read",
                                           "expires_in_days": 30}, format="json")
    assert made.status_code == 201, made.content
    body = made.json()
    assert body["token"].startswith(body["prefix"]) and body["scope"] == "read"
    assert timedelta(days=29) < (ApiToken.objects.get().expires_at - timezone.now()) \
        <= timedelta(days=30)
    assert bearer_client(body["token"]).get("/api/v1/hosts/").status_code == 200
    listed = client.get("/api/v1/tokens/").json()["results"]
    assert [t["name"] for t in listed] == ["grafana"] and "token" not in listed[0]
    assert listed[0]["last_used_at"] is not None


def test_a_token_cannot_create_another(db):
    user_with_role("ann", "admin")
    client = bearer_client(issue_api_token("ann", "ci"))
    response = client.post("/api/v1/tokens/", {"name": "more"}, format="json")
    assert response.status_code == 403 and ApiToken.objects.count() == 1


def test_the_lifetime_is_bounded(db, settings):
    settings.PITWALL = {**settings.PITWALL, "API_TOKEN_MAX_DAYS": 10}
    response = signed_in("ann").post("/api/v1/tokens/", {"name": "x", "expires_in_days": 11},
                                     format="json")
    assert response.status_code == 400 and "expires_in_days" in response.json()
    assert not ApiToken.objects.exists()


def test_revocation_is_immediate_and_only_by_its_user_or_an_admin(db):
    ann = signed_in("ann")
    token = ann.post("/api/v1/tokens/", {"name": "x"}, format="json").json()
    other = signed_in("bob", "deployer")
    assert other.post(f"/api/v1/tokens/{token['id']}/revoke/").status_code == 404  # not listed
    assert ann.post(f"/api/v1/tokens/{token['id']}/revoke/").status_code == 200
    response = bearer_client(token["token"]).get("/api/v1/hosts/")
    assert response.status_code == 401 and "revoked" in response.json()["detail"]


def test_an_admin_lists_and_revokes_everyones_tokens(db):
    user_with_role("ann", "viewer")
    plain = issue_api_token("ann", "anns")
    admin = signed_in("root", "admin")
    listed = admin.get("/api/v1/tokens/?all=1").json()["results"]
    assert [(t["user"], t["name"]) for t in listed] == [("ann", "anns")]
    assert admin.get("/api/v1/tokens/").json()["results"] == []  # own by default
    assert admin.post(f"/api/v1/tokens/{listed[0]['id']}/revoke/").status_code == 200
    assert bearer_client(plain).get("/api/v1/hosts/").status_code == 401


def test_an_expired_token_is_refused_with_its_expiry(db):
    user_with_role("ann", "viewer")
    plain = issue_api_token("ann", "old", expires_at=timezone.now() - timedelta(seconds=1))
    response = bearer_client(plain).get("/api/v1/hosts/")
    assert response.status_code == 401 and "expired" in response.json()["detail"]


def test_agent_tokens_are_listed_and_revoked_by_admins_only(db):
    plain, host = issue_agent_token("gpu-1")
    agent = bearer_client(plain)
    assert agent.get("/api/v1/agent/config").status_code == 200
    token = AgentToken.objects.get()
    assert signed_in("dee", "deployer").post(
        f"/api/v1/agent-tokens/{token.id}/revoke/").status_code == 403
    admin = signed_in("root", "admin")
    assert [t["hostname"] for t in admin.get("/api/v1/agent-tokens/").json()["results"]] \
        == ["gpu-1"]
    assert admin.post(f"/api/v1/agent-tokens/{token.id}/revoke/").status_code == 200
    assert agent.get("/api/v1/agent/config").status_code == 401


def test_the_tokens_page_creates_shows_once_and_revokes(db):
    client = Client()
    client.force_login(user_with_role("ann", "viewer"))
    page = client.post("/account/tokens/", {"name": "cli", "scope": "write",
                                            "expires_in_days": 7})
    html = page.content.decode()
    token = ApiToken.objects.get()
    assert page.status_code == 200
    assert 'id="issued-token"' in html and f"pwu_{token.lookup}_" in html
    assert 'id="issued-token"' not in client.get("/account/tokens/").content.decode()
    client.post(f"/account/tokens/{token.id}/revoke/")
    token.refresh_from_db()
    assert token.revoked_at is not None
