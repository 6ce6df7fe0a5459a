"""Every pattern a user writes is compiled and matched here: silence matchers, rule label
matchers (``=~``, ``!~``) and a rule's hostname glob.

Regexes are RE2's (google-re2): matching takes time linear in the label's length whatever the
pattern, so no pattern can stall the alert list or the notification dispatch (Python's ``re``
backtracks: ``(.|.)*!`` doubled its cost with every character of a label). The syntax is RE2's,
as Alertmanager's (Go regexp is RE2): no backreferences, no lookaround. A matcher matches the
whole label, as Alertmanager anchors it (``^(?:pattern)$``): ``fullmatch``. Globs (``infer-*``)
keep fnmatch's syntax and are translated to RE2 too.
"""

from __future__ import annotations

import functools

import re2

# The longest pattern accepted (characters). Matching is linear in the label's length for a
# given pattern, and the compiled program grows with the pattern: this bounds both.
MAX_PATTERN_CHARS = 1000
# RE2's memory budget for one compiled pattern; a larger program is refused ("pattern too
# large"), which covers a short pattern with huge repetition counts as well.
MAX_PROGRAM_BYTES = 1 << 20

_OPTIONS = re2.Options()
_OPTIONS.log_errors = False  # a refused pattern is the user's error, answered with a 400
_OPTIONS.max_mem = MAX_PROGRAM_BYTES


def set_options(count: int):
    """Options for an RE2 set of ``count`` patterns: each keeps its own memory budget."""
    options = re2.Options()
    options.log_errors = False
    options.max_mem = MAX_PROGRAM_BYTES * count
    return options


class PatternError(ValueError):
    """A pattern RE2 refuses, or one too long: the message says why, without the field."""


def compile_regex(pattern: str):
    """The compiled RE2 program of a user's regex. Raises PatternError."""
    if len(pattern) > MAX_PATTERN_CHARS:
        raise PatternError(f"is {len(pattern)} characters long; a pattern has at most "
                           f"{MAX_PATTERN_CHARS} characters")
    return _compile(pattern)


@functools.lru_cache(maxsize=4096)
def _compile(pattern: str):
    # Cached: the same silences are matched against every alert of a list.
    try:
        return re2.compile(pattern, options=_OPTIONS)
    except re2.error as exc:
        raise PatternError(f"is not a regex RE2 accepts (Alertmanager's syntax): "
                           f"{_reason(exc)}") from None


def regex_problem(pattern: str) -> str | None:
    """Why ``pattern`` is refused (to follow the field's name), or None."""
    try:
        compile_regex(pattern)
    except PatternError as exc:
        return str(exc)
    return None


def fullmatch(pattern: str, text: str) -> bool:
    """True when the regex matches the whole of ``text``."""
    return compile_regex(pattern).fullmatch(text) is not None


def _reason(exc: Exception) -> str:
    reason = exc.args[0] if exc.args else str(exc)
    return reason.decode("utf-8", "replace") if isinstance(reason, bytes) else str(reason)


# --- globs -------------------------------------------------------------------------------

_NOTHING = r"[^\x00-\x{10FFFF}]"  # a class no character is in: an empty fnmatch range


@functools.lru_cache(maxsize=1024)
def glob_regex(glob: str) -> str:
    """fnmatch's syntax (``*``, ``?``, ``[seq]``, ``[!seq]``; a ``[`` without its ``]`` is
    itself) as an RE2 regex, for ``fullmatch``. fnmatch's own translation relies on lookahead
    and backreferences, which RE2 does not have (and needs not: it never backtracks)."""
    out, i, n = [], 0, len(glob)
    while i < n:
        char = glob[i]
        i += 1
        if char == "*":
            if not out or out[-1] != ".*":  # runs of * are one
                out.append(".*")
        elif char == "?":
            out.append(".")
        elif char == "[":
            j = i  # the closing ], found as fnmatch finds it
            if j < n and glob[j] == "!":
                j += 1
            if j < n and glob[j] == "]":
                j += 1
            while j < n and glob[j] != "]":
                j += 1
            if j >= n:
                out.append(re2.escape("["))
            else:
                out.append(_glob_class(glob[i:j]))
                i = j + 1
        else:
            out.append(re2.escape(char))
    return f"(?s:{''.join(out)})"  # * and ? match any character, newlines too, as fnmatch's


def _glob_class(stuff: str) -> str:
    negate = stuff.startswith("!")
    if negate:
        stuff = stuff[1:]
    items, k = [], 0
    while k < len(stuff):
        if k + 2 < len(stuff) and stuff[k + 1] == "-":
            lo, hi = stuff[k], stuff[k + 2]
            if lo <= hi:  # fnmatch drops a reversed range
                items.append(f"{_class_char(lo)}-{_class_char(hi)}")
            k += 3
        else:
            items.append(_class_char(stuff[k]))
            k += 1
    if not items:
        return "." if negate else _NOTHING
    return f"[{'^' if negate else ''}{''.join(items)}]"


def _class_char(char: str) -> str:
    return char if char.isalnum() else f"\\x{{{ord(char):x}}}"


def glob_problem(glob: str) -> str | None:
    """Why a glob is refused (too long, or a program too large), or None."""
    if len(glob) > MAX_PATTERN_CHARS:
        return (f"is {len(glob)} characters long; a pattern has at most {MAX_PATTERN_CHARS} "
                f"characters")
    try:
        _compile(glob_regex(glob))
    except PatternError as exc:
        return str(exc)
    return None


def glob_match(glob: str, name: str) -> bool:
    """fnmatch.fnmatchcase(name, glob), in linear time. The translation may be longer than
    MAX_PATTERN_CHARS (escapes): the glob's own length is what is bounded (glob_problem)."""
    return _compile(glob_regex(glob)).fullmatch(name) is not None
