"""Admins manage users and their roles (API, page, command); nobody changes their own role or
deactivates themselves, and only a superuser changes a superuser."""

from __future__ import annotations

import io

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.test import Client
from rest_framework.test import APIClient

from controlplane.accounts.roles import role_of
from tests.support.roles import user_with_role

PASSWORD = "a-long-enough-passphrase-9"


def signed_in(user) -> APIClient:
    client = APIClient()
    client.force_login(user)
    return client


@pytest.fixture
def admin(db):
    return user_with_role("root", "admin")


def test_an_admin_creates_a_user_with_a_role_and_the_password_is_validated(admin):
    client = signed_in(admin)
    weak = client.post("/api/v1/users/", {"username": "ann", "password": "12345678",
                                          "role": "viewer"}, format="json")
    assert weak.status_code == 400 and "password" in weak.json()
    assert not get_user_model().objects.filter(username="ann").exists()
    made = client.post("/api/v1/users/", {"username": "ann", "password": PASSWORD,
                                          "role": "operator"}, format="json")
    assert made.status_code == 201 and made.json()["role"] == "operator"
    assert get_user_model().objects.get(username="ann").check_password(PASSWORD)


def test_an_admin_changes_a_role_and_deactivates_a_user(admin):
    ann = user_with_role("ann", "viewer")
    client = signed_in(admin)
    response = client.patch(f"/api/v1/users/{ann.id}/", {"role": "deployer",
                                                         "is_active": False}, format="json")
    assert response.status_code == 200
    ann.refresh_from_db()
    assert role_of(ann) == "deployer" and not ann.is_active


def test_no_one_changes_their_own_role_or_deactivates_themselves(admin):
    client = signed_in(admin)
    for change in ({"role": "viewer"}, {"is_active": False}):
        response = client.patch(f"/api/v1/users/{admin.id}/", change, format="json")
        assert response.status_code == 403 and "another admin" in response.json()["detail"]
    admin.refresh_from_db()
    assert role_of(admin) == "admin" and admin.is_active


def test_only_a_superuser_changes_a_superuser(admin):
    su = get_user_model().objects.create_superuser("su", "", PASSWORD)
    response = signed_in(admin).patch(f"/api/v1/users/{su.id}/", {"password": PASSWORD + "x"},
                                      format="json")
    assert response.status_code == 403
    su.refresh_from_db()
    assert su.check_password(PASSWORD)


def test_users_are_for_admins_only(db):
    assert signed_in(user_with_role("d", "deployer")).get("/api/v1/users/").status_code == 403


def test_the_users_page_changes_a_role(admin):
    ann = user_with_role("ann", "viewer")
    client = Client()
    client.force_login(admin)
    assert f'data-user-id="{ann.id}"' in client.get("/account/users/").content.decode()
    client.post(f"/account/users/{ann.id}/", {"role": "operator", "is_active": "on"})
    assert role_of(ann) == "operator"
    client.post("/account/users/", {"username": "bo", "password": PASSWORD, "role": "viewer"})
    assert role_of(get_user_model().objects.get(username="bo")) == "viewer"


def test_set_role_command(db):
    user_with_role("ann", None)
    call_command("set_role", "ann", "deployer", stdout=io.StringIO())
    assert role_of(get_user_model().objects.get(username="ann")) == "deployer"
    call_command("set_role", "ann", "none", stdout=io.StringIO())
    assert role_of(get_user_model().objects.get(username="ann")) is None
