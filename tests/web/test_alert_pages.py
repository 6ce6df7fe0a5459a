"""The alert pages: alerts, one alert, rules and their editor, silences, channels.

``signed_in`` is an operator (not staff): may read everything, acknowledge and silence, but
gets 403 for any change to rules or channels; ``lead`` is staff."""

from __future__ import annotations

import hashlib
import re
from datetime import timedelta
from urllib.parse import parse_qs, urlparse

import pytest
from django.test import Client
from django.utils import timezone

from controlplane.alerts.delivery import service
from controlplane.alerts.delivery.models import Channel, DeliveryState, Notification
from controlplane.alerts.models import Alert, AlertEvent, AlertRule, AlertState, Silence
from controlplane.alerts.silences import create_silence
from tests.support.alert_data import samples
from tests.web.helpers import assert_sends_to_login

SECRET = "whsec-page-7c1e44"
URL_TOKEN = "T0KEN-b9d2f0"


@pytest.fixture
def hot_rule(db) -> AlertRule:
    made = AlertRule(name="GPU too hot", metric="gpu.temp_c", aggregation="max", window_s=60,
                     op=">", threshold=85, severity="critical",
                     summary="{host} GPU {gpu_index}: {value:.0f} °C")
    made.full_clean()
    made.save()
    return made


def make_alert(rule: AlertRule, page_fleet, state: str = AlertState.FIRING,
               active_since=None, **fields) -> Alert:
    now = timezone.now()
    since = active_since or now - timedelta(minutes=10)
    gpu = page_fleet.gpu0
    labels = {"alertname": rule.name, "severity": rule.severity, "host": page_fleet.host.hostname,
              "gpu": gpu.uuid}
    return Alert.objects.create(
        rule=rule, target=f"gpu:{gpu.id}", host_id=page_fleet.host.id, gpu_id=gpu.id, labels=labels,
        fingerprint=hashlib.sha256(repr(sorted(labels.items())).encode()).hexdigest()[:32],
        state=state, value=91.0, summary=f"{page_fleet.host.hostname} GPU 0: 91 °C",
        active_since=since, started_at=since if state == AlertState.FIRING else None, **fields)


@pytest.fixture
def firing(hot_rule, page_fleet) -> Alert:
    alert = make_alert(hot_rule, page_fleet)
    AlertEvent.objects.create(alert=alert, at=alert.active_since, from_state="inactive",
                              to_state="pending", value=88.0)
    AlertEvent.objects.create(alert=alert, at=alert.started_at + timedelta(seconds=1),
                              from_state="pending", to_state="firing", value=91.0)
    return alert


@pytest.fixture
def webhook(db, receiver, allow_private) -> Channel:
    return service.create_channel(name="oncall", kind="webhook",
                                  config={"url": f"{receiver.url}/{URL_TOKEN}", "secret": SECRET})


def pages(alert: Alert, rule: AlertRule) -> list[str]:
    return ["/alerts/", f"/alerts/{alert.id}/", f"/alerts/{alert.id}", "/alerts/rules/",
            "/alerts/rules/new/", f"/alerts/rules/{rule.id}/", "/alerts/silences/",
            "/alerts/channels/"]


def test_every_page_renders_for_a_signed_in_user(operator_client, firing, hot_rule, webhook):
    for path in pages(firing, hot_rule):
        response = operator_client.get(path)
        assert response.status_code == 200, path
        assert 'id="nav-alerts"' in response.content.decode()


def test_anonymous_visitors_are_sent_to_the_login_page(firing, hot_rule):
    for path in pages(firing, hot_rule):
        assert_sends_to_login(path)


