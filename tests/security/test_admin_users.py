"""Django's /admin/ applies the rules of the Users API (controlplane/accounts/users.py): a staff
admin who is not a superuser cannot make anyone a superuser (themselves included), grant
permissions outside the roles, change a superuser or their password, change their own role or
deactivate themselves, edit what the roles hold, or delete users. The same changes through the
API are refused too, so both doors are tested side by side."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group, Permission
from django.test import Client
from rest_framework.test import APIClient

from controlplane.accounts.roles import ADMIN, role_of
from tests.support.roles import user_with_role

PASSWORD = "a-long-enough-passphrase-9"
TAKEN = "the-attacker-knows-this-one-7"


@pytest.fixture
def staff_admin(db):
    """An admin by role who may open /admin/: staff, not a superuser."""
    return user_with_role("mallory", ADMIN, is_staff=True)


@pytest.fixture
def superuser(db):
    return user_with_role("root", None, is_superuser=True, is_staff=True, password=PASSWORD)


def browser(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def api(user) -> APIClient:
    client = APIClient()
    client.force_login(user)
    return client


def change_form(user, **changes) -> dict:
    """What the admin's change form posts for ``user``, with ``changes`` on top."""
    data = {"username": user.username, "email": user.email, "first_name": "", "last_name": "",
            "date_joined_0": user.date_joined.strftime("%Y-%m-%d"),
            "date_joined_1": user.date_joined.strftime("%H:%M:%S"),
            "groups": [g.pk for g in user.groups.all()], "user_permissions": []}
    flags = {"is_active": user.is_active, "is_staff": user.is_staff,
             "is_superuser": user.is_superuser}
    flags.update({k: changes.pop(k) for k in list(changes) if k in flags})
    data.update({name: "on" for name, held in flags.items() if held})
    data.update(changes)
    return data


def fresh(user):
    return get_user_model().objects.get(pk=user.pk)


def test_a_staff_admin_cannot_make_themselves_a_superuser(staff_admin):
    url = f"/admin/auth/user/{staff_admin.pk}/change/"
    browser(staff_admin).post(url, change_form(staff_admin, is_superuser=True))
    assert not fresh(staff_admin).is_superuser
    # The API has no door for it at all: the field is read-only there.
    api(staff_admin).patch(f"/api/v1/users/{staff_admin.pk}/", {"is_superuser": True},
                           format="json")
    assert not fresh(staff_admin).is_superuser


def test_a_staff_admin_cannot_make_another_user_a_superuser(staff_admin):
    ann = user_with_role("ann", "viewer", is_staff=True)
    browser(staff_admin).post(f"/admin/auth/user/{ann.pk}/change/",
                              change_form(ann, is_superuser=True))
    assert not fresh(ann).is_superuser


def test_a_staff_admin_cannot_grant_permissions_outside_the_roles(staff_admin):
    axes = Permission.objects.filter(content_type__app_label="axes").first()
    session = browser(staff_admin)
    session.post(f"/admin/auth/user/{staff_admin.pk}/change/",
                 change_form(staff_admin, user_permissions=[axes.pk]))
    assert not fresh(staff_admin).user_permissions.exists()
    role = Group.objects.get(name=ADMIN)
    response = session.post(f"/admin/auth/group/{role.pk}/change/",
                            {"name": ADMIN, "permissions": [axes.pk]})
    assert response.status_code == 403
    assert not role.permissions.filter(pk=axes.pk).exists()


def test_a_staff_admin_cannot_change_a_superusers_password(staff_admin, superuser):
    response = browser(staff_admin).post(
        f"/admin/auth/user/{superuser.pk}/password/",
        {"password1": TAKEN, "password2": TAKEN, "usable_password": "true"})
    assert response.status_code == 403
    assert fresh(superuser).check_password(PASSWORD)
    refused = api(staff_admin).patch(f"/api/v1/users/{superuser.pk}/", {"password": TAKEN},
                                     format="json")
    assert refused.status_code == 403 and "superuser" in refused.json()["detail"]
    assert fresh(superuser).check_password(PASSWORD)


def test_a_staff_admin_cannot_change_or_delete_a_superuser(staff_admin, superuser):
    session = browser(staff_admin)
    response = session.post(f"/admin/auth/user/{superuser.pk}/change/",
                            change_form(superuser, is_active=False, is_superuser=False))
    assert response.status_code == 403
    assert fresh(superuser).is_active and fresh(superuser).is_superuser
    response = session.post(f"/admin/auth/user/{superuser.pk}/delete/", {"post": "yes"})
    assert response.status_code == 403 and fresh(superuser).is_active


def test_a_staff_admin_cannot_change_their_own_role_or_deactivate_themselves(staff_admin):
    browser(staff_admin).post(f"/admin/auth/user/{staff_admin.pk}/change/",
                              change_form(staff_admin, is_active=False, groups=[]))
    assert fresh(staff_admin).is_active and role_of(fresh(staff_admin)) == ADMIN


def test_a_staff_admin_still_changes_other_users_as_the_api_would(staff_admin):
    ann = user_with_role("ann", "viewer", password=PASSWORD)
    session = browser(staff_admin)
    deployer = Group.objects.get(name="deployer")
    response = session.post(f"/admin/auth/user/{ann.pk}/change/",
                            change_form(ann, email="ann@example.com", groups=[deployer.pk]))
    assert response.status_code == 302, response.content[-2000:]
    assert fresh(ann).email == "ann@example.com" and role_of(fresh(ann)) == "deployer"
    new = "another-long-passphrase-3"
    response = session.post(f"/admin/auth/user/{ann.pk}/password/",
                            {"password1": new, "password2": new, "usable_password": "true"})
    assert response.status_code == 302 and fresh(ann).check_password(new)


def test_a_superuser_keeps_the_whole_user_admin(superuser):
    ann = user_with_role("ann", "viewer", is_staff=True)
    response = browser(superuser).post(f"/admin/auth/user/{ann.pk}/change/",
                                       change_form(ann, is_superuser=True))
    assert response.status_code == 302 and fresh(ann).is_superuser
