"""A rule's aggregate over its window, as SQL over the slices (alias ``s``) of its entity.

Every expression carries its own window as a FILTER on the slice start, so rules with
different windows share one scan of the slices; ``%s`` placeholders take the window's first
slice (``build.window_start``), in the order the expression's params list gives.
"""

from __future__ import annotations

from controlplane.alerts.models import Aggregation

IN_WINDOW = "s.ts >= %s"


def newest(col: str) -> str:
    """[epoch, value] of the last row, in the window, that has the metric."""
    return (f"(max(ARRAY[extract(epoch FROM s.t1), s.{col}_last]) "
            f"FILTER (WHERE {IN_WINDOW} AND s.{col}_last IS NOT NULL))")


def oldest(col: str) -> str:
    return (f"(min(ARRAY[extract(epoch FROM s.t0), s.{col}_first]) "
            f"FILTER (WHERE {IN_WINDOW} AND s.{col}_first IS NOT NULL))")


def average(col: str) -> str:
    """Two placeholders."""
    return (f"(sum(s.{col}_sum) FILTER (WHERE {IN_WINDOW}) "
            f"/ NULLIF(sum(s.{col}_n) FILTER (WHERE {IN_WINDOW}), 0))")


def aggregate(col: str, aggregation: str, mask: int | None) -> tuple[str, int]:
    """The SQL of one aggregate and how many window placeholders it takes."""
    if mask:
        return _masked(col, aggregation, int(mask))
    if aggregation == Aggregation.AVG:
        return average(col), 2
    if aggregation in (Aggregation.MIN, Aggregation.MAX):
        return f"{aggregation}(s.{col}_{aggregation}) FILTER (WHERE {IN_WINDOW})", 1
    if aggregation == Aggregation.LAST:
        return f"{newest(col)}[2]", 1
    return _rate(f"{newest(col)}[2]", f"{oldest(col)}[2]", col), 4


def _rate(last: str, first: str, col: str) -> str:
    return f"(({last} - {first}) / NULLIF({newest(col)}[1] - {oldest(col)}[1], 0))"


def _masked(col: str, aggregation: str, mask: int) -> tuple[str, int]:
    """Each row counts 1 when (value & mask) <> 0, else 0; the slices' distinct values and
    their row counts make the share exact."""
    hits = (f"coalesce(sum((SELECT sum(u.c) FROM unnest(s.{col}_vals, s.{col}_cnts) "
            f"AS u(v, c) WHERE (u.v & {mask}) <> 0)) FILTER (WHERE {IN_WINDOW}), 0)")
    rows = f"sum(s.{col}_n) FILTER (WHERE {IN_WINDOW})"
    bit = lambda v: f"((({v})::int8 & {mask}) <> 0)::int"  # noqa: E731
    if aggregation == Aggregation.AVG:
        return f"({hits}::float8 / NULLIF({rows}, 0))", 2
    if aggregation == Aggregation.MAX:
        return f"CASE WHEN {rows} > 0 THEN ({hits} > 0)::int END", 2
    if aggregation == Aggregation.MIN:
        return f"CASE WHEN {rows} > 0 THEN ({hits} = {rows})::int END", 3
    if aggregation == Aggregation.LAST:
        return bit(f"{newest(col)}[2]"), 1
    return _rate(bit(f"{newest(col)}[2]"), bit(f"{oldest(col)}[2]"), col), 4
