"""Stalled engines, from their newest raw rows: what the fleet and engine pages show.

An engine is stalled when it holds requests but makes no progress: over the last
``ENGINE_STALL_S`` seconds (the first of its rows at or before the start of that span, the
last within ``FRESH_S`` of now) engine.up stayed 1, requests were running or waiting in every
row, and neither engine.generation_tokens_per_s nor engine.requests_finished_per_s was above
0. vLLM's /health keeps answering 200 while its engine loop is wedged, and /metrics keeps
serving the last gauges. A down engine (up 0, no rows) is not stalled but down; an idle one
(nothing running or waiting) is healthy. The alert kind ``engine_stalled``
(controlplane/alerts/named_kinds.py) says the same from the evaluator's slices.

Each engine costs one probe of its primary key ``(engine_id, ts)`` over that span, and each
stalled one (rare) one more backwards to the last row that was not stalled, at most
``LOOKBACK`` back: when the stall began.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime, timedelta

from django.conf import settings
from django.db import connection
from django.utils import timezone

from controlplane.fleet.models import Engine
from controlplane.telemetry.schema import TABLES

# The newest row must be this recent: an engine whose rows stopped is not known to be stalled.
FRESH_S = 15
# How far back the start of a stall is looked for; an older start reads as this far back.
LOOKBACK = timedelta(hours=1)
# A row that is not stalled: down, idle, or making progress.
_MOVING = ("(coalesce(up, 0) <> 1 OR coalesce(requests_running, 0) + "
           "coalesce(requests_waiting, 0) <= 0 OR coalesce(generation_tokens_per_s, 0) > 0 "
           "OR coalesce(requests_finished_per_s, 0) > 0)")


def stalled_engines(engine_ids: Iterable[int] | None = None,
                    now: datetime | None = None,
                    span_s: float | None = None) -> dict[int, datetime]:
    """engine id -> when its stall began (the first stalled row after the last row that was
    not, or the start of LOOKBACK), for the stalled engines among ``engine_ids`` (None: every
    present engine). ``span_s``: how long without progress counts (None: ENGINE_STALL_S, what
    the pages show; a service's router acts sooner, on SERVICE_STALL_S)."""
    now = now or timezone.now()
    ids = list(engine_ids) if engine_ids is not None else list(
        Engine.objects.filter(present=True).values_list("id", flat=True))
    if not ids:
        return {}
    span = timedelta(seconds=settings.PITWALL["ENGINE_STALL_S"] if span_s is None else span_s)
    table = TABLES["engine"].name
    stalled = _fetch(
        f"SELECT e.id FROM unnest(%(ids)s::int[]) AS e(id)\n"
        f"CROSS JOIN LATERAL (SELECT min(ts) AS first, max(ts) AS last,\n"
        f"  coalesce(bool_or({_MOVING}) FILTER (WHERE ts > %(start)s), true) AS moving\n"
        f"  FROM {table} WHERE engine_id = e.id AND ts > %(lo)s AND ts <= %(now)s) s\n"
        f"WHERE s.first <= %(start)s AND s.last > %(fresh)s AND NOT s.moving",
        {"ids": ids, "lo": now - span - timedelta(seconds=FRESH_S), "now": now,
         "start": now - span, "fresh": now - timedelta(seconds=FRESH_S)})
    return {engine_id: _began(table, engine_id, now) for (engine_id,) in stalled}


def _began(table: str, engine_id: int, now: datetime) -> datetime:
    """The first row after the engine's last row that was not stalled (within LOOKBACK)."""
    (began,), = _fetch(
        f"SELECT min(ts) FROM {table}\n"
        f"WHERE engine_id = %(id)s AND ts <= %(now)s AND ts > coalesce(\n"
        f"  (SELECT max(ts) FROM {table} WHERE engine_id = %(id)s AND ts > %(lo)s\n"
        f"     AND ts <= %(now)s AND {_MOVING}), %(lo)s)",
        {"id": engine_id, "now": now, "lo": now - LOOKBACK})
    return began


def _fetch(sql: str, params: dict[str, object]) -> list[tuple]:
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return cursor.fetchall()
