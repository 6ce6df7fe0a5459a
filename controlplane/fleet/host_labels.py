"""Host labels that people set (the API's PATCH /hosts/{id}/, the host page): checked, stored,
audited. A service's ``selector`` matches ``Host.all_labels()``: the agent's own labels
(``--label``), overridden by these.

Keys and values are bounded as the agent's are (docs/protocol.md, inventory ``labels``): a key
is at most 63 characters of ``[a-z0-9._/-]`` that starts and ends with a letter or a digit, a
value at most 63 of ``[A-Za-z0-9._-]``, and a host holds at most 32. Host is not a tracked
model (its rows change with every inventory), so the change is recorded here.
"""

from __future__ import annotations

import re

from django.core.exceptions import ValidationError
from django.db import transaction

from controlplane.audit.record import record
from controlplane.fleet.models import Host

MAX_LABELS = 32
MAX_KEY = 63
MAX_VALUE = 63
LABEL_KEY = re.compile(r"[a-z0-9](?:[a-z0-9._/-]{0,61}[a-z0-9])?\Z")
LABEL_VALUE = re.compile(r"[A-Za-z0-9._-]{0,63}\Z")


def check(labels: object) -> dict[str, str]:
    """``labels`` as stored, or a ValidationError keyed ``labels`` naming each bad entry."""
    if not isinstance(labels, dict):
        raise ValidationError({"labels": ['an object of key: value strings, e.g. '
                                          '{"pool": "online", "zone": "rack-3"}']})
    problems = [f"at most {MAX_LABELS} labels, not {len(labels)}"] if len(
        labels) > MAX_LABELS else []
    for key, value in list(labels.items())[:MAX_LABELS + 1]:
        problems += _entry_problems(key, value)
    if problems:
        raise ValidationError({"labels": problems})
    return dict(labels)


def _entry_problems(key: str, value: object) -> list[str]:
    # The length first: no pattern ever reads more than the bound.
    shown = key if len(key) <= MAX_KEY else f"{key[:MAX_KEY]}…"
    if len(key) > MAX_KEY or not LABEL_KEY.match(key):
        return [f"key {shown!r}: 1 to {MAX_KEY} of a-z 0-9 . _ / -, starting and ending with "
                f"a letter or a digit"]
    if not isinstance(value, str):
        return [f"{key}: the value must be a string"]
    if len(value) > MAX_VALUE or not LABEL_VALUE.match(value):
        return [f"{key}: the value must be at most {MAX_VALUE} of A-Z a-z 0-9 . _ -"]
    return []


@transaction.atomic
def set_labels(host: Host, labels: object) -> bool:
    """Replace the host's own labels; False when they are the same. The audit log records who
    changed what (the request's user, as for tracked models)."""
    wanted = check(labels)
    held = Host.objects.select_for_update().values_list("labels", flat=True).get(pk=host.pk)
    held = held if isinstance(held, dict) else {}
    host.labels = wanted
    if held == wanted:
        return False
    Host.objects.filter(pk=host.pk).update(labels=wanted)
    record("changed", "host", host.pk, host.hostname, {"labels": [held, wanted]})
    return True


def parse_lines(text: str) -> dict[str, str]:
    """Labels written one ``key=value`` a line (the host page, the service form's selector);
    a ValidationError names the line that does not read. The values are checked by ``check``
    (or by the service's own checks for a selector)."""
    labels: dict[str, str] = {}
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        key, eq, value = line.partition("=")
        key = key.strip()
        if not eq or not key:
            raise ValidationError(f"line {number}: write key=value")
        if key in labels:
            raise ValidationError(f"line {number}: {key[:MAX_KEY]} is set twice")
        labels[key] = value.strip()
    return labels


def lines(labels: object) -> str:
    return "\n".join(f"{k}={v}" for k, v in labels.items()) if isinstance(labels, dict) else ""
