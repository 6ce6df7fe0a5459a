"""NVML clocks-event (throttle) reason bits, by name: the one list the pages and JS decode with.

Bits as in nvml.h (nvmlClocksEventReason*). "GPU idle" and the clock settings are not
slowdowns; ``severe`` marks the reasons an operator must act on (power brake, thermal, HW).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class Reason:
    bit: int
    name: str
    severe: bool = False


THROTTLE_REASONS: tuple[Reason, ...] = (
    Reason(0x1, "GPU idle"),
    Reason(0x2, "applications clocks"),
    Reason(0x4, "SW power cap"),
    Reason(0x8, "HW slowdown", severe=True),
    Reason(0x10, "sync boost"),
    Reason(0x20, "SW thermal", severe=True),
    Reason(0x40, "HW thermal", severe=True),
    Reason(0x80, "HW power brake", severe=True),
    Reason(0x100, "display clocks"),
)


def decode(mask: int | None) -> list[Reason]:
    if not mask:
        return []
    return [r for r in THROTTLE_REASONS if mask & r.bit]


def reasons_json() -> list[dict]:
    return [asdict(r) for r in THROTTLE_REASONS]
