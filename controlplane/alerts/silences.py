"""Silences and acknowledgements: what keeps an alert quiet, and who decided it."""

from __future__ import annotations

import json
import logging
from datetime import datetime, timedelta

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import connection, transaction
from django.db.models import QuerySet
from django.utils import timezone

from controlplane.alerts import patterns
from controlplane.alerts.compiled import (
    MIN_REGEX_BYTES,
    Compiled,
    CompiledCache,
    compile_matchers,
    matches_all,
    regex_bytes,
)
from controlplane.alerts.models import Alert, AlertEvent, AlertState, Silence
from controlplane.audit.record import record

log = logging.getLogger(__name__)

LABELS = ("alertname", "severity", "host", "engine", "gpu")
OPS = ("=", "!=", "=~", "!~")
# pg_advisory_xact_lock key: silences are created one at a time, so two at once cannot both
# pass the bounds on the active silences.
CREATE_LOCK = 0x7069_7473_696C  # "pitsil"


def max_duration() -> timedelta:
    """PITWALL["ALERT_SILENCE_MAX_DAYS"]: a silence for years would hide a rule's alerts from
    everyone, long after its reason is gone. Read at call time (a test's change applies)."""
    return timedelta(days=settings.PITWALL["ALERT_SILENCE_MAX_DAYS"])


def validate_matchers(matchers: object, *, field: str = "matchers",
                      labels: tuple[str, ...] = LABELS,
                      allow_empty: bool = False) -> list[dict[str, str]]:
    """[{label, op, value}], op one of OPS (default "="), regexes RE2 compiles, at most
    ``patterns.MAX_PATTERN_CHARS`` long; errors keyed by ``field`` and naming the matcher."""
    if not isinstance(matchers, list) or not (matchers or allow_empty):
        raise ValidationError({field: f"{field} must be a {'' if allow_empty else 'non-empty '}"
                                      f"list of {{label, op, value}}"})
    for i, m in enumerate(matchers):
        where = f"{field}[{i}]"
        if not isinstance(m, dict) or set(m) - {"label", "op", "value"} or "label" not in m \
                or "value" not in m:
            raise ValidationError({field: f"{where} must be {{label, op, value}}"})
        if m["label"] not in labels:
            raise ValidationError({field: f"{where}.label {m['label']!r} is not one of "
                                          f"{', '.join(labels)}"})
        if m.setdefault("op", "=") not in OPS:
            raise ValidationError({field: f"{where}.op must be one of {', '.join(OPS)}"})
        if m["op"] in ("=~", "!~") and (problem := patterns.regex_problem(str(m["value"]))):
            raise ValidationError({field: f"{where}.value {problem}"})
    return matchers


def create_silence(*, matchers: list[dict[str, str]], starts_at: datetime, ends_at: datetime,
                   author: str, comment: str, created_by=None) -> Silence:
    """A silence by ``created_by``, whose name is then its author whatever ``author`` says (no
    one silences in another's name); ``author`` names the author only without a user (tests,
    scripts). At most ``max_duration()`` long, and starting at most that far ahead (a silence
    scheduled years ahead would lie in wait long after anyone remembers it)."""
    if created_by is not None:
        author = created_by.get_username()
    errors = {}
    longest = max_duration()
    if starts_at - timezone.now() > longest:
        errors["starts_at"] = f"a silence starts at most {_days(longest)} from now"
    if ends_at <= starts_at:
        errors["ends_at"] = "ends_at must be after starts_at"
    elif ends_at - starts_at > longest:
        errors["ends_at"] = (f"a silence lasts at most {_days(longest)} after starts_at; "
                             f"silence again when it ends if need be")
    if not author.strip():
        errors["author"] = "author is required"
    if not comment.strip():
        errors["comment"] = "say why: comment is required"
    if errors:
        raise ValidationError(errors)
    matchers = validate_matchers(matchers)
    check_own_bounds(matchers)
    with transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_xact_lock(%(key)s)", {"key": CREATE_LOCK})
        check_fleet_bounds(matchers, timezone.now())
        return Silence.objects.create(matchers=matchers, starts_at=starts_at, ends_at=ends_at,
                                      author=author, comment=comment, created_by=created_by)


