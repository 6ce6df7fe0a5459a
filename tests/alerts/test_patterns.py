"""User-supplied patterns (silence and rule matchers, hostname globs) in linear time, RE2's
syntax, bounded length: one module compiles them all (controlplane/alerts/patterns.py)."""

from __future__ import annotations

import fnmatch
import time

import pytest
from django.core.exceptions import ValidationError

from controlplane.alerts import patterns
from controlplane.alerts.patterns import MAX_PATTERN_CHARS
from controlplane.alerts.silences import matches, validate_matchers

EVIL = "(.|.)*!"  # exponential for a backtracking engine on any label without a "!"
ALERTS = 1000


def _cost(matchers: list[dict], alerts: list[dict]) -> float:
    """Seconds to match every alert, the best of several tries (a busy machine only ever adds
    time, so the minimum is the stablest figure)."""
    best = float("inf")
    for _ in range(7):
        started = time.perf_counter()
        for labels in alerts:
            matches(matchers, labels)
        best = min(best, time.perf_counter() - started)
    return best


def test_a_pathological_silence_regex_over_1000_alerts_is_matched_in_linear_time():
    # No wall-clock limit: the cost of the pathological pattern relative to a plain one on the
    # same alerts must not grow with the labels' length. Doubling the label from 6 to 12
    # characters multiplies a backtracking engine's relative cost by 2**6 = 64 (Python's re);
    # a linear one keeps it about the same.
    evil = [{"label": "host", "op": "=~", "value": EVIL}]
    plain = [{"label": "host", "op": "=~", "value": "gpu-node-[0-9]+!"}]
    slowdown = {}
    for length in (6, 12):
        alerts = [{"alertname": "GPU hot", "host": "a" * length} for _ in range(ALERTS)]
        assert not any(matches(evil, labels) for labels in alerts)
        slowdown[length] = _cost(evil, alerts) / _cost(plain, alerts)
    assert slowdown[12] < 4 * slowdown[6], slowdown


def test_long_labels_under_a_pathological_regex_are_matched():
    # 1,000 alerts with 200-character labels: a backtracking engine would need 2**200 steps.
    alerts = [{"host": "x" * 199 + str(i % 10)} for i in range(ALERTS)]
    evil = [{"label": "host", "op": "=~", "value": EVIL}]
    assert not any(matches(evil, labels) for labels in alerts)
    assert all(matches([{"label": "host", "op": "!~", "value": EVIL}], labels)
               for labels in alerts)


@pytest.mark.parametrize(("value", "label", "expected"), [
    ("gpu-node-.*", "gpu-node-12", True),
    ("gpu-node-1", "gpu-node-12", False),  # anchored at both ends, as Alertmanager anchors
    ("node", "gpu-node-1", False),
    ("a|b", "a", True),
    ("a|b", "ab", False),  # ^(?:a|b)$, not ^a|b$
    ("", "", True),
    (".+", "", False),
])
def test_regex_matchers_match_the_whole_label(value, label, expected):
    assert matches([{"label": "host", "op": "=~", "value": value}], {"host": label}) is expected
    assert matches([{"label": "host", "op": "!~", "value": value}],
                   {"host": label}) is not expected


@pytest.mark.parametrize(("value", "words"), [
    (r"(a)\1", "invalid escape sequence"),  # a backreference: RE2 has none
    ("(?=gpu)", "invalid perl operator"),  # a lookahead
    ("gpu-([", "missing"),
    ("a{1001}", "invalid repetition size"),
    ("x" * (MAX_PATTERN_CHARS + 1), f"at most {MAX_PATTERN_CHARS} characters"),
])
def test_what_re2_refuses_or_too_long_a_pattern_is_refused_naming_the_field(value, words):
    with pytest.raises(ValidationError) as caught:
        validate_matchers([{"label": "host", "op": "=~", "value": value}], field="matchers")
    [message] = caught.value.message_dict["matchers"]
    assert message.startswith("matchers[0].value ") and words in message, message


def test_a_pattern_of_the_maximum_length_is_accepted():
    value = "x" * MAX_PATTERN_CHARS
    assert validate_matchers([{"label": "host", "op": "=~", "value": value}])
    assert matches([{"label": "host", "op": "=~", "value": value}], {"host": value})


def test_an_equality_matcher_is_not_a_pattern_and_has_no_length_check_of_patterns():
    value = "(" * 10  # not a regex with =
    assert matches([{"label": "host", "value": value}], {"host": value})


GLOBS = ["infer-*", "*", "gpu-node-?", "gpu-[0-9]*", "gpu-[!0-9]*", "[]x]*", "[!]x]*", "a[",
         "[z-a]*", "a-[a-c-e]", "*.example.com", "**a**", "x\\y", "[\\]*", "a[^b]c", "a[&~|]c",
         "gpu-(node)+", "gpu.node", "[!]"]
NAMES = ["infer-1", "gpu-node-1", "gpu-node-12", "gpu-7", "gpu-x", "]x", "x", "a[", "a", "",
         "a-b", "a-d", "a--", "host.example.com", "banana", "x\\y", "\\", "a^c", "abc", "a&c",
         "a~c", "gpu-(node)+", "gpu-nodenode", "gpu.node", "gpuxnode", "!", "[!]"]


@pytest.mark.parametrize("glob", GLOBS)
def test_hostname_globs_match_as_fnmatch_does(glob):
    for name in NAMES:
        assert patterns.glob_match(glob, name) is fnmatch.fnmatchcase(name, glob), (glob, name)


def test_a_pathological_glob_is_matched():
    glob = "*a" * 60 + "b"
    assert not patterns.glob_match(glob, "a" * 253)
