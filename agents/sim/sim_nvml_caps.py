"""What a simulated GPU has, by its model name: NVLink, ECC, row remapping, energy counter, fan.

NVML answers "not supported" for what a board lacks, so the simulation must know which boards
lack what: an H100/H200 SXM has 18 NVLink links, an A100 SXM 12; PCIe inference cards (L4,
A10, T4, L40) have none; a GeForce card has no ECC; row remapping came with Ampere (a T4 retires
pages instead); the total-energy counter with Volta. The names are those NVML reports.
"""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class Caps:
    nvlink_links: int = 0  # 0: no NVLink (its queries answer "not supported")
    ecc: bool = True
    row_remapping: bool = True
    energy: bool = True  # nvmlDeviceGetTotalEnergyConsumption (Volta and later)
    fan: bool = False  # data-center boards are cooled by the chassis

    @property
    def nvlink(self) -> bool:
        return self.nvlink_links > 0


_LINKS = {"H100": 18, "H200": 18, "H800": 18, "GH200": 18, "B200": 18, "A100": 12, "A800": 8,
          "V100": 6}
_NO_NVLINK = {"PCIE", "L4", "L40", "L40S", "A10", "A10G", "A16", "A2", "T4", "RTX", "GEFORCE"}
_PRE_AMPERE = {"T4", "V100", "P100", "P40", "P4", "K80", "M60", "M40", "GTX"}
_PRE_VOLTA = {"P100", "P40", "P4", "K80", "M60", "M40"}


def _words(model: str) -> set[str]:
    # "NVIDIA A100-SXM4-80GB" -> {"NVIDIA", "A100", "SXM4", "80GB"}: "A10" must not match A100.
    return set(re.split(r"[\s\-_()]+", model.upper()))


def caps_for(model: str) -> Caps:
    words = _words(model)
    links = 0 if words & _NO_NVLINK else max((_LINKS.get(w, 0) for w in words), default=0)
    ecc = "GEFORCE" not in words
    return Caps(
        nvlink_links=links,
        ecc=ecc,
        row_remapping=ecc and not words & _PRE_AMPERE,
        energy=not words & _PRE_VOLTA,
        fan=bool(words & {"RTX", "GEFORCE", "QUADRO"}),
    )
