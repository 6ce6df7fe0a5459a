"""The slices of each entity, kept in the evaluating process between cycles.

Each cycle brings every entity's slices up to ``now`` for the longest window its rules read:
it reads only the raw rows since the previous cycle (``raw.read``) and folds them (``fold``).
Rows that reach PostgreSQL up to ``LATE_S`` after their timestamp (the agent's send, the
ingest writer's flush) still count: the slices from ``hi - LATE_S`` on are rebuilt. Rows later
than that (a spool replayed after an outage) are not: alerting on minutes-old data helps
nobody, and the agent-offline rule has already spoken.

The slices live in this process, not in PostgreSQL: a steady cycle over 8,000 GPUs reads
~15 s of raw rows and does its windows as array arithmetic (BENCHMARKS.md §7). What they cover
is also written to ``alerts_slice_state`` in the cycle's transaction. A store trusts itself
only when that row still says what it last wrote: another process evaluated meanwhile, a
cycle rolled back, or the tables were emptied, and it rebuilds its whole span from raw rows
(a 5-minute window of 8,000 GPUs: a few seconds, once). Whenever time goes backwards or the
rules need columns or masks it does not hold, it rebuilds too.
"""

from __future__ import annotations

from bisect import bisect_left
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timedelta

import numpy as np
from django.db import connection

from agents.protocol import Entity
from controlplane.alerts.shards import WHOLE, Shard
from controlplane.alerts.windows.brin import summarize_new_ranges
from controlplane.alerts.windows.fold import Block, fold
from controlplane.alerts.windows.needs import Need
from controlplane.alerts.windows.raw import read
from controlplane.alerts.windows.schema import STATE_TABLE
from controlplane.alerts.windows.slices import (
    SLICE_US,
    first_slice,
    floor_slice,
    micros,
    window_start,
)

# Rows that arrive up to this long after their timestamp still count (see the module doc).
LATE_S = 5
# A rebuild reads the raw rows a minute at a time: bounded memory, short statements.
CHUNK_S = 60


