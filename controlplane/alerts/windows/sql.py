"""A rule's aggregate over its window, as SQL over the slices (alias ``s``) of its entity.

Rules of one entity read windows of a few lengths, all ending now. Their starts cut the slices
into **bands** (band 0: the slices of the shortest window; band ``i``: the slices a window
starting at the ``i``-th start adds), so each slice row is folded once, into its band, by
plain aggregates (``partials``: level 1, one per distinct part such as ``sum`` of a column); a
window is then the bands up to its own (``combined``: level 2 over ~4 band rows per target).
Filtering every slice row by every window, as the first design did, evaluated each aggregate
and its FILTER on every row once per window (BENCHMARKS.md §7).

``last`` and ``rate`` read two slices per target instead (``point``): the newest one (alias
``l``) and the oldest one of the window (alias ``f<n>``), each fetched by primary key
(``ORDER BY ts … LIMIT 1`` per target), so the band scan covers the aggregate windows only.
"""

from __future__ import annotations

from controlplane.alerts.models import Aggregation
from controlplane.telemetry.models import HistogramLayout

# The window's first slice: statements that use ``newest`` or ``average`` bind ``since``.
IN_WINDOW = "s.ts >= %(since)s"
POINTS = (Aggregation.LAST, Aggregation.RATE)


def newest(col: str) -> str:
    """[epoch, value] of the last row, in the window (``%(since)s`` on), that has the metric."""
    return (f"(max(ARRAY[extract(epoch FROM s.t1), s.{col}_last]) "
            f"FILTER (WHERE {IN_WINDOW} AND s.{col}_last IS NOT NULL))")


def average(col: str) -> str:
    """The average over the window (``%(since)s`` on) from the slices' sums and counts."""
    return (f"(sum(s.{col}_sum) FILTER (WHERE {IN_WINDOW}) "
            f"/ NULLIF(sum(s.{col}_n) FILTER (WHERE {IN_WINDOW}), 0))")


def partials(col: str, aggregation: str, mask: int | None) -> dict[str, str]:
    """Level 1: the per-band parts an aggregate (avg, min or max) is made of, by name."""
    if mask:
        return {f"{col}_hits_{int(mask)}": f"sum({_mask_hits(col, int(mask))})",
                f"{col}_n": f"sum(s.{col}_n)"}
    if aggregation == Aggregation.AVG:
        return {f"{col}_sum": f"sum(s.{col}_sum)", f"{col}_n": f"sum(s.{col}_n)"}
    return {f"{col}_{aggregation}": f"{aggregation}(s.{col}_{aggregation})"}


def combined(col: str, aggregation: str, mask: int | None, band: int) -> str:
    """Level 2: the aggregate over bands 0..``band`` (alias ``b``) from its ``partials``."""
    within = f"FILTER (WHERE b.band <= {band})"
    if mask:
        return _masked_share(f"coalesce(sum(b.{col}_hits_{int(mask)}) {within}, 0)",
                             f"sum(b.{col}_n) {within}", aggregation)
    if aggregation == Aggregation.AVG:
        return f"(sum(b.{col}_sum) {within} / NULLIF(sum(b.{col}_n) {within}, 0))"
    return f"{aggregation}(b.{col}_{aggregation}) {within}"


def point(col: str, aggregation: str, mask: int | None, lo: str, first: str) -> str:
    """``last`` or ``rate`` from the newest slice ``l`` and the window's oldest ``first``;
    ``lo`` is the window start: a target whose newest slice is older has no value."""
    bit = (lambda v: f"((({v})::int8 & {int(mask)}) <> 0)::int") if mask else (lambda v: v)
    last = f"CASE WHEN l.ts >= {lo} THEN {bit(f'l.{col}_last')} END"
    if aggregation == Aggregation.LAST:
        return last
    return (f"(({last}) - {bit(f'{first}.{col}_first')}) "
            f"/ NULLIF(extract(epoch FROM l.t1 - {first}.t0), 0)")


def _mask_hits(col: str, mask: int) -> str:
    """The slice's rows whose value has any bit of ``mask``: the slices keep their distinct
    values and the row count of each, so the share is exact."""
    # Most slices hold one distinct value: read it without unnesting.
    one = f"CASE WHEN (s.{col}_vals[1] & {mask}) <> 0 THEN s.{col}_cnts[1] ELSE 0 END"
    many = (f"(SELECT sum(u.c) FROM unnest(s.{col}_vals, s.{col}_cnts) AS u(v, c) "
            f"WHERE (u.v & {mask}) <> 0)")
    return f"CASE WHEN cardinality(s.{col}_vals) = 1 THEN {one} ELSE {many} END"


def _masked_share(hits: str, rows: str, aggregation: str) -> str:
    """avg: the share of rows with a bit of the mask; max: 1 if any row had one; min: 1 if
    every row had one."""
    if aggregation == Aggregation.AVG:
        return f"({hits}::float8 / NULLIF({rows}, 0))"
    if aggregation == Aggregation.MAX:
        return f"CASE WHEN {rows} > 0 THEN ({hits} > 0)::int END"
    return f"CASE WHEN {rows} > 0 THEN ({hits} = {rows})::int END"


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
