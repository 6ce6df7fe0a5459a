"""Silenced alerts send nothing; acknowledged ones do not repeat, their resolution is sent."""

from __future__ import annotations

from controlplane.alerts.silences import acknowledge, create_silence
from tests.alerts.delivery.helpers import at, cycle, fire, payloads, resolve


def silence_host(host: str, until) -> None:
    create_silence(matchers=[{"label": "host", "op": "=", "value": host}], starts_at=at(0),
                   ends_at=until, author="bob", comment="maintenance")


def test_silenced_alerts_send_nothing(webhook, receiver):
    silence_host("gpu-01", at(hours=8))
    alert = fire("KVCacheFull", "gpu-01")

    assert cycle(at(30)) == []
    assert cycle(at(hours=5)) == []
    resolve(alert, at(hours=6))
    assert cycle(at(hours=7)) == []
    assert receiver.requests == []


def test_a_silenced_alert_is_left_out_of_its_group(webhook, receiver):
    silence_host("gpu-01", at(hours=8))
    fire("KVCacheFull", "gpu-01")
    fire("KVCacheFull", "gpu-02")

    cycle(at(30))

    [body] = payloads(receiver)
    assert [a["labels"]["host"] for a in body["alerts"]] == ["gpu-02"]


def test_an_alert_silenced_after_it_was_sent_neither_repeats_nor_resolves_while_silenced(
        webhook, receiver):
    alert = fire("KVCacheFull", "gpu-01")
    cycle(at(30))
    silence_host("gpu-01", at(hours=6))

    assert cycle(at(hours=5)) == []
    resolve(alert, at(hours=5, minutes=1))
    assert cycle(at(hours=5, minutes=10)) == []
    [resolved] = cycle(at(hours=6, minutes=1))  # the silence is over: the resolution goes out

    assert resolved.status == "resolved"


def test_acknowledged_alerts_are_not_repeated_but_their_resolution_is_sent(webhook, receiver):
    alert = fire("KVCacheFull", "gpu-01")
    cycle(at(30))
    assert acknowledge(alert, by="bob", comment="on it", now=at(minutes=1))

    assert cycle(at(hours=4, minutes=1)) == []
    assert cycle(at(hours=9)) == []
    resolve(alert, at(hours=10))
    [resolved] = cycle(at(hours=10))

    assert resolved.status == "resolved"
    assert [p["status"] for p in payloads(receiver)] == ["firing", "resolved"]


def test_a_group_repeats_while_one_of_its_alerts_is_not_acknowledged(webhook, receiver):
    acked = fire("KVCacheFull", "gpu-01")
    fire("KVCacheFull", "gpu-02")
    cycle(at(30))
    acknowledge(acked, by="bob", now=at(minutes=1))

    [repeat] = cycle(at(hours=4, seconds=30))

    assert len(repeat.payload["alerts"]) == 2
