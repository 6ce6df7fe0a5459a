"""Sample rows put into the raw tables with plain SQL, and a short way to ask for a series."""

from __future__ import annotations

from datetime import UTC, datetime

from django.db import connection

from controlplane.telemetry import partitions
from controlplane.telemetry.models import HistogramLayout
from controlplane.telemetry.schema import TABLES

# A fixed instant for the series tests that give their window explicitly.
T0 = datetime(2026, 3, 2, 12, 0, tzinfo=UTC)


def insert_samples(entity: str, rows: list[dict]) -> None:
    """One plain INSERT per row; each row maps column names (keys, ts, metrics) to values."""
    table = TABLES[entity].name
    with connection.cursor() as cursor:
        partitions.ensure(cursor, {row["ts"].astimezone(UTC).date() for row in rows})
        for row in rows:
            marks = ", ".join(["%s"] * len(row))
            cursor.execute(f"INSERT INTO {table} ({', '.join(row)}) VALUES ({marks})",
                           list(row.values()))


def layout(bounds: list[float]) -> int:
    return HistogramLayout.objects.get_or_create(bounds=bounds)[0].id


def series(client, **params):
    return client.get("/api/v1/series/", params)
