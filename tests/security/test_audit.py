"""The audit log records who changed what, when and from where; secrets never reach it; its
rows cannot be changed or deleted, by the ORM or by SQL."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from django.contrib.auth.models import Group
from django.db import connection, transaction
from django.db.utils import DatabaseError
from django.test import Client
from django.utils import timezone

from controlplane.accounts.roles import assign_role
from controlplane.alerts.models import Alert, AlertRule
from controlplane.audit.models import AuditEntry
from controlplane.fleet.models import Host
from controlplane.fleet.tokens import issue_api_token
from tests.support.clients import bearer_client
from tests.support.roles import user_with_role

RULE = {"name": "GPU hot", "metric": "gpu.temp_c", "aggregation": "max", "window_s": 30,
        "op": ">", "threshold": 85}
SECRET = "whsec-do-not-log-0123456789"


@pytest.fixture
def admin_api(db):
    user_with_role("carol", "admin")
    return bearer_client(issue_api_token("carol", "audit-tests"))


def entries(target_type: str) -> list[AuditEntry]:
    """The entries of a kind that people made (migrate loaded the alert pack before)."""
    return list(AuditEntry.objects.filter(target_type=target_type)
                .exclude(via="system").order_by("id"))


def test_a_rules_life_is_recorded_with_who_how_and_from_where(admin_api):
    rule_id = admin_api.post("/api/v1/alert-rules/", RULE, format="json").json()["id"]
    admin_api.patch(f"/api/v1/alert-rules/{rule_id}/", {"threshold": 90}, format="json")
    admin_api.delete(f"/api/v1/alert-rules/{rule_id}/")
    made, changed, deleted = entries("alert rule")
    lookup = made.via
    assert (made.action, changed.action, deleted.action) == ("created", "changed", "deleted")
    assert {e.actor for e in (made, changed, deleted)} == {"carol"}
    assert lookup.startswith("token pwu_") and made.address == "127.0.0.1"
    assert made.changes["threshold"] == [None, 85.0]
    assert changed.changes == {"threshold": [85.0, 90.0]}
    assert deleted.target == "GPU hot" and deleted.target_id == str(rule_id)


def test_secrets_never_reach_the_log(admin_api, db):
    channel = admin_api.post("/api/v1/channels/", {
        "name": "hook", "kind": "webhook",
        "config": {"url": "https://hooks.example.com/T0/abc", "secret": SECRET}},
        format="json")
    assert channel.status_code == 201, channel.content
    admin_api.patch(f"/api/v1/channels/{channel.json()['id']}/", {"config": {
        "url": "https://hooks.example.com/T0/abc", "secret": SECRET + "-2"}}, format="json")
    user = user_with_role("dave", "viewer")
    user.set_password("a-long-new-passphrase-42")
    user.save()
    logged = json.dumps([e.changes for e in AuditEntry.objects.all()])
    # neither the hash nor its algorithm's mark (whichever hasher the settings name)
    algorithm = user.password.split("$", 1)[0] + "$"
    assert user.password not in logged and algorithm not in logged
    assert SECRET not in logged and "hooks.example.com" not in logged
    changed = entries("channel")[-1]
    assert changed.changes["config"] == [{"url": "(redacted)", "secret": "(redacted)"},
                                         {"url": "(redacted)", "secret": "(redacted, changed)"}]


def test_role_changes_and_token_revocations_are_recorded(db):
    user = user_with_role("erin", "viewer")
    assign_role(user, "deployer")
    roles = [e.changes["groups"] for e in AuditEntry.objects.filter(
        target_type="user", target_id=str(user.pk)).order_by("id") if "groups" in e.changes]
    assert roles == [{"added": ["viewer"]}, {"removed": ["viewer"]}, {"added": ["deployer"]}]
    assert {"added": ["deployer"]} in roles and {"removed": ["viewer"]} in roles
    client = Client()
    client.force_login(user)
    token = client.post("/api/v1/tokens/", {"name": "t"},
                        content_type="application/json").json()
    client.post(f"/api/v1/tokens/{token['id']}/revoke/")
    made, revoked = entries("API token")
    assert made.action == "created" and made.actor == "erin" and made.via == "session"
    assert list(revoked.changes) == ["revoked_at"] and revoked.changes["revoked_at"][0] is None


def test_a_silence_and_its_expiry_are_recorded(db):
    client = Client()
    client.force_login(user_with_role("olga", "operator"))
    silence = client.post("/api/v1/silences/", {
        "matchers": [{"label": "alertname", "op": "=", "value": "x"}],
        "ends_at": (timezone.now() + timedelta(hours=1)).isoformat(), "comment": "reboot"},
        content_type="application/json").json()
    client.post(f"/api/v1/silences/{silence['id']}/expire/")
    made, expired = entries("silence")
    assert made.actor == expired.actor == "olga"
    assert list(expired.changes) == ["ends_at"]


def test_changes_made_by_the_system_name_the_process(db):
    Host.objects.create(hostname="h")  # not audited: inventory, not a decision
    rule = AlertRule.objects.create(**RULE)
    entry = AuditEntry.objects.get(target_type="alert rule", target_id=str(rule.id))
    assert entry.actor.startswith("system: ") and entry.via == "system" and entry.user_id is None
    assert not AuditEntry.objects.filter(target_type="host").exists()


def test_entries_are_append_only_in_the_orm_and_in_sql(admin_api):
    admin_api.post("/api/v1/alert-rules/", RULE, format="json")
    entry = entries("alert rule")[0]
    entry.actor = "someone else"
    with pytest.raises(ValueError):
        entry.save()
    with pytest.raises(ValueError):
        entry.delete()
    for statement in ("UPDATE audit_auditentry SET actor = 'x'", "DELETE FROM audit_auditentry"):
        with pytest.raises(DatabaseError, match="append-only"), transaction.atomic(), \
                connection.cursor() as cursor:
            cursor.execute(statement)
    assert AuditEntry.objects.get(pk=entry.pk).actor == "carol"


def test_the_log_is_for_admins_and_filters_by_actor_and_target(admin_api, db):
    admin_api.post("/api/v1/alert-rules/", RULE, format="json")
    user_with_role("frank", "viewer")
    found = admin_api.get("/api/v1/audit/", {"actor": "carol", "target_type": "alert rule"}).json()
    assert [e["action"] for e in found["results"]] == ["created"]
    operator = Client()
    operator.force_login(user_with_role("gil", "deployer"))
    assert operator.get("/api/v1/audit/").status_code == 403
    page = Client()
    page.force_login(Group.objects.get(name="admin").user_set.get())
    html = page.get("/audit/", {"actor": "carol"}).content.decode()
    assert "GPU hot" in html and "frank" not in html


def test_acknowledgements_are_recorded(db):
    rule = AlertRule.objects.create(**RULE)
    alert = Alert.objects.create(rule=rule, target="host:1", fingerprint="f", state="firing",
                                 labels={"alertname": "GPU hot"})
    client = Client()
    client.force_login(user_with_role("olga", "operator"))
    client.post(f"/api/v1/alerts/{alert.id}/ack/", {"comment": "on it"},
                content_type="application/json")
    client.post(f"/api/v1/alerts/{alert.id}/unack/")
    acked, unacked = entries("alert")
    assert (acked.action, unacked.action) == ("acknowledged", "unacknowledged")
    assert acked.actor == "olga" and acked.target == "GPU hot on host:1"
    assert acked.changes == {"comment": [None, "on it"]}


def test_the_logs_time_filters_refuse_what_cannot_be_a_time(admin_api):
    for bad in ("0204-10-17T10:23:34.19-22:22", "9999-12-31T23:59:59-23:00", "yesterday"):
        response = admin_api.get("/api/v1/audit/", {"since": bad})
        assert response.status_code == 400 and "since" in response.json(), bad
    assert admin_api.get("/api/v1/audit/", {"since": "2026-01-01T00:00:00Z"}).status_code == 200