def test_the_link_of_a_notification_opens_the_alert(operator_client, firing, settings):
    from controlplane.alerts.delivery.dispatch import Firing, RuleText, message_alert
    from controlplane.alerts.models import Alert

    settings.PITWALL = {**settings.PITWALL, "ALERT_EXTERNAL_URL": "https://pitwall.example"}
    row = Firing(*Alert.objects.filter(id=firing.id).values_list(*Firing._fields).get())
    link = message_alert(row, RuleText("GPU too hot", "", ""), timezone.now()).generator_url
    response = operator_client.get(urlparse(link).path)
    assert response.status_code == 200 and "GPU too hot" in response.content.decode()


def test_an_operator_who_is_not_staff_cannot_change_rules_or_channels(
        operator_client, hot_rule, webhook, receiver):
    form = {"name": "x", "kind": "threshold", "severity": "warning", "metric": "gpu.temp_c",
            "aggregation": "max", "window_s": 60, "op": ">", "threshold": 1, "for_s": 0,
            "keep_firing_for_s": 0, "params": "{}"}
    for path in ["/alerts/rules/new/", f"/alerts/rules/{hot_rule.id}/",
                 f"/alerts/rules/{hot_rule.id}/delete/", f"/alerts/channels/{webhook.id}/test/",
                 f"/alerts/channels/{webhook.id}/enable/"]:
        assert operator_client.post(path, form).status_code == 403, path
    assert AlertRule.objects.filter(id=hot_rule.id).exists() and not receiver.requests
    html = operator_client.get(f"/alerts/rules/{hot_rule.id}/").content.decode()
    assert 'id="read-only"' in html and 'id="save-button"' not in html


# -- the alerts list and one alert --------------------------------------------------------

def test_the_list_shows_firing_pending_and_recently_resolved_alerts(operator_client, hot_rule,
                                                                   page_fleet):
    now = timezone.now()
    hot = make_alert(hot_rule, page_fleet)
    other = AlertRule.objects.create(name="Warm", metric="gpu.temp_c", aggregation="max",
                                     severity="warning")
    pending = make_alert(other, page_fleet, state=AlertState.PENDING)
    old = make_alert(AlertRule.objects.create(name="Old", metric="gpu.temp_c"), page_fleet,
                     state=AlertState.RESOLVED, resolved_at=now - timedelta(days=3))
    html = operator_client.get("/alerts/").content.decode()
    assert f'data-alert-id="{hot.id}" data-state="firing"' in html
    assert f'data-alert-id="{pending.id}" data-state="pending"' in html
    assert f'data-alert-id="{old.id}"' not in html
    assert f'href="/hosts/{page_fleet.host.id}/"' in html
    assert f'href="/gpus/{page_fleet.gpu0.id}/"' in html
    assert "gpu-node-1 GPU 0: 91 °C" in html
    assert re.search(r'class="nav-count"[^>]*>1<', html)

    only_warnings = operator_client.get("/alerts/?severity=warning").content.decode()
    assert f'data-alert-id="{pending.id}"' in only_warnings
    assert f'data-alert-id="{hot.id}"' not in only_warnings
    only_firing = operator_client.get("/alerts/?state=firing").content.decode()
    assert f'data-alert-id="{hot.id}"' in only_firing
    assert f'data-alert-id="{pending.id}"' not in only_firing
    assert '<b data-count="pending">1</b>' in only_firing  # the summary ignores the filter


def test_the_list_says_which_silence_covers_an_alert(operator_client, firing, operator):
    now = timezone.now()
    silence = create_silence(matchers=[{"label": "alertname", "op": "=", "value": "GPU too hot"}],
                             starts_at=now, ends_at=now + timedelta(hours=1), author="ops",
                             comment="fan swap")
    html = operator_client.get("/alerts/").content.decode()
    assert f'href="/alerts/silences/#silence-{silence.id}"' in html


def test_an_alert_shows_its_labels_and_history_newest_first(operator_client, firing):
    html = operator_client.get(f"/alerts/{firing.id}/").content.decode()
    assert firing.fingerprint in html and "GPU-a0" in html
    history = html[html.index('id="event-table"'):]
    assert history.index(">firing<") < history.index(">inactive<")


