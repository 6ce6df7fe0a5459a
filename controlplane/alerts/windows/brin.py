"""Keep the BRIN summaries of the newest raw rows current, so a cycle's read touches the last
seconds only.

A cycle reads the raw rows of the last ~20 s through the BRIN index on ``ts``. BRIN returns a
block range it has not summarised as a match, whatever it holds, and ``autosummarize`` leaves
the newest ranges to autovacuum, which comes by once a ``autovacuum_naptime`` (a minute): so
the read rechecked up to a minute or more of rows (at 8,000 GPUs, 500,000 where it needs
160,000). Each cycle therefore summarises the ranges that filled since the previous one (the
work autovacuum would do a little later, once), never the last, still filling range: a
summarised range that rows keep extending would cost ingest an index update per row.

``brin_summarize_range`` takes the table's SHARE UPDATE EXCLUSIVE lock, which autovacuum also
holds while it works on the partition: the cycle waits at most ``LOCK_WAIT`` (less than
``deadlock_timeout``, after which a waiting lock would cancel autovacuum) and otherwise reads
with the summaries as they are.
"""

from __future__ import annotations

from datetime import datetime

from django.db import DatabaseError, connection, transaction

from controlplane.telemetry.partitions import day_of, partition_name
from controlplane.telemetry.schema import SampleTable

# PostgreSQL's default pages_per_range, which the sample tables keep (a larger setting only
# makes a call summarise a range twice, which returns at once).
RANGE_PAGES = 128
LOCK_WAIT = "200ms"
# partition -> the first range not yet summarised by this process
_DONE: dict[str, int] = {}


def summarize_sql() -> str:
    """Summarise the full ranges from %(first)s on of %(partition)s's BRIN indexes; returns
    how many were summarised and the first range left (the last, still filling)."""
    return (
        "SELECT coalesce(sum(brin_summarize_range(i.indexrelid, r * %(pages)s)), 0)::int8,\n"
        "  max(n.last)\n"
        "FROM pg_index i\n"
        "JOIN pg_class c ON c.oid = i.indexrelid\n"
        "JOIN pg_am a ON a.oid = c.relam AND a.amname = 'brin'\n"
        "CROSS JOIN LATERAL (SELECT (pg_relation_size(i.indrelid)\n"
        "  / current_setting('block_size')::int8 - 1) / %(pages)s AS last) n\n"
        "CROSS JOIN LATERAL generate_series(%(first)s, n.last - 1) r\n"
        "WHERE i.indrelid = to_regclass(%(partition)s)")


def summarize_new_ranges(table: SampleTable, lo: datetime, hi: datetime) -> int:
    """Summarise the filled ranges of the partitions holding (lo, hi]; how many were."""
    done = 0
    for day in sorted({day_of(lo.timestamp()), day_of(hi.timestamp())}):
        partition = partition_name(table.name, day)
        try:
            with transaction.atomic(), connection.cursor() as cursor:
                cursor.execute(f"SET LOCAL lock_timeout = '{LOCK_WAIT}'")
                cursor.execute(summarize_sql(), {"pages": RANGE_PAGES, "partition": partition,
                                                 "first": _DONE.get(partition, 0)})
                summarised, last = cursor.fetchone()
                cursor.execute("SET LOCAL lock_timeout = DEFAULT")
        except DatabaseError:  # autovacuum holds the partition: read with the summaries as is
            continue
        done += summarised
        if last is not None:
            _DONE[partition] = last
    return done
