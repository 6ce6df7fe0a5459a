"""Sign-in is throttled per user and address; passwords are validated; the pages send a
Content-Security-Policy; X-Forwarded-Proto is believed only behind a proxy; redirects stay
on this site."""

from __future__ import annotations

import io

import pytest
from django.contrib.auth import get_user_model
from django.core.management import CommandError, call_command
from django.test import Client

from controlplane.fleet.models import Deployment, Host
from controlplane.tuning.models import Suggestion
from tests.support.roles import user_with_role

PASSWORD = "correct horse battery staple"


@pytest.mark.parametrize("url", ["/accounts/login/", "/admin/login/"])
def test_fifty_wrong_passwords_lock_the_right_one_out(db, url, settings):
    user_with_role("ops", "admin", password=PASSWORD, is_staff=True)
    client = Client()
    for _ in range(50):
        client.post(url, {"username": "ops", "password": "guess"})
    response = client.post(url, {"username": "ops", "password": PASSWORD})
    assert response.status_code == 429
    assert "_auth_user_id" not in client.session
    # Another user from the same address is not locked out by ops's failures.
    user_with_role("eve", "viewer", password=PASSWORD)
    assert Client().post(url, {"username": "eve", "password": PASSWORD}).status_code in (200, 302)


def test_below_the_limit_the_right_password_still_signs_in(db, settings):
    user_with_role("ops", "viewer", password=PASSWORD)
    client = Client()
    for _ in range(settings.AXES_FAILURE_LIMIT - 1):
        client.post("/accounts/login/", {"username": "ops", "password": "guess"})
    assert client.post("/accounts/login/", {"username": "ops", "password": PASSWORD}
                       ).status_code == 302


def test_ensure_admin_refuses_a_weak_chosen_password(db, monkeypatch):
    monkeypatch.setenv("PITWALL_ADMIN_PASSWORD", "12345678")
    with pytest.raises(CommandError, match="PITWALL_ADMIN_PASSWORD is refused.*numeric"):
        call_command("ensure_admin")
    assert not get_user_model().objects.filter(username="admin").exists()
    monkeypatch.setenv("PITWALL_ADMIN_PASSWORD", PASSWORD)
    call_command("ensure_admin", stdout=io.StringIO())
    assert get_user_model().objects.get(username="admin").check_password(PASSWORD)


def test_pages_send_a_content_security_policy_with_a_nonce_for_the_import_map(db):
    client = Client()
    client.force_login(user_with_role("v", "viewer"))
    response = client.get("/")
    policy = response["Content-Security-Policy"]
    assert "script-src 'self' 'nonce-" in policy and "frame-ancestors 'none'" in policy
    nonce = policy.split("'nonce-")[1].split("'")[0]
    assert f'<script type="importmap" nonce="{nonce}">' in response.content.decode()


def test_x_forwarded_proto_is_not_believed_without_a_proxy(db, settings):
    settings.SECURE_SSL_REDIRECT = True
    response = Client().get("/healthz/", HTTP_X_FORWARDED_PROTO="https")
    assert response.status_code == 301 and response["Location"].startswith("https://")


def test_the_tuning_page_never_redirects_to_another_site(db):
    client = Client()
    client.force_login(user_with_role("d", "deployer"))
    host = Host.objects.create(hostname="h")
    d = Deployment.objects.create(host=host, name="m", model="m", port=8000,
                                  vllm_version="0.32.0")
    s = Suggestion.objects.create(deployment=d, kind="kv_pressure", reasoning="r", expected="e",
                                  confidence=1, severity=1, revision=1)
    for bad in ("//evil.example/x", "https://evil.example/", "/\\evil.example"):
        response = client.post(f"/suggestions/{s.id}/dismiss/", {"next": bad})
        assert response["Location"] == f"/deployments/{d.id}/", bad
    response = client.post(f"/suggestions/{s.id}/dismiss/", {"next": "/suggestions/"})
    assert response["Location"] == "/suggestions/"
