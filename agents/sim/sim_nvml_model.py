"""The physics of one simulated GPU: what its sensors read, given the engines that use it.

Numbers follow an H100 SXM (700 W limit, 1980 MHz boost, HBM3 at 2619 MHz, ~70 W idle). Units
are NVML's: mW, MHz, °C, KB/s, bytes, integer percent.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field
from typing import Any

from agents import nvml_bits
from agents.sim.sim_nvml_caps import Caps
from agents.sim.sim_nvml_counters import CounterModel

MIB = 1024**2
CUDA_CONTEXT_BYTES = 512 * MIB  # what a CUDA context costs beyond the vLLM budget
IDLE_USED_BYTES = 512 * MIB  # an unclaimed GPU: persistence daemon, driver allocations
RESERVED_BYTES = 256 * MIB  # driver-reserved (reported apart by memory info v2)
POWER_LIMIT_MW = 700_000
IDLE_POWER_W = 70.0
IDLE_SM_MHZ, BOOST_SM_MHZ, POWER_CAPPED_SM_MHZ = 345, 1980, 1755
MEM_CLOCK_MHZ = 2619
THERMAL_TAU_S = 20.0  # the die and heat sink take tens of seconds to settle


@dataclass(frozen=True)
class Claim:
    """One engine process's use of one GPU, taken from the simulated vLLM's /sim/state."""

    pid: int
    mem_bytes: int  # gpu_memory_utilization x total, reserved at start and held
    busy: float  # 0-1, share of time a kernel runs
    kv_usage: float  # 0-1
    peers: int = 1  # GPUs the engine spans (tensor parallel): more than one talk over NVLink


def claims_from_state(state: dict[str, Any], mem_total: int) -> dict[int, Claim]:
    """GPU index -> claim, from one engine's state; malformed states claim nothing."""
    try:
        claim = Claim(
            pid=int(state["pid"]),
            mem_bytes=int(float(state["gpu_memory_utilization"]) * mem_total),
            busy=min(1.0, max(0.0, float(state["busy_fraction"]))),
            kv_usage=min(1.0, max(0.0, float(state["kv_cache_usage"]))),
            peers=len(state["gpu_indices"]),
        )
        return {int(index): claim for index in state["gpu_indices"]}
    except (KeyError, TypeError, ValueError):
        return {}


@dataclass
class Reading:
    used_bytes: int = IDLE_USED_BYTES
    util: int = 0
    mem_util: int = 0
    power_mw: int = int(IDLE_POWER_W * 1000)
    temp_c: float = 32.0
    sm_mhz: int = IDLE_SM_MHZ
    tx_kbs: int = 0
    rx_kbs: int = 0
    reasons: int = nvml_bits.GPU_IDLE
    processes: list[Claim] = field(default_factory=list)


class GpuModel:
    def __init__(self, mem_total: int, rng: random.Random, caps: Caps | None = None,
                 counter_rng: random.Random | None = None) -> None:
        self.mem_total = mem_total
        self._rng = rng
        self._at: float | None = None
        self.reading = Reading()
        # Its own random stream: the counters' draws leave the sensors' sequence as it was.
        self.counters = CounterModel(caps or Caps(), counter_rng or random.Random())
        self._counted_at: float | None = None

    def update(self, claims: list[Claim], now: float) -> None:
        rng, r = self._rng, Reading(processes=list(claims))
        busy = min(1.0, sum(c.busy for c in claims))
        kv = max((c.kv_usage for c in claims), default=0.0)
        held = sum(c.mem_bytes + CUDA_CONTEXT_BYTES for c in claims)
        r.used_bytes = min(held or IDLE_USED_BYTES, self.mem_total - RESERVED_BYTES)
        if claims and busy > 0:
            r.util = _pct(busy * 100 + rng.gauss(0, 1.5))
            r.mem_util = _pct(busy * (25 + 45 * kv) + rng.gauss(0, 1.5))
        else:
            r.util = rng.choice((0, 0, 0, 1))
        peak_w = 0.96 * POWER_LIMIT_MW / 1000
        watts = IDLE_POWER_W + (peak_w - IDLE_POWER_W) * (r.util / 100) ** 1.2 + rng.gauss(0, 4)
        r.power_mw = int(min(max(watts, 55.0), POWER_LIMIT_MW / 1000) * 1000)
        r.reasons, r.sm_mhz = self._clocks(r, active=busy > 0)
        r.temp_c = self._temperature(r.power_mw / 1000, now)
        # Inference moves little over PCIe (tokens in and out, NVLink carries the collectives).
        r.rx_kbs = int(busy * rng.uniform(80_000, 250_000) + rng.uniform(0, 400))
        r.tx_kbs = int(busy * rng.uniform(20_000, 80_000) + rng.uniform(0, 200))
        self._count(r, busy, max((c.peers for c in claims if c.busy > 0), default=1), now)
        self.reading = r

    def _count(self, r: Reading, busy: float, peers: int, now: float) -> None:
        if self._counted_at is not None:  # the mean power of the step: from old to new draw
            watts = (self.reading.power_mw + r.power_mw) / 2000
            self.counters.advance(now - self._counted_at, watts, busy, peers, busy)
        self._counted_at = now

    def _clocks(self, r: Reading, active: bool) -> tuple[int, int]:
        if not active:
            return nvml_bits.GPU_IDLE, IDLE_SM_MHZ
        if r.power_mw > 0.93 * POWER_LIMIT_MW:
            mhz = POWER_CAPPED_SM_MHZ + self._rng.randint(-30, 30)
            return nvml_bits.SW_POWER_CAP, mhz
        return nvml_bits.NONE, BOOST_SM_MHZ

    def _temperature(self, watts: float, now: float) -> float:
        target = 31.0 + 0.058 * watts  # ~35 °C idle, ~70 °C at the power limit
        if self._at is None:
            temp = target
        else:
            settle = 1.0 - math.exp(-max(0.0, now - self._at) / THERMAL_TAU_S)
            temp = self.reading.temp_c + (target - self.reading.temp_c) * settle
        self._at = now
        return temp


def _pct(value: float) -> int:
    return int(round(min(100.0, max(0.0, value))))
