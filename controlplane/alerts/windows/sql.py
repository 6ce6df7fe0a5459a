"""A rule's aggregate over its window, as SQL over the slices (alias ``s``) of its entity.

``avg``, ``min`` and ``max`` are aggregates; every one carries its own window as a FILTER on
the slice start, so rules with different windows share one scan of the slices; ``%s``
placeholders take the window's first slice (``build.window_start``). ``last`` and ``rate`` read
two slices per target instead (``point``): the newest one (alias ``l``) and the oldest one of
the window (alias ``f<n>``), found by ``max(ts)``/``min(ts)`` and fetched by primary key. An
aggregate over [time, value] pairs did the same on every slice row and cost five times as
much (BENCHMARKS.md §7).
"""

from __future__ import annotations

from controlplane.alerts.models import Aggregation

IN_WINDOW = "s.ts >= %s"


def newest(col: str) -> str:
    """[epoch, value] of the last row, in the window, that has the metric."""
    return (f"(max(ARRAY[extract(epoch FROM s.t1), s.{col}_last]) "
            f"FILTER (WHERE {IN_WINDOW} AND s.{col}_last IS NOT NULL))")


def average(col: str) -> str:
    """Two placeholders."""
    return (f"(sum(s.{col}_sum) FILTER (WHERE {IN_WINDOW}) "
            f"/ NULLIF(sum(s.{col}_n) FILTER (WHERE {IN_WINDOW}), 0))")


POINTS = (Aggregation.LAST, Aggregation.RATE)


def aggregate(col: str, aggregation: str, mask: int | None) -> str:
    """The SQL of one aggregate (avg, min or max); ``%s`` stands for its window start."""
    if mask:
        return _masked(col, aggregation, int(mask))
    if aggregation == Aggregation.AVG:
        return average(col)
    return f"{aggregation}(s.{col}_{aggregation}) FILTER (WHERE {IN_WINDOW})"


def point(col: str, aggregation: str, mask: int | None, lo: str, first: str) -> str:
    """``last`` or ``rate`` from the newest slice ``l`` and the window's oldest ``first``;
    ``lo`` is the window start: a target whose newest slice is older has no value."""
    bit = (lambda v: f"((({v})::int8 & {int(mask)}) <> 0)::int") if mask else (lambda v: v)
    last = f"CASE WHEN l.ts >= {lo} THEN {bit(f'l.{col}_last')} END"
    if aggregation == Aggregation.LAST:
        return last
    return (f"(({last}) - {bit(f'{first}.{col}_first')}) "
            f"/ NULLIF(extract(epoch FROM l.t1 - {first}.t0), 0)")


def _masked(col: str, aggregation: str, mask: int) -> str:
    """Each row counts 1 when (value & mask) <> 0, else 0; the slices' distinct values and
    their row counts make the share exact."""
    # Most slices hold one distinct value: read it without unnesting.
    one = f"CASE WHEN (s.{col}_vals[1] & {mask}) <> 0 THEN s.{col}_cnts[1] ELSE 0 END"
    many = (f"(SELECT sum(u.c) FROM unnest(s.{col}_vals, s.{col}_cnts) AS u(v, c) "
            f"WHERE (u.v & {mask}) <> 0)")
    per_slice = f"CASE WHEN cardinality(s.{col}_vals) = 1 THEN {one} ELSE {many} END"
    hits = f"coalesce(sum({per_slice}) FILTER (WHERE {IN_WINDOW}), 0)"
    rows = f"sum(s.{col}_n) FILTER (WHERE {IN_WINDOW})"
    if aggregation == Aggregation.AVG:
        return f"({hits}::float8 / NULLIF({rows}, 0))"
    if aggregation == Aggregation.MAX:
        return f"CASE WHEN {rows} > 0 THEN ({hits} > 0)::int END"
    return f"CASE WHEN {rows} > 0 THEN ({hits} = {rows})::int END"
