"""NVML's clocks-event (throttle) reason bits: the one list the agent's simulated GPUs, the
default alert pack and the pages read.

Bits as in nvml.h (``nvmlClocksEventReason*``, formerly ``nvmlClocksThrottleReason*``), the
value of the metric ``gpu.throttle_reasons``. "GPU idle" and the clock settings are not
slowdowns; ``severe`` marks the reasons an operator must act on (HW slowdown, thermal, power
brake). Plain Python: importable without pynvml or Django.
"""

from __future__ import annotations

from dataclasses import dataclass

NONE = 0x0
GPU_IDLE = 0x1
APPLICATIONS_CLOCKS = 0x2
SW_POWER_CAP = 0x4
HW_SLOWDOWN = 0x8
SYNC_BOOST = 0x10
SW_THERMAL = 0x20
HW_THERMAL = 0x40
HW_POWER_BRAKE = 0x80
DISPLAY_CLOCKS = 0x100


@dataclass(frozen=True)
class Reason:
    bit: int
    name: str
    severe: bool = False


THROTTLE_REASONS: tuple[Reason, ...] = (
    Reason(GPU_IDLE, "GPU idle"),
    Reason(APPLICATIONS_CLOCKS, "applications clocks"),
    Reason(SW_POWER_CAP, "SW power cap"),
    Reason(HW_SLOWDOWN, "HW slowdown", severe=True),
    Reason(SYNC_BOOST, "sync boost"),
    Reason(SW_THERMAL, "SW thermal", severe=True),
    Reason(HW_THERMAL, "HW thermal", severe=True),
    Reason(HW_POWER_BRAKE, "HW power brake", severe=True),
    Reason(DISPLAY_CLOCKS, "display clocks"),
)

# The clocks are down for heat or a hardware signal: 0x8 | 0x20 | 0x40 | 0x80 = 232.
SEVERE = sum(r.bit for r in THROTTLE_REASONS if r.severe)


def decode(mask: int | None) -> list[Reason]:
    """The reasons set in ``mask``, in bit order; none for 0 or None."""
    if not mask:
        return []
    return [r for r in THROTTLE_REASONS if mask & r.bit]