def onset_range(html: str, kind: str) -> tuple[int, int]:
    match = re.search(rf'href="([^"]+)" data-onset-kind="{kind}"', html)
    assert match, f"no onset link to the {kind} page"
    query = parse_qs(urlparse(match.group(1).replace("&amp;", "&")).query)
    return int(query["from"][0]), int(query["to"][0])


def test_the_onset_links_chart_half_an_hour_either_side_of_the_onset(operator_client, hot_rule,
                                                                    page_fleet):
    began = timezone.now() - timedelta(hours=3)
    alert = make_alert(hot_rule, page_fleet, active_since=began)
    html = operator_client.get(f"/alerts/{alert.id}/").content.decode()
    start, end = onset_range(html, "gpu")
    assert start == int(began.timestamp()) - 1800
    assert abs(end - (began.timestamp() + 1800)) <= 2
    assert onset_range(html, "host") == (start, end)
    assert f'/gpus/{page_fleet.gpu0.id}/?from={start}&amp;to={end}' in html


def test_the_onset_link_of_a_fresh_alert_ends_now(operator_client, hot_rule, page_fleet):
    began = timezone.now() - timedelta(minutes=5)
    alert = make_alert(hot_rule, page_fleet, active_since=began)
    start, end = onset_range(operator_client.get(f"/alerts/{alert.id}/").content.decode(), "gpu")
    assert start == int(began.timestamp()) - 1800
    assert abs(end - timezone.now().timestamp()) <= 5


def test_an_operator_acknowledges_and_unacknowledges_a_firing_alert(operator_client, firing):
    response = operator_client.post(f"/alerts/{firing.id}/ack/", {"action": "ack",
                                                            "comment": "on it"}, follow=True)
    firing.refresh_from_db()
    assert (firing.acknowledged_by, firing.ack_comment) == ("ops", "on it")
    assert "Acknowledged" in response.content.decode() and 'id="unack"' in response.content.decode()
    assert AlertEvent.objects.filter(alert=firing, note__startswith="acknowledged by ops").exists()

    operator_client.post(f"/alerts/{firing.id}/ack/", {"action": "unack"})
    firing.refresh_from_db()
    assert firing.acknowledged_at is None and firing.acknowledged_by == ""


def test_a_pending_alert_cannot_be_acknowledged(operator_client, hot_rule, page_fleet):
    alert = make_alert(hot_rule, page_fleet, state=AlertState.PENDING)
    response = operator_client.post(f"/alerts/{alert.id}/ack/", {"action": "ack"}, follow=True)
    alert.refresh_from_db()
    assert alert.acknowledged_at is None
    assert "only a firing alert" in response.content.decode()


def test_acknowledging_needs_the_csrf_token(operator, firing):
    client = Client(enforce_csrf_checks=True)
    client.force_login(operator)
    assert client.post(f"/alerts/{firing.id}/ack/", {"action": "ack"}).status_code == 403


# -- silences --------------------------------------------------------------------------------

def test_silence_this_prefills_the_form_with_the_alert_labels(operator_client, firing):
    html = operator_client.get(f"/alerts/{firing.id}/").content.decode()
    link = re.search(r'href="([^"]+)" id="silence-this"', html).group(1).replace("&amp;", "&")
    form = operator_client.get(link).content.decode()
    assert "alertname=GPU too hot\nhost=gpu-node-1\ngpu=GPU-a0</textarea>" in form
    assert 'name="author" value="ops"' in form


