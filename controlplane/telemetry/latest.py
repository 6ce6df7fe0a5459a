"""The latest sample of each entity: what a page shows before the first live event.

Read-only SQL over the raw sample tables (names from schema.py). Each entity's latest row is
one backward probe of its primary key ``(entity, ts)``, bounded to a recent window so that
only the newest daily partitions are touched; an entity silent for longer has no sample.
Values are keyed by wire key (``util_pct``), ``ts`` in unix seconds; a metric that was not
reported is absent, as on the wire.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import timedelta

from django.db import connection
from django.utils import timezone

from agents.protocol import PROCESS_ATTRIBUTES, metrics_of
from controlplane.telemetry.schema import TABLES, column_for

RECENT = timedelta(minutes=15)

Sample = dict[str, object]


def latest_samples(entity: str, ids: Iterable[int]) -> dict[int, Sample]:
    """id -> {"ts": unix s, <wire key>: value, ...} for host, gpu or engine ids; ids without a
    recent sample are left out."""
    ids = list(ids)
    if not ids:
        return {}
    table = TABLES[entity]
    key = table.keys[0].name
    cols = ", ".join(_value_columns(entity))
    rows = _rows(
        f"SELECT e.id AS entity_id, s.* FROM unnest(%s::int[]) AS e(id) "
        f"CROSS JOIN LATERAL (SELECT extract(epoch FROM ts)::float8 AS ts, {cols} "
        f"FROM {table.name} WHERE {key} = e.id AND ts >= %s ORDER BY ts DESC LIMIT 1) s",
        [ids, timezone.now() - RECENT])
    return {row.pop("entity_id"): _present(row) for row in rows}


def latest_process_samples(host_id: int) -> list[Sample]:
    """The newest sample of each process seen recently on a host, with its CPU affinity."""
    table = TABLES["proc"]
    cols = ", ".join([*_value_columns("proc"), *PROCESS_ATTRIBUTES])
    rows = _rows(
        f"SELECT DISTINCT ON (pid) pid, engine_id, extract(epoch FROM ts)::float8 AS ts, {cols} "
        f"FROM {table.name} WHERE host_id = %s AND ts >= %s ORDER BY pid, ts DESC",
        [host_id, timezone.now() - RECENT])
    return [_present(row) for row in rows]


def _value_columns(entity: str) -> list[str]:
    """Gauge and rate columns of an entity (histograms have no single latest value)."""
    return [column_for(m).name for m in metrics_of(entity) if m.kind != "histogram"]


def _rows(sql: str, params: list) -> list[dict]:
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        names = [c.name for c in cursor.description]
        return [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]


def _present(row: dict) -> Sample:
    # Absent metrics are absent, as on the wire (NULL columns dropped).
    return {k: v for k, v in row.items() if v is not None}
