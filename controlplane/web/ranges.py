"""The time range a page shows, as the URL keeps it: ``?range=1h`` or ``?from=…&to=…``.

Pages render the picker from this and hand the same numbers to the browser, which computes its
own window for the series API. A malformed or reversed range falls back to live instead of
refusing the page: a link that went stale should still open the dashboard.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import UTC, datetime

from django.http import QueryDict

LIVE_WINDOW_S = 300
# Name -> window in seconds, in the order the picker shows them.
PRESETS: dict[str, int] = {
    "live": LIVE_WINDOW_S,
    "1h": 3600,
    "6h": 6 * 3600,
    "24h": 24 * 3600,
    "7d": 7 * 86400,
    "30d": 30 * 86400,
}
PRESET_LABELS = {"live": "Live", "1h": "1 h", "6h": "6 h", "24h": "24 h", "7d": "7 d",
                 "30d": "30 d"}
CUSTOM = "custom"
# A custom range longer than the longest preset is clipped to it: the series API answers
# nothing wider.
MAX_CUSTOM_S = PRESETS["30d"]


@dataclass(frozen=True)
class TimeRange:
    name: str  # a PRESETS key or "custom"
    start: float  # unix seconds
    end: float

    @property
    def live(self) -> bool:
        return self.name == "live"

    def as_json(self) -> dict:
        return {"name": self.name, "from": self.start, "to": self.end, "live": self.live}


def _unix(text: str | None) -> float | None:
    """Unix seconds, or an ISO-8601 instant (UTC when it names no zone: the custom range
    form submitted without JavaScript sends its datetime-local fields as they are)."""
    if not text:
        return None
    try:
        value = float(text)
    except ValueError:
        try:
            instant = datetime.fromisoformat(text)
        except ValueError:
            return None
        value = (instant if instant.tzinfo else instant.replace(tzinfo=UTC)).timestamp()
    return value if 0 < value < 1e11 else None


def parse_range(query: QueryDict, now: float | None = None) -> TimeRange:
    now = time.time() if now is None else now
    start, end = _unix(query.get("from")), _unix(query.get("to"))
    if start is not None and end is not None and start < end:
        return TimeRange(CUSTOM, max(start, end - MAX_CUSTOM_S), end)
    name = query.get("range", "live")
    if name not in PRESETS:
        name = "live"
    return TimeRange(name, now - PRESETS[name], now)
