"""The Alertmanager API transport against real loopback receivers standing in for
Alertmanagers (the real one: tests/alerts/delivery/test_real_alertmanager.py)."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest

from controlplane.alerts.transports import (
    AlertmanagerApiTransport,
    ConfigError,
    TransportError,
    make_test_notification,
)
from tests.alerts.transports.messages import ONSET
from tests.support.live import free_port
from tests.support.receivers import Receiver, serving


@pytest.fixture
def second(receiver) -> Iterator[Receiver]:
    """Another receiver: the other Alertmanager of an HA pair."""
    with serving("/am2") as rec:
        yield rec


def base(rec: Receiver) -> str:
    return rec.url  # a base URL with a path: Alertmanager behind a route prefix


def deliver(message, *urls, **config):
    return AlertmanagerApiTransport().notify({"urls": list(urls), **config}, message)


def test_it_posts_postable_alerts_to_api_v2_alerts(receiver, allow_private, message):
    before = datetime.now(UTC)
    result = deliver(message, base(receiver))
    after = datetime.now(UTC)

    [request] = receiver.requests
    assert request.path == "/hook/api/v2/alerts"
    assert request.headers["Content-Type"] == "application/json"
    assert "Authorization" not in request.headers
    firing, resolved = request.json()
    assert list(firing) == ["labels", "annotations", "startsAt", "endsAt", "generatorURL"]
    assert firing["labels"] == {"alertname": "KVCacheFull", "severity": "critical",
                                "host": "gpu-07"}
    assert firing["annotations"] == {
        "summary": "KV cache at 97% on gpu-07 with 12 requests waiting",
        "description": "Requests queue <behind> a full cache & preemptions rise.",
        "pitwall_url": "https://pitwall.example.com/hosts/gpu-07?from=2026-12-02T14:20Z"}
    assert firing["startsAt"] == "2026-12-02T14:30:00Z"
    assert firing["generatorURL"] == "https://pitwall.example.com/hosts/gpu-07?from=2026-12-02T14:20Z"
    # Firing: endsAt 4 resend intervals (default 60 s) after the send, as Prometheus does.
    ends = datetime.fromisoformat(firing["endsAt"])
    assert before + timedelta(seconds=240) <= ends + timedelta(milliseconds=1)
    assert ends <= after + timedelta(seconds=240)
    # Resolved: endsAt is when it resolved.
    assert resolved["endsAt"] == "2026-12-02T14:45:00Z"
    assert resolved["labels"]["host"] == "gpu-08"
    assert result.detail == f"127.0.0.1:{receiver.url.split(':')[2].split('/')[0]} HTTP 200: ok"


def test_resend_s_sets_how_far_ahead_a_firing_alert_ends(receiver, allow_private, message):
    before = datetime.now(UTC)
    deliver(message, base(receiver), resend_s=10)
    firing = receiver.requests[0].json()[0]
    ends = datetime.fromisoformat(firing["endsAt"])
    assert before + timedelta(seconds=40) <= ends + timedelta(milliseconds=1)
    assert ends < before + timedelta(seconds=60)


def test_external_labels_are_added_unless_the_alert_has_the_label(receiver, allow_private,
                                                                  message):
    deliver(message, base(receiver),
            external_labels={"source": "pitwall", "cluster": "eu-1", "host": "not-this"})
    labels = receiver.requests[0].json()[0]["labels"]
    assert labels == {"alertname": "KVCacheFull", "severity": "critical", "host": "gpu-07",
                      "source": "pitwall", "cluster": "eu-1"}


def test_labels_alertmanager_would_refuse_are_made_valid(receiver, allow_private, message):
    from dataclasses import replace

    alert = replace(message.alerts[0], labels={"alertname": "X", "gpu.index": "3",
                                               "9lives": "y", "engine": ""})
    deliver(replace(message, alerts=[alert]), base(receiver))
    assert receiver.requests[0].json()[0]["labels"] == {
        "alertname": "X", "gpu_index": "3", "_9lives": "y"}  # empty: no label, as Prometheus


def test_a_bearer_token_is_sent_and_never_in_the_detail(receiver, allow_private, message):
    result = deliver(message, base(receiver), bearer_token="am-token-5e1f")
    assert receiver.requests[0].headers["Authorization"] == "Bearer am-token-5e1f"
    assert "am-token" not in result.detail


def test_every_alertmanager_of_an_ha_pair_gets_every_post(receiver, second, allow_private,
                                                          message):
    result = deliver(message, base(receiver), base(second))

    assert len(receiver.requests) == len(second.requests) == 1
    assert receiver.requests[0].body == second.requests[0].body
    assert result.detail.count("HTTP 200: ok") == 2


def test_one_alertmanager_down_still_delivers_and_the_detail_says_which(receiver,
                                                                        allow_private, message):
    down = f"http://127.0.0.1:{free_port()}/secret-path"
    result = deliver(message, down, base(receiver))

    assert len(receiver.requests) == 1
    first, second = result.detail.split("; ")
    assert first.startswith(f"127.0.0.1:{down.split(':')[2].split('/')[0]} failed: "
                            "connection failed")
    assert second.endswith("HTTP 200: ok")
    assert "secret-path" not in result.detail


def test_all_down_is_retryable(allow_private, message):
    with pytest.raises(TransportError) as caught:
        deliver(message, f"http://127.0.0.1:{free_port()}", f"http://127.0.0.1:{free_port()}")
    assert not caught.value.permanent
    assert str(caught.value).count("failed: connection failed") == 2


def test_all_refusing_is_permanent_and_one_retryable_failure_keeps_it_retryable(
        receiver, second, allow_private, message):
    receiver.status = second.status = 400
    receiver.reply = second.reply = b'{"message":"bad alert"}'
    with pytest.raises(TransportError) as caught:
        deliver(message, base(receiver), base(second))
    assert caught.value.permanent and caught.value.status_code == 400

    second.status = 503
    with pytest.raises(TransportError) as caught:
        deliver(message, base(receiver), base(second))
    assert not caught.value.permanent


def test_private_addresses_are_refused_unless_allowed(receiver, message):
    with pytest.raises(TransportError) as caught:
        deliver(message, base(receiver))
    assert caught.value.permanent and "private" in str(caught.value)
    assert receiver.requests == []


def test_the_test_notification_ends_on_its_own_soon(receiver, allow_private):
    before = datetime.now(UTC)
    deliver(make_test_notification("am", "https://pitwall.example.com"), base(receiver))

    [alert] = receiver.requests[0].json()
    assert alert["labels"] == {"alertname": "PitwallTestNotification", "severity": "info"}
    ends = datetime.fromisoformat(alert["endsAt"])
    assert before < ends <= datetime.now(UTC) + timedelta(minutes=5)


def test_an_end_before_the_start_is_never_sent(receiver, allow_private, message):
    from dataclasses import replace

    early = replace(message.alerts[1], ends_at=ONSET - timedelta(minutes=1))
    deliver(replace(message, alerts=[early]), base(receiver))
    alert = receiver.requests[0].json()[0]
    assert alert["endsAt"] == alert["startsAt"]


@pytest.mark.parametrize(("config", "field"), [
    ({}, "urls"),
    ({"urls": []}, "urls"),
    ({"urls": "ftp://am:9093"}, "urls[0]"),
    ({"urls": ["http://am-1:9093", "am-2:9093"]}, "urls[1]"),
    ({"urls": ["http://am-1:9093", "http://am-2:x"]}, "urls[1]"),
    ({"urls": ["http://am-1:9093", "http://am-2:9093", "http://am-1:9093/"]}, "urls[2]"),
    ({"urls": [f"http://am-{i}:9093" for i in range(9)]}, "urls"),
    ({"urls": ["http://am:9093"], "resend_s": 5}, "resend_s"),
    ({"urls": ["http://am:9093"], "resend_s": 601}, "resend_s"),
    ({"urls": ["http://am:9093"], "resend_s": "60"}, "resend_s"),
    ({"urls": ["http://am:9093"], "bearer_token": "a\nb"}, "bearer_token"),
    ({"urls": ["http://am:9093"], "external_labels": {"bad-name": "x"}},
     "external_labels.bad-name"),
    ({"urls": ["http://am:9093"], "external_labels": {"env": ""}}, "external_labels.env"),
    ({"urls": ["http://am:9093"], "external_labels": {"env": "x" * 1001}},
     "external_labels.env"),
    ({"urls": ["http://am:9093"], "external_labels": {"e" * 101: "x"}},
     "external_labels." + "e" * 100),
])
def test_a_bad_config_names_the_field(config, field):
    with pytest.raises(ConfigError) as caught:
        AlertmanagerApiTransport().validate_config(config)
    assert caught.value.field == field


def test_a_good_config_is_cleaned():
    cleaned = AlertmanagerApiTransport().validate_config(
        {"urls": ["http://am-1:9093/", "https://am-2.example.com"], "bearer_token": "",
         "other": 1})
    assert cleaned == {"urls": ["http://am-1:9093", "https://am-2.example.com"],
                       "resend_s": 60}
