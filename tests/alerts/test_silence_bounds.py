"""Silences are compiled once, not once per alert, and bounded: matchers per silence, silences
active or pending, regex bytes in all. Compilations are counted as RE2 compiles them
(patterns.py's cache misses), never timed."""

from __future__ import annotations

import random
from datetime import timedelta

import pytest
from django.test import Client
from django.utils import timezone

from controlplane.alerts import patterns, silences
from controlplane.alerts.compiled import compile_matchers
from controlplane.alerts.delivery.dispatch import dispatch
from controlplane.alerts.models import Silence
from tests.alerts.delivery.helpers import at, fire
from tests.support.roles import user_with_role

# More distinct patterns than patterns.py's cache holds (4,096): matched alert by alert, each
# alert compiled every one of them again.
SILENCES, PER_SILENCE = 140, 31
PATTERNS = SILENCES * PER_SILENCE
# Their regexes count 140 x 31 x 64 bytes: as an operator who raised the bound allows.
ROOM_FOR_THEM = {"ALERT_SILENCES_MAX_PATTERN_BYTES": 1 << 20}


def many_pattern_silences() -> None:
    """Silences whose regexes all match a gpu-* host, each ending in a matcher that never
    matches: they silence nothing, and every regex is tried for every alert. Stored as
    they were before the bounds (straight into the table)."""
    Silence.objects.bulk_create([Silence(
        matchers=[*({"label": "host", "op": "=~", "value": f"(?:gpu-.*|s{i}m{k})"}
                    for k in range(PER_SILENCE)),
                  {"label": "alertname", "op": "=", "value": "never fires"}],
        starts_at=at(0), ends_at=at(hours=8), author="mallory", comment="stall")
        for i in range(SILENCES)])


def compilations() -> int:
    return patterns._compile.cache_info().misses


@pytest.fixture
def cold_caches():
    patterns._compile.cache_clear()
    silences.COMPILED.clear()
    yield
    patterns._compile.cache_clear()
    silences.COMPILED.clear()


@pytest.mark.parametrize("alerts", [1, 4])
def test_a_dispatch_pass_compiles_each_silence_once_whatever_the_number_of_alerts(
        db, cold_caches, settings, alerts):
    settings.PITWALL = {**settings.PITWALL, **ROOM_FOR_THEM}
    many_pattern_silences()
    for n in range(alerts):
        fire("KVCacheFull", f"gpu-{n:02d}")

    dispatch(at(30))
    assert compilations() == PATTERNS  # once each, not once per alert (before: x alerts)

    dispatch(at(60))
    assert compilations() == PATTERNS  # the next pass reuses them


def test_a_stored_silence_over_the_matcher_bound_silences_nothing_and_is_not_compiled(
        db, cold_caches):
    silence = Silence.objects.create(
        matchers=[{"label": "host", "op": "=~", "value": f"(?:gpu-.*|x{k})"} for k in range(40)],
        starts_at=at(0), ends_at=at(hours=8), author="mallory", comment="stored long ago")
    alert = fire("KVCacheFull", "gpu-01")

    assert not silences.silence_matches(silence, alert.labels)
    assert compilations() == 0


def test_a_silence_within_the_bounds_still_silences(db, cold_caches):
    silence = silences.create_silence(
        matchers=[{"label": "host", "op": "=~", "value": "gpu-.*"},
                  {"label": "alertname", "op": "!=", "value": "other"}],
        starts_at=timezone.now(), ends_at=timezone.now() + timedelta(hours=1),
        author="ops", comment="maintenance")
    alert = fire("KVCacheFull", "gpu-01")
    assert silences.is_silenced(alert)
    assert silences.silenced_by(alert) == silence


def test_the_silence_form_names_the_bound_and_stores_nothing(db, settings):
    client = Client()
    client.force_login(user_with_role("ops", "operator"))
    lines = "\n".join(f"host=~gpu-{k}.*" for k in range(33))
    response = client.post("/alerts/silences/", {
        "matchers": lines, "duration_s": "3600", "comment": "too many"})
    assert "at most 32 matchers (PITWALL_ALERT_SILENCE_MAX_MATCHERS)" in \
        response.content.decode()
    assert not Silence.objects.exists()

    settings.PITWALL = {**settings.PITWALL, "ALERT_SILENCES_MAX_ACTIVE": 1}
    for expected in (1, 1):
        client.post("/alerts/silences/", {"matchers": "host=gpu-1", "duration_s": "3600",
                                          "comment": "fan swap"})
        assert Silence.objects.count() == expected
    response = client.post("/alerts/silences/", {"matchers": "host=gpu-1", "duration_s": "3600",
                                                 "comment": "fan swap"})
    assert "PITWALL_ALERT_SILENCES_MAX_ACTIVE" in response.content.decode()


def one_by_one(matchers: list[dict[str, str]], labels: dict[str, str]) -> bool:
    """Each matcher on its own, as matching was before it was compiled."""
    for m in matchers:
        have = labels.get(m["label"], "")
        hit = (patterns.fullmatch(m["value"], have) if m["op"] in ("=~", "!~")
               else have == m["value"])
        if hit == (m["op"] in ("!=", "!~")):
            return False
    return True


def test_compiled_matchers_agree_with_matching_them_one_by_one():
    # Regexes of one label run together as an RE2 set: what it answers must be what each
    # regex answers on its own, for every op and mix.
    rng = random.Random(20261205)
    values = ["gpu-node-1", "gpu-node-12", "cpu-7", "", "GPU-a0", "héllo-ü"]
    regexes = ["gpu-.*", "gpu-node-1", ".*1", "cpu-[0-9]+", "", "h.llo-.", "x|gpu-node-12",
               "(?i)gpu-a0", ".*"]
    for _ in range(3000):
        matchers = [{"label": rng.choice(["host", "gpu"]), "op": op,
                     "value": rng.choice(regexes if op in ("=~", "!~") else values)}
                    for op in rng.choices(["=", "!=", "=~", "!~"], k=rng.randint(0, 6))]
        labels = {"host": rng.choice(values), "gpu": rng.choice(values)}
        assert compile_matchers(matchers).matches(labels) == one_by_one(matchers, labels), (
            matchers, labels)
