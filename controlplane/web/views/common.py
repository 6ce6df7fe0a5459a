"""What every page hands its template: the range, the picker, and the browser's page config."""

from __future__ import annotations

import time

from django.conf import settings
from django.http import HttpRequest
from django.urls import reverse

from controlplane.web.nvml import reasons_json
from controlplane.web.ranges import LIVE_WINDOW_S, PRESET_LABELS, parse_range


def page_context(request: HttpRequest, page: str, groups: list[str],
                 labels: dict[str, str] | None = None, **extra) -> dict:
    """``groups`` are the live groups the page subscribes to (docs/live.md); ``labels`` name
    the entities whose lines may first appear through a live event ("gpu:11": "GPU 0")."""
    now = time.time()
    time_range = parse_range(request.GET, now)
    config = {
        "page": page,
        "range": time_range.as_json(),
        "groups": groups,
        "server_now": now,
        "live_window_s": LIVE_WINDOW_S,
        "online_window_s": settings.PITWALL["ONLINE_WINDOW_S"],
        "series_url": reverse("series"),
        "ws_path": "/ws/live/",
        "throttle_reasons": reasons_json(),
        "labels": labels or {},
    }
    return {"range": time_range, "presets": PRESET_LABELS, "page_config": config, **extra}
