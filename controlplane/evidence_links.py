"""Where a piece of evidence can be seen: its entity's page, zoomed on the window it covers
(the pages' own range format, ``?from=<unix>&to=<unix>``, as alert links use).

The pages and the API both hand these links out, so they live here, where the application is
put together (like asgi.py and urls.py), and neither layer imports the other."""

from __future__ import annotations

from datetime import datetime
from urllib.parse import urlencode

from django.urls import NoReverseMatch, reverse

PAGES = {"engine": "web:engine", "gpu": "web:gpu", "host": "web:host"}


def chart_url(item: dict) -> str | None:
    page, entity_id = PAGES.get(item.get("entity", "")), item.get("entity_id")
    if page is None or entity_id is None:
        return None
    try:
        base = reverse(page, args=[entity_id])
        start = datetime.fromisoformat(item["start"]).timestamp()
        end = datetime.fromisoformat(item["end"]).timestamp()
    except (NoReverseMatch, KeyError, TypeError, ValueError):
        return None
    return f"{base}?{urlencode({'from': int(start), 'to': int(end)})}"


def with_links(evidence: list[dict]) -> list[dict]:
    return [{**item, "chart": chart_url(item)} for item in evidence]
