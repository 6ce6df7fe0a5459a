"""The raw tables' BRIN indexes on ts summarise new ranges by themselves (autosummarize), on
the partitions that exist and on those created later."""

from __future__ import annotations

from datetime import date

from django.db import connection

from controlplane.telemetry import partitions
from controlplane.telemetry.schema import TABLES


def brin_options() -> dict[str, list[str] | None]:
    """reloptions of every BRIN index on a partition of a raw sample table."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT i.relname, i.reloptions FROM pg_index x "
            "JOIN pg_class i ON i.oid = x.indexrelid JOIN pg_class t ON t.oid = x.indrelid "
            "JOIN pg_am a ON a.oid = i.relam WHERE a.amname = 'brin' AND t.relname = ANY(%s)",
            [[child for tables in _children().values() for child in tables]])
        return dict(cursor.fetchall())


def _children() -> dict[str, list[str]]:
    with connection.cursor() as cursor:
        cursor.execute(partitions.EXISTING_SQL, [[t.name for t in TABLES.values()]])
        out: dict[str, list[str]] = {}
        for parent, child in cursor.fetchall():
            out.setdefault(parent, []).append(child)
        return out


def test_every_raw_partition_brin_index_autosummarizes_including_new_ones(transactional_db):
    with connection.cursor() as cursor:
        partitions.ensure(cursor, [date(2002, 3, 4)])
    try:
        options = brin_options()
        assert any("20020304" in name for name in options)
        assert len(options) >= len(TABLES)
        assert all(opts == ["autosummarize=on"] for opts in options.values()), options
    finally:
        with connection.cursor() as cursor:
            for table in TABLES.values():
                cursor.execute(f"DROP TABLE IF EXISTS {table.name}_p20020304")