def test_an_operator_silences_alerts_and_expires_the_silence(operator_client, firing, operator):
    response = operator_client.post("/alerts/silences/", {
        "matchers": "alertname=GPU too hot\nhost=~gpu-node-.*\n", "duration_s": "3600",
        "author": "ops", "comment": "fan swap in progress"}, follow=True)
    silence = Silence.objects.get()
    assert silence.matchers == [{"label": "alertname", "op": "=", "value": "GPU too hot"},
                                {"label": "host", "op": "=~", "value": "gpu-node-.*"}]
    assert silence.created_by == operator
    assert abs((silence.ends_at - silence.starts_at).total_seconds() - 3600) < 1
    covers = response.content.decode().split(f'id="silence-{silence.id}"')[1].split("</tr>")[0]
    assert f'data-alert-id="{firing.id}"' in covers

    operator_client.post(f"/alerts/silences/{silence.id}/expire/")
    silence.refresh_from_db()
    assert silence.ends_at <= timezone.now()
    html = operator_client.get("/alerts/silences/").content.decode()
    assert f'id="silence-{silence.id}"' in html.split('id="expired-silences"')[1]


def test_a_silence_is_in_its_creators_name_whatever_the_form_says(operator_client, firing,
                                                                  operator):
    form = operator_client.get("/alerts/silences/").content.decode()
    author = re.search(r'<input[^>]*name="author"[^>]*>', form).group(0)
    assert 'value="ops"' in author and "disabled" in author
    operator_client.post("/alerts/silences/", {"matchers": "host=gpu-node-1", "duration_s": "3600",
                                         "author": "lead", "comment": "fan swap"})
    silence = Silence.objects.get()
    assert (silence.author, silence.created_by) == ("ops", operator)


def test_a_bad_matcher_is_shown_and_nothing_is_stored(operator_client, db):
    response = operator_client.post("/alerts/silences/", {
        "matchers": "host=~gpu-[\nrack=7", "duration_s": "3600", "author": "ops",
        "comment": "x"})
    html = response.content.decode()
    assert response.status_code == 200 and "is not a regex" in html
    assert not Silence.objects.exists()
    response = operator_client.post("/alerts/silences/", {
        "matchers": "rack=7", "duration_s": "3600", "author": "ops", "comment": "x"})
    assert "is not one of alertname" in response.content.decode()
    assert not Silence.objects.exists()


# -- rules -----------------------------------------------------------------------------------

def rule_form(**fields) -> dict:
    form = {"name": "Hot GPU", "enabled": "on", "kind": "threshold", "severity": "critical",
            "metric": "gpu.temp_c", "aggregation": "max", "window_s": "60", "op": ">",
            "threshold": "85", "for_s": "120", "keep_firing_for_s": "0", "params": "{}",
            "summary": "{host} GPU {gpu_index}: {value:.0f} °C", "host_ids": "",
            "engine_ids": "", "hostname_glob": "", "description": ""}
    form.update(fields)
    return form


def test_the_rule_list_shows_each_rule_and_its_firing_count(operator_client, firing, hot_rule):
    html = operator_client.get("/alerts/rules/").content.decode()
    row = html.split(f'data-rule-id="{hot_rule.id}"')[1].split("</tr>")[0]
    assert "max(gpu.temp_c[1 min]) &gt; 85" in row
    assert 'class="badge firing">1<' in row


def test_a_preview_shows_what_would_fire_now_and_stores_nothing(lead, page_fleet, empty_samples):
    now = timezone.now()
    samples("gpu", {"gpu_id": page_fleet.gpu0.id}, lambda ts: {"temp_c": 91.0},
            now - timedelta(seconds=50), now)
    samples("gpu", {"gpu_id": page_fleet.gpu1.id}, lambda ts: {"temp_c": 60.0},
            now - timedelta(seconds=50), now)
    rules_before = AlertRule.objects.count()

    response = lead.post("/alerts/rules/new/", rule_form(preview="1"))

    html = response.content.decode()
    assert response.status_code == 200
    table = html.split('id="preview-table"')[1]
    assert f'data-target="gpu:{page_fleet.gpu0.id}"' in table
    assert f'data-target="gpu:{page_fleet.gpu1.id}"' not in table
    assert "gpu-node-1 GPU 0: 91 °C" in table
    assert re.search(r'id="preview-count"><b>1</b> target meets', html)
    assert "fires after 120 s if it keeps holding" in html
    assert 'value="Hot GPU"' in html  # the form comes back as it was sent
    assert AlertRule.objects.count() == rules_before and not Alert.objects.exists()