# --- bounds ------------------------------------------------------------------------------
# Every active silence is matched against every alert of the alert list and of each dispatch
# pass: their number and the regexes they compile are bounded (docs/security.md).


def _limit(key: str) -> int:
    return int(settings.PITWALL[key])


def check_own_bounds(matchers: list[dict[str, str]]) -> None:
    """One silence: at most ALERT_SILENCE_MAX_MATCHERS matchers, and no more regex bytes than
    all active silences together may hold."""
    most, bytes_most = _limit("ALERT_SILENCE_MAX_MATCHERS"), _limit(
        "ALERT_SILENCES_MAX_PATTERN_BYTES")
    if len(matchers) > most:
        raise ValidationError({"matchers": (
            f"a silence has at most {most} matchers (PITWALL_ALERT_SILENCE_MAX_MATCHERS); "
            f"this one has {len(matchers)}")})
    if (size := regex_bytes(matchers)) > bytes_most:
        raise ValidationError({"matchers": (
            f"the regexes of this silence count {size} bytes (each at least {MIN_REGEX_BYTES}); "
            f"the active silences hold at most {bytes_most} bytes of regexes in all "
            f"(PITWALL_ALERT_SILENCES_MAX_PATTERN_BYTES)")})


def check_fleet_bounds(matchers: list[dict[str, str]], now: datetime) -> None:
    """With this one, at most ALERT_SILENCES_MAX_ACTIVE silences active or pending, holding
    at most ALERT_SILENCES_MAX_PATTERN_BYTES bytes of regexes. Call under CREATE_LOCK."""
    most, bytes_most = _limit("ALERT_SILENCES_MAX_ACTIVE"), _limit(
        "ALERT_SILENCES_MAX_PATTERN_BYTES")
    live = list(Silence.objects.filter(ends_at__gt=now).values_list("matchers", flat=True))
    if len(live) >= most:
        raise ValidationError({"non_field_errors": (
            f"{len(live)} silences are active or pending, the most allowed "
            f"(PITWALL_ALERT_SILENCES_MAX_ACTIVE = {most}); expire one first")})
    held = sum(regex_bytes(m) for m in live if isinstance(m, list))
    if held + (size := regex_bytes(matchers)) > bytes_most:
        raise ValidationError({"matchers": (
            f"the active and pending silences hold {held} bytes of regexes and this one "
            f"{size} (each regex counts at least {MIN_REGEX_BYTES}); at most {bytes_most} in "
            f"all (PITWALL_ALERT_SILENCES_MAX_PATTERN_BYTES)")})


def _days(span: timedelta) -> str:
    return f"{span.total_seconds() / 86400:g} days"


def expire_silence(silence: Silence, now: datetime | None = None) -> None:
    now = now or timezone.now()
    if silence.ends_at > now:
        silence.ends_at = max(now, silence.starts_at)
        silence.save(update_fields=["ends_at"])


def active_silences(now: datetime | None = None) -> QuerySet[Silence]:
    now = now or timezone.now()
    return Silence.objects.filter(starts_at__lte=now, ends_at__gt=now)


def matches(matchers: list[dict[str, str]], labels: dict[str, str], *,
            on_refused: bool | None = None) -> bool:
    """Every matcher matches; a regex matches the whole label (RE2, linear time: patterns.py).
    A regex refused today but stored before (Python's syntax was accepted until RE2 came)
    raises patterns.PatternError, or gives ``on_refused`` when it is given. Compiles the
    matchers for this call: to match many label sets, compile once (compiled.py)."""
    try:
        compiled = compile_matchers(matchers)
    except patterns.PatternError:
        if on_refused is None:
            raise
        return on_refused
    return matches_all(compiled, labels)


# Silences compiled, kept between passes: a silence's matchers never change (to change one,
# expire it and create another), so its id and matchers key its compiled form.
COMPILED = CompiledCache()
_UNSET = object()


