"""Slice time: 10-second slices aligned to 2000-01-01 UTC, the instant PostgreSQL's binary
timestamps count from, so a raw row's slice is plain integer arithmetic on what it sends."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

SLICE_S = 10
SLICE_US = SLICE_S * 1_000_000
EPOCH = datetime(2000, 1, 1, tzinfo=UTC)
_US = timedelta(microseconds=1)


def micros(at: datetime) -> int:
    """Microseconds since EPOCH."""
    return (at - EPOCH) // _US


def from_micros(us: int) -> datetime:
    return EPOCH + timedelta(microseconds=int(us))


def floor_slice(at: datetime) -> datetime:
    """The start of the 10-s boundary at or before ``at``."""
    return from_micros(micros(at) // SLICE_US * SLICE_US)


def window_start(now: datetime, window_s: int) -> datetime:
    """The first slice a window ``(now - window_s, now]`` reads: windows are rounded out to
    whole slices, so a 60-s window reads 60 to 70 s of samples."""
    return floor_slice(now - timedelta(seconds=window_s))


def first_slice(now: datetime, window_s: int) -> int:
    """The number of the first slice a window reads (``window_start`` / 10 s)."""
    return micros(window_start(now, window_s)) // SLICE_US
