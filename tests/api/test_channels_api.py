"""/api/v1/channels/ and /api/v1/notifications/: staff manage channels, whose config never
comes back in any response; test notifications go to a real HTTP receiver."""

from __future__ import annotations

import json

import pytest
from django.utils import timezone
from rest_framework.test import APIClient

from controlplane.alerts.delivery import service
from controlplane.alerts.delivery.models import Channel, Notification

URL = "/api/v1/channels/"
NOTIFICATIONS = "/api/v1/notifications/"
SECRET = "whsec-api-7d41e0"
TOKEN = "T0KEN-in-the-path-93ab"


def assert_no_secret(response) -> None:
    text = json.dumps(response.json())
    assert SECRET not in text and TOKEN not in text


@pytest.fixture
def webhook(db, receiver, allow_private) -> Channel:
    return service.create_channel(name="oncall", kind="webhook",
                                  config={"url": f"{receiver.url}/{TOKEN}", "secret": SECRET})


def test_it_refuses_anonymous_clients_and_agent_tokens(webhook, anonymous, agent_client):
    for client in (anonymous, agent_client):
        assert client.get(URL).status_code == 401
        assert client.get(NOTIFICATIONS).status_code == 401
        assert client.post(f"{URL}{webhook.id}/test/").status_code == 401
    assert not Notification.objects.exists()


def test_staff_creates_a_channel_and_its_config_never_comes_back(staff):
    config = {"url": f"https://hooks.example.com/{TOKEN}", "secret": SECRET}
    response = staff.post(URL, {"name": "oncall", "kind": "webhook", "config": config},
                          format="json")
    assert response.status_code == 201, response.json()
    assert_no_secret(response)
    body = response.json()
    assert "config" not in body
    assert body["config_redacted"] == {"url_host": "hooks.example.com", "secret_set": True}
    assert (body["kind"], body["enabled"], body["last_ok"]) == ("webhook", True, None)
    assert Channel.objects.get(id=body["id"]).config == config

    assert_no_secret(staff.get(URL))
    assert_no_secret(staff.get(f"{URL}{body['id']}/"))


def test_an_email_channel_shows_its_recipients(staff):
    response = staff.post(URL, {"name": "mail", "kind": "email",
                                "config": {"to": "a@example.com, b@example.com"}}, format="json")
    assert response.status_code == 201, response.json()
    assert response.json()["config_redacted"] == {"to": ["a@example.com", "b@example.com"]}


@pytest.mark.parametrize(("payload", "field"), [
    ({"kind": "webhook", "config": {"url": f"https://hooks.example.com/{TOKEN}"}}, "config"),
    ({"kind": "webhook", "config": {"url": "ftp://x", "secret": SECRET}}, "config"),
    ({"kind": "email", "config": {"to": "not an address"}}, "config"),
    ({"kind": "pager", "config": {}}, "kind"),
    ({"kind": "webhook"}, "config"),
    ({"kind": "webhook", "config": "url=x"}, "config"),
])
def test_a_bad_channel_is_a_400_naming_the_field_without_the_secret(staff, payload, field):
    response = staff.post(URL, {"name": "oncall", **payload}, format="json")
    assert response.status_code == 400
    assert field in response.json(), response.json()
    assert_no_secret(response)
    assert not Channel.objects.exists()


def test_a_user_who_is_not_staff_reads_channels_but_cannot_change_test_or_enable_them(
        webhook, api, receiver):
    listed = api.get(URL)
    assert listed.status_code == 200 and listed.json()["count"] == 1
    assert_no_secret(listed)
    new = {"name": "mine", "kind": "email", "config": {"to": "a@example.com"}}
    assert api.post(URL, new, format="json").status_code == 403
    assert api.patch(f"{URL}{webhook.id}/", {"name": "x"}, format="json").status_code == 403
    assert api.delete(f"{URL}{webhook.id}/").status_code == 403
    for verb in ("test", "enable", "disable"):
        assert api.post(f"{URL}{webhook.id}/{verb}/").status_code == 403
    assert Channel.objects.get().name == "oncall" and Channel.objects.count() == 1
    assert receiver.requests == [] and not Notification.objects.exists()


def test_an_update_keeps_the_config_unless_one_is_sent_and_validates_a_new_one(staff, webhook):
    response = staff.patch(f"{URL}{webhook.id}/", {"name": "pager"}, format="json")
    assert response.status_code == 200, response.json()
    assert_no_secret(response)
    webhook.refresh_from_db()
    assert webhook.name == "pager" and webhook.config["secret"] == SECRET

    refused = staff.patch(f"{URL}{webhook.id}/", {"config": {"url": "https://x.example.com"}},
                          format="json")
    assert refused.status_code == 400 and "config" in refused.json()
    webhook.refresh_from_db()
    assert webhook.config["secret"] == SECRET

    new_secret = "whsec-rotated-11"
    rotated = staff.patch(f"{URL}{webhook.id}/",
                          {"config": {"url": "https://x.example.com/h", "secret": new_secret}},
                          format="json")
    assert rotated.status_code == 200 and new_secret not in json.dumps(rotated.json())
    webhook.refresh_from_db()
    assert webhook.config == {"url": "https://x.example.com/h", "secret": new_secret}


def test_staff_deletes_a_channel(staff, webhook):
    assert staff.delete(f"{URL}{webhook.id}/").status_code == 204
    assert not Channel.objects.exists()


