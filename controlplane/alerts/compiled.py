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

import re2

from controlplane.alerts import patterns

REGEX_OPS = ("=~", "!~")


class Plain(NamedTuple):
    """An = or != matcher: a string comparison."""

    label: str
    value: str
    negated: bool

    def holds(self, labels: Mapping[str, Any]) -> bool:
        return (str(labels.get(self.label, "")) == self.value) != self.negated


class Regexes:
    """The regexes of one op on one label, run together: an RE2 set answers which of them
    match the whole label in one scan (about 1 us for 16), where one call per regex costs
    about 5 us each. The set only ever says less than the truth (its DFA may run out of
    memory and answer nothing), so an empty answer is checked regex by regex."""

    def __init__(self, label: str, regexes: list[tuple[str, Any]]) -> None:
        self.label = label
        self.programs = tuple(program for _, program in regexes)
        self.together = _set_of([pattern for pattern, _ in regexes])

    def _hits(self, text: str) -> list[int] | None:
        return self.together.Match(text) if self.together is not None else None

    def all_match(self, labels: Mapping[str, Any]) -> bool:
        text = str(labels.get(self.label, ""))
        hits = self._hits(text)
        if hits is not None:
            return len(hits) == len(self.programs)
        return all(p.fullmatch(text) is not None for p in self.programs)

    def any_match(self, labels: Mapping[str, Any]) -> bool:
        text = str(labels.get(self.label, ""))
        return bool(self._hits(text)) or any(p.fullmatch(text) is not None
                                             for p in self.programs)


def _set_of(patterns_: list[str]):
    """An anchored RE2 set of ``patterns_``, or None (one pattern, or a set RE2 will not
    build within its memory budget: the regexes then run one by one)."""
    if len(patterns_) < 2:
        return None
    together = re2.Set.FullMatchSet(patterns.set_options(len(patterns_)))
    try:
        for pattern in patterns_:
            together.Add(pattern)
        together.Compile()
    except re2.error:
        return None
    return together


class Compiled:
    """A list of matchers, compiled: the plain comparisons first, then each label's wanted
    regexes (=~), then its refused ones (!~). Every matcher must hold, so the cheap ones go
    first and a failing one ends the match."""

    def __init__(self, matchers: Iterable[Mapping[str, Any]]) -> None:
        plain, wanted, refused = [], {}, {}
        for m in matchers:
            op, label, value = m.get("op", "="), str(m["label"]), str(m["value"])
            if op in REGEX_OPS:
                groups = wanted if op == "=~" else refused
                groups.setdefault(label, []).append((value, patterns.compile_regex(value)))
            else:
                plain.append(Plain(label, value, op == "!="))
        self.plain = tuple(plain)
        self.wanted = tuple(Regexes(label, found) for label, found in wanted.items())
        self.refused = tuple(Regexes(label, found) for label, found in refused.items())

    def matches(self, labels: Mapping[str, Any]) -> bool:
        return (all(p.holds(labels) for p in self.plain)
                and all(r.all_match(labels) for r in self.wanted)
                and not any(r.any_match(labels) for r in self.refused))


def compile_matchers(matchers: Iterable[Mapping[str, Any]]) -> Compiled:
    """Raises patterns.PatternError for a regex RE2 refuses (one stored before RE2 came)."""
    return Compiled(matchers)


def matches_all(compiled: Compiled, labels: Mapping[str, Any]) -> bool:
    """Every matcher holds (an empty list matches everything)."""
    return compiled.matches(labels)


# What a regex counts against the bounds at least, however short: matching one costs about
# 5 us whatever its length (most of it the call), and each alert of a pass is matched against
# every regex of the active silences until one silences it. 64 KiB of bounds then hold at most
# 1,024 regexes: about 5 ms per alert at worst.
MIN_REGEX_BYTES = 64


def regex_bytes(matchers: Iterable[Mapping[str, Any]]) -> int:
    """What the regexes among ``matchers`` count against the bounds: their UTF-8 bytes, at
    least MIN_REGEX_BYTES each (what compiling them and matching them cost)."""
    return sum(max(MIN_REGEX_BYTES, len(str(m.get("value", "")).encode())) for m in matchers
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
