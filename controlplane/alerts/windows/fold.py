"""Fold raw rows into 10-second slices: per target and slice, the partial aggregates rule
windows are made of.

A slice ``s`` holds the rows with ``s < ts <= s + 10 s`` (right-closed, like a rule window
``(now - w, now]``): its row count ``rows``, the first and last row's time ``t0``/``t1``, and
per scalar column (``Parts``) the rows where present ``n``, their ``sum``, ``min``, ``max`` and
the ``first``/``last`` present values (for ``last`` and ``rate``); for a bitmask, per mask a
rule tests, the rows with any bit of it (so a share of rows stays exact). A histogram keeps the
layout holding most observations in the slice (ties: the newer layout) and its counts summed
bucket by bucket. A process's slice also keeps the engine its last row served.

All of it is sorting and ``reduceat`` over the arrays ``raw.read`` gives: no Python step per row.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from controlplane.alerts.windows.raw import Rows
from controlplane.alerts.windows.slices import SLICE_US

# A column's parts, by name: "n" (int32, rows where present), "sum" (float64), "min", "max",
# "first", "last" (the raw column's float type: float32 for a float4 column, so a slice of
# 8,000 GPUs stays small), and per mask ("mask", m) the rows with any bit of it (int32). Only
# the parts the rules read are computed and kept.
Parts = dict[object, np.ndarray]
PART_NAMES = ("n", "sum", "min", "max", "first", "last")


@dataclass
class Block:
    """One slice of one entity table: a row per target that had rows in it, keys sorted."""

    sid: int  # slice number: its start is sid * 10 s after 2000-01-01 UTC
    keys: np.ndarray  # int64
    rows: np.ndarray  # int32
    t0: np.ndarray  # int64 microseconds
    t1: np.ndarray
    engine: np.ndarray | None  # proc: the engine of the slice's last row (-1: none)
    parts: dict[str, Parts]  # column -> its parts
    layouts: dict[str, np.ndarray]  # histogram key -> int32 layout (-1: none)
    counts: dict[str, np.ndarray]  # histogram key -> int32 (targets, buckets)


def slice_ids(ts: np.ndarray) -> np.ndarray:
    """The slice of each timestamp (right-closed: a row at exactly s + 10 s belongs to s)."""
    return (ts - 1) // SLICE_US


def fold(rows: Rows, parts: dict[str, frozenset]) -> list[Block]:
    """The slices of ``rows``, oldest first. ``parts``: per column, the parts to compute (names
    of PART_NAMES and ("mask", m) for each mask a rule tests)."""
    if not len(rows):
        return []
    sid = slice_ids(rows.ts)
    order = np.lexsort((rows.ts, rows.key, sid))
    sid, key, ts = sid[order], rows.key[order], rows.ts[order]
    starts = _group_starts(sid, key)
    ends = np.r_[starts[1:], len(sid)] - 1
    group_sid = sid[starts]
    grouped = {
        "keys": key[starts], "rows": np.diff(np.r_[starts, len(sid)]).astype(np.int32),
        "t0": ts[starts], "t1": ts[ends],
        "engine": rows.engine[order][ends] if rows.engine is not None else None,
    }
    folded = {name: _parts(values[order], starts, parts.get(name, frozenset()))
              for name, values in rows.values.items()}
    group_of_row = np.repeat(np.arange(len(starts)), grouped["rows"])
    histograms = {k: _histogram(rows.layouts[k][order], rows.counts[k][order], group_of_row,
                                len(starts)) for k in rows.layouts}
    return _blocks(group_sid, grouped, folded, histograms)


def _group_starts(sid: np.ndarray, key: np.ndarray) -> np.ndarray:
    new = np.empty(len(sid), bool)
    new[0] = True
    new[1:] = (sid[1:] != sid[:-1]) | (key[1:] != key[:-1])
    return np.flatnonzero(new)


def _parts(values: np.ndarray, starts: np.ndarray, wanted: frozenset) -> Parts:
    present = ~np.isnan(values)
    out: Parts = {}
    n = np.add.reduceat(present.astype(np.int32), starts)
    if "n" in wanted:
        out["n"] = n
    if "sum" in wanted:
        total = np.add.reduceat(np.where(present, values, 0.0), starts, dtype=np.float64)
        out["sum"] = np.where(n > 0, total, np.nan)
    if "min" in wanted:
        out["min"] = np.fmin.reduceat(values, starts)
    if "max" in wanted:
        out["max"] = np.fmax.reduceat(values, starts)
    index = np.arange(len(values))
    if "first" in wanted:
        out["first"] = _pick(values, np.minimum.reduceat(np.where(present, index, len(values)),
                                                         starts))
    if "last" in wanted:
        out["last"] = _pick(values, np.maximum.reduceat(np.where(present, index, -1), starts))
    masks = [m for m in wanted if isinstance(m, tuple)]
    if masks:
        bits = np.where(present, values, 0).astype(np.int64)
        for mask in masks:
            out[mask] = np.add.reduceat(((bits & mask[1]) != 0).astype(np.int32), starts)
    return out


def _pick(values: np.ndarray, at: np.ndarray) -> np.ndarray:
    """values[at], NaN where ``at`` points outside (no present row)."""
    inside = (at >= 0) & (at < len(values))
    return np.where(inside, values[np.clip(at, 0, len(values) - 1)], np.nan)


def _histogram(layouts: np.ndarray, counts: np.ndarray, group_of_row: np.ndarray,
               groups: int) -> tuple[np.ndarray, np.ndarray]:
    """Per group: the layout holding most observations (ties: the higher id, the newer
    layout) and its counts summed bucket by bucket; -1 and zeros where none."""
    out_layout = np.full(groups, -1, np.int32)
    out_counts = np.zeros((groups, counts.shape[1]), np.int32)
    has = layouts >= 0
    if not has.any():
        return out_layout, out_counts
    g, lay, c = group_of_row[has], layouts[has], counts[has]
    order = np.lexsort((lay, g))
    g, lay, c = g[order], lay[order], c[order]
    starts = _group_starts(g, lay.astype(np.int64))
    sums = np.add.reduceat(c, starts, axis=0)
    g, lay = g[starts], lay[starts]
    best = np.lexsort((lay, sums.sum(axis=1), g))  # the last of each group wins
    last_of_group = best[np.r_[g[best][1:] != g[best][:-1], True]]
    out_layout[g[last_of_group]] = lay[last_of_group]
    out_counts[g[last_of_group]] = sums[last_of_group]
    return out_layout, out_counts


def _blocks(group_sid: np.ndarray, grouped: dict, parts: dict[str, Parts],
            histograms: dict[str, tuple[np.ndarray, np.ndarray]]) -> list[Block]:
    bounds = np.r_[_group_starts(group_sid, group_sid), len(group_sid)]
    blocks = []
    for a, b in zip(bounds[:-1], bounds[1:], strict=True):
        cut = slice(a, b)
        blocks.append(Block(
            sid=int(group_sid[a]), keys=grouped["keys"][cut], rows=grouped["rows"][cut],
            t0=grouped["t0"][cut], t1=grouped["t1"][cut],
            engine=None if grouped["engine"] is None else grouped["engine"][cut],
            parts={name: {part: v[cut] for part, v in p.items()} for name, p in parts.items()},
            layouts={k: lay[cut] for k, (lay, _) in histograms.items()},
            counts={k: c[cut] for k, (_, c) in histograms.items()}))
    return blocks
