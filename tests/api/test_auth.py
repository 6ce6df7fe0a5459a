"""Who may read the API: users by token or session; nobody else, agents included."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.utils import timezone
from rest_framework.test import APIClient

from controlplane.fleet.models import ApiToken
from controlplane.fleet.tokens import issue_api_token

pytestmark = pytest.mark.usefixtures("mixed_fleet")

URLS = [
    "/api/v1/hosts/",
    "/api/v1/gpus/",
    "/api/v1/engines/",
    "/api/v1/series/?metric=host.cpu_pct&entity=gpu-node-1",
]


def bearer_client(token: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    return client


@pytest.fixture
def detail_urls(mixed_fleet) -> list[str]:
    return [f"/api/v1/hosts/{mixed_fleet.online_host.id}/", f"/api/v1/gpus/{mixed_fleet.gpu.id}/",
            f"/api/v1/engines/{mixed_fleet.engine.id}/"]


@pytest.mark.parametrize("url", URLS)
def test_it_serves_a_user_with_a_token(api, url):
    assert api.get(url).status_code == 200


@pytest.mark.parametrize("url", URLS)
def test_it_serves_a_second_user_signed_in_with_a_session(bob_session, url):
    assert bob_session.get(url).status_code == 200


@pytest.mark.parametrize("url", URLS)
def test_it_refuses_an_anonymous_client_with_401_and_a_bearer_challenge(anonymous, url):
    response = anonymous.get(url)
    assert response.status_code == 401
    assert response["WWW-Authenticate"] == "Bearer"


@pytest.mark.parametrize("url", URLS)
def test_it_refuses_an_agent_token(agent_client, url):
    response = agent_client.get(url)
    assert response.status_code == 401
    assert "user API token" in response.json()["detail"]


def test_it_refuses_agent_tokens_and_anonymous_clients_on_detail_routes(
        detail_urls, agent_client, anonymous, api):
    for url in detail_urls:
        assert api.get(url).status_code == 200
        assert agent_client.get(url).status_code == 401
        assert anonymous.get(url).status_code == 401


def test_it_refuses_a_revoked_token(api, alice_token):
    ApiToken.objects.update(revoked_at=timezone.now())
    assert api.get("/api/v1/hosts/").status_code == 401


def test_it_refuses_the_token_of_an_inactive_user(api, alice):
    alice.is_active = False
    alice.save()
    assert api.get("/api/v1/hosts/").status_code == 401


def test_it_refuses_a_token_with_a_wrong_secret(alice_token):
    forged = alice_token[:-4] + ("AAAA" if not alice_token.endswith("AAAA") else "BBBB")
    assert bearer_client(forged).get("/api/v1/hosts/").status_code == 401


def test_it_refuses_a_bearer_value_that_is_no_pitwall_token():
    assert bearer_client("hello").get("/api/v1/hosts/").status_code == 401


def test_it_records_when_a_token_was_last_used(api):
    assert ApiToken.objects.get().last_used_at is None
    api.get("/api/v1/hosts/")
    assert ApiToken.objects.get().last_used_at is not None


def test_each_user_token_acts_as_its_own_user(api, bob):
    bob_client = bearer_client(issue_api_token("bob"))
    assert bob_client.get("/api/v1/hosts/").wsgi_request.user == bob
    assert api.get("/api/v1/hosts/").wsgi_request.user == get_user_model().objects.get(
        username="alice")


@pytest.mark.parametrize("url", URLS[:3])
def test_it_is_read_only(api, url):
    assert api.post(url, {"hostname": "x"}, format="json").status_code == 405
