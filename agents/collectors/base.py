"""What every collector shares: a warning channel that prints one line, never a traceback."""

from __future__ import annotations

import sys
from collections.abc import Callable

Warn = Callable[[str], None]


def stderr_warn(message: str) -> None:
    print(f"pitwall-agent: warning: {message}", file=sys.stderr, flush=True)


class WarnOnce:
    """Warn when a source's state changes (ok -> failing, or a new error), not every interval."""

    def __init__(self, warn: Warn = stderr_warn) -> None:
        self._warn = warn
        self._last: dict[str, str | None] = {}

    def fail(self, source: str, message: str) -> None:
        if self._last.get(source) != message:
            self._last[source] = message
            self._warn(f"{source}: {message}")

    def ok(self, source: str) -> None:
        if self._last.get(source):
            self._warn(f"{source}: recovered")
        self._last[source] = None