def compiled_silence(silence: Silence) -> Compiled | None:
    """The silence's matchers compiled, once per instance (so once per pass or request, which
    reads the active silences once) and, across passes, from COMPILED. None: it silences
    nothing (a regex RE2 refuses, malformed matchers, or over today's bounds)."""
    held = silence.__dict__.get("_compiled_matchers", _UNSET)
    if held is _UNSET:
        held = silence.__dict__["_compiled_matchers"] = _cached_compile(silence)
    return held


def _cached_compile(silence: Silence) -> Compiled | None:
    key = (silence.pk, json.dumps(silence.matchers, sort_keys=True, default=str))
    found, compiled = COMPILED.get(key)
    if found:
        return compiled
    compiled = _compile_silence(silence)
    # What it holds: the regexes' bytes (one refused holds nothing, and stays cached so that
    # its warning is logged once).
    weight = 1 if compiled is None else 1 + regex_bytes(silence.matchers)
    most_bytes = _limit("ALERT_SILENCES_MAX_PATTERN_BYTES")
    COMPILED.put(key, compiled, weight, max_entries=2 * _limit("ALERT_SILENCES_MAX_ACTIVE"),
                 max_bytes=2 * most_bytes)
    return compiled


def _compile_silence(silence: Silence) -> Compiled | None:
    matchers = silence.matchers
    try:
        # One stored before the bounds were set, or over them since they were lowered, is
        # not compiled at all: compiling it could cost seconds each pass.
        check_own_bounds(matchers)
        return compile_matchers(matchers)
    except ValidationError as exc:
        log.warning("silence %s silences nothing: %s", silence.pk, exc.messages[0])
    except (patterns.PatternError, KeyError, TypeError, AttributeError) as exc:
        log.warning("silence %s silences nothing: its matchers are refused (%s)",
                    silence.pk, exc)
    return None


def silence_matches(silence: Silence, labels: dict[str, str]) -> bool:
    """A silence whose stored regex RE2 refuses (or over the bounds) silences nothing: better
    a page too many than a stalled or failing list."""
    compiled = compiled_silence(silence)
    return compiled is not None and matches_all(compiled, labels)


def silenced_by(alert: Alert, now: datetime | None = None,
                silences: list[Silence] | None = None) -> Silence | None:
    """The first active silence matching the alert; pass ``silences`` to check many alerts
    against one read of the active ones."""
    pool = active_silences(now) if silences is None else silences
    return silence_of(alert.labels, pool)


def silence_of(labels: dict, silences) -> Silence | None:
    """The first of ``silences`` whose matchers match these labels."""
    return next((s for s in silences if silence_matches(s, labels)), None)


def is_silenced(alert: Alert, now: datetime | None = None,
                silences: list[Silence] | None = None) -> bool:
    return silenced_by(alert, now, silences) is not None


def acknowledge(alert: Alert, by: str, comment: str = "",
                now: datetime | None = None) -> bool:
    """Ack a firing alert: no repeats until it resolves (the resolve clears the ack).
    False when the alert is not firing (anymore)."""
    now = now or timezone.now()
    done = Alert.objects.filter(id=alert.id, state=AlertState.FIRING).update(
        acknowledged_at=now, acknowledged_by=by, ack_comment=comment) == 1
    if done:
        alert.acknowledged_at, alert.acknowledged_by, alert.ack_comment = now, by, comment
        AlertEvent.objects.create(alert=alert, at=now, from_state=AlertState.FIRING,
                                  to_state=AlertState.FIRING, value=alert.value,
                                  note=f"acknowledged by {by}: {comment}"[:500])
        # A conditional UPDATE, which sends no signal: the audit log is told here.
        record("acknowledged", "alert", alert.id, _audit_name(alert),
               {"comment": [None, comment]} if comment else {})
    return done


def unacknowledge(alert: Alert) -> None:
    if Alert.objects.filter(id=alert.id, acknowledged_at__isnull=False).update(
            acknowledged_at=None, acknowledged_by="", ack_comment=""):
        record("unacknowledged", "alert", alert.id, _audit_name(alert))
    alert.acknowledged_at, alert.acknowledged_by, alert.ack_comment = None, "", ""


def _audit_name(alert: Alert) -> str:
    return f"{alert.labels.get('alertname', alert.rule_id)} on {alert.target}"
