"""A simulated GPU's cumulative counters, in NVML's units: they only ever grow.

Energy integrates the simulated power draw (mJ since the driver loaded). NVLink carries a
tensor-parallel engine's collectives while it is busy (KiB, per direction, spread over the
links); an engine on one GPU sends nothing over it. Errors are rare random events whose rates
follow the traffic: a CRC error on a link is followed by its replay, a corrected ECC error
comes with memory traffic, a PCIe replay with PCIe traffic. Start values stand for the time
since the driver loaded (days) and, for ECC aggregates, since manufacture.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from agents.sim.sim_nvml_caps import Caps

KIB = 1024
DAY_S = 86_400.0
# NVLink error counter types, as nvml.h numbers them (nvmlNvLinkErrorCounter_t).
REPLAY, RECOVERY, CRC_FLIT, CRC_DATA, ECC_DATA = range(5)
# Mean seconds between events while the driving traffic is at its peak.
CRC_EVERY_S = 1_200.0
RECOVERY_EVERY_S = 6 * 3_600.0
SBE_EVERY_S = 3_600.0
PCIE_REPLAY_EVERY_S = 1_800.0
NVLINK_PEAK_BPS = (5e9, 30e9)  # per direction, a busy TP engine's all-reduces on H100-class


@dataclass
class Counters:
    energy_mj: float = 0.0
    nvlink_tx_kib: float = 0.0
    nvlink_rx_kib: float = 0.0
    link_errors: list[list[int]] = field(default_factory=list)  # [link][counter type]
    sbe_aggregate: int = 0
    sbe_volatile: int = 0
    dbe_aggregate: int = 0
    dbe_volatile: int = 0
    # Remapped rows: correctable, uncorrectable, pending (0/1), failed (0/1).
    remapped: tuple[int, int, int, int] = (0, 0, 0, 0)
    pcie_replays: int = 0


class CounterModel:
    def __init__(self, caps: Caps, rng: random.Random) -> None:
        self.caps, self._rng = caps, rng
        uptime = rng.uniform(1, 30) * DAY_S
        c = self.now = Counters(energy_mj=uptime * rng.uniform(120, 250) * 1000)
        if caps.nvlink:
            c.nvlink_tx_kib = uptime * rng.uniform(0.1e9, 2e9) / KIB
            c.nvlink_rx_kib = c.nvlink_tx_kib * rng.uniform(0.97, 1.03)
            c.link_errors = [[0] * 5 for _ in range(caps.nvlink_links)]
            for _ in range(rng.choice((0, 0, 1, 3))):
                self._crc_error()
        if caps.ecc:
            c.sbe_aggregate = rng.choice((0, 0, 0, 1, 3, 12))
        if caps.row_remapping:
            c.remapped = (rng.choice((0, 0, 0, 1, 2)), 0, 0, 0)
        c.pcie_replays = rng.randint(0, 4)

    def advance(self, dt: float, watts: float, busy: float, peers: int, pcie_busy: float) -> None:
        """``dt`` seconds at ``watts``; ``busy`` 0-1; ``peers``: GPUs of the busiest engine."""
        if dt <= 0:
            return
        c, rng = self.now, self._rng
        c.energy_mj += watts * dt * 1000
        traffic = busy if peers > 1 and self.caps.nvlink else 0.0
        if traffic:
            bps = traffic * rng.uniform(*NVLINK_PEAK_BPS)
            c.nvlink_tx_kib += bps * dt / KIB
            c.nvlink_rx_kib += bps * rng.uniform(0.95, 1.05) * dt / KIB
            for _ in range(self._events(traffic / CRC_EVERY_S, dt)):
                self._crc_error()
            for _ in range(self._events(traffic / RECOVERY_EVERY_S, dt)):
                c.link_errors[rng.randrange(self.caps.nvlink_links)][RECOVERY] += 1
        if self.caps.ecc:
            sbe = self._events(busy / SBE_EVERY_S, dt)
            c.sbe_aggregate, c.sbe_volatile = c.sbe_aggregate + sbe, c.sbe_volatile + sbe
        c.pcie_replays += self._events(pcie_busy / PCIE_REPLAY_EVERY_S, dt)

    def _crc_error(self) -> None:
        link = self.now.link_errors[self._rng.randrange(self.caps.nvlink_links)]
        link[self._rng.choice((CRC_FLIT, CRC_DATA))] += 1
        link[REPLAY] += 1  # the receiver asked for the packet again

    def _events(self, rate: float, dt: float) -> int:
        """How many events of a Poisson process of ``rate`` per second fall in ``dt``."""
        count, at = 0, 0.0
        while rate > 0:
            at += self._rng.expovariate(rate)
            if at > dt:
                break
            count += 1
        return count