def test_only_those_who_may_edit_rules_preview(operator_client, hot_rule):
    # A preview runs the draft's queries over the fleet.
    for url in ("/alerts/rules/new/", f"/alerts/rules/{hot_rule.id}/"):
        assert operator_client.post(url, rule_form(preview="1")).status_code == 403


def test_a_preview_past_the_query_timeout_says_so(lead, db, settings, monkeypatch):
    from django.db import connection

    from controlplane.alerts import preview as preview_module

    def slow(rule, now):
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_sleep(5)")

    settings.PITWALL = {**settings.PITWALL, "QUERY_TIMEOUT_S": 0.05}
    monkeypatch.setattr(preview_module, "_own_slices", slow)
    response = lead.post("/alerts/rules/new/", rule_form(preview="1"))
    assert response.status_code == 503
    html = response.content.decode()
    assert "the preview took longer than 0.05 s" in html.split('id="preview-error"')[1]
    assert 'id="preview-table"' not in html


def test_a_rule_that_failed_its_last_cycle_is_marked_on_the_pages(operator_client, hot_rule):
    AlertRule.objects.filter(id=hot_rule.id).update(
        last_error="<b>division</b> by zero", last_error_at=timezone.now())
    row = operator_client.get("/alerts/rules/").content.decode().split(
        f'data-rule-id="{hot_rule.id}"')[1].split("</tr>")[0]
    assert "rule-error" in row and "&lt;b&gt;division&lt;/b&gt; by zero" in row
    html = operator_client.get(f"/alerts/rules/{hot_rule.id}/").content.decode()
    notice = html.split('id="rule-error"')[1].split("</p>")[0]
    assert "&lt;b&gt;division&lt;/b&gt; by zero" in notice and "<b>division" not in notice


def test_previewing_an_edit_leaves_the_saved_rule_alone(lead, hot_rule):
    lead.post(f"/alerts/rules/{hot_rule.id}/", rule_form(name="GPU too hot", threshold="10",
                                                         preview="1"))
    hot_rule.refresh_from_db()
    assert hot_rule.threshold == 85


def test_a_bad_rule_shows_the_error_beside_its_field_and_stores_nothing(lead, db):
    rules_before = AlertRule.objects.count()
    response = lead.post("/alerts/rules/new/", rule_form(summary="{host} is {bogus}",
                                                         aggregation="quantile"))
    html = response.content.decode()
    assert response.status_code == 200
    summary = html.split('data-field="summary"')[1].split("</div>")[0]
    assert "unknown field(s) bogus" in summary
    aggregation = html.split('data-field="aggregation"')[1].split("</div>")[0]
    assert "quantile applies to histogram metrics only" in aggregation
    assert AlertRule.objects.count() == rules_before


def test_a_preview_of_a_bad_rule_shows_errors_not_a_preview(lead, db):
    html = lead.post("/alerts/rules/new/", rule_form(metric="", preview="1")).content.decode()
    assert "unknown metric" in html.split('data-field="metric"')[1].split("</div>")[0]
    assert 'id="preview"' not in html


def test_the_rule_editor_takes_label_matchers_one_per_line(lead, db):
    lead.post("/alerts/rules/new/",
              rule_form(label_matchers="model=~llama-3.*\nhost!=\"gpu-node-2\""))
    rule = AlertRule.objects.get(name="Hot GPU")
    assert rule.label_matchers == [{"label": "model", "op": "=~", "value": "llama-3.*"},
                                   {"label": "host", "op": "!=", "value": "gpu-node-2"}]
    html = lead.get(f"/alerts/rules/{rule.id}/").content.decode()
    assert "model=~llama-3.*\nhost!=gpu-node-2" in html
    html = lead.post("/alerts/rules/new/", rule_form(name="Bad", label_matchers="rack=a")
                     ).content.decode()
    assert "is not one of host, engine, gpu, model" in \
        html.split('data-field="label_matchers"')[1].split("</div>")[0]
    assert not AlertRule.objects.filter(name="Bad").exists()