def test_a_test_notification_reaches_the_receiver_and_the_row_comes_back(
        staff, webhook, receiver):
    response = staff.post(f"{URL}{webhook.id}/test/")
    assert response.status_code == 200, response.json()
    assert_no_secret(response)
    body = response.json()
    assert (body["state"], body["test"], body["attempts"]) == ("sent", True, 1)
    assert body["next_attempt_at"] is None and body["sent_at"] is not None
    assert body["detail"].startswith("HTTP 200") and body["channel"] == webhook.id
    [request] = receiver.requests
    assert request.path.endswith(TOKEN) and "X-Pitwall-Signature" in request.headers
    assert request.json()["id"] == body["uuid"] == body["payload"]["id"]

    channel = staff.get(f"{URL}{webhook.id}/").json()
    assert channel["last_ok"] is True and channel["last_detail"].startswith("HTTP 200")


def test_a_failed_test_says_why_and_leaves_the_channel_enabled(staff, webhook, receiver):
    receiver.status, receiver.reply = 404, b"no such hook"
    body = staff.post(f"{URL}{webhook.id}/test/").json()
    assert body["state"] == "failed" and "HTTP 404" in body["last_error"]
    channel = staff.get(f"{URL}{webhook.id}/").json()
    assert channel["enabled"] is True and channel["last_ok"] is False


def test_staff_disables_and_enables_a_channel(staff, webhook):
    response = staff.post(f"{URL}{webhook.id}/disable/", {"reason": "hook moved"},
                          format="json")
    assert response.status_code == 200
    assert (response.json()["enabled"], response.json()["disabled_reason"]) == (
        False, "hook moved")
    response = staff.post(f"{URL}{webhook.id}/enable/")
    assert response.status_code == 200
    body = response.json()
    assert (body["enabled"], body["disabled_reason"], body["disabled_at"]) == (True, "", None)
    webhook.refresh_from_db()
    assert webhook.enabled


def test_notifications_list_filters_and_shows_the_payload_on_the_detail_only(
        staff, webhook, api):
    other = service.create_channel(name="mail", kind="email", config={"to": ["a@example.com"]})
    staff.post(f"{URL}{webhook.id}/test/")
    listed = api.get(NOTIFICATIONS)
    assert listed.status_code == 200
    [row] = listed.json()["results"]
    assert (row["channel"], row["channel_name"], row["state"]) == (webhook.id, "oncall", "sent")
    assert "payload" not in row and row["uuid"]
    assert_no_secret(listed)

    assert api.get(NOTIFICATIONS, {"channel": other.id}).json()["results"] == []
    assert len(api.get(NOTIFICATIONS, {"state": "sent,failed"}).json()["results"]) == 1
    assert api.get(NOTIFICATIONS, {"state": "failed"}).json()["results"] == []
    assert api.get(NOTIFICATIONS, {"state": "lost"}).status_code == 400

    detail = api.get(f"{NOTIFICATIONS}{row['id']}/").json()
    assert detail["payload"]["test"] is True and detail["payload"]["id"] == row["uuid"]
    assert api.delete(f"{NOTIFICATIONS}{row['id']}/").status_code == 405


def test_the_browsable_api_shows_no_config_either(carol, webhook):
    client = APIClient()
    client.force_login(carol)
    for url in (URL, f"{URL}{webhook.id}/"):
        response = client.get(url, HTTP_ACCEPT="text/html")
        assert response.status_code == 200
        page = response.content.decode()
        assert SECRET not in page and TOKEN not in page


def test_an_alertmanager_api_channel_shows_its_hosts_never_its_token_or_paths(staff):
    config = {"urls": [f"https://am-1.example.com/{TOKEN}", "http://am-2.example.com:9093"],
              "resend_s": 30, "bearer_token": SECRET, "external_labels": {"source": "pitwall"}}
    response = staff.post(URL, {"name": "am", "kind": "alertmanager_api", "config": config},
                          format="json")
    assert response.status_code == 201, response.json()
    assert_no_secret(response)
    assert response.json()["config_redacted"] == {
        "resend_s": 30, "external_labels": {"source": "pitwall"},
        "url_hosts": ["am-1.example.com", "am-2.example.com"], "bearer_token_set": True}
    assert_no_secret(staff.get(f"{URL}{response.json()['id']}/"))


def test_a_bad_alertmanager_url_is_a_400_naming_its_index(staff):
    config = {"urls": ["http://am-1:9093", "am-2:9093"]}
    response = staff.post(URL, {"name": "am", "kind": "alertmanager_api", "config": config},
                          format="json")
    assert response.status_code == 400
    assert response.json() == {"config": ["urls[1]: must be an http:// or https:// URL"]}


def test_the_old_alertmanager_kind_is_a_400_telling_the_new_names(staff):
    response = staff.post(URL, {"name": "am", "kind": "alertmanager",
                                "config": {"url": "https://am.example.com"}}, format="json")
    assert response.status_code == 400
    assert response.json() == {"kind": [
        "unknown channel kind 'alertmanager': renamed 'alertmanager_webhook' (Alertmanager's "
        "webhook payload); 'alertmanager_api' posts to Alertmanager's API"]}
    assert not Channel.objects.exists()


def test_superseded_notifications_can_be_listed_by_state(staff, db):
    channel = service.create_channel(name="am", kind="alertmanager_api",
                                     config={"urls": ["https://am.example.com"]})
    now = timezone.now()
    Notification.objects.create(channel=channel, status="firing", state="superseded",
                                give_up_at=now, payload={})
    rows = staff.get(NOTIFICATIONS, {"state": "superseded"}).json()["results"]
    assert [r["state"] for r in rows] == ["superseded"]
