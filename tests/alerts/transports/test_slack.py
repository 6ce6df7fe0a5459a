from __future__ import annotations

from dataclasses import replace

from controlplane.alerts.transports import SlackTransport
from tests.alerts.transports.messages import kv_cache_alert


def deliver(receiver, message):
    SlackTransport().notify({"url": receiver.url}, message)
    [request] = receiver.requests
    return request


def test_it_posts_a_slack_message_with_text_and_blocks(receiver, allow_private, message):
    request = deliver(receiver, message)
    body = request.json()

    assert body["text"] == "[FIRING:1] KV cache at 97% on gpu-07 with 12 requests waiting (+1 more)"
    header, first, second, context = body["blocks"]
    assert header == {"type": "header", "text": {"type": "plain_text", "text": body["text"]}}
    assert first["type"] == second["type"] == "section"
    assert first["text"]["type"] == "mrkdwn"
    assert first["text"]["text"].startswith(":red_circle: *KV cache at 97% on gpu-07")
    assert second["text"]["text"].startswith(":large_green_circle: *KV cache at 97% on gpu-08")
    assert f"<{message.alerts[0].generator_url}|Charts>" in first["text"]["text"]
    assert message.id in context["elements"][0]["text"]
    assert request.headers["X-Pitwall-Notification-Id"] == message.id


def test_it_escapes_slack_control_characters_in_annotations(receiver, allow_private, message):
    text = deliver(receiver, message).json()["blocks"][1]["text"]["text"]

    assert "Requests queue &lt;behind&gt; a full cache &amp; preemptions rise." in text


def test_an_alert_storm_stays_within_slacks_block_limit(receiver, allow_private, message):
    storm = replace(message, alerts=[kv_cache_alert(f"gpu-{n:02}") for n in range(60)])

    blocks = deliver(receiver, storm).json()["blocks"]

    assert len(blocks) == 12
    assert blocks[-1]["elements"][0]["text"].startswith("and 50 more alerts")