def test_staff_create_and_edit_a_rule(lead, db):
    response = lead.post("/alerts/rules/new/", rule_form(host_ids="3, 4"))
    rule = AlertRule.objects.get(name="Hot GPU")
    assert response.status_code == 302 and response["Location"] == f"/alerts/rules/{rule.id}/"
    assert (rule.metric, rule.threshold, rule.for_s, rule.host_ids) == ("gpu.temp_c", 85, 120,
                                                                        [3, 4])
    lead.post(f"/alerts/rules/{rule.id}/", rule_form(threshold="90", enabled=""))
    rule.refresh_from_db()
    assert rule.threshold == 90 and not rule.enabled

    lead.post(f"/alerts/rules/{rule.id}/delete/")
    assert not AlertRule.objects.filter(id=rule.id).exists()


def test_a_pack_rule_says_so_and_can_be_disabled_but_not_deleted(lead, db):
    rule = AlertRule.objects.create(name="Pack rule", pack_key="test-pack", metric="gpu.temp_c",
                                    aggregation="max", threshold=90)
    html = lead.get(f"/alerts/rules/{rule.id}/").content.decode()
    assert 'id="pack-note"' in html and 'id="delete-rule"' not in html
    lead.post(f"/alerts/rules/{rule.id}/", rule_form(name="Pack rule", enabled=""))
    rule.refresh_from_db()
    assert not rule.enabled and rule.pack_key == "test-pack"
    lead.post(f"/alerts/rules/{rule.id}/delete/")
    assert AlertRule.objects.filter(id=rule.id).exists()


# -- channels --------------------------------------------------------------------------------

def test_a_test_notification_reaches_the_receiver_and_the_page_shows_it(
        lead, webhook, receiver):
    response = lead.post(f"/alerts/channels/{webhook.id}/test/", follow=True)
    html = response.content.decode()
    [request] = receiver.requests
    assert request.json()["test"] is True and request.path == f"/hook/{URL_TOKEN}"
    row = Notification.objects.get(channel=webhook)
    assert row.state == DeliveryState.SENT
    assert "sent: HTTP 200: ok" in html
    section = html.split(f'id="channel-{webhook.id}"')[1]
    assert f'data-uuid="{row.uuid}" data-state="sent"' in section
    assert 'class="badge ok">ok</span> HTTP 200: ok' in section


def test_a_failed_test_notification_shows_its_error(lead, webhook, receiver):
    receiver.status, receiver.reply = 401, b"bad signature"
    html = lead.post(f"/alerts/channels/{webhook.id}/test/", follow=True).content.decode()
    assert "failed: HTTP 401: bad signature" in html
    assert 'class="badge bad">failed</span> HTTP 401: bad signature' in html


def test_staff_enable_a_channel_a_permanent_error_disabled(lead, webhook):
    service.disable_channel(webhook, "HTTP 404: no such hook")
    html = lead.get("/alerts/channels/").content.decode()
    assert "HTTP 404: no such hook" in html and 'data-action="enable"' in html
    lead.post(f"/alerts/channels/{webhook.id}/enable/")
    webhook.refresh_from_db()
    assert webhook.enabled and webhook.disabled_reason == ""


def test_no_page_shows_a_channel_secret(lead, operator_client, firing, hot_rule, webhook):
    service.send_test(webhook)
    for client in (lead, operator_client):
        for path in pages(firing, hot_rule):
            html = client.get(path).content.decode()
            assert SECRET not in html and URL_TOKEN not in html, path


def test_the_new_rule_button_follows_the_permission_not_is_staff(lead, operator_client, db):
    assert 'id="new-rule"' in lead.get("/alerts/rules/").content.decode()
    html = operator_client.get("/alerts/rules/").content.decode()
    assert 'id="new-rule"' not in html and "read-only" in html
