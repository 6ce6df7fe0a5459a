"""Silences match alerts by labels within their time range; an ack lasts until the resolve."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.core.exceptions import ValidationError

from controlplane.alerts.models import AlertEvent
from controlplane.alerts.silences import (
    acknowledge,
    create_silence,
    expire_silence,
    is_silenced,
)
from tests.support.alert_data import T0, rule, run, samples

S = timedelta(seconds=1)


@pytest.fixture
def hot_alert(node):
    samples("gpu", {"gpu_id": node.gpus[0].id}, lambda ts: {"temp_c": 95.0 if ts <= T0 else 50},
            T0 - 60 * S, T0 + 60 * S)
    r = rule(name="GPU hot", metric="gpu.temp_c", aggregation="max", window_s=10, op=">",
             threshold=85, severity="critical")
    return run(r, T0)[0]


def silence(matchers, start=T0 - 60 * S, end=T0 + 3600 * S):
    return create_silence(matchers=matchers, starts_at=start, ends_at=end, author="alice",
                          comment="maintenance")


def test_a_silence_matching_the_host_silences_the_alert(hot_alert):
    silence([{"label": "host", "op": "=", "value": "gpu-node-1"}])
    assert is_silenced(hot_alert, T0)


def test_every_matcher_must_match(hot_alert):
    silence([{"label": "host", "value": "gpu-node-1"},
             {"label": "severity", "value": "warning"}])
    assert not is_silenced(hot_alert, T0)


def test_regex_matchers_match_the_whole_label(hot_alert):
    silence([{"label": "alertname", "op": "=~", "value": "GPU.*"}])
    assert is_silenced(hot_alert, T0)


def test_a_regex_matching_only_part_of_the_label_does_not_match(hot_alert):
    silence([{"label": "host", "op": "=~", "value": "gpu-node"}])
    assert not is_silenced(hot_alert, T0)


def test_a_negative_matcher_excludes_matching_alerts(hot_alert):
    silence([{"label": "alertname", "op": "!=", "value": "GPU hot"}])
    assert not is_silenced(hot_alert, T0)


def test_a_silence_only_applies_between_its_start_and_end(hot_alert):
    silence([{"label": "host", "value": "gpu-node-1"}], start=T0 + 60 * S, end=T0 + 120 * S)
    assert not is_silenced(hot_alert, T0)
    assert is_silenced(hot_alert, T0 + 90 * S)
    assert not is_silenced(hot_alert, T0 + 120 * S)


def test_an_expired_silence_no_longer_silences(hot_alert):
    s = silence([{"label": "host", "value": "gpu-node-1"}])
    expire_silence(s, now=T0 + 10 * S)
    assert not is_silenced(hot_alert, T0 + 11 * S)


def test_a_silence_with_an_unknown_label_is_refused(db):
    with pytest.raises(ValidationError) as caught:
        silence([{"label": "datacenter", "value": "x"}])
    assert "matchers[0].label 'datacenter'" in caught.value.message_dict["matchers"][0]


def test_a_silence_without_a_comment_or_ending_before_it_starts_is_refused(db):
    with pytest.raises(ValidationError) as caught:
        create_silence(matchers=[{"label": "host", "value": "a"}], starts_at=T0, ends_at=T0,
                       author="alice", comment=" ")
    assert set(caught.value.message_dict) == {"ends_at", "comment"}


def test_a_bad_regex_is_refused(db):
    with pytest.raises(ValidationError):
        silence([{"label": "host", "op": "=~", "value": "("}])


def test_an_acknowledgement_lasts_until_the_alert_resolves(hot_alert):
    # That an acknowledged alert does not repeat: tests/alerts/delivery/test_silences_and_acks.py
    assert not hot_alert.acknowledged
    assert acknowledge(hot_alert, "alice", "looking at the fans", now=T0)
    hot_alert.refresh_from_db()
    assert hot_alert.acknowledged
    assert AlertEvent.objects.filter(note__startswith="acknowledged by alice").exists()
    [resolved] = run(hot_alert.rule, T0 + 30 * S)
    assert resolved.state == "resolved" and not resolved.acknowledged


def test_an_alert_that_is_not_firing_cannot_be_acknowledged(hot_alert):
    run(hot_alert.rule, T0 + 30 * S)
    hot_alert.refresh_from_db()
    assert not acknowledge(hot_alert, "alice", now=T0 + 31 * S)


def test_a_silence_matching_the_gpu_silences_the_alert(hot_alert):
    silence([{"label": "gpu", "value": hot_alert.labels["gpu"]}])
    assert is_silenced(hot_alert, T0)
