"""Histogram counts summed in SQL, position by position (tuning's facts read them so)."""

from __future__ import annotations

from controlplane.telemetry.models import HistogramLayout


def bucket_sums(counts: str, buckets: int) -> str:
    """An aggregate: histogram count arrays summed position by position, cut to their length.
    ``buckets``: the most any layout has (``max_buckets``). One sum per position over the rows,
    not a row per bucket and sample to sort and group."""
    sums = ", ".join(f"sum({counts}[{i}])::int8" for i in range(1, buckets + 1))
    return f"(ARRAY[{sums}])[1:max(cardinality({counts}))]"


def max_buckets(cursor) -> int:
    """The most counts a histogram layout has: its bounds and +Inf."""
    cursor.execute(f"SELECT coalesce(max(cardinality(bounds)), 0) + 1 "
                   f"FROM {HistogramLayout._meta.db_table}")
    return cursor.fetchone()[0]
