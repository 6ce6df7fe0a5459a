"""What a batch becomes for storage: per sample table, its values column by column.

A v2 batch arrives as columns (columns.py) and COPY's binary format is encoded a column at a
time (binary.py), so the columns go from the decoder to the encoder as they are: the batch is
never turned into row tuples on the way (that round trip, rows and back to columns, was a third
of the server's Python per value). Rows are still built where one is asked for (the live
publisher, only while someone watches), from these columns.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from itertools import chain, repeat

from controlplane.telemetry.schema import TABLES

# A column: one value per row (None for a NULL cell), or None when every cell is NULL.
Column = Sequence | None
# Position of ts in each table's columns: after the entity key columns.
TS_INDEX = {t.name: len(t.keys) for t in TABLES.values()}
WIDTH = {t.name: len(t.all_columns) for t in TABLES.values()}


def rows_of(columns: Sequence[Column], length: int) -> list[tuple]:
    """``length`` row tuples from ``columns`` (a None column: NULL in every row)."""
    return list(zip(*(repeat(None, length) if c is None else c for c in columns),
                    strict=False))


@dataclass(frozen=True, slots=True)
class TableColumns:
    """One table's rows, as columns in the table's column order (keys, ts, values)."""

    table: str
    length: int  # rows
    columns: tuple[Column, ...]

    def __post_init__(self) -> None:
        if len(self.columns) != WIDTH[self.table]:
            raise ValueError(f"{self.table} has {WIDTH[self.table]} columns, "
                             f"got {len(self.columns)}")

    @property
    def ts(self) -> Sequence[float]:
        """Each row's unix seconds (never NULL: ts is part of the primary key)."""
        return self.columns[TS_INDEX[self.table]]  # type: ignore[return-value]

    def rows(self) -> list[tuple]:
        return rows_of(self.columns, self.length)

    @classmethod
    def from_rows(cls, table: str, rows: list[tuple]) -> TableColumns:
        """From row tuples (protocol v1's walk builds rows: v1 is deprecated, not optimised)."""
        if not rows:
            return cls(table, 0, tuple(repeat(None, WIDTH[table])))
        return cls(table, len(rows), tuple(zip(*rows, strict=True)))


Tables = dict[str, TableColumns]  # table name -> its columns; tables without rows left out


def concat(parts: list[TableColumns]) -> TableColumns:
    """The rows of ``parts`` (one table), in order, as one: what one COPY sends. The loop is
    per column, not per column and part: a flush joins a hundred batches' columns."""
    if len(parts) == 1:
        return parts[0]
    merged: list[Column] = []
    for cells in zip(*(p.columns for p in parts), strict=True):
        # all(): a column of a part with rows is a non-empty sequence, true; None is false.
        # (``None in cells`` compares every list with None: ~10 % slower here.)
        if all(cells):
            merged.append(list(chain.from_iterable(cells)))
        elif cells.count(None) == len(cells):
            merged.append(None)
        else:
            merged.append(list(chain.from_iterable(
                repeat(None, part.length) if c is None else c
                for part, c in zip(parts, cells, strict=True))))
    return TableColumns(parts[0].table, sum(p.length for p in parts), tuple(merged))
