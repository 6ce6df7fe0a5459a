"""Matchers compiled once: a silence's (or a route's, a rule's) regexes are compiled when it is
first matched, then reused for every alert of a pass and, within a bounded cache, for the
next passes.

Matching alert by alert with the regex text let one silence of more distinct patterns than
patterns.py's cache holds (4,096) compile every pattern again for every alert: 4,200 patterns
of 1,000 characters cost about 2.6 s per alert, so the alert list and the notification
dispatch (which holds its lock meanwhile) stalled. Here the compiled matchers are built once
per silence and kept with it.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Iterable, Mapping
from typing import Any, NamedTuple

from controlplane.alerts import patterns

REGEX_OPS = ("=~", "!~")
NEGATED_OPS = ("!=", "!~")


class Matcher(NamedTuple):
    label: str
    op: str
    value: str
    regex: Any  # the compiled RE2 program of a regex op; None for = and !=

    def holds(self, labels: Mapping[str, Any]) -> bool:
        have = str(labels.get(self.label, ""))
        hit = (self.regex.fullmatch(have) is not None if self.regex is not None
               else have == self.value)
        return hit != (self.op in NEGATED_OPS)


Compiled = tuple[Matcher, ...]


def compile_matchers(matchers: Iterable[Mapping[str, Any]]) -> Compiled:
    """Each matcher with its regex compiled. Raises patterns.PatternError for a regex RE2
    refuses (one stored before RE2 came)."""
    out = []
    for m in matchers:
        op, value = m.get("op", "="), str(m["value"])
        regex = patterns.compile_regex(value) if op in REGEX_OPS else None
        out.append(Matcher(str(m["label"]), op, value, regex))
    return tuple(out)


def matches_all(compiled: Compiled, labels: Mapping[str, Any]) -> bool:
    """Every matcher holds (an empty list matches everything)."""
    return all(m.holds(labels) for m in compiled)


def regex_bytes(matchers: Iterable[Mapping[str, Any]]) -> int:
    """The UTF-8 bytes of the regexes among ``matchers``: what compiling them costs."""
    return sum(len(str(m.get("value", "")).encode()) for m in matchers
               if isinstance(m, Mapping) and m.get("op", "=") in REGEX_OPS)


class CompiledCache:
    """Compiled matchers by key (a silence's id and its matchers), least recently used out
    first, bounded by entries and by the regex bytes held: RE2 programs take about 75 times
    their pattern's length (measured: 1,000 characters, 76 KB), so bytes are what bound the
    memory. Thread-safe: the web process matches from several threads."""

    def __init__(self) -> None:
        self._entries: OrderedDict[Any, tuple[Compiled | None, int]] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()

    def get(self, key: Any) -> tuple[bool, Compiled | None]:
        with self._lock:
            if key not in self._entries:
                return False, None
            self._entries.move_to_end(key)
            return True, self._entries[key][0]

    def put(self, key: Any, compiled: Compiled | None, weight: int, *, max_entries: int,
            max_bytes: int) -> None:
        if weight > max_bytes:
            return  # larger than the whole cache: compiled for this pass only
        with self._lock:
            if key in self._entries:
                return
            self._entries[key] = (compiled, weight)
            self._bytes += weight
            while len(self._entries) > max_entries or self._bytes > max_bytes:
                _, (_, dropped) = self._entries.popitem(last=False)
                self._bytes -= dropped

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
            self._bytes = 0

    def __len__(self) -> int:
        return len(self._entries)
