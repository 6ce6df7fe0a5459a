"""Roles decide what each user may do, through the API and the pages alike; is_staff alone
no longer grants anything, and a token never carries more than its user's rights."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.test import Client
from rest_framework.test import APIClient

from controlplane.accounts.roles import ORDER, holds, role_of, sync_roles
from controlplane.alerts.models import Alert, AlertRule
from controlplane.fleet.models import Host
from controlplane.fleet.tokens import issue_api_token
from tests.support.clients import bearer_client
from tests.support.roles import user_with_role

RULE = {"name": "GPU hot", "metric": "gpu.temp_c", "aggregation": "max", "window_s": 30,
        "op": ">", "threshold": 85}
SILENCE = {"matchers": [{"label": "alertname", "op": "=", "value": "GPU hot"}],
           "duration_s": 3600, "comment": "maintenance"}


def session_as(role: str | None, **fields) -> APIClient:
    client = APIClient()
    client.force_login(user_with_role(f"user-{role}", role, **fields))
    return client


def firing_alert() -> Alert:
    rule = AlertRule.objects.create(name="r", metric="gpu.temp_c", aggregation="max",
                                    window_s=30, op=">", threshold=1)
    return Alert.objects.create(rule=rule, target="host:1", fingerprint="f", state="firing")


def attempts(client: APIClient, alert: Alert, host: Host) -> dict[str, int]:
    """The status of one request per kind of action."""
    return {
        "read hosts": client.get("/api/v1/hosts/").status_code,
        "read rules": client.get("/api/v1/alert-rules/").status_code,
        "silence": client.post("/api/v1/silences/", SILENCE, format="json").status_code,
        "ack": client.post(f"/api/v1/alerts/{alert.id}/ack/", {"comment": "on it"},
                           format="json").status_code,
        "deploy": client.post("/api/v1/deployments/", {"host": host.id},
                              format="json").status_code,
        "write rule": client.post("/api/v1/alert-rules/", RULE, format="json").status_code,
        "read audit": client.get("/api/v1/audit/").status_code,
    }


# What each role may do (True) and may not (False): a refusal is a 403, anything else passed
# the permission check (a 400 for an incomplete body counts as allowed).
ALLOWED = {
    None: dict.fromkeys(["read hosts", "read rules", "silence", "ack", "deploy", "write rule",
                         "read audit"], False),
    "viewer": {"read hosts": True, "read rules": True, "silence": False, "ack": False,
               "deploy": False, "write rule": False, "read audit": False},
    "operator": {"read hosts": True, "read rules": True, "silence": True, "ack": True,
                 "deploy": False, "write rule": False, "read audit": False},
    "deployer": {"read hosts": True, "read rules": True, "silence": True, "ack": True,
                 "deploy": True, "write rule": False, "read audit": False},
    "admin": dict.fromkeys(["read hosts", "read rules", "silence", "ack", "deploy",
                            "write rule", "read audit"], True),
}


@pytest.mark.parametrize("role", [None, *ORDER])
def test_each_role_may_do_what_its_row_says_and_nothing_more(db, role):
    alert, host = firing_alert(), Host.objects.create(hostname="h1")
    got = attempts(session_as(role), alert, host)
    assert {k: v != 403 for k, v in got.items()} == ALLOWED[role], got


def test_is_staff_alone_grants_nothing(db):
    alert, host = firing_alert(), Host.objects.create(hostname="h1")
    got = attempts(session_as(None, is_staff=True), alert, host)
    assert set(got.values()) == {403}


def test_a_refusal_names_the_permission_missing(db):
    response = session_as("viewer").post("/api/v1/silences/", SILENCE, format="json")
    assert response.status_code == 403
    assert "alerts.add_silence" in response.json()["detail"]


def test_a_read_only_token_never_writes_even_for_an_admin(db):
    user_with_role("root", "admin")
    client = bearer_client(issue_api_token("root", "ro", scope="read"))
    assert client.get("/api/v1/alert-rules/").status_code == 200
    response = client.post("/api/v1/alert-rules/", RULE, format="json")
    assert response.status_code == 403 and "read-only" in response.json()["detail"]
    assert not AlertRule.objects.filter(name="GPU hot").exists()


def test_a_token_carries_at_most_its_users_rights(db):
    user_with_role("watcher", "viewer")
    client = bearer_client(issue_api_token("watcher", "rw", scope="write"))
    assert client.post("/api/v1/silences/", SILENCE, format="json").status_code == 403


def test_pages_check_the_same_permissions(db):
    viewer, nobody = Client(), Client()
    viewer.force_login(user_with_role("v", "viewer"))
    nobody.force_login(user_with_role("n", None))
    assert viewer.get("/").status_code == 200
    assert nobody.get("/").status_code == 403
    assert viewer.get("/alerts/rules/new/").status_code == 200  # read-only form
    posted = viewer.post("/alerts/rules/new/", {**RULE, "severity": "warning"})
    assert posted.status_code == 403 and not AlertRule.objects.filter(name="GPU hot").exists()
    assert viewer.get("/audit/").status_code == 403


def test_roles_hold_the_roles_before_them_and_credentials_stay_private():
    assert holds("viewer", "fleet.view_host") and holds("admin", "fleet.view_host")
    assert not holds("operator", "fleet.change_deployment")
    assert holds("deployer", "fleet.deploy_code") and not holds("operator", "fleet.deploy_code")
    assert not holds("deployer", "fleet.view_apitoken") and holds("admin", "fleet.view_apitoken")


def test_syncing_the_roles_is_idempotent_and_restores_a_groups_permissions(db):
    from django.apps import apps
    from django.contrib.auth.models import Group

    viewer = Group.objects.get(name="viewer")
    before = set(viewer.permissions.values_list("codename", flat=True))
    viewer.permissions.clear()
    sync_roles(apps)
    sync_roles(apps)
    assert set(viewer.permissions.values_list("codename", flat=True)) == before
    assert "view_host" in before and "add_silence" not in before


def test_role_of_names_the_highest_role(db):
    user = user_with_role("x", "deployer")
    assert role_of(user) == "deployer"
    assert role_of(get_user_model().objects.create_superuser("su", "", "pw")) == "admin"


def test_the_roles_migration_keeps_what_each_existing_user_could_do(db):
    """Before roles, active users read, acked and silenced; staff changed the rest."""
    from importlib import import_module
    from types import SimpleNamespace

    from django.apps import apps
    from django.db import connection

    users = get_user_model().objects
    plain, staff = users.create_user("plain"), users.create_user("lead", is_staff=True)
    gone = users.create_user("gone", is_active=False)
    migration = import_module("controlplane.accounts.migrations.0001_roles")
    migration.create_roles(apps, SimpleNamespace(connection=connection))
    assert (role_of(plain), role_of(staff), role_of(gone)) == ("operator", "admin", None)