class SliceStore:
    """One entity's slices, ``(lo, hi]`` covered, a Block per slice number."""

    def __init__(self, entity: Entity, shard: Shard = WHOLE) -> None:
        self.entity, self.shard = entity, shard
        self.blocks: dict[int, Block] = {}
        self.lo: datetime | None = None
        self.hi: datetime | None = None
        self.need: Need | None = None

    def refresh(self, cursor, now: datetime, need: Need, trusted: bool = True) -> None:
        """Cover the window of ``need`` ending at ``now``. ``cursor``: a psycopg cursor."""
        lo = window_start(now, need.longest_s)
        summarize_new_ranges(need.reading.table, lo, now)
        if not trusted or self.hi is None or self.hi > now or self.need is None or (
                need.reading, need.parts) != (self.need.reading, self.need.parts):
            self.blocks = {}
            self._fold(cursor, need, lo, now)
        else:
            start = max(floor_slice(self.hi - timedelta(seconds=LATE_S)), lo)
            if lo < self.lo:  # a longer window appeared: only the span before is added
                self._fold(cursor, need, lo, self.lo)
            self._drop(lambda sid: sid >= micros(start) // SLICE_US)
            self._fold(cursor, need, start, now)
        self._drop(lambda sid: sid < micros(lo) // SLICE_US)
        self._trim(now, need)
        self.lo, self.hi, self.need = lo, now, need

    def _fold(self, cursor, need: Need, lo: datetime, hi: datetime) -> None:
        """Fold the rows in (lo, hi], a minute of slices at a time."""
        while hi > lo:
            upto = min(floor_slice(lo + timedelta(seconds=CHUNK_S)), hi)
            for block in fold(read(cursor, need.reading, lo, upto, self.shard), need.parts):
                self.blocks[block.sid] = block
            lo = upto

    def _trim(self, now: datetime, need: Need) -> None:
        """Drop each column's parts from the slices older than the longest window reading it:
        one 10-minute rule must not keep every other column ten minutes long."""
        for name, window_s in need.windows.items():
            first = micros(window_start(now, window_s)) // SLICE_US
            for sid, block in self.blocks.items():
                if sid < first:
                    block.parts.pop(name, None)
                    block.layouts.pop(name, None)
                    block.counts.pop(name, None)

    def nbytes(self) -> int:
        """The memory the slices hold."""
        total = 0
        for block in self.blocks.values():
            arrays = [block.keys, block.rows, block.t0, block.t1, *block.layouts.values(),
                      *block.counts.values(), *(a for p in block.parts.values()
                                                for a in p.values())]
            total += sum(a.nbytes for a in arrays) + (block.engine.nbytes
                                                      if block.engine is not None else 0)
        return total

    def _drop(self, gone) -> None:
        self.blocks = {sid: b for sid, b in self.blocks.items() if not gone(sid)}


def refresh_stores(cursor, stores: dict[Entity, SliceStore], now: datetime,
                   needs: dict[Entity, Need], record: bool = True,
                   side_by_side: bool = False, shard: Shard = WHOLE) -> None:
    """Bring these stores up to ``now``. ``record``: the evaluator's own stores, trusted only
    while ``alerts_slice_state`` says what they last covered, and recorded there (see the
    module doc); otherwise built afresh. ``side_by_side``: the GPUs' rows (the most) are read
    and folded on a connection of their own, in a thread, while this one does the others, so
    PostgreSQL reads on two cores (only where other connections see the rows: outside a
    caller's transaction). ``shard``: the stores hold that shard's targets only, and their
    record is the shard's own."""
    marks = {}
    if record:
        cursor.execute(f"SELECT entity, lo, hi FROM {STATE_TABLE}")
        marks = {entity: (lo, hi) for entity, lo, hi in cursor.fetchall()}
    for entity in needs:
        stores.setdefault(entity, SliceStore(entity, shard))

    def bring(entity: Entity, on) -> None:
        store = stores[entity]
        store.refresh(on, now, needs[entity],
                      record and marks.get(_mark(entity, shard)) == (store.lo, store.hi))

    apart = [e for e in needs if side_by_side and e == "gpu" and len(needs) > 1]
    with ThreadPoolExecutor(1) as pool:
        elsewhere = [pool.submit(_on_own_connection, bring, e) for e in apart]
        for entity in needs:
            if entity not in apart:
                bring(entity, cursor)
        for done in elsewhere:
            done.result()
    if record:
        for entity in needs:
            cursor.execute(
                f"INSERT INTO {STATE_TABLE} (entity, lo, hi) VALUES (%(e)s, %(lo)s, %(hi)s) "
                f"ON CONFLICT (entity) DO UPDATE SET lo = EXCLUDED.lo, hi = EXCLUDED.hi",
                {"e": _mark(entity, shard), "lo": stores[entity].lo, "hi": stores[entity].hi})


def _mark(entity: Entity, shard: Shard) -> str:
    """The key of a store's record: the entity, and an evaluator shard's name after it."""
    return f"{entity}@{shard.name}" if not shard.whole else entity


def _on_own_connection(bring, entity: Entity) -> None:
    try:
        with connection.cursor() as cursor:
            bring(entity, cursor.cursor)
    finally:
        connection.close()  # this thread's connection, back to the pool


class View:
    """One store's slices as (targets x slices) matrices, for one cycle: row ``u`` is target
    ``keys[u]``, column ``j`` the slice ``sid0 + j``. Matrices are built on first use.

    A column's matrices start at the first slice of the longest window that reads it, not at
    the store's: the engine store keeps an hour of slices for the histograms a burn rule reads,
    and building every scalar column an hour wide cost most of a quiet cycle's array work.
    ``part`` and ``mask_hits`` therefore take the window's first column ``j0`` and return the
    columns from ``j0`` on."""

    def __init__(self, store: SliceStore, now: datetime) -> None:
        self.sid0 = micros(store.lo) // SLICE_US
        self.width = max(micros(now) // SLICE_US - self.sid0 + 1, 0)
        blocks = [b for sid, b in sorted(store.blocks.items()) if sid < self.sid0 + self.width]
        self.keys = np.unique(np.concatenate([b.keys for b in blocks])) if blocks \
            else np.zeros(0, np.int64)
        # where each block's rows go: all targets in key order (most slices: a plain column
        # copy), or the positions of the block's targets
        self._at = [(b.sid - self.sid0, slice(None) if np.array_equal(b.keys, self.keys)
                     else np.searchsorted(self.keys, b.keys), b) for b in blocks]
        self._columns = [j for j, _, _ in self._at]
        # per column: the first view column its longest window reads (older slices no longer
        # hold its parts: SliceStore._trim)
        windows = store.need.windows if store.need is not None else {}
        self._first = {name: self.column_of(first_slice(now, window_s))
                       for name, window_s in windows.items()}
        self._cache: dict[tuple, tuple[int, np.ndarray]] = {}
        self._newest: tuple[np.ndarray, np.ndarray] | None = None
        self._oldest: dict[int, tuple[np.ndarray, np.ndarray]] = {}

    def column_of(self, sid: int) -> int:
        return min(max(sid - self.sid0, 0), self.width)

    def matrix(self, what: tuple, pick, fill: float, dtype=np.float64, j0: int = 0,
               column: str | None = None) -> np.ndarray:
        """The (targets x slices) matrix of ``pick(block)`` (None: a slice older than the
        window that keeps it) from column ``j0`` on, ``fill`` where a target had no rows in a
        slice; ``what`` names it in the cycle's cache. Built once a cycle, from the first
        slice of the longest window reading ``column`` (or from ``j0`` if that is earlier)."""
        start, out = self._cache.get(what, (self.width + 1, None))
        if out is None or j0 < start:
            start = min(j0, self._first.get(column, j0)) if column else 0
            # column-major: a slice is one contiguous column, a window a run of columns
            out = np.full((len(self.keys), self.width - start), fill, dtype, order="F")
            for j, rows, block in self._at[bisect_left(self._columns, start):]:
                values = pick(block)
                if values is not None:
                    out[rows, j - start] = values
            self._cache[what] = (start, out)
        return out[:, j0 - start:]

    def rows(self) -> np.ndarray:
        return self.matrix(("rows",), lambda b: b.rows, 0, np.int32)

    def part(self, column: str, part: str, j0: int) -> np.ndarray:
        """Columns ``j0`` on of one part of a column."""
        pick = lambda b: b.parts.get(column, {}).get(part)  # noqa: E731
        if part == "n":
            return self.matrix((column, "n"), pick, 0, np.int32, j0, column)
        return self.matrix((column, part), pick, np.nan, np.float64, j0, column)

    def mask_hits(self, column: str, mask: int, j0: int) -> np.ndarray:
        return self.matrix((column, "mask", mask),
                           lambda b: b.parts.get(column, {}).get(("mask", mask)), 0, np.int32,
                           j0, column)

    def times(self, which: str) -> np.ndarray:
        return self.matrix((which,), lambda b: getattr(b, which), 0, np.int64)

    def engines(self) -> np.ndarray:
        return self.matrix(("engine",), lambda b: b.engine, -1, np.int64)

    def layouts(self, key: str) -> np.ndarray:
        return self.matrix((key, "layout"), lambda b: b.layouts.get(key), -1, np.int64)

    def counts(self, key: str) -> np.ndarray:
        """(targets x slices x buckets), built at each call: the cycle sums histograms slice
        by slice (``histogram_slices``); this is the reference the tests compare with."""
        buckets = next((b.counts[key].shape[1] for _, _, b in self._at if key in b.counts), 0)
        out = np.zeros((len(self.keys), self.width, buckets), np.int64)
        for j, rows, block in self._at:
            if key in block.counts:
                out[rows, j] = block.counts[key]
        return out

    def histogram_slices(self, key: str, j0: int):
        """Per slice from column ``j0`` that holds the histogram: (the positions of its
        targets, their layouts, their counts), for sums that need no matrix."""
        everyone = np.arange(len(self.keys))
        for j, rows, block in self._at:
            if j >= j0 and key in block.counts:
                yield everyone[rows], block.layouts[key], block.counts[key]

    def newest(self) -> tuple[np.ndarray, np.ndarray]:
        """Per target: the column of its newest slice, and whether it has any (once a cycle:
        every ``last`` and ``rate`` rule asks)."""
        if self._newest is None:
            present = self.rows() > 0
            has = present.any(axis=1)
            newest = self.width - 1 - np.argmax(present[:, ::-1], axis=1) if self.width else \
                np.zeros(len(self.keys), np.int64)
            self._newest = newest, has
        return self._newest

    def oldest_from(self, j0: int) -> tuple[np.ndarray, np.ndarray]:
        """Per target: the column of its oldest slice at or after column ``j0``, and whether
        it has one (once a cycle per window)."""
        if j0 not in self._oldest:
            present = self.rows()[:, j0:] > 0
            has = present.any(axis=1)
            self._oldest[j0] = (np.argmax(present, axis=1) + j0 if present.shape[1] else
                                np.zeros(len(self.keys), np.int64)), has
        return self._oldest[j0]
