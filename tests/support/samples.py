"""The sample tables (raw, packed, rollups) and the alert slices' record: raw SQL, outside
Django's flush."""

from __future__ import annotations

from django.db import connection

from controlplane.alerts.windows.schema import STATE_TABLE
from controlplane.telemetry.packing.schema import TABLES as PACKED
from controlplane.telemetry.rollups.schema import all_tables as rollup_tables
from controlplane.telemetry.schema import TABLES


def truncate_samples() -> None:
    """Empty the raw, packed and rollup sample tables and the evaluator's record: truncate the
    partitions that hold rows (a TRUNCATE of all of them costs a sixth of a second, and most
    tests leave them empty)."""
    parents = [t.name for t in TABLES.values()] + [t.name for t in PACKED.values()] \
        + [t.name for t in rollup_tables()] + [STATE_TABLE]
    with connection.cursor() as cursor:
        # the leaf partitions of the partitioned tables, and the plain tables themselves
        cursor.execute("SELECT relid::text FROM unnest(%(p)s::regclass[]) AS parent, "
                       "LATERAL pg_partition_tree(parent) WHERE isleaf "
                       "UNION SELECT oid::regclass::text FROM pg_class "
                       "WHERE oid = ANY(%(p)s::regclass[]) AND relkind = 'r'", {"p": parents})
        leaves = [leaf for (leaf,) in cursor.fetchall()]
        cursor.execute(" UNION ALL ".join(f"SELECT %s WHERE EXISTS (SELECT FROM {leaf})"
                                          for leaf in leaves), leaves)
        holding = [leaf for (leaf,) in cursor.fetchall()]
        if holding:
            cursor.execute("TRUNCATE " + ", ".join(holding))
